//! `engram bench count`: token-counting throughput, single-threaded and on several threads.
//!
//! The file is read once; each measurement is the best of `--repeat` runs of counting the whole
//! text in process, so file reading and process start are not part of the figure. The parallel
//! count must equal the single-threaded one, or the benchmark fails.
//!
//! The OpenAI tokenizers memoise piece counts per thread, so a figure depends on whether the
//! thread has counted similar text before. "Cold" runs each repetition on a new thread (empty
//! cache: the first count a process makes); "warm" repeats on one thread (a long-running agent
//! or proxy). The parallel figure is cold: its threads are new each time.

use std::time::{Duration, Instant};

use anyhow::bail;
use engram::Tokenizer;
use serde::Serialize;

use crate::cli::{BenchCompactArgs, BenchCountArgs};
use crate::user_error;

#[derive(Debug, Serialize)]
struct Row {
    tokenizer: String,
    bytes: usize,
    tokens: usize,
    threads: usize,
    single_cold_mb_s: f64,
    single_warm_mb_s: f64,
    parallel_mb_s: f64,
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
        let (tokens, cold) = best_of(repeat, || {
            std::thread::scope(|s| {
                s.spawn(|| tokenizer.count(&text))
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p))
            })
        });
        let (warm_tokens, warm) = best_of(repeat, || tokenizer.count(&text));
        let (parallel_tokens, parallel) =
            best_of(repeat, || tokenizer.count_parallel(&text, threads));
        if parallel_tokens != tokens || warm_tokens != tokens {
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
            single_cold_mb_s: mb / cold.as_secs_f64(),
            single_warm_mb_s: mb / warm.as_secs_f64(),
            parallel_mb_s: mb / parallel.as_secs_f64(),
        });
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"results": rows}))?
        );
    } else {
        println!(
            "{:<10} {:>8} {:>10} {:>14} {:>14} {:>18}",
            "tokenizer", "MB", "tokens", "1 thread cold", "1 thread warm", "N threads (cold)"
        );
        for r in &rows {
            println!(
                "{:<10} {:>8.2} {:>10} {:>9.1} MB/s {:>9.1} MB/s {:>9.1} MB/s ({})",
                r.tokenizer,
                r.bytes as f64 / 1e6,
                r.tokens,
                r.single_cold_mb_s,
                r.single_warm_mb_s,
                r.parallel_mb_s,
                r.threads
            );
        }
    }
    Ok(())
}

pub(crate) fn run_compact(args: &BenchCompactArgs) -> anyhow::Result<()> {
    use engram::compact::{CompactOptions, compact};
    use engram::{Message, TokenCounter};

    let bytes = std::fs::read(&args.file)
        .map_err(|e| user_error!("cannot read {}: {e}", args.file.display()))?;
    let started = Instant::now();
    let conversation = engram::parse_conversation(&bytes)?;
    let parse = started.elapsed();
    let tokenizer = Tokenizer::from_name(&args.tokenizer)?;
    let options = CompactOptions::new(args.budget);
    let repeat = args.repeat.max(1);

    // Each run with a new counter: no message counts cached from an earlier run.
    let mut first = None;
    let mut best = Duration::MAX;
    let mut tokens_after = 0;
    for _ in 0..repeat {
        let counter = TokenCounter::new(tokenizer.clone());
        let start = Instant::now();
        let out = compact(&conversation, &counter, &options)?;
        let took = start.elapsed();
        first.get_or_insert(took);
        best = best.min(took);
        tokens_after = out.report.tokens_after;
    }
    // An agent's next turn in a live session: the history resumed (compacted to the target
    // once), then one message appended and the context rebuilt.
    let mut live = engram::compact::live::LiveContext::resume(
        TokenCounter::new(tokenizer),
        args.budget,
        conversation.clone(),
    )?;
    let mut append = Duration::MAX;
    for i in 0..repeat {
        let turn = Message::user(format!("Next step {i}: run the tests again."));
        let start = Instant::now();
        live.push(turn)?;
        std::hint::black_box(live.view().len());
        append = append.min(start.elapsed());
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let report = serde_json::json!({
        "messages": conversation.messages.len(),
        "bytes": bytes.len(),
        "parse_ms": ms(parse),
        "first_compact_ms": ms(first.unwrap_or(best)),
        "compact_ms": ms(best),
        "append_ms": ms(append),
        "tokens_after": tokens_after,
        "budget": args.budget,
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{} messages ({:.1} MB): parse {:.1} ms; compact to {} tokens: first {:.1} ms, best {:.1} ms; one turn appended and rebuilt: {:.2} ms",
            conversation.messages.len(),
            bytes.len() as f64 / 1e6,
            ms(parse),
            tokens_after,
            ms(first.unwrap_or(best)),
            ms(best),
            ms(append)
        );
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

/// Peak resident memory of this process, in MiB (Linux: VmHWM), when known.
pub(crate) fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

pub(crate) fn run_search(
    global: &crate::cli::GlobalArgs,
    args: &crate::cli::BenchSearchArgs,
) -> anyhow::Result<()> {
    use engram::memory::{MemoryStore, SearchQuery, Tier};
    let text = std::fs::read_to_string(&args.queries)
        .map_err(|e| user_error!("cannot read {}: {e}", args.queries.display()))?;
    let queries: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if queries.is_empty() {
        bail!(crate::UserError(format!(
            "{} has no queries",
            args.queries.display()
        )));
    }
    let tiers = args
        .tier
        .iter()
        .map(|t| Tier::parse(t).ok_or_else(|| user_error!("unknown tier {t:?}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let path = crate::memory::db_path(global)?;
    let store = engram_store::SqliteStore::open(&path)?;
    let entries = store.stats()?;
    let query = |q: &str| SearchQuery {
        tiers: tiers.clone(),
        ..SearchQuery::new(q, args.limit)
    };
    // Warm-up: the page cache, as in a running agent.
    for q in &queries {
        store.search(&query(q))?;
    }
    let mut times = Vec::with_capacity(queries.len());
    let mut hits = 0;
    for q in &queries {
        let started = Instant::now();
        hits += store.search(&query(q))?.len();
        times.push(started.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    let at = |p: f64| times[((times.len() - 1) as f64 * p).round() as usize];
    let doc = serde_json::json!({
        "queries": queries.len(),
        "entries": entries,
        "mean_hits": hits as f64 / queries.len() as f64,
        "median_ms": at(0.5),
        "p90_ms": at(0.9),
        "p99_ms": at(0.99),
        "max_ms": at(1.0),
        "peak_rss_mib": peak_rss_mib(),
    });
    if args.json {
        println!("{doc}");
    } else {
        println!(
            "{} queries over {} entries: median {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms; peak memory {:.0} MiB",
            queries.len(),
            entries.working
                + entries.episodic
                + entries.archive
                + entries.learnings
                + entries.journal,
            at(0.5),
            at(0.9),
            at(0.99),
            at(1.0),
            peak_rss_mib().unwrap_or(0.0)
        );
    }
    Ok(())
}
