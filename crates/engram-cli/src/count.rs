//! `engram count`: per-message and total tokens, share of the window, estimated input cost.

use std::io::Write;

use engram::{Conversation, ModelRegistry, ResolvedModel, TokenCounter, Tokenizer};
use serde::Serialize;

use crate::cli::{CountArgs, GlobalArgs};
use crate::{input, registry};

/// The JSON report (`--json`). Field names are a contract: tests and scripts read them.
#[derive(Debug, Serialize)]
struct CountReport<'a> {
    schema_version: u32,
    model: &'a str,
    tokenizer: &'a str,
    /// False when the tokenizer is not the model's own or images were estimated.
    exact: bool,
    context_window: usize,
    max_output_tokens: usize,
    total_tokens: usize,
    content_tokens: usize,
    tools_tokens: usize,
    percent_of_window: f64,
    input_cost_usd: f64,
    messages: Vec<MessageRow<'a>>,
}

#[derive(Debug, Serialize)]
struct MessageRow<'a> {
    index: usize,
    /// The message's `id`, or its index as a string when it has none (engram's source ids).
    id: String,
    role: &'a str,
    tokens: usize,
}

pub(crate) fn run(global: &GlobalArgs, args: &CountArgs) -> anyhow::Result<()> {
    let registry = registry::load(global)?;
    let bytes = input::read_bytes(args.file.as_deref())?;
    let conversation = input::parse(&bytes, args.format)?;
    let model = resolve_model(&registry, args.model.as_deref(), &conversation);
    if let Some(warning) = model.warning() {
        eprintln!("engram: warning: {warning}");
    }
    let tokenizer = match &args.tokenizer {
        Some(name) => Tokenizer::from_name(name)?,
        None => model.spec.tokenizer()?,
    };
    let exact_tokenizer = if args.tokenizer.is_some() {
        tokenizer.is_exact()
    } else {
        model.spec.counts_are_exact() && tokenizer.is_exact()
    };
    let counter = TokenCounter::new(tokenizer);
    let count = counter.count_conversation(&conversation);
    let total = count.total();
    let window = model.spec.context_window;
    let report = CountReport {
        schema_version: 1,
        model: &model.spec.id,
        tokenizer: counter.tokenizer().id(),
        exact: exact_tokenizer && !count.estimated(),
        context_window: window,
        max_output_tokens: model.spec.max_output_tokens,
        total_tokens: total,
        content_tokens: count.content_tokens(),
        tools_tokens: count.tools,
        percent_of_window: round2(100.0 * total as f64 / window as f64),
        input_cost_usd: model.spec.price.cost(total, 0, 0),
        messages: conversation
            .messages
            .iter()
            .zip(&count.messages)
            .enumerate()
            .map(|(index, (message, c))| MessageRow {
                index,
                id: message.id.clone().unwrap_or_else(|| index.to_string()),
                role: message.role.as_str(),
                tokens: c.total(),
            })
            .collect(),
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        print_human(
            &mut out,
            &report,
            &model,
            args.summary,
            conversation.tools.len(),
        )?;
    }
    out.flush()?;
    Ok(())
}

/// `--model`, else the input's `model` field, else the registry's default.
fn resolve_model(
    registry: &ModelRegistry,
    requested: Option<&str>,
    conversation: &Conversation,
) -> ResolvedModel {
    let name = requested
        .or_else(|| conversation.model())
        .unwrap_or_else(|| registry.default_model());
    registry.resolve(name)
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn print_human(
    out: &mut impl Write,
    report: &CountReport<'_>,
    model: &ResolvedModel,
    summary: bool,
    tool_definitions: usize,
) -> std::io::Result<()> {
    if !summary {
        let id_width = report
            .messages
            .iter()
            .map(|m| m.id.chars().count())
            .max()
            .unwrap_or(2)
            .clamp(2, 24);
        writeln!(
            out,
            "{:>5}  {:<9}  {:<id_width$}  {:>9}",
            "#", "role", "id", "tokens"
        )?;
        for m in &report.messages {
            let id: String = m.id.chars().take(id_width).collect();
            writeln!(
                out,
                "{:>5}  {:<9}  {:<id_width$}  {:>9}",
                m.index,
                m.role,
                id,
                thousands(m.tokens)
            )?;
        }
        writeln!(out)?;
    }
    writeln!(
        out,
        "messages  {:>6}  {:>12} tokens ({} content)",
        report.messages.len(),
        thousands(report.total_tokens - report.tools_tokens),
        thousands(report.content_tokens)
    )?;
    if tool_definitions > 0 {
        writeln!(
            out,
            "tools     {:>6}  {:>12} tokens",
            tool_definitions,
            thousands(report.tools_tokens)
        )?;
    }
    let how = if report.exact { "exact" } else { "estimate" };
    writeln!(
        out,
        "total             {:>12} tokens = {:.1}% of {}'s {}-token window ({}, {how})",
        thousands(report.total_tokens),
        report.percent_of_window,
        report.model,
        thousands(report.context_window),
        report.tokenizer,
    )?;
    let price = model.spec.price.input;
    if price > 0.0 {
        writeln!(
            out,
            "input cost        {:>12} at ${price}/M input tokens",
            format!("${:.4}", report.input_cost_usd)
        )?;
    }
    let room = report.context_window.saturating_sub(report.total_tokens);
    if report.total_tokens > report.context_window {
        writeln!(
            out,
            "over the window by {} tokens: compact it before sending",
            thousands(report.total_tokens - report.context_window)
        )?;
    } else if room < model.spec.max_output_tokens {
        writeln!(
            out,
            "only {} tokens left for the reply (the model may write up to {})",
            thousands(room),
            thousands(model.spec.max_output_tokens)
        )?;
    }
    Ok(())
}

/// 12345 → "12,345".
pub(crate) fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::thousands;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
    }
}
