//! The LLM summarizer a binding configures, with its cache and usage.

use crate::{Res, err, registry, to_json};
use engram::compact::summarize::Summarizer;
use engram_llm::{Client, ProviderConfig};
use std::sync::Arc;

/// An LLM that writes summaries (OpenAI-compatible, Anthropic or Ollama), with its cache and
/// usage kept for the object's life.
pub struct LlmSummarizer {
    inner: Arc<engram_llm::LlmSummarizer>,
    model: String,
}
impl LlmSummarizer {
    /// A summarizer calling `model` through `api` (openai, anthropic or ollama).
    pub fn new(
        api: &str,
        model: &str,
        base_url: Option<&str>,
        api_key_env: Option<&str>,
        timeout_seconds: Option<f64>,
        max_retries: Option<u32>,
    ) -> Res<Self> {
        let mut config = ProviderConfig::named(api, model, base_url, api_key_env)
            .map_err(|e| err(e.to_string()))?;
        if let Some(t) = timeout_seconds {
            if !(t.is_finite() && t > 0.0) {
                return Err(err("timeout_seconds must be positive"));
            }
            config.timeout = std::time::Duration::from_secs_f64(t);
        }
        if let Some(r) = max_retries {
            config.max_retries = r;
        }
        let client = Client::new(config).map_err(|e| err(e.to_string()))?;
        let window = registry()?.resolve(model).spec.context_window;
        Ok(LlmSummarizer {
            inner: Arc::new(engram_llm::LlmSummarizer::new(client, window)),
            model: model.to_owned(),
        })
    }

    /// The summarizer, for the functions here that take one.
    pub fn summarizer(&self) -> Arc<dyn Summarizer> {
        Arc::clone(&self.inner) as Arc<dyn Summarizer>
    }

    /// `api:model`.
    pub fn name(&self) -> String {
        self.inner.name().to_owned()
    }

    /// Calls, tokens and cost so far, as JSON.
    pub fn usage_json(&self) -> Res<String> {
        let spec = registry()?.resolve(&self.model).spec;
        to_json(&self.inner.usage_report(&spec))
    }
}
