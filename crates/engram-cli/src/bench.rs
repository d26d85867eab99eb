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

use crate::cli::{BenchCompactArgs, BenchCountArgs, BenchHistoryArgs};
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
        crate::outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"results": rows}))?
        )?;
    } else {
        crate::outln!(
            "{:<10} {:>8} {:>10} {:>14} {:>14} {:>18}",
            "tokenizer",
            "MB",
            "tokens",
            "1 thread cold",
            "1 thread warm",
            "N threads (cold)"
        )?;
        for r in &rows {
            crate::outln!(
                "{:<10} {:>8.2} {:>10} {:>9.1} MB/s {:>9.1} MB/s {:>9.1} MB/s ({})",
                r.tokenizer,
                r.bytes as f64 / 1e6,
                r.tokens,
                r.single_cold_mb_s,
                r.single_warm_mb_s,
                r.parallel_mb_s,
                r.threads
            )?;
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
        crate::outln!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        crate::outln!(
            "{} messages ({:.1} MB): parse {:.1} ms; compact to {} tokens: first {:.1} ms, best {:.1} ms; one turn appended and rebuilt: {:.2} ms",
            conversation.messages.len(),
            bytes.len() as f64 / 1e6,
            ms(parse),
            tokens_after,
            ms(first.unwrap_or(best)),
            ms(best),
            ms(append)
        )?;
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
        crate::outln!("{doc}")?;
    } else {
        crate::outln!(
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
        )?;
    }
    Ok(())
}

/// `engram bench history`: `search_history` latency over a long session.
pub(crate) fn run_history(args: &BenchHistoryArgs) -> anyhow::Result<()> {
    let bytes = crate::conversation_file::read_bytes(Some(args.file.as_path()))?;
    let conversation = crate::conversation_file::parse(&bytes, crate::cli::InputFormatArg::Auto)?;
    let source: Vec<engram::Message> = conversation
        .messages
        .into_iter()
        .filter(|m| m.role != engram::Role::System)
        .collect();
    if source.is_empty() {
        bail!(
            "{}: no messages to fill the session with",
            args.file.display()
        );
    }
    let dir = std::env::temp_dir().join(format!("engram-bench-history-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = (|| -> anyhow::Result<()> {
        let store = engram_store::SqliteStore::open(&dir.join("bench.db"))?;
        let registry = engram::ModelRegistry::builtin();
        let mut new = engram::session::new_session(&registry, "gpt-4o", Some(10_000_000), 0);
        new.id = Some("bench".into());
        let mut session = engram::Session::create(&store, &new)?;
        let mut all = Vec::with_capacity(args.messages);
        while all.len() < args.messages {
            for m in &source {
                if all.len() == args.messages {
                    break;
                }
                let mut m = m.clone();
                m.id = None;
                all.push(m);
            }
        }
        // The same messages repeat: make each turn findable by a word of its own.
        for (i, m) in all.iter_mut().enumerate() {
            if i % 100 == 0 {
                m.content = Some(engram::Content::Text(format!("{} marker{i}word", m.text())));
            }
        }
        for chunk in all.chunks(1_000) {
            session.append(chunk.to_vec())?;
        }
        let queries: Vec<String> = (0..args.messages)
            .step_by(100)
            .map(|i| format!("marker{i}word"))
            .collect();
        // The first search builds the session's index (a process keeps it for later calls).
        let start = Instant::now();
        session.search_history(&queries[0], 5)?;
        let first = start.elapsed();
        // Common words too: long postings lists.
        let mut common_times = Vec::new();
        for q in ["error", "file test", "python def return"] {
            let start = Instant::now();
            session.search_history(q, 5)?;
            common_times.push(start.elapsed());
        }
        common_times.sort();
        let mut times = Vec::with_capacity(queries.len());
        let mut found = 0;
        for q in &queries {
            let start = Instant::now();
            let hits = session.search_history(q, 5)?;
            times.push(start.elapsed());
            found += usize::from(hits.first().is_some_and(|h| h.snippet.contains(q.as_str())));
        }
        times.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let at = |p: f64| times[((times.len() - 1) as f64 * p) as usize];
        let row = serde_json::json!({
            "messages": args.messages,
            "queries": queries.len(),
            "found_first": found,
            "first_search_ms": ms(first),
            "common_words_max_ms": ms(common_times[common_times.len() - 1]),
            "median_ms": ms(at(0.5)),
            "p90_ms": ms(at(0.9)),
            "max_ms": ms(times[times.len() - 1]),
        });
        if args.json {
            crate::outln!("{row}")?;
        } else {
            crate::outln!(
                "search_history over {} messages: the first search (building the index) {:.0} ms; then {} rare-word queries ({} found first): median {:.2} ms, p90 {:.2} ms, max {:.2} ms; common words at most {:.2} ms",
                args.messages,
                ms(first),
                queries.len(),
                found,
                ms(at(0.5)),
                ms(at(0.9)),
                ms(times[times.len() - 1]),
                ms(common_times[common_times.len() - 1])
            )?;
        }
        Ok(())
    })();
    std::fs::remove_dir_all(&dir).ok();
    result
}
