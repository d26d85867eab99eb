//! What the redactor replaces in conversations: every message's text and tool-call arguments of
//! the JSONL files given (records with `messages`, as the dev data holds them), by kind, with
//! each distinct replaced value and how often. A replacement that is not a secret (a path, a
//! hash, a line of code) is a false positive to fix.
//!
//! ```text
//! cargo run --release -p engram --example redaction_scan -- path/to/dev-data/*.jsonl
//! ```

use std::collections::BTreeMap;
use std::io::BufRead;

use serde_json::Value;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files: Vec<String> = std::env::args().skip(1).collect();
    if files.is_empty() {
        return Err("usage: redaction_scan FILE.jsonl... (records with `messages`)".into());
    }
    let (mut messages, mut texts) = (0usize, 0usize);
    let mut by_kind: BTreeMap<&str, BTreeMap<String, usize>> = BTreeMap::new();
    for file in &files {
        let reader = std::io::BufReader::new(std::fs::File::open(file)?);
        for (i, line) in reader.lines().enumerate() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            let record: Value =
                serde_json::from_str(&line).map_err(|e| format!("{file}:{}: {e}", i + 1))?;
            for message in record["messages"].as_array().into_iter().flatten() {
                messages += 1;
                for text in message_texts(message) {
                    texts += 1;
                    for f in engram::redact::findings(&text) {
                        let value: String = text[f.range].chars().take(100).collect();
                        *by_kind.entry(f.kind).or_default().entry(value).or_default() += 1;
                    }
                }
            }
        }
    }
    let total: usize = by_kind.values().flat_map(|v| v.values()).sum();
    println!(
        "{messages} messages ({texts} texts) in {} files: {total} replaced",
        files.len()
    );
    for (kind, values) in &by_kind {
        println!("\n{kind}: {}", values.values().sum::<usize>());
        let mut values: Vec<_> = values.iter().collect();
        values.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        for (value, n) in values {
            println!("  {n:>4}  {value:?}");
        }
    }
    Ok(())
}

/// A message's texts: its content (a string or text parts) and its tool calls' arguments.
fn message_texts(message: &Value) -> Vec<String> {
    let mut out = Vec::new();
    match &message["content"] {
        Value::String(s) => out.push(s.clone()),
        Value::Array(parts) => out.extend(
            parts
                .iter()
                .filter_map(|p| p["text"].as_str().map(str::to_owned)),
        ),
        _ => {}
    }
    for call in message["tool_calls"].as_array().into_iter().flatten() {
        if let Some(args) = call["function"]["arguments"].as_str() {
            out.push(args.to_owned());
        }
    }
    out
}
