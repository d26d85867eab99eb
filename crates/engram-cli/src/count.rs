//! `engram count`: per-message and total tokens, share of the window, estimated input cost.

use std::io::Write;

use engram::{Conversation, ModelRegistry, ResolvedModel, Role, TokenCounter, Tokenizer};
use serde::Serialize;

use crate::cli::{CountArgs, GlobalArgs};
use crate::{conversation_file, registry};

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
    /// For an estimate calibrated from the provider's usage (`engram serve` learns it): how
    /// many requests it was learned from.
    #[serde(skip_serializing_if = "Option::is_none")]
    calibrated_from: Option<u64>,
    messages: Rows,
}

/// One message's line of the report, as kept while counting (small: a history of millions of
/// short messages keeps one of these per message, not the message).
#[derive(Debug)]
struct Row {
    /// The message's `id`; the report shows its index when it has none.
    id: Option<String>,
    tokens: usize,
    role: Role,
}

impl Row {
    fn id(&self, index: usize) -> std::borrow::Cow<'_, str> {
        self.id
            .as_deref()
            .map_or_else(|| index.to_string().into(), Into::into)
    }
}

/// The rows as the JSON report lists them: `{index, id, role, tokens}`.
#[derive(Debug)]
struct Rows(Vec<Row>);

impl Serialize for Rows {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct MessageRow<'a> {
            index: usize,
            /// The message's `id`, or its index as a string when it has none (engram's source ids).
            id: std::borrow::Cow<'a, str>,
            role: &'static str,
            tokens: usize,
        }
        serializer.collect_seq(self.0.iter().enumerate().map(|(index, row)| MessageRow {
            index,
            id: row.id(index),
            role: row.role.as_str(),
            tokens: row.tokens,
        }))
    }
}

pub(crate) fn run(global: &GlobalArgs, args: &CountArgs) -> anyhow::Result<()> {
    let registry = registry::load(global)?;
    let bytes = conversation_file::read_bytes(args.file.as_deref())?;
    let (conversation, messages) = conversation_file::parse_streamed(&bytes, args.format)?;
    let model = resolve_model(&registry, args.model.as_deref(), &conversation);
    if let Some(warning) = model.warning() {
        eprintln!("engram: warning: {warning}");
    }
    let mut tokenizer = match &args.tokenizer {
        Some(name) => Tokenizer::from_name(name)?,
        None => model.spec.tokenizer()?,
    };
    // An estimate is calibrated with what the proxy learned of this model from its upstream's
    // usage, when the database holds a calibration.
    let mut calibration = None;
    if args.tokenizer.is_none() && !tokenizer.is_exact() {
        let key = if model.spec.id.is_empty() {
            args.model
                .clone()
                .or_else(|| conversation.model().map(str::to_owned))
        } else {
            Some(model.spec.id.clone())
        };
        let learned = match (key, crate::memory::db_path(global)) {
            (Some(key), Ok(db)) => engram_store::read_calibration(&db, &key).unwrap_or_else(|e| {
                eprintln!(
                    "engram: warning: the count calibration in {} could not be read: {e}",
                    db.display()
                );
                None
            }),
            _ => None,
        };
        if let Some(c) = learned
            && let Some(factor) = c.factor()
        {
            tokenizer = Tokenizer::from_name(&model.spec.tokenizer)?.scaled(factor);
            calibration = Some(c);
        }
    }
    let exact_tokenizer = if args.tokenizer.is_some() {
        tokenizer.is_exact()
    } else {
        model.spec.counts_are_exact() && tokenizer.is_exact()
    };
    let counter = TokenCounter::new(tokenizer);
    // Each message is counted as it is parsed and then dropped: only its row is kept.
    let mut rows = Vec::with_capacity(messages.size_hint().1.unwrap_or(0));
    let mut messages_total = 0;
    let mut content_tokens = 0;
    let mut estimated = false;
    for message in messages {
        let message = message?;
        let count = counter.count_message(&message);
        messages_total += count.total();
        content_tokens += count.content_tokens();
        estimated |= count.estimated;
        rows.push(Row {
            id: message.id,
            tokens: count.total(),
            role: message.role,
        });
    }
    drop(bytes);
    // A calibrated estimate adds what the provider adds to a request with tools.
    let tools_tokens = counter.count_tools(&conversation.tools)
        + match &calibration {
            Some(c) if !conversation.tools.is_empty() => c.tools_overhead().unwrap_or(0),
            _ => 0,
        };
    let total = counter.accounting().per_conversation + tools_tokens + messages_total;
    let window = model.spec.context_window;
    let report = CountReport {
        schema_version: 1,
        model: &model.spec.id,
        tokenizer: counter.tokenizer().id(),
        exact: exact_tokenizer && !estimated,
        context_window: window,
        max_output_tokens: model.spec.max_output_tokens,
        total_tokens: total,
        content_tokens,
        tools_tokens,
        percent_of_window: round2(100.0 * total as f64 / window as f64),
        input_cost_usd: model.spec.price.cost(total, 0, 0),
        calibrated_from: calibration.as_ref().map(|c| c.samples),
        messages: Rows(rows),
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
            .0
            .iter()
            .enumerate()
            .map(|(index, row)| row.id(index).chars().count())
            .max()
            .unwrap_or(2)
            .clamp(2, 24);
        writeln!(
            out,
            "{:>5}  {:<9}  {:<id_width$}  {:>9}",
            "#", "role", "id", "tokens"
        )?;
        for (index, row) in report.messages.0.iter().enumerate() {
            let id: String = row.id(index).chars().take(id_width).collect();
            writeln!(
                out,
                "{:>5}  {:<9}  {:<id_width$}  {:>9}",
                index,
                row.role,
                id,
                thousands(row.tokens)
            )?;
        }
        writeln!(out)?;
    }
    writeln!(
        out,
        "messages  {:>6}  {:>12} tokens ({} content)",
        report.messages.0.len(),
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
    let how = match (report.exact, report.calibrated_from) {
        (true, _) => "exact".to_owned(),
        (false, Some(n)) => format!("estimate calibrated from {n} requests"),
        (false, None) => "estimate".to_owned(),
    };
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
