//! How far engram's estimate of a Claude request is from what Anthropic billed for it, before and
//! after calibration, on requests recorded against the real API (`testdata/claude/`).
//!
//! *Before* is the registry's estimate (cl100k times 1.25 for the Claude models it knows; its
//! fallback for the others) with the proxy's 10% margin. *After* is the proxy's calibration
//! ([`engram::calibrate`]: a ratio and the hidden prompt a request with tools gets), learned
//! request by request in the file's order, per model: each request is estimated with what the
//! requests before it taught, then learned from.
//!
//! The test fails when the calibration stops beating the registry's estimate; it prints the
//! table docs/benchmarks-history.md records:
//!
//! ```text
//! cargo test -p engram --test claude_estimate -- --nocapture
//! ```

use std::collections::HashMap;
use std::io::BufRead;

use engram::calibrate::Calibration;
use engram::{ModelRegistry, TokenCounter, Tokenizer};
use serde_json::Value;

/// The margin the proxy keeps over an estimate without a calibration (`--estimate-margin`).
const MARGIN: f64 = 0.1;

#[derive(Default)]
struct Errors {
    n: usize,
    relative: Vec<f64>,
    tokens_off: f64,
    tokens: f64,
    under: usize,
    over_margin: usize,
}

impl Errors {
    fn add(&mut self, estimate: f64, actual: usize, margin: f64) {
        let actual = actual as f64;
        self.n += 1;
        self.relative.push((estimate - actual).abs() / actual);
        self.tokens_off += (estimate - actual).abs();
        self.tokens += actual;
        self.under += usize::from(estimate < actual);
        // A request at the limit by this estimate, less its margin, would not fit.
        self.over_margin += usize::from(estimate * (1.0 + margin) < actual);
    }

    fn tokens_off(&self) -> f64 {
        self.tokens_off / self.tokens.max(1.0)
    }

    fn over_margin(&self) -> f64 {
        self.over_margin as f64 / self.n.max(1) as f64
    }

    fn row(&mut self, name: &str) {
        self.relative.sort_by(f64::total_cmp);
        let median = self.relative.get(self.relative.len() / 2).copied();
        let mean = self.relative.iter().sum::<f64>() / self.n.max(1) as f64;
        println!(
            "| {name} | {} | {:.3} | {:.3} | {:.3} | {:.2} | {:.2} |",
            self.n,
            mean,
            median.unwrap_or(0.0),
            self.tokens_off / self.tokens.max(1.0),
            self.under as f64 / self.n.max(1) as f64,
            self.over_margin as f64 / self.n.max(1) as f64,
        );
    }
}

#[test]
fn the_calibrated_claude_estimate_is_closer_to_what_anthropic_billed()
-> Result<(), Box<dyn std::error::Error>> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/claude/requests.jsonl"
    );
    let registry = ModelRegistry::builtin();
    let base = TokenCounter::new(Tokenizer::cl100k()?);
    let mut counters: HashMap<String, TokenCounter> = HashMap::new();
    let mut calibrations: HashMap<String, Calibration> = HashMap::new();
    let (mut before, mut after, mut after_warm) =
        (Errors::default(), Errors::default(), Errors::default());
    let reader = std::io::BufReader::new(std::fs::File::open(path)?);
    for (i, line) in reader.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let record: Value =
            serde_json::from_str(&line).map_err(|e| format!("{path}:{}: {e}", i + 1))?;
        let actual = record["input_tokens"].as_u64().ok_or("input_tokens")? as usize;
        let request = &record["request"];
        let model = request["model"].as_str().unwrap_or("");
        let conversation = engram::formats::anthropic::from_anthropic(request)
            .map_err(|e| format!("{path}:{}: {e}", i + 1))?;
        let resolved = registry.resolve(model);
        let key = if resolved.spec.id.is_empty() {
            model.to_owned()
        } else {
            resolved.spec.id.clone()
        };
        let counter = counters.entry(key.clone()).or_insert_with(|| {
            TokenCounter::new(
                resolved
                    .spec
                    .tokenizer()
                    .unwrap_or_else(|_| Tokenizer::chars_per_token(4)),
            )
        });
        let estimate = counter.count_conversation(&conversation).total() as f64;
        before.add(estimate, actual, MARGIN);
        let counted = base.count_conversation(&conversation).total();
        let tools = !conversation.tools.is_empty();
        let calibration = calibrations.entry(key).or_default();
        let calibrated = calibration.estimate(counted, tools).unwrap_or(estimate);
        after.add(calibrated, actual, calibration.margin(MARGIN));
        if calibration.factor().is_some() {
            after_warm.add(calibrated, actual, calibration.margin(MARGIN));
        }
        *calibration = calibration.observed(counted, tools, actual, i as i64);
    }
    println!(
        "| estimate | requests | mean relative error | median | tokens off / tokens | under | over even with the margin |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    before.row("registry (cl100k x 1.25), 10% margin");
    after.row("calibrated as the proxy learns, every request");
    after_warm.row("calibrated, once a model has 3 requests");
    assert!(before.n >= 100, "the fixture's requests: {}", before.n);
    assert!(
        after.tokens_off() < 0.5 * before.tokens_off(),
        "calibrated {:.3} of the tokens off, the registry {:.3}",
        after.tokens_off(),
        before.tokens_off()
    );
    assert!(
        after_warm.over_margin() < 0.5 * before.over_margin(),
        "calibrated {:.2} over even with the margin, the registry {:.2}",
        after_warm.over_margin(),
        before.over_margin()
    );
    let mut models: Vec<_> = calibrations.into_iter().collect();
    models.sort_by_key(|(_, c)| std::cmp::Reverse(c.samples));
    for (model, c) in models.iter().take(6) {
        println!(
            "{model}: {} requests, factor {:?}, tools {:?}, error {:.3}, margin {:.3}",
            c.samples,
            c.factor(),
            c.tools_overhead(),
            c.relative_error().unwrap_or(f64::NAN),
            c.margin(MARGIN)
        );
    }
    Ok(())
}
