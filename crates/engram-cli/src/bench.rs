//! `engram bench count`: token-counting throughput, single-threaded and on several threads.
//!
//! The file is read once; each measurement is the best of `--repeat` runs of counting the whole
//! text in process, so file reading and process start are not part of the figure. The parallel
//! count must equal the single-threaded one, or the benchmark fails.

use std::time::{Duration, Instant};

use anyhow::bail;
use engram::Tokenizer;
use serde::Serialize;

use crate::cli::BenchCountArgs;
use crate::user_error;

#[derive(Debug, Serialize)]
struct Row {
    tokenizer: String,
    bytes: usize,
    tokens: usize,
    threads: usize,
    single_mb_s: f64,
    parallel_mb_s: f64,
    single_s: f64,
    parallel_s: f64,
}

pub(crate) fn run_count(args: &BenchCountArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.file)
        .map_err(|e| user_error!("cannot read {} as UTF-8 text: {e}", args.file.display()))?;
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let repeat = args.repeat.max(1);
    let mut rows = Vec::new();
    for name in &args.tokenizer {
        let tokenizer = Tokenizer::from_name(name)?;
        // Warm up: vocabularies load lazily on first use.
        tokenizer.count("warm up");
        let (tokens, single) = best_of(repeat, || tokenizer.count(&text));
        let (parallel_tokens, parallel) =
            best_of(repeat, || tokenizer.count_parallel(&text, threads));
        if parallel_tokens != tokens {
            bail!(
                "{name}: the parallel count ({parallel_tokens}) differs from the single-threaded one ({tokens})"
            );
        }
        let mb = text.len() as f64 / 1e6;
        rows.push(Row {
            tokenizer: tokenizer.id().to_owned(),
            bytes: text.len(),
            tokens,
            threads,
            single_mb_s: mb / single.as_secs_f64(),
            parallel_mb_s: mb / parallel.as_secs_f64(),
            single_s: single.as_secs_f64(),
            parallel_s: parallel.as_secs_f64(),
        });
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"results": rows}))?
        );
    } else {
        println!(
            "{:<10} {:>12} {:>12} {:>14} {:>16}",
            "tokenizer", "MB", "tokens", "1 thread MB/s", "threads MB/s"
        );
        for r in &rows {
            println!(
                "{:<10} {:>12.2} {:>12} {:>14.1} {:>12.1} ({})",
                r.tokenizer,
                r.bytes as f64 / 1e6,
                r.tokens,
                r.single_mb_s,
                r.parallel_mb_s,
                r.threads
            );
        }
    }
    Ok(())
}

fn best_of(repeat: usize, mut f: impl FnMut() -> usize) -> (usize, Duration) {
    let mut best = Duration::MAX;
    let mut result = 0;
    for _ in 0..repeat {
        let start = Instant::now();
        result = std::hint::black_box(f());
        best = best.min(start.elapsed());
    }
    (result, best)
}
