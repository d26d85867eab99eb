//! `engram compact`: the fixed contract the evaluation harness calls.

use std::io::Write;
use std::sync::Arc;

use engram::compact::compact;
use engram::request::{CompactRequest, Compaction, compacted_request, compaction_document};
use engram::{TokenCounter, Tokenizer};
use serde_json::{Value, json};

use crate::cli::{CompactArgs, GlobalArgs};
use crate::{conversation_file, flag_error, registry};

pub(crate) fn run(global: &GlobalArgs, args: &CompactArgs) -> anyhow::Result<()> {
    let registry = registry::load(global)?;
    // Loading a BPE vocabulary takes tens of milliseconds: do it on the other core while the
    // input is read and parsed.
    let warm = args.tokenizer.clone().map(|name| {
        std::thread::spawn(move || Tokenizer::from_name(&name).map(|t| t.count("warm")))
    });
    let bytes = conversation_file::read_bytes(args.file.as_deref())?;
    let (conversation, anthropic) = conversation_file::parse_request(&bytes, args.format)?;
    drop(bytes);
    if let Some(handle) = warm {
        // An unknown name is reported below, with the right exit code.
        let _ = handle.join();
    }
    let request = CompactRequest {
        model: args.model.clone(),
        tokenizer: args.tokenizer.clone(),
        budget: args.budget,
        strategy: Some(args.strategy.clone()),
        query: args.query.clone(),
        keep_tool_outputs: Some(args.keep_tool_outputs),
        keep_recent: Some(args.keep_recent),
        preserve_window: Some(args.preserve_window),
        digest_share: Some(args.digest_share),
        recall_share: Some(args.recall_share),
        summary_prompt: crate::summarizer::prompt(&args.summarizer)?,
        ..CompactRequest::default()
    };
    let Compaction {
        model,
        tokenizer,
        mut options,
    } = request
        .resolve(&registry, conversation.model())
        .map_err(flag_error)?;
    if args.tokenizer.is_none()
        && let Some(warning) = model.warning()
    {
        eprintln!("engram: warning: {warning}");
    }
    let counter = TokenCounter::new(tokenizer);
    let config = crate::config::load(global)?;
    let summarizer = crate::summarizer::from_args(&registry, &args.summarizer, &config)?;
    if let Some(s) = &summarizer {
        options.summarizer = Some(Arc::clone(s) as Arc<dyn engram::compact::summarize::Summarizer>);
    }
    options.embedder = crate::embeddings::from_args(&args.recall, crate::embeddings::Keep::File);
    if let Some(weights) = &args.recall.recall_weights {
        options.recall = options
            .recall
            .clone()
            .with(weights)
            .map_err(|e| crate::user_error!("--recall-weights: {e}"))?;
    }
    let compacted = compact(&conversation, &counter, &options)?;

    if args.plain {
        // The request to send: an Anthropic request comes back as an Anthropic request.
        return write_line(&compacted_request(
            &conversation,
            anthropic.as_ref(),
            &compacted,
            counter.tokenizer(),
        )?);
    }
    let mut doc = serde_json::Map::new();
    doc.insert("schema_version".into(), json!(1));
    doc.extend(compaction_document(
        &conversation,
        &compacted,
        counter.tokenizer(),
        false,
    ));
    if let Some(s) = &summarizer
        && let Some(Value::Object(report)) = doc.get_mut("report")
    {
        report.insert(
            "summarizer_usage".into(),
            crate::summarizer::usage_report(&registry, s),
        );
    }
    write_line(&doc)
}

/// Writes `value` to standard output as one line of JSON.
fn write_line(value: &impl serde::Serialize) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    serde_json::to_writer(&mut out, value)?;
    writeln!(out)?;
    out.flush()?;
    Ok(())
}
