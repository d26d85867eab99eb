//! Sleep consolidation: working entries older than TTL/2 are grouped by source and
//! session, each group is summarised into one episodic entry whose `summary_of` names the
//! originals, and the originals move to the archive, one group per transaction.
//!
//! The working-memory cap never deletes: when working memory holds more than `max_working`
//! entries, the oldest overflow is consolidated early (Mnemosyne silently deletes it).
//! Candidates are read in batches and huge groups are summarised in chunks, so a sleep over a
//! million entries never holds a long transaction.

use std::time::Instant;

use serde::Serialize;
use serde_json::json;

use super::{
    Consolidation, ConsolidationRecord, MemoryEntry, MemoryStore, NewEntry, Tier, Timestamp,
};
use crate::Error;
use crate::compact::salient::count_salient;
use crate::compact::summarize::{Summarizer, SummaryRequest};
use crate::message::Message;
use crate::timestamp::format_minute;

/// When and how to consolidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SleepPolicy {
    /// Working memory's time to live, in milliseconds (default 24 h); candidates are older than
    /// half of it.
    pub ttl_ms: i64,
    /// The most working entries kept; the oldest overflow is consolidated early (default 10,000).
    pub max_working: usize,
    /// The most entries one summary stands for; larger groups are consolidated in chunks.
    pub group_chunk: usize,
    /// Candidates read per batch.
    pub batch: usize,
    /// The longest summary, in characters.
    pub summary_chars: usize,
    /// Groups are applied together, each atomically, in transactions of about this many
    /// entries (a fraction of a second): few commits, and no transaction long enough to keep
    /// writers waiting.
    pub entries_per_transaction: usize,
}

impl Default for SleepPolicy {
    fn default() -> Self {
        SleepPolicy {
            ttl_ms: 24 * 3600 * 1000,
            max_working: 10_000,
            group_chunk: 200,
            batch: 20_000,
            summary_chars: 1_200,
            entries_per_transaction: 20_000,
        }
    }
}

/// What a sleep did (the CLI's `sleep --json`).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct SleepReport {
    /// Working entries consolidated.
    pub items_consolidated: usize,
    /// Episodic summaries created.
    pub summaries_created: usize,
    /// Groups (source and session) consolidated.
    pub groups: usize,
    /// Of the consolidated entries, those taken early because working memory was over its cap.
    pub over_cap: usize,
    /// Groups whose summarizer failed and got the extractive summary instead.
    pub fallbacks: usize,
    /// Wall time.
    pub duration_ms: f64,
}

/// The instructions a [`Summarizer`] gets for a group of memory entries.
pub const MEMORY_PROMPT: &str = "\
Consolidate the memory entries below (all from one source) into a short list of facts an agent \
will need later. Keep names, file paths, identifiers, numbers, dates and error messages exactly \
as written. Leave out repetition and chatter. Write only the bullet points.";

/// Consolidates what is due at `now`, with the extractive summary.
pub fn sleep(
    store: &dyn MemoryStore,
    now: Timestamp,
    policy: &SleepPolicy,
) -> Result<SleepReport, Error> {
    sleep_with(store, now, policy, None)
}

/// Consolidates what is due at `now`; groups are summarised by `summarizer` when given (an
/// LLM, say), falling back to the extractive summary for a group whose summary fails or is
/// not shorter than what it replaces (the log records which was used, and why).
pub fn sleep_with(
    store: &dyn MemoryStore,
    now: Timestamp,
    policy: &SleepPolicy,
    summarizer: Option<&dyn Summarizer>,
) -> Result<SleepReport, Error> {
    let started = Instant::now();
    let mut report = SleepReport::default();
    let cutoff = now - policy.ttl_ms / 2;
    let mut breaker = Breaker::default();
    loop {
        let batch = match summarizer {
            // The extractive summary's work on each entry is done while the rest are read.
            None => read_with_lines(store, cutoff, policy.batch.max(1))?,
            Some(_) => Batch::new(store.working_before(cutoff, policy.batch.max(1))?),
        };
        if batch.entries.is_empty() {
            break;
        }
        let before = report.items_consolidated;
        // A short batch was all there was: when all of it was consolidated, there is no need
        // to ask again (when another sleep held some of it, there may be: what it skipped).
        let short = batch.entries.len() < policy.batch.max(1);
        let read = batch.entries.len();
        consolidate_batch(
            store,
            batch,
            now,
            policy,
            summarizer,
            &mut breaker,
            &mut report,
        )?;
        if report.items_consolidated == before {
            // Every group of the batch was taken by another process sharing the store (it
            // holds them or consolidated them): they are its work, not ours to wait for.
            break;
        }
        if short && report.items_consolidated - before == read {
            break;
        }
    }
    // The cap: consolidate the oldest overflow early, never delete it.
    let working = store.working_count()?;
    if working > policy.max_working {
        let overflow = store.oldest_working(working - policy.max_working)?;
        report.over_cap = overflow.len();
        consolidate_batch(
            store,
            Batch::new(overflow),
            now,
            policy,
            summarizer,
            &mut breaker,
            &mut report,
        )?;
    }
    report.duration_ms = started.elapsed().as_secs_f64() * 1e3;
    Ok(report)
}

/// After this many failures in a row the summarizer is not called again in the same sleep (a
/// server that is down would otherwise cost its retries on every group).
const SUMMARIZER_FAILURES: usize = 3;

/// Consecutive summarizer failures in one sleep, and the last reason.
#[derive(Debug, Default)]
struct Breaker {
    failures: usize,
    last: String,
}

/// Candidates to consolidate, in any order, with their [`Line`]s when those were worked out
/// already (else `lines` is empty).
struct Batch {
    entries: Vec<MemoryEntry>,
    lines: Vec<Line>,
}

impl Batch {
    fn new(entries: Vec<MemoryEntry>) -> Self {
        Batch {
            entries,
            lines: Vec::new(),
        }
    }
}

/// The candidates older than `before` (at most `limit`) as the store reads them, with each
/// one's [`Line`] worked out on a thread of its own while the rest are still being read.
fn read_with_lines(
    store: &dyn MemoryStore,
    before: Timestamp,
    limit: usize,
) -> Result<Batch, Error> {
    let (send, receive) = std::sync::mpsc::sync_channel::<Vec<MemoryEntry>>(64);
    let work = move || {
        let mut batches = Vec::new();
        let mut lines = Vec::new();
        for batch in receive {
            lines.extend(batch.iter().map(|e| best_line(&e.content)));
            batches.push(batch);
        }
        let mut entries = Vec::with_capacity(lines.len());
        for batch in batches {
            entries.extend(batch);
        }
        Batch { entries, lines }
    };
    std::thread::scope(|scope| {
        let worker = std::thread::Builder::new()
            .name("engram-lines".into())
            .spawn_scoped(scope, work);
        let Ok(worker) = worker else {
            // No thread to be had: the lines are worked out after the read.
            let mut entries = Vec::new();
            store.working_before_each(before, limit, &mut |batch| entries.extend(batch))?;
            let lines = entries.iter().map(|e| best_line(&e.content)).collect();
            return Ok(Batch { entries, lines });
        };
        let read = store.working_before_each(before, limit, &mut |batch| {
            // The worker only ends when the channel closes.
            let _ = send.send(batch);
        });
        drop(send);
        let out = match worker.join() {
            Ok(out) => out,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        read.map(|()| out)
    })
}

fn consolidate_batch(
    store: &dyn MemoryStore,
    batch: Batch,
    now: Timestamp,
    policy: &SleepPolicy,
    summarizer: Option<&dyn Summarizer>,
    breaker: &mut Breaker,
    report: &mut SleepReport,
) -> Result<(), Error> {
    let Batch {
        entries: mut batch,
        mut lines,
    } = batch;
    if lines.len() != batch.len() {
        lines = Vec::new();
    }
    let groups = sort_into_groups(&mut batch, &mut lines);
    let chunks = chunk_ranges(&groups, policy.group_chunk.max(1));
    // Without a summarizer, the extractive summaries are all written first (on two threads
    // when there are enough of them).
    let mut extractive = match summarizer {
        None => summarize_chunks(&batch, &lines, &chunks, policy.summary_chars),
        Some(_) => Vec::new(),
    }
    .into_iter();
    let mut pending = Vec::new();
    let mut pending_entries = 0;
    for &(from, to, first) in &chunks {
        if first {
            report.groups += 1;
        }
        let chunk = &mut batch[from..to];
        let source = chunk[0].source.clone();
        // A group of single entries from several sessions belongs to none of them.
        let session_id = if chunk.iter().all(|e| e.session_id == chunk[0].session_id) {
            chunk[0].session_id.clone()
        } else {
            None
        };
        let started = Instant::now();
        let mut duration_ms = None;
        let (content, strategy, model) = match summarizer {
            Some(s) if breaker.failures >= SUMMARIZER_FAILURES => {
                report.fallbacks += 1;
                (
                    summarize(chunk, policy.summary_chars),
                    format!(
                        "extractive (fallback: {} failed {SUMMARIZER_FAILURES} times in a row, not called again in this sleep; last: {})",
                        s.name(),
                        breaker.last
                    ),
                    Some(s.name().to_owned()),
                )
            }
            Some(s) => match summarize_with(s, chunk, policy.summary_chars) {
                Ok(text) => {
                    breaker.failures = 0;
                    (text, "summarizer".to_owned(), Some(s.name().to_owned()))
                }
                Err(reason) => {
                    breaker.failures += 1;
                    breaker.last.clone_from(&reason);
                    report.fallbacks += 1;
                    (
                        summarize(chunk, policy.summary_chars),
                        format!("extractive (fallback: {reason})"),
                        Some(s.name().to_owned()),
                    )
                }
            },
            None => {
                let (text, ms) = extractive
                    .next()
                    .ok_or_else(|| Error::Backend("a chunk without a summary".into()))?;
                duration_ms = Some(ms);
                (text, "extractive".to_owned(), None)
            }
        };
        // The entries are not needed after their summary: their ids move out.
        let ids: Vec<String> = chunk
            .iter_mut()
            .map(|e| std::mem::take(&mut e.id))
            .collect();
        let summary_preview = first_chars(&content, 200).to_owned();
        let consolidation = Consolidation {
            summary: NewEntry {
                id: None,
                tier: Tier::Episodic,
                content,
                source: source.clone(),
                session_id: session_id.clone(),
                created_at: chunk.iter().map(|e| e.created_at).max().unwrap_or(now),
                importance: chunk.iter().map(|e| e.importance).fold(0.0, f64::max),
                metadata: json!({"consolidated": chunk.len()}),
                summary_of: Vec::new(),
            },
            record: ConsolidationRecord {
                id: 0,
                session_id: session_id.clone(),
                source: source.clone(),
                items_consolidated: chunk.len(),
                summary_preview,
                created_at: now,
                strategy,
                model,
                duration_ms: duration_ms.unwrap_or_else(|| started.elapsed().as_secs_f64() * 1e3),
                ids_in: ids.clone(),
                ids_out: Vec::new(),
            },
            ids,
        };
        pending_entries += chunk.len();
        pending.push(consolidation);
        if pending_entries >= policy.entries_per_transaction {
            flush(store, &mut pending, report)?;
            pending_entries = 0;
        }
    }
    // The entries are summarised and their ids moved out: they are freed while the last
    // transaction runs.
    free_in_background(batch);
    flush(store, &mut pending, report)
}

/// Drops `entries` on a thread of its own when there are many (freeing ten thousand entries'
/// strings takes milliseconds), here when there are few or no thread is to be had.
fn free_in_background(entries: Vec<MemoryEntry>) {
    if entries.len() < 1_000 {
        return;
    }
    // When the thread cannot start, the closure (and the entries with it) is dropped here.
    let _ = std::thread::Builder::new()
        .name("engram-free".into())
        .spawn(move || drop(entries));
}

/// Sorts `batch` into groups by source and session, in that order, each group's entries
/// oldest first (entries of the same time in the order they came), and `lines` (when not
/// empty) with them; returns each entry's group (its rank), in the sorted order.
///
/// An entry alone in its (source, session) group joins its source's group of entries without
/// a session: a sleep over entries that each have a session of their own writes one summary
/// per source, not one per entry (the summary's `summary_of` still names every original).
///
/// Each entry's group gets a rank (its key's place among the few distinct keys) and the
/// entries are ordered by (rank, time, position): no string is compared per entry pair, and
/// the entries are put in place by swaps, with no second copy of the batch.
fn sort_into_groups(batch: &mut [MemoryEntry], lines: &mut [Line]) -> Vec<u32> {
    // Fx, not SipHash: hashing every entry's key with SipHash was a third of this function's
    // time.
    let mut keys: rustc_hash::FxHashMap<(&str, Option<&str>), u32> =
        rustc_hash::FxHashMap::default();
    let mut counts: Vec<u32> = Vec::new();
    let mut ids: Vec<u32> = batch
        .iter()
        .map(|e| {
            let next = keys.len() as u32;
            let id = *keys
                .entry((e.source.as_str(), e.session_id.as_deref()))
                .or_insert(next);
            if id == next {
                counts.push(0);
            }
            counts[id as usize] += 1;
            id
        })
        .collect();
    // Single entries with a session go to their source's session-less group.
    let mut by_id: Vec<(&str, Option<&str>)> = vec![("", None); keys.len()];
    for (&key, &id) in &keys {
        by_id[id as usize] = key;
    }
    let mut merged: rustc_hash::FxHashMap<(&str, Option<&str>), u32> =
        rustc_hash::FxHashMap::default();
    let remap: Vec<u32> = by_id
        .iter()
        .zip(&counts)
        .map(|(&(source, session), &count)| {
            let key = if count == 1 && session.is_some() {
                (source, None)
            } else {
                (source, session)
            };
            let next = merged.len() as u32;
            *merged.entry(key).or_insert(next)
        })
        .collect();
    for id in &mut ids {
        *id = remap[*id as usize];
    }
    let mut sorted: Vec<((&str, Option<&str>), u32)> = merged.into_iter().collect();
    sorted.sort_unstable();
    let mut rank = vec![0u32; sorted.len()];
    for (r, (_, id)) in sorted.iter().enumerate() {
        rank[*id as usize] = r as u32;
    }
    let mut order: Vec<(u32, i64, u32)> = batch
        .iter()
        .zip(&ids)
        .enumerate()
        .map(|(i, (e, &id))| (rank[id as usize], e.created_at, i as u32))
        .collect();
    order.sort_unstable();
    let groups: Vec<u32> = order.iter().map(|&(r, _, _)| r).collect();
    // The entry that goes to place k is the one at order[k]'s position; each cycle of that
    // permutation is followed with swaps.
    let mut from: Vec<u32> = order.into_iter().map(|(_, _, i)| i).collect();
    let with_lines = lines.len() == batch.len();
    for start in 0..from.len() {
        let mut k = start;
        while from[k] as usize != start {
            let next = from[k] as usize;
            batch.swap(k, next);
            if with_lines {
                lines.swap(k, next);
            }
            from[k] = k as u32;
            k = next;
        }
        from[k] = k as u32;
    }
    groups
}

/// Each group's chunks of at most `chunk_size` entries, as ranges of the sorted batch whose
/// entries' groups are `groups`, with whether the chunk is its group's first.
fn chunk_ranges(groups: &[u32], chunk_size: usize) -> Vec<(usize, usize, bool)> {
    let mut chunks = Vec::new();
    let mut start = 0;
    for group in groups.chunk_by(|a, b| a == b) {
        let end = start + group.len();
        for from in (start..end).step_by(chunk_size) {
            chunks.push((from, (from + chunk_size).min(end), from == start));
        }
        start = end;
    }
    chunks
}

/// The extractive summary of each of `chunks` (ranges of `batch`, sorted into groups), in
/// order, with the milliseconds each took; split between two threads when there is enough to
/// split. `lines` are the entries' [`Line`]s, or empty.
fn summarize_chunks(
    batch: &[MemoryEntry],
    lines: &[Line],
    chunks: &[(usize, usize, bool)],
    max_chars: usize,
) -> Vec<(String, f64)> {
    let run = |chunks: &[(usize, usize, bool)]| -> Vec<(String, f64)> {
        chunks
            .iter()
            .map(|&(from, to, _)| {
                let started = Instant::now();
                let text = summarize_lines(&batch[from..to], lines.get(from..to), max_chars);
                (text, started.elapsed().as_secs_f64() * 1e3)
            })
            .collect()
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 2 || batch.len() < 2_000 {
        return run(chunks);
    }
    // Two halves of about the same number of entries.
    let middle = chunks
        .iter()
        .position(|&(_, to, _)| to * 2 >= batch.len())
        .map_or(chunks.len(), |i| i + 1);
    let (first, second) = chunks.split_at(middle);
    std::thread::scope(|scope| {
        let other = scope.spawn(|| run(second));
        let mut out = run(first);
        match other.join() {
            Ok(rest) => out.extend(rest),
            Err(panic) => std::panic::resume_unwind(panic),
        }
        out
    })
}

/// Applies the pending groups in one transaction.
fn flush(
    store: &dyn MemoryStore,
    pending: &mut Vec<Consolidation>,
    report: &mut SleepReport,
) -> Result<(), Error> {
    if pending.is_empty() {
        return Ok(());
    }
    for record in store.consolidate_many(pending)? {
        report.items_consolidated += record.items_consolidated;
        report.summaries_created += 1;
    }
    pending.clear();
    Ok(())
}

/// A group's summary by `summarizer`, with the group's header; the reason when it is not
/// usable (an error, an empty reply, or one not shorter than the entries).
fn summarize_with(
    summarizer: &dyn Summarizer,
    entries: &[MemoryEntry],
    max_chars: usize,
) -> Result<String, String> {
    let messages: Vec<Message> = entries
        .iter()
        .map(|e| Message::user(format!("[{}] {}", format_minute(e.created_at), e.content)))
        .collect();
    let refs: Vec<&Message> = messages.iter().collect();
    let text = summarizer
        .summarize(&SummaryRequest {
            messages: &refs,
            prompt: MEMORY_PROMPT,
            focus: None,
            max_tokens: (max_chars / 4).max(16),
            previous: None,
        })
        .map_err(|e| e.to_string())?;
    let text = text.trim();
    let input: usize = entries.iter().map(|e| e.content.len()).sum();
    if text.is_empty() {
        return Err("the summary was empty".into());
    }
    if text.len() >= input.max(max_chars) {
        return Err(format!(
            "the summary ({} characters) was not shorter than what it replaces",
            text.len()
        ));
    }
    Ok(format!("{}\n{text}", group_header(entries)))
}

fn group_header(entries: &[MemoryEntry]) -> String {
    let (from, to) = (
        entries.iter().map(|e| e.created_at).min().unwrap_or(0),
        entries.iter().map(|e| e.created_at).max().unwrap_or(0),
    );
    let source = entries.first().map_or("", |e| e.source.as_str());
    format!(
        "[{} from {source}, {} to {}]",
        crate::plural(entries.len(), "entry", "entries"),
        format_minute(from),
        format_minute(to)
    )
}

/// The first `n` characters of `s`.
fn first_chars(s: &str, n: usize) -> &str {
    if s.len() <= n {
        return s; // no more characters than bytes
    }
    if s.as_bytes()[..n].is_ascii() {
        return &s[..n]; // n one-byte characters, and a character starts after them
    }
    match s.char_indices().nth(n) {
        Some((end, _)) => &s[..end],
        None => s,
    }
}

/// The extractive summary of a group (a text-substitution fallback, done better): a
/// header with the count, source and time range, then each entry's most informative line
/// (the one with the most identifiers, or its first), duplicates removed, newest last, within
/// `max_chars`; the entries with the most identifiers win when not all fit.
pub fn summarize(entries: &[MemoryEntry], max_chars: usize) -> String {
    summarize_lines(entries, None, max_chars)
}

/// An entry's most informative line (the one with the most identifiers, or its first, cut to
/// 240 characters) as a range of its content, and that line's weight (its identifiers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Line {
    start: u32,
    len: u32,
    weight: u32,
}

fn best_line(content: &str) -> Line {
    let mut candidates = content.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = candidates.next().unwrap_or("");
    // Most entries are one line: no need to score it against nothing.
    let best = match candidates.next() {
        None => first,
        Some(second) => [first, second]
            .into_iter()
            .chain(candidates)
            .max_by_key(|l| (count_salient(l), std::cmp::Reverse(l.len() / 40)))
            .unwrap_or(""),
    };
    let line = first_chars(best, 240);
    // A line of the content: its offset is within the content.
    let start = if line.is_empty() {
        0
    } else {
        line.as_ptr() as usize - content.as_ptr() as usize
    };
    Line {
        start: start as u32,
        len: line.len() as u32,
        weight: if line.is_empty() {
            0
        } else {
            count_salient(line) as u32
        },
    }
}

/// [`summarize`], with the entries' [`Line`]s when they were worked out already.
fn summarize_lines(entries: &[MemoryEntry], known: Option<&[Line]>, max_chars: usize) -> String {
    let header = group_header(entries);
    let mut lines: Vec<(usize, usize, &str)> = Vec::new(); // (order, weight, line)
    // Lines are short and many: a fast hash, not SipHash.
    let mut seen = rustc_hash::FxHashSet::default();
    for (i, e) in entries.iter().enumerate() {
        let at = match known {
            Some(known) => known[i],
            None => best_line(&e.content),
        };
        let line = &e.content[at.start as usize..(at.start + at.len) as usize];
        if !line.is_empty() && seen.insert(line) {
            lines.push((i, at.weight as usize, line));
        }
    }
    let mut budget = max_chars.saturating_sub(header.len());
    let mut order: Vec<usize> = (0..lines.len()).collect();
    order.sort_by(|&a, &b| {
        lines[b]
            .1
            .cmp(&lines[a].1)
            .then(lines[b].0.cmp(&lines[a].0))
    });
    let mut keep = vec![false; lines.len()];
    for i in order {
        let cost = lines[i].2.len() + 3;
        if cost <= budget {
            budget -= cost;
            keep[i] = true;
        }
    }
    let mut out = header;
    for (i, (_, _, line)) in lines.iter().enumerate() {
        if keep[i] {
            out.push_str("\n- ");
            out.push_str(line);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compact::summarize::DeterministicSummarizer;
    use crate::in_memory::InMemoryStore;

    #[derive(Debug)]
    struct Failing(&'static str);

    impl Summarizer for Failing {
        fn name(&self) -> &str {
            "failing"
        }
        fn summarize(&self, _: &SummaryRequest<'_>) -> Result<String, Error> {
            if self.0.is_empty() {
                Err(Error::Summarizer {
                    summarizer: "failing".into(),
                    reason: "connection refused".into(),
                })
            } else {
                Ok(self.0.repeat(1000))
            }
        }
    }

    fn store_with_aged_entries() -> (InMemoryStore, Timestamp) {
        let store = InMemoryStore::new();
        let now = crate::memory::parse_time("2026-05-01T00:00:00Z").expect("time");
        let entries: Vec<NewEntry> = (0..6)
            .map(|i| NewEntry {
                created_at: now - 20 * 3600 * 1000 + i,
                ..NewEntry::working(format!("user asked to rename src/mod_{i}.rs"), "chat")
            })
            .collect();
        store.insert(&entries).expect("insert");
        (store, now)
    }

    #[test]
    fn chunk_summaries_split_between_threads_come_back_in_order() {
        // Sorted into groups as consolidate_batch sorts them, of many sizes (one is chunked).
        let mut batch = Vec::new();
        for g in 0..40 {
            for i in 0..(g * g % 97 + 1) * 3 {
                batch.push(MemoryEntry {
                    id: format!("g{g}-{i}"),
                    tier: Tier::Working,
                    content: format!("group {g} step {i}: edited src/mod_{g}_{i}.rs"),
                    source: format!("source{g:02}"),
                    session_id: None,
                    created_at: i64::from(i),
                    importance: 0.5,
                    metadata: serde_json::Value::Null,
                    summary_of: Vec::new(),
                });
            }
        }
        assert!(batch.len() >= 2_000, "enough to split: {}", batch.len());
        let expected: Vec<String> = batch
            .chunk_by(|a, b| a.source == b.source)
            .flat_map(|group| group.chunks(200))
            .map(|chunk| summarize(chunk, 1_200))
            .collect();
        let groups = sort_into_groups(&mut batch, &mut []);
        let chunks = chunk_ranges(&groups, 200);
        let lines: Vec<Line> = batch.iter().map(|e| best_line(&e.content)).collect();
        for lines in [&lines[..], &[]] {
            let got: Vec<String> = summarize_chunks(&batch, lines, &chunks, 1_200)
                .into_iter()
                .map(|(text, _)| text)
                .collect();
            assert_eq!(got, expected);
        }
    }

    #[test]
    fn groups_sort_by_source_then_session_and_keep_their_order() {
        let entry = |id: &str, source: &str, session: Option<&str>| MemoryEntry {
            id: id.into(),
            tier: Tier::Working,
            content: String::new(),
            source: source.into(),
            session_id: session.map(str::to_owned),
            created_at: 0,
            importance: 0.5,
            metadata: serde_json::Value::Null,
            summary_of: Vec::new(),
        };
        let mut batch = vec![
            entry("1", "b", None),
            entry("2", "a", Some("s2")),
            entry("3", "a", None),
            entry("4", "b", None),
            entry("5", "a", Some("s1")),
            entry("6", "a", Some("s2")),
            entry("7", "a", None),
        ];
        let groups = sort_into_groups(&mut batch, &mut []);
        let ids: Vec<&str> = batch.iter().map(|e| e.id.as_str()).collect();
        // "5" is alone in (a, s1): it joins a's entries without a session.
        assert_eq!(ids, ["3", "5", "7", "2", "6", "1", "4"]);
        assert_eq!(groups, [0, 0, 0, 1, 1, 2, 2]);
        assert!(sort_into_groups(&mut [], &mut []).is_empty());
    }

    proptest::proptest! {
        /// The batch comes out as a stable sort by (source, session, time) would leave it (an
        /// entry alone in its session counting as session-less), with each entry's line still
        /// beside it, and the groups numbered in that order.
        #[test]
        fn groups_sort_as_a_stable_sort_would_and_lines_follow_their_entries(
            keys in proptest::collection::vec((0u8..4, proptest::option::of(0u8..3), 0i64..6), 0..80),
        ) {
            let mut batch: Vec<MemoryEntry> = keys
                .iter()
                .enumerate()
                .map(|(i, &(source, session, at))| MemoryEntry {
                    id: i.to_string(),
                    tier: Tier::Working,
                    content: format!("entry {i} edited src/f{i}.rs\nsecond line {i}"),
                    source: format!("s{source}"),
                    session_id: session.map(|s| format!("t{s}")),
                    created_at: at,
                    importance: 0.5,
                    metadata: serde_json::Value::Null,
                    summary_of: Vec::new(),
                })
                .collect();
            let count = |e: &MemoryEntry| {
                batch.iter().filter(|o| o.source == e.source && o.session_id == e.session_id).count()
            };
            let key = |e: &MemoryEntry, n: usize| {
                (e.source.clone(), if n == 1 { None } else { e.session_id.clone() })
            };
            let mut expected: Vec<(MemoryEntry, (String, Option<String>))> =
                batch.iter().map(|e| (e.clone(), key(e, count(e)))).collect();
            expected.sort_by(|(a, ka), (b, kb)| (ka, a.created_at).cmp(&(kb, b.created_at)));
            let mut lines: Vec<Line> = batch.iter().map(|e| best_line(&e.content)).collect();
            let groups = sort_into_groups(&mut batch, &mut lines);
            let entries: Vec<MemoryEntry> = expected.iter().map(|(e, _)| e.clone()).collect();
            proptest::prop_assert_eq!(&batch, &entries);
            for (i, w) in expected.windows(2).enumerate() {
                proptest::prop_assert_eq!(groups[i] == groups[i + 1], w[0].1 == w[1].1);
            }
            for (e, line) in batch.iter().zip(&lines) {
                proptest::prop_assert_eq!(*line, best_line(&e.content));
            }
        }
    }

    #[test]
    fn first_chars_counts_characters_not_bytes() {
        assert_eq!(first_chars("héllo wörld", 4), "héll");
        assert_eq!(first_chars("héllo", 5), "héllo");
        assert_eq!(first_chars("héllo", 9), "héllo");
        assert_eq!(first_chars("日本語", 2), "日本");
        assert_eq!(first_chars("", 3), "");
        // ASCII first, then not: cut on the ASCII, after a multi-byte character, within one.
        assert_eq!(first_chars("abcdé", 4), "abcd");
        assert_eq!(first_chars("abcdéf", 5), "abcdé");
        assert_eq!(first_chars("abé日本", 4), "abé日");
    }

    #[test]
    fn entries_alone_in_their_sessions_are_summarised_together_by_source() {
        let store = InMemoryStore::new();
        let now = crate::memory::parse_time("2026-01-10T00:00:00Z").expect("time");
        let old = now - 48 * 3_600_000;
        let entries: Vec<NewEntry> = (0..5)
            .map(|i| NewEntry {
                id: Some(format!("e{i}")),
                session_id: Some(format!("conversation-{i}")),
                created_at: old + i,
                ..NewEntry::working(format!("deployed service {i} with blue-green"), "chat")
            })
            .chain(std::iter::once(NewEntry {
                id: Some("alone".into()),
                created_at: old,
                ..NewEntry::working("the only shell entry", "shell")
            }))
            .collect();
        store.insert(&entries).expect("insert");
        let report = sleep(&store, now, &SleepPolicy::default()).expect("sleep");
        assert_eq!(
            (report.items_consolidated, report.summaries_created),
            (6, 2)
        );
        let log = store.log(10).expect("log");
        let chat = log
            .iter()
            .find(|r| r.source == "chat")
            .expect("chat's group");
        assert_eq!(chat.items_consolidated, 5);
        assert_eq!(chat.session_id, None, "the summary spans five sessions");
        let summary = store.get(&chat.ids_out[0]).expect("get").expect("summary");
        let mut lineage = summary.summary_of.clone();
        lineage.sort();
        assert_eq!(lineage, ["e0", "e1", "e2", "e3", "e4"], "lineage kept");
        assert!(
            summary.content.starts_with("[5 entries from chat"),
            "{}",
            summary.content
        );
        let shell = log
            .iter()
            .find(|r| r.source == "shell")
            .expect("shell's group");
        let one = store.get(&shell.ids_out[0]).expect("get").expect("summary");
        assert!(
            one.content.starts_with("[1 entry from shell"),
            "{}",
            one.content
        );
    }

    #[test]
    fn a_summarizer_writes_the_summary_and_is_logged() {
        let (store, now) = store_with_aged_entries();
        let report = sleep_with(
            &store,
            now,
            &SleepPolicy::default(),
            Some(&DeterministicSummarizer),
        )
        .expect("sleep");
        assert_eq!((report.summaries_created, report.fallbacks), (1, 0));
        let record = store.log(1).expect("log").remove(0);
        assert_eq!(record.strategy, "summarizer");
        assert_eq!(record.model.as_deref(), Some("deterministic"));
        let summary = store
            .get(&record.ids_out[0])
            .expect("get")
            .expect("summary");
        // The header gives the group's span to the minute, as a session's summaries do.
        assert!(
            summary.content.starts_with(
                "[6 entries from chat, 2026-04-30 04:00 UTC to 2026-04-30 04:00 UTC]\n"
            ),
            "{}",
            summary.content
        );
        assert_eq!(summary.summary_of.len(), 6);
    }

    #[test]
    fn a_failing_or_verbose_summarizer_falls_back_to_extractive() {
        for (summarizer, why) in [
            (Failing(""), "connection refused"),
            (Failing("blah "), "not shorter"),
        ] {
            let (store, now) = store_with_aged_entries();
            let report =
                sleep_with(&store, now, &SleepPolicy::default(), Some(&summarizer)).expect("sleep");
            assert_eq!((report.summaries_created, report.fallbacks), (1, 1));
            let record = store.log(1).expect("log").remove(0);
            assert!(
                record.strategy.starts_with("extractive (fallback: ")
                    && record.strategy.contains(why),
                "{}",
                record.strategy
            );
            let summary = store
                .get(&record.ids_out[0])
                .expect("get")
                .expect("summary");
            assert!(
                summary.content.contains("src/mod_5.rs"),
                "{}",
                summary.content
            );
        }
    }

    #[derive(Debug, Default)]
    struct Counting(std::sync::atomic::AtomicUsize);

    impl Summarizer for Counting {
        fn name(&self) -> &str {
            "down"
        }
        fn summarize(&self, _: &SummaryRequest<'_>) -> Result<String, Error> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Err(Error::Summarizer {
                summarizer: "down".into(),
                reason: "connection refused".into(),
            })
        }
    }

    #[test]
    fn a_summarizer_that_keeps_failing_is_not_called_for_every_group() {
        let store = InMemoryStore::new();
        let now = crate::memory::parse_time("2026-05-01T00:00:00Z").expect("time");
        let entries: Vec<NewEntry> = (0..10)
            .map(|i| NewEntry {
                created_at: now - 20 * 3600 * 1000 + i,
                ..NewEntry::working(format!("note {i}"), format!("source{i}"))
            })
            .collect();
        store.insert(&entries).expect("insert");
        let down = Counting::default();
        let report = sleep_with(&store, now, &SleepPolicy::default(), Some(&down)).expect("sleep");
        assert_eq!((report.groups, report.fallbacks), (10, 10));
        assert_eq!(
            down.0.load(std::sync::atomic::Ordering::SeqCst),
            SUMMARIZER_FAILURES
        );
        let log = store.log(10).expect("log");
        assert!(
            log.iter().any(|r| r.strategy.contains(
                "not called again in this sleep; last: summarizer down: connection refused"
            )),
            "{log:?}"
        );
    }
}
