//! `engram compact`: the fixed contract the evaluation harness calls.

use std::io::Write;
use std::sync::Arc;

use engram::compact::{CompactOptions, Strategy, compact};
use engram::{TokenCounter, Tokenizer};
use serde_json::{Value, json};

use crate::cli::{CompactArgs, GlobalArgs};
use crate::{input, registry, user_error};

pub(crate) fn run(global: &GlobalArgs, args: &CompactArgs) -> anyhow::Result<()> {
    let registry = registry::load(global)?;
    let strategy =
        Strategy::from_name(&args.strategy).map_err(|e| user_error!("--strategy: {e}"))?;
    // Loading a BPE vocabulary takes tens of milliseconds: do it on the other core while the
    // input is read and parsed.
    let warm = args.tokenizer.clone().map(|name| {
        std::thread::spawn(move || Tokenizer::from_name(&name).map(|t| t.count("warm")))
    });
    let bytes = input::read_bytes(args.file.as_deref())?;
    let conversation = input::parse(&bytes, args.format)?;
    drop(bytes);
    if let Some(handle) = warm {
        // An unknown name is reported below, with the right exit code.
        let _ = handle.join();
    }
    let name = args
        .model
        .as_deref()
        .or_else(|| conversation.model())
        .unwrap_or_else(|| registry.default_model());
    let model = registry.resolve(name);
    if args.tokenizer.is_none()
        && let Some(warning) = model.warning()
    {
        eprintln!("engram: warning: {warning}");
    }
    let tokenizer = match &args.tokenizer {
        Some(name) => Tokenizer::from_name(name)?,
        None => model.spec.tokenizer()?,
    };
    let budget = match args.budget {
        Some(0) => return Err(user_error!("--budget must be positive")),
        Some(b) => b,
        None => engram::compact::policy::default_budget(
            model.spec.context_window,
            model.spec.max_output_tokens,
        ),
    };
    let counter = TokenCounter::new(tokenizer);
    let mut options = CompactOptions::new(budget);
    options.strategy = strategy;
    options.query = args.query.clone().filter(|q| !q.trim().is_empty());
    options.mask_keep_last = args.keep_tool_outputs;
    options.keep_recent = args.keep_recent.max(1);
    options.preserve_window = args.preserve_window;
    for (name, value) in [
        ("--digest-share", args.digest_share),
        ("--recall-share", args.recall_share),
    ] {
        if !(0.0..=1.0).contains(&value) {
            return Err(user_error!("{name} must be between 0 and 1, not {value}"));
        }
    }
    options.digest_share = args.digest_share;
    options.recall_share = args.recall_share;
    let config = crate::config::load(global)?;
    let summarizer = crate::summarizer::from_args(&registry, &args.summarizer, &config)?;
    options.prompt = crate::summarizer::prompt(&args.summarizer)?;
    if let Some(s) = &summarizer {
        options.summarizer = Some(Arc::clone(s) as Arc<dyn engram::compact::summarize::Summarizer>);
    }
    let compacted = compact(&conversation, &counter, &options)?;

    let messages: Vec<Value> = compacted
        .messages
        .iter()
        .map(|m| m.to_value(args.plain))
        .collect();
    // The request's other keys (model, tools, temperature, ...) pass through, so that the output
    // of an OpenAI request body is a request body again.
    let mut doc = serde_json::Map::new();
    if !args.plain {
        doc.insert("schema_version".into(), json!(1));
    }
    for (key, value) in &conversation.extra {
        doc.insert(key.clone(), value.clone());
    }
    doc.insert("messages".into(), Value::Array(messages));
    if !conversation.tools.is_empty() {
        doc.insert("tools".into(), Value::Array(conversation.tools.clone()));
    }
    if !args.plain {
        let mut report = serde_json::to_value(&compacted.report)?;
        if let Value::Object(map) = &mut report {
            map.insert("tokenizer".into(), json!(counter.tokenizer().id()));
            map.insert("exact".into(), json!(counter.tokenizer().is_exact()));
            if let Some(s) = &summarizer {
                map.insert(
                    "summarizer_usage".into(),
                    crate::summarizer::usage_report(&registry, s),
                );
            }
        }
        doc.insert("report".into(), report);
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    serde_json::to_writer(&mut out, &doc)?;
    writeln!(out)?;
    out.flush()?;
    Ok(())
}
