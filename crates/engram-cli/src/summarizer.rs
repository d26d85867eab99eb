//! `--summarizer`: a model that writes summaries, through engram-llm.

use std::sync::Arc;

use engram::ModelRegistry;
use engram::compact::summarize::Summarizer;
use engram_llm::{Api, Client, LlmSummarizer, ProviderConfig};
use serde_json::{Value, json};

use crate::cli::SummarizerArgs;
use crate::user_error;

/// The summarizer the arguments ask for, if any.
pub(crate) fn from_args(
    registry: &ModelRegistry,
    args: &SummarizerArgs,
) -> anyhow::Result<Option<Arc<LlmSummarizer>>> {
    let Some(api) = &args.summarizer else {
        return Ok(None);
    };
    let api = Api::parse(api).ok_or_else(|| user_error!("unknown summarizer API {api:?}"))?;
    let model = args
        .summarizer_model
        .clone()
        .ok_or_else(|| user_error!("--summarizer {} needs --summarizer-model M", api.as_str()))?;
    let mut config = ProviderConfig::new(api, model.clone());
    if let Some(url) = &args.base_url {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(user_error!(
                "--base-url {url:?} must start with http:// or https://"
            ));
        }
        config.base_url = url.clone();
    }
    if let Some(var) = &args.api_key_env {
        config.api_key_env = Some(var.clone());
    }
    let client = Client::new(config).map_err(|e| user_error!("--summarizer: {e}"))?;
    let window = registry.resolve(&model).spec.context_window;
    Ok(Some(Arc::new(LlmSummarizer::new(client, window))))
}

/// What the summarizer used, for the report.
pub(crate) fn usage_report(registry: &ModelRegistry, summarizer: &LlmSummarizer) -> Value {
    let usage = summarizer.usage();
    let model = registry.resolve(summarizer.name().split_once(':').map_or("", |(_, m)| m));
    json!({
        "calls": usage.calls,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cached_tokens": usage.cached_tokens,
        "cost_usd": usage.cost(&model.spec),
        "secrets_redacted": summarizer.redacted(),
    })
}
