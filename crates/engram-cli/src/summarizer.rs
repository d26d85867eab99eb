//! `--summarizer`: a model that writes summaries, through engram-llm.

use std::sync::Arc;

use engram::ModelRegistry;
use engram::compact::summarize::Summarizer;
use engram_llm::{Client, LlmSummarizer, ProviderConfig};
use serde_json::{Value, json};

use crate::cli::SummarizerArgs;
use crate::user_error;

/// The instructions `--summary-prompt FILE` gives, if any.
pub(crate) fn prompt(args: &SummarizerArgs) -> anyhow::Result<Option<String>> {
    let Some(path) = &args.summary_prompt else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| user_error!("--summary-prompt {}: {e}", path.display()))?;
    if text.trim().is_empty() {
        return Err(user_error!(
            "--summary-prompt {}: the file is empty",
            path.display()
        ));
    }
    Ok(Some(text.trim().to_owned()))
}

/// The summarizer the arguments ask for, else the config file's `[summarizer]`, if any.
pub(crate) fn from_args(
    registry: &ModelRegistry,
    args: &SummarizerArgs,
    config: &engram::config::Config,
) -> anyhow::Result<Option<Arc<LlmSummarizer>>> {
    from_args_with_windows(registry, args, config, &std::collections::BTreeMap::new())
}

/// [`from_args`], with the windows of models the registry does not know (`engram serve
/// --model-window`): a local server's model summarising has its own small window.
pub(crate) fn from_args_with_windows(
    registry: &ModelRegistry,
    args: &SummarizerArgs,
    config: &engram::config::Config,
    windows: &std::collections::BTreeMap<String, usize>,
) -> anyhow::Result<Option<Arc<LlmSummarizer>>> {
    let from_config;
    let args = match (&args.summarizer, &config.summarizer) {
        (None, Some(c)) => {
            from_config = SummarizerArgs {
                summarizer: Some(c.api.clone()),
                summarizer_model: Some(c.model.clone()),
                base_url: c.base_url.clone(),
                api_key_env: c.api_key_env.clone(),
                summary_prompt: args.summary_prompt.clone(),
            };
            &from_config
        }
        _ => args,
    };
    let Some(api) = &args.summarizer else {
        return Ok(None);
    };
    let model = args
        .summarizer_model
        .clone()
        .ok_or_else(|| user_error!("--summarizer {api} needs --summarizer-model M"))?;
    let config = ProviderConfig::named(
        api,
        &model,
        args.base_url.as_deref(),
        args.api_key_env.as_deref(),
    )
    .map_err(|e| user_error!("--summarizer: {e}"))?;
    let client = Client::new(config).map_err(|e| user_error!("--summarizer: {e}"))?;
    let window = windows
        .get(&model)
        .copied()
        .unwrap_or_else(|| registry.resolve(&model).spec.context_window);
    Ok(Some(Arc::new(LlmSummarizer::new(client, window))))
}

/// What the summarizer used, for the report.
pub(crate) fn usage_report(registry: &ModelRegistry, summarizer: &LlmSummarizer) -> Value {
    let model = registry.resolve(summarizer.name().split_once(':').map_or("", |(_, m)| m));
    summarizer.usage_report(&model.spec)
}

/// `engram summarize`.
pub(crate) fn run(
    global: &crate::cli::GlobalArgs,
    file: Option<&std::path::Path>,
    focus: Option<&str>,
    max_tokens: usize,
    json_out: bool,
    args: &SummarizerArgs,
) -> anyhow::Result<()> {
    use engram::compact::summarize::{DEFAULT_PROMPT, DeterministicSummarizer, SummaryRequest};
    if max_tokens == 0 {
        return Err(user_error!("--max-tokens must be positive"));
    }
    let registry = crate::registry::load(global)?;
    let config = crate::config::load(global)?;
    let bytes = crate::conversation_file::read_bytes(file)?;
    let conversation = crate::conversation_file::parse(&bytes, crate::cli::InputFormatArg::Auto)?;
    let messages: Vec<&engram::Message> = conversation
        .messages
        .iter()
        .skip_while(|m| m.role.is_instruction())
        .collect();
    if messages.is_empty() {
        return Err(user_error!(
            "nothing to summarise: the conversation has no messages after its system prompt"
        ));
    }
    let custom = prompt(args)?;
    let request = SummaryRequest {
        messages: &messages,
        prompt: custom.as_deref().unwrap_or(DEFAULT_PROMPT),
        focus: focus.filter(|f| !f.trim().is_empty()),
        max_tokens,
        previous: None,
    };
    let model = from_args(&registry, args, &config)?;
    let (summary, name, fallback) = match &model {
        Some(s) => match s.summarize(&request) {
            Ok(text) => (text, s.name().to_owned(), None),
            Err(e) => (
                DeterministicSummarizer.summarize(&request)?,
                DeterministicSummarizer.name().to_owned(),
                Some(e.to_string()),
            ),
        },
        None => (
            DeterministicSummarizer.summarize(&request)?,
            DeterministicSummarizer.name().to_owned(),
            None,
        ),
    };
    if json_out {
        let doc = json!({
            "summary": summary,
            "summarizer": name,
            "fallback": fallback,
            "usage": model.as_ref().map(|s| usage_report(&registry, s)),
        });
        crate::outln!("{doc}")?;
    } else {
        if let Some(why) = &fallback {
            eprintln!(
                "engram: the model's summary was not used ({why}); this is the model-free one"
            );
        }
        crate::outln!("{summary}")?;
    }
    Ok(())
}
