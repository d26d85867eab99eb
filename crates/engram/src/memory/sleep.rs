//! Sleep consolidation (seed 003): working entries older than TTL/2 are grouped by source and
//! session, each group is summarised into one episodic entry whose `summary_of` names the
//! originals, and the originals move to the archive, one group per transaction.
//!
//! The working-memory cap never deletes: when working memory holds more than `max_working`
//! entries, the oldest overflow is consolidated early (Mnemosyne silently deletes it).
//! Candidates are read in batches and huge groups are summarised in chunks, so a sleep over a
//! million entries never holds a long transaction.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;
use serde_json::json;

use super::{
    Consolidation, ConsolidationRecord, MemoryEntry, MemoryError, MemoryStore, NewEntry, Tier,
    Timestamp, format_time,
};
use crate::compact::salient::salient_tokens;

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
}

impl Default for SleepPolicy {
    fn default() -> Self {
        SleepPolicy {
            ttl_ms: 24 * 3600 * 1000,
            max_working: 10_000,
            group_chunk: 200,
            batch: 20_000,
            summary_chars: 1_200,
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
    /// Wall time.
    pub duration_ms: f64,
}

/// Consolidates what is due at `now`.
pub fn sleep(
    store: &dyn MemoryStore,
    now: Timestamp,
    policy: &SleepPolicy,
) -> Result<SleepReport, MemoryError> {
    let started = Instant::now();
    let mut report = SleepReport::default();
    let cutoff = now - policy.ttl_ms / 2;
    loop {
        let batch = store.working_before(cutoff, policy.batch.max(1))?;
        if batch.is_empty() {
            break;
        }
        consolidate_batch(store, batch, now, policy, &mut report)?;
    }
    // The cap: consolidate the oldest overflow early, never delete it.
    let working = store.stats()?.working;
    if working > policy.max_working {
        let overflow = store.oldest_working(working - policy.max_working)?;
        report.over_cap = overflow.len();
        consolidate_batch(store, overflow, now, policy, &mut report)?;
    }
    report.duration_ms = started.elapsed().as_secs_f64() * 1e3;
    Ok(report)
}

fn consolidate_batch(
    store: &dyn MemoryStore,
    batch: Vec<MemoryEntry>,
    now: Timestamp,
    policy: &SleepPolicy,
    report: &mut SleepReport,
) -> Result<(), MemoryError> {
    let mut groups: BTreeMap<(String, Option<String>), Vec<MemoryEntry>> = BTreeMap::new();
    for entry in batch {
        groups
            .entry((entry.source.clone(), entry.session_id.clone()))
            .or_default()
            .push(entry);
    }
    for ((source, session_id), entries) in groups {
        report.groups += 1;
        for chunk in entries.chunks(policy.group_chunk.max(1)) {
            let started = Instant::now();
            let content = summarize(chunk, policy.summary_chars);
            let ids: Vec<String> = chunk.iter().map(|e| e.id.clone()).collect();
            let consolidation = Consolidation {
                summary: NewEntry {
                    id: None,
                    tier: Tier::Episodic,
                    content: content.clone(),
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
                    summary_preview: content.chars().take(200).collect(),
                    created_at: now,
                    strategy: "extractive".into(),
                    model: None,
                    duration_ms: started.elapsed().as_secs_f64() * 1e3,
                    ids_in: ids.clone(),
                    ids_out: Vec::new(),
                },
                ids,
            };
            store.consolidate(&consolidation)?;
            report.items_consolidated += chunk.len();
            report.summaries_created += 1;
        }
    }
    Ok(())
}

/// The extractive summary of a group (seed 003's text-substitution fallback, done better): a
/// header with the count, source and time range, then each entry's most informative line
/// (the one with the most identifiers, or its first), duplicates removed, newest last, within
/// `max_chars`; the entries with the most identifiers win when not all fit.
pub fn summarize(entries: &[MemoryEntry], max_chars: usize) -> String {
    let (from, to) = (
        entries.iter().map(|e| e.created_at).min().unwrap_or(0),
        entries.iter().map(|e| e.created_at).max().unwrap_or(0),
    );
    let source = entries.first().map_or("", |e| e.source.as_str());
    let header = format!(
        "[{} entries from {source}, {} to {}]",
        entries.len(),
        format_time(from),
        format_time(to)
    );
    let mut lines: Vec<(usize, usize, String)> = Vec::new(); // (order, weight, line)
    let mut seen = std::collections::HashSet::new();
    for (i, e) in entries.iter().enumerate() {
        let best = e
            .content
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .max_by_key(|l| (salient_tokens(l).count(), std::cmp::Reverse(l.len() / 40)))
            .unwrap_or("");
        let line: String = best.chars().take(240).collect();
        if !line.is_empty() && seen.insert(line.clone()) {
            lines.push((i, salient_tokens(&line).count(), line));
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
