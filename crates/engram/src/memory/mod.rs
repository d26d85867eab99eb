//! Memory that lasts: tiers, the [`MemoryStore`] trait, and sleep
//! consolidation.
//!
//! Every entry lives in exactly one tier. New entries go to *working* memory. Sleep turns groups
//! of aged working entries into one *episodic* summary whose `summary_of` names them, and moves
//! the originals to the *archive*: nothing is deleted unless a retention setting says so.
//! *Learnings* and the *journal* (`context_synthesis` entries) are tiers
//! too, so that one search covers everything.
//!
//! Backends implement [`MemoryStore`] and run the same conformance suite
//! (`conformance::memory::run`, built with the `conformance` feature):
//! [`InMemoryStore`](crate::in_memory::InMemoryStore), SQLite and
//! PostgreSQL in `engram-store`.

pub mod consolidation;
pub mod hybrid;
pub mod search;

pub use crate::timestamp::{Timestamp, format_time, new_id, now, parse_time, serialize_time};
use serde::Serialize;
use serde_json::Value;

use crate::Error;

/// Where an entry lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Recent entries, with a TTL.
    Working,
    /// Summaries of consolidated working entries.
    Episodic,
    /// Originals that left working memory, kept.
    Archive,
    /// Lessons from earlier runs.
    Learning,
    /// Compaction summaries (`context_synthesis`).
    Journal,
}

impl Tier {
    /// Every tier.
    pub const ALL: [Tier; 5] = [
        Tier::Working,
        Tier::Episodic,
        Tier::Archive,
        Tier::Learning,
        Tier::Journal,
    ];

    /// The tier's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Working => "working",
            Tier::Episodic => "episodic",
            Tier::Archive => "archive",
            Tier::Learning => "learning",
            Tier::Journal => "journal",
        }
    }

    /// Parses a tier's name.
    pub fn parse(s: &str) -> Option<Tier> {
        Tier::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

/// A stored entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryEntry {
    /// Stable id.
    pub id: String,
    /// Its tier.
    pub tier: Tier,
    /// The text.
    pub content: String,
    /// Where it came from (a tool, a channel, an agent).
    pub source: String,
    /// The session it belongs to, if any.
    pub session_id: Option<String>,
    /// When it was written.
    #[serde(serialize_with = "crate::memory::serialize_time")]
    pub created_at: Timestamp,
    /// 0 to 1.
    pub importance: f64,
    /// The caller's metadata, verbatim.
    pub metadata: Value,
    /// For a summary: the ids it replaces.
    pub summary_of: Vec<String>,
}

impl MemoryEntry {
    /// `metadata` and `summary_of` as a backend stores them (JSON text, or nothing), read
    /// leniently: text that is not what it should be reads as none rather than failing a read.
    pub fn with_stored_json(mut self, metadata: Option<&str>, summary_of: Option<&str>) -> Self {
        self.metadata = metadata
            .and_then(|m| serde_json::from_str(m).ok())
            .unwrap_or(Value::Null);
        self.summary_of = summary_of
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default();
        self
    }
}

/// An entry to insert. Without an id, the store makes one.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEntry {
    /// Id; an entry whose id is already stored is skipped (re-running an import is safe).
    pub id: Option<String>,
    /// The tier (normally working).
    pub tier: Tier,
    /// The text.
    pub content: String,
    /// Where it came from.
    pub source: String,
    /// The session, if any.
    pub session_id: Option<String>,
    /// When it was written.
    pub created_at: Timestamp,
    /// 0 to 1.
    pub importance: f64,
    /// Metadata.
    pub metadata: Value,
    /// For a summary: the ids it replaces (an export read back keeps its lineage).
    pub summary_of: Vec<String>,
}

/// An entry's importance when its writer gives none (every surface: `memory add`, an import
/// line, the HTTP API, Python and Node).
pub const DEFAULT_IMPORTANCE: f64 = 0.5;

impl NewEntry {
    /// A working-memory entry written now.
    pub fn working(content: impl Into<String>, source: impl Into<String>) -> Self {
        NewEntry {
            id: None,
            tier: Tier::Working,
            content: content.into(),
            source: source.into(),
            session_id: None,
            created_at: now(),
            importance: DEFAULT_IMPORTANCE,
            metadata: Value::Null,
            summary_of: Vec::new(),
        }
    }
}

/// What an insert did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Inserted {
    /// New entries stored.
    pub inserted: usize,
    /// Entries skipped because their id was already stored.
    pub skipped: usize,
}

/// A full-text query with filters.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SearchQuery {
    /// The words to look for (any of them; BM25 ranks).
    pub text: String,
    /// The most hits to return.
    pub limit: usize,
    /// Only these tiers; empty means working and episodic.
    pub tiers: Vec<Tier>,
    /// Only this session.
    pub session_id: Option<String>,
    /// Only this source.
    pub source: Option<String>,
    /// Only entries written at or after this time.
    pub since: Option<Timestamp>,
    /// Only entries written before this time.
    pub until: Option<Timestamp>,
}

/// The most hits one search returns, whatever limit it asked for: a larger limit is clamped
/// (a limit reaches the index's collectors, which allocate for it).
pub const MAX_MEMORY_HITS: usize = 10_000;

/// The most hits a search returns when it asks for no number (every surface).
pub const DEFAULT_MEMORY_HITS: usize = 10;

/// The most consolidation records a read of the log returns when it asks for no number (every
/// surface: the CLI's `memory log`, `GET /v1/memory/log`, Python's and Node's `log()`).
pub const DEFAULT_LOG_LIMIT: usize = 20;

impl SearchQuery {
    /// The limit, clamped to [`MAX_MEMORY_HITS`].
    pub fn clamped_limit(&self) -> usize {
        self.limit.min(MAX_MEMORY_HITS)
    }

    /// A query for `text` with the default tiers, returning up to `limit` hits.
    pub fn new(text: impl Into<String>, limit: usize) -> Self {
        SearchQuery {
            text: text.into(),
            limit,
            ..SearchQuery::default()
        }
    }

    /// The tiers searched.
    pub fn tiers(&self) -> Vec<Tier> {
        if self.tiers.is_empty() {
            vec![Tier::Working, Tier::Episodic]
        } else {
            self.tiers.clone()
        }
    }

    /// True when `entry` passes the filters (not the text).
    pub fn admits(&self, entry: &MemoryEntry) -> bool {
        self.tiers().contains(&entry.tier)
            && self
                .session_id
                .as_ref()
                .is_none_or(|s| entry.session_id.as_ref() == Some(s))
            && self.source.as_ref().is_none_or(|s| &entry.source == s)
            && self.since.is_none_or(|t| entry.created_at >= t)
            && self.until.is_none_or(|t| entry.created_at < t)
    }
}

/// One search result; higher scores are better.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchHit {
    /// The entry.
    pub entry: MemoryEntry,
    /// Relevance (BM25; comparable within one query only).
    pub score: f64,
}

impl SearchHit {
    /// Puts `hits` in memory search's order, best score first, then the newest, then by id,
    /// and keeps the first `limit`.
    pub fn best_first(hits: &mut Vec<SearchHit>, limit: usize) {
        hits.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then(b.entry.created_at.cmp(&a.entry.created_at))
                .then_with(|| a.entry.id.cmp(&b.entry.id))
        });
        hits.truncate(limit);
    }

    /// The entry's JSON ([`MemoryEntry::to_json`]) with its `score`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = self.entry.to_json();
        v["score"] = serde_json::json!(self.score);
        v
    }
}

/// Entries per tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Stats {
    /// Working memory.
    pub working: usize,
    /// Episodic memory.
    pub episodic: usize,
    /// Archive.
    pub archive: usize,
    /// Learnings.
    pub learnings: usize,
    /// Journal.
    pub journal: usize,
}

/// A consolidation, as the log records it (its columns, and what an audit needs).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConsolidationRecord {
    /// Assigned by the store.
    pub id: i64,
    /// The group's session, if any.
    pub session_id: Option<String>,
    /// The group's source.
    pub source: String,
    /// Working entries consolidated.
    pub items_consolidated: usize,
    /// The start of the summary.
    pub summary_preview: String,
    /// When it ran.
    #[serde(serialize_with = "crate::memory::serialize_time")]
    pub created_at: Timestamp,
    /// How the summary was written (`extractive`, or a summarizer's name).
    pub strategy: String,
    /// The model, when an LLM wrote it.
    pub model: Option<String>,
    /// How long the group took.
    pub duration_ms: f64,
    /// The working entries consolidated.
    pub ids_in: Vec<String>,
    /// The episodic summary created.
    pub ids_out: Vec<String>,
}

impl ConsolidationRecord {
    /// As JSON, with `created_at` as RFC 3339 (what the CLI, the server and Python return).
    pub fn to_json(&self) -> Value {
        with_time(serde_json::to_value(self), self.created_at)
    }
}

impl MemoryEntry {
    /// As JSON, with `created_at` as RFC 3339 (what the CLI, the server and Python return).
    pub fn to_json(&self) -> Value {
        with_time(serde_json::to_value(self), self.created_at)
    }
}

fn with_time(value: serde_json::Result<Value>, created_at: Timestamp) -> Value {
    let mut v = value.unwrap_or(Value::Null);
    v["created_at"] = Value::String(format_time(created_at));
    v
}

/// One group's consolidation, applied atomically by [`MemoryStore::consolidate`].
#[derive(Debug, Clone, PartialEq)]
pub struct Consolidation {
    /// The working entries to archive.
    pub ids: Vec<String>,
    /// The episodic summary to create (its `summary_of` is `ids`).
    pub summary: NewEntry,
    /// The log record (its `id` is assigned by the store).
    pub record: ConsolidationRecord,
}

/// What to forget: every entry matching all the filters given (at least one).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Forget {
    /// One entry.
    pub id: Option<String>,
    /// Everything of a session.
    pub session_id: Option<String>,
    /// Everything from a source.
    pub source: Option<String>,
}

impl Forget {
    /// True when no filter is set (forgetting everything takes [`MemoryStore::forget_all`]).
    pub fn is_empty(&self) -> bool {
        self.id.is_none() && self.session_id.is_none() && self.source.is_none()
    }

    /// The error for a forget that matched nothing (most often a mistyped id): every surface
    /// that reports it as a failure says the same.
    pub fn matched_nothing(&self) -> Error {
        let what = match (&self.id, &self.session_id, &self.source) {
            (Some(id), _, _) => format!("no memory entry with id {id:?}"),
            (_, Some(s), _) => format!("no memory entries of session {s:?}"),
            (_, _, Some(s)) => format!("no memory entries from source {s:?}"),
            _ => "no memory entries matched".to_owned(),
        };
        Error::NotFound {
            missing: crate::error::Missing::MemoryEntries,
            message: format!("{what}; nothing was forgotten"),
        }
    }

    /// True when `entry` matches every filter given.
    pub fn matches(&self, entry: &MemoryEntry) -> bool {
        !self.is_empty()
            && self.id.as_ref().is_none_or(|id| &entry.id == id)
            && self
                .session_id
                .as_ref()
                .is_none_or(|s| entry.session_id.as_ref() == Some(s))
            && self.source.as_ref().is_none_or(|s| &entry.source == s)
    }
}

/// What forgetting removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Forgotten {
    /// Entries deleted (every tier, with their full-text rows).
    pub entries: usize,
    /// Summaries whose `summary_of` no longer names the deleted entries.
    pub summaries_updated: usize,
}

impl Forgotten {
    /// `entries` deleted, and no summary to update (everything went).
    pub fn everything(entries: usize) -> Self {
        Forgotten {
            entries,
            summaries_updated: 0,
        }
    }
}

/// A memory backend. Every method is atomic: it changes everything it says or nothing.
pub trait MemoryStore: crate::embed::VectorStore + Send + Sync {
    /// Inserts entries; ids already stored are skipped.
    fn insert(&self, entries: &[NewEntry]) -> Result<Inserted, Error>;
    /// Inserts a stream of entries in one transaction, without holding them all in memory:
    /// the first `Err` (a bad line, say) rolls everything back and is returned.
    fn insert_stream(
        &self,
        entries: &mut dyn Iterator<Item = Result<NewEntry, Error>>,
    ) -> Result<Inserted, Error> {
        let all = entries.collect::<Result<Vec<_>, _>>()?;
        self.insert(&all)
    }
    /// Full-text search with filters, best first.
    fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, Error>;
    /// An entry by id, in whatever tier.
    fn get(&self, id: &str) -> Result<Option<MemoryEntry>, Error>;
    /// Entries per tier.
    fn stats(&self) -> Result<Stats, Error>;
    /// How many entries working memory holds: `stats().working`, which a store may count
    /// without counting the other tiers (sleep asks after every run, and the archive only
    /// grows).
    fn working_count(&self) -> Result<usize, Error> {
        self.stats().map(|s| s.working)
    }
    /// Working entries written before `before`, oldest first, at most `limit`.
    fn working_before(&self, before: Timestamp, limit: usize) -> Result<Vec<MemoryEntry>, Error>;
    /// [`working_before`](Self::working_before)'s entries, handed to `each` in batches as
    /// they are read, in an order of the store's choosing (not oldest first): a caller can
    /// start on them before the read ends (sleep works out each entry's summary line
    /// meanwhile). The default hands them over in one batch.
    fn working_before_each(
        &self,
        before: Timestamp,
        limit: usize,
        each: &mut dyn FnMut(Vec<MemoryEntry>),
    ) -> Result<(), Error> {
        each(self.working_before(before, limit)?);
        Ok(())
    }
    /// The `n` oldest working entries.
    fn oldest_working(&self, n: usize) -> Result<Vec<MemoryEntry>, Error>;
    /// Applies one group's consolidation in one transaction: the summary is inserted as
    /// episodic, the originals move to the archive, the record is logged.
    fn consolidate(&self, consolidation: &Consolidation) -> Result<ConsolidationRecord, Error>;
    /// Applies several groups' consolidations in one transaction (fewer commits for a big
    /// sleep); each group stays atomic. A group whose entries are no longer all in working
    /// memory (another process consolidated them) is skipped; the records of those applied
    /// are returned.
    fn consolidate_many(
        &self,
        consolidations: &[Consolidation],
    ) -> Result<Vec<ConsolidationRecord>, Error> {
        let mut out = Vec::with_capacity(consolidations.len());
        for c in consolidations {
            match self.consolidate(c) {
                Ok(record) => out.push(record),
                Err(Error::NotWorking(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
    /// The consolidation log, newest first.
    fn log(&self, limit: usize) -> Result<Vec<ConsolidationRecord>, Error>;
    /// Deletes the entries `what` selects (an empty filter is refused) and removes their ids
    /// from the remaining summaries' `summary_of`.
    fn forget(&self, what: &Forget) -> Result<Forgotten, Error>;
    /// Deletes every memory entry and the consolidation log (sessions are not touched).
    fn forget_all(&self) -> Result<Forgotten, Error>;
    /// Deletes archived originals written before `before` (the retention setting; never
    /// called unless one is set), updating summaries' `summary_of`.
    fn delete_archived_before(&self, before: Timestamp) -> Result<Forgotten, Error>;
    /// Claims the next automatic sleep: true (and the claim recorded) when none ran in the
    /// last `interval_ms` before `now`, so that several processes sharing a store do not all
    /// consolidate at once.
    fn claim_sleep(&self, now: Timestamp, interval_ms: i64) -> Result<bool, Error>;
    /// A small value the store keeps for engram under `key` (the tier counts over time).
    fn meta(&self, key: &str) -> Result<Option<String>, Error>;
    /// Sets [`MemoryStore::meta`].
    fn set_meta(&self, key: &str, value: &str) -> Result<(), Error>;
    /// Entries in id order after `after`, at most `limit`, optionally of one session (for
    /// export; page with the last id returned).
    fn entries(
        &self,
        session_id: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<MemoryEntry>, Error>;
}

/// The most snapshots [`record_tier_counts`] keeps (the oldest go first).
pub const TIER_HISTORY: usize = 500;

/// The tier counts at a moment (after a sleep).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct TierCounts {
    /// When.
    pub at: Timestamp,
    /// Working memory.
    pub working: usize,
    /// Episodic memory.
    pub episodic: usize,
    /// Archive.
    pub archive: usize,
    /// Learnings.
    pub learnings: usize,
    /// Journal.
    pub journal: usize,
}

/// Keeps the tier counts at `at` (each sleep does), the newest [`TIER_HISTORY`] of them. Two
/// processes recording at the same moment may keep one of the two snapshots.
pub fn record_tier_counts(store: &dyn MemoryStore, at: Timestamp) -> Result<(), Error> {
    let s = store.stats()?;
    let mut history = tier_history(store)?;
    history.push(TierCounts {
        at,
        working: s.working,
        episodic: s.episodic,
        archive: s.archive,
        learnings: s.learnings,
        journal: s.journal,
    });
    let excess = history.len().saturating_sub(TIER_HISTORY);
    history.drain(..excess);
    let text = serde_json::to_string(&history).map_err(|e| Error::Backend(e.to_string()))?;
    store.set_meta("tier_history", &text)
}

/// The tier counts the sleeps recorded, oldest first.
pub fn tier_history(store: &dyn MemoryStore) -> Result<Vec<TierCounts>, Error> {
    Ok(store
        .meta("tier_history")?
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default())
}

/// The error for an empty [`Forget`].
pub fn empty_forget() -> Error {
    Error::Conflict(
        "forget needs an id, a session or a source (forgetting everything is a separate call)"
            .into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip() {
        let t = parse_time("2026-11-21T07:00:00Z").expect("time");
        assert_eq!(format_time(t), "2026-11-21T07:00:00Z");
        assert!(parse_time("yesterday").is_err());
        // To the minute, one width for every time.
        assert_eq!(crate::timestamp::format_minute(t), "2026-11-21 07:00 UTC");
        assert_eq!(
            crate::timestamp::format_minute(t + 59_999),
            "2026-11-21 07:00 UTC"
        );
        assert_eq!(
            crate::timestamp::format_minute(t + 60_000),
            "2026-11-21 07:01 UTC"
        );
    }
}
