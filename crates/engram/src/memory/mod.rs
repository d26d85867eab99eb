//! Memory that lasts (seeds 002 and 003): tiers, the [`MemoryStore`] trait, and sleep
//! consolidation.
//!
//! Every entry lives in exactly one tier. New entries go to *working* memory. Sleep turns groups
//! of aged working entries into one *episodic* summary whose `summary_of` names them, and moves
//! the originals to the *archive*: nothing is deleted unless a retention setting says so.
//! *Learnings* (seed 001) and the *journal* (seed 002's `context_synthesis` entries) are tiers
//! too, so that one search covers everything.
//!
//! Backends implement [`MemoryStore`] and run the same conformance suite
//! (`conformance::run`): [`InMemoryStore`](crate::in_memory::InMemoryStore), SQLite and
//! PostgreSQL in `engram-store`.

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod hybrid;
pub mod sleep;

use serde::Serialize;
use serde_json::Value;

pub use crate::store::{
    StoreError, Timestamp, format_time, new_id, now, parse_time, serialize_time,
};

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
    /// Lessons from earlier runs (seed 001).
    Learning,
    /// Compaction summaries (seed 002's `context_synthesis`).
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

    /// Reads one line of an import file:
    /// `{"content","source","session_id"?,"created_at"? (RFC 3339),"importance"?,"metadata"?,"id"?}`,
    /// plus `"tier"?` and `"summary_of"?` as `memory export` writes them, so that an export
    /// reads back as it was (and `"type": "memory"`, as `engram export` marks its memory
    /// lines). A key of another name is an error, so that a misspelt `importance` is not left
    /// out quietly. An error is `(field, what is wrong)`; the front says the field its way
    /// (``field `content`: is empty``), so the message does not repeat it.
    pub fn from_json(value: &Value, default_time: Timestamp) -> Result<NewEntry, (String, String)> {
        const FIELDS: [&str; 9] = [
            "content",
            "source",
            "session_id",
            "created_at",
            "importance",
            "metadata",
            "id",
            "tier",
            "summary_of",
        ];
        let Value::Object(map) = value else {
            return Err((
                "".into(),
                "expected an object with `content` and `source`".into(),
            ));
        };
        for (key, value) in map {
            if key == "type" {
                if value.as_str() != Some("memory") {
                    return Err((key.clone(), "must be \"memory\" when given".into()));
                }
            } else if !FIELDS.contains(&key.as_str()) {
                return Err((
                    key.clone(),
                    format!(
                        "is not a field of an entry; its fields: {}",
                        FIELDS.join(", ")
                    ),
                ));
            }
        }
        let string = |key: &str, required: bool| -> Result<Option<String>, (String, String)> {
            match map.get(key) {
                None | Some(Value::Null) if required => Err((key.into(), "is required".to_owned())),
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err((key.into(), "must be a string".to_owned())),
            }
        };
        let content = string("content", true)?.unwrap_or_default();
        if content.trim().is_empty() {
            return Err(("content".into(), "is empty".into()));
        }
        if string("source", true)?.is_some_and(|s| s.trim().is_empty()) {
            return Err((
                "source".into(),
                "is empty; say where the entry came from (a tool, a channel, an agent)".into(),
            ));
        }
        let created_at = match string("created_at", false)? {
            Some(s) => parse_time(&s).map_err(|e| ("created_at".into(), e))?,
            None => default_time,
        };
        let importance = match map.get("importance") {
            None | Some(Value::Null) => DEFAULT_IMPORTANCE,
            Some(Value::Number(n)) => match n.as_f64() {
                Some(x) if (0.0..=1.0).contains(&x) => x,
                _ => {
                    return Err(("importance".into(), "must be between 0 and 1".into()));
                }
            },
            Some(_) => return Err(("importance".into(), "must be a number".into())),
        };
        let tier = match string("tier", false)? {
            None => Tier::Working,
            Some(name) => Tier::parse(&name).ok_or_else(|| {
                (
                    "tier".to_owned(),
                    format!(
                        "unknown tier {name:?}; expected one of working, episodic, archive, learning, journal"
                    ),
                )
            })?,
        };
        let summary_of = match map.get("summary_of") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(ids)) => ids
                .iter()
                .map(|id| id.as_str().map(str::to_owned))
                .collect::<Option<Vec<String>>>()
                .ok_or_else(|| {
                    (
                        "summary_of".to_owned(),
                        "must be an array of ids (strings)".to_owned(),
                    )
                })?,
            Some(_) => {
                return Err((
                    "summary_of".into(),
                    "must be an array of ids (strings)".into(),
                ));
            }
        };
        Ok(NewEntry {
            id: string("id", false)?,
            tier,
            summary_of,
            content,
            source: string("source", true)?.unwrap_or_default(),
            session_id: string("session_id", false)?,
            created_at,
            importance,
            metadata: map.get("metadata").cloned().unwrap_or(Value::Null),
        })
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
pub const MAX_SEARCH_LIMIT: usize = 10_000;

/// The most hits a search returns when it asks for no number (every surface).
pub const DEFAULT_SEARCH_LIMIT: usize = 10;

/// The most consolidation records a read of the log returns when it asks for no number (every
/// surface: the CLI's `memory log`, `GET /v1/memory/log`, Python's and Node's `log()`).
pub const DEFAULT_LOG_LIMIT: usize = 20;

impl SearchQuery {
    /// The limit, clamped to [`MAX_SEARCH_LIMIT`].
    pub fn clamped_limit(&self) -> usize {
        self.limit.min(MAX_SEARCH_LIMIT)
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

/// A consolidation, as the log records it (seed 003's columns, plus what an audit needs).
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
    pub fn matched_nothing(&self) -> StoreError {
        let what = match (&self.id, &self.session_id, &self.source) {
            (Some(id), _, _) => format!("no memory entry with id {id:?}"),
            (_, Some(s), _) => format!("no memory entries of session {s:?}"),
            (_, _, Some(s)) => format!("no memory entries from source {s:?}"),
            _ => "no memory entries matched".to_owned(),
        };
        StoreError::NotFound(format!("{what}; nothing was forgotten"))
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

/// A memory backend. Every method is atomic: it changes everything it says or nothing.
pub trait MemoryStore: crate::embed::VectorStore + Send + Sync {
    /// Inserts entries; ids already stored are skipped.
    fn insert(&self, entries: &[NewEntry]) -> Result<Inserted, StoreError>;
    /// Inserts a stream of entries in one transaction, without holding them all in memory:
    /// the first `Err` (a bad line, say) rolls everything back and is returned.
    fn insert_stream(
        &self,
        entries: &mut dyn Iterator<Item = Result<NewEntry, StoreError>>,
    ) -> Result<Inserted, StoreError> {
        let all = entries.collect::<Result<Vec<_>, _>>()?;
        self.insert(&all)
    }
    /// Full-text search with filters, best first.
    fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, StoreError>;
    /// An entry by id, in whatever tier.
    fn get(&self, id: &str) -> Result<Option<MemoryEntry>, StoreError>;
    /// Entries per tier.
    fn stats(&self) -> Result<Stats, StoreError>;
    /// How many entries working memory holds: `stats().working`, which a store may count
    /// without counting the other tiers (sleep asks after every run, and the archive only
    /// grows).
    fn working_count(&self) -> Result<usize, StoreError> {
        self.stats().map(|s| s.working)
    }
    /// Working entries written before `before`, oldest first, at most `limit`.
    fn working_before(
        &self,
        before: Timestamp,
        limit: usize,
    ) -> Result<Vec<MemoryEntry>, StoreError>;
    /// [`working_before`](Self::working_before)'s entries, handed to `each` in batches as
    /// they are read, in an order of the store's choosing (not oldest first): a caller can
    /// start on them before the read ends (sleep works out each entry's summary line
    /// meanwhile). The default hands them over in one batch.
    fn working_before_each(
        &self,
        before: Timestamp,
        limit: usize,
        each: &mut dyn FnMut(Vec<MemoryEntry>),
    ) -> Result<(), StoreError> {
        each(self.working_before(before, limit)?);
        Ok(())
    }
    /// The `n` oldest working entries.
    fn oldest_working(&self, n: usize) -> Result<Vec<MemoryEntry>, StoreError>;
    /// Applies one group's consolidation in one transaction: the summary is inserted as
    /// episodic, the originals move to the archive, the record is logged.
    fn consolidate(&self, consolidation: &Consolidation)
    -> Result<ConsolidationRecord, StoreError>;
    /// Applies several groups' consolidations in one transaction (fewer commits for a big
    /// sleep); each group stays atomic. A group whose entries are no longer all in working
    /// memory (another process consolidated them) is skipped; the records of those applied
    /// are returned.
    fn consolidate_many(
        &self,
        consolidations: &[Consolidation],
    ) -> Result<Vec<ConsolidationRecord>, StoreError> {
        let mut out = Vec::with_capacity(consolidations.len());
        for c in consolidations {
            match self.consolidate(c) {
                Ok(record) => out.push(record),
                Err(StoreError::NotWorking(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
    /// The consolidation log, newest first.
    fn log(&self, limit: usize) -> Result<Vec<ConsolidationRecord>, StoreError>;
    /// Deletes the entries `what` selects (an empty filter is refused) and removes their ids
    /// from the remaining summaries' `summary_of`.
    fn forget(&self, what: &Forget) -> Result<Forgotten, StoreError>;
    /// Deletes every memory entry and the consolidation log (sessions are not touched).
    fn forget_all(&self) -> Result<Forgotten, StoreError>;
    /// Deletes archived originals written before `before` (the retention setting; never
    /// called unless one is set), updating summaries' `summary_of`.
    fn delete_archived_before(&self, before: Timestamp) -> Result<Forgotten, StoreError>;
    /// Claims the next automatic sleep: true (and the claim recorded) when none ran in the
    /// last `interval_ms` before `now`, so that several processes sharing a store do not all
    /// consolidate at once.
    fn claim_sleep(&self, now: Timestamp, interval_ms: i64) -> Result<bool, StoreError>;
    /// A small value the store keeps for engram under `key` (the tier counts over time).
    fn meta(&self, key: &str) -> Result<Option<String>, StoreError>;
    /// Sets [`MemoryStore::meta`].
    fn set_meta(&self, key: &str, value: &str) -> Result<(), StoreError>;
    /// Entries in id order after `after`, at most `limit`, optionally of one session (for
    /// export; page with the last id returned).
    fn entries(
        &self,
        session_id: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<MemoryEntry>, StoreError>;
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
pub fn record_tier_counts(store: &dyn MemoryStore, at: Timestamp) -> Result<(), StoreError> {
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
    let text = serde_json::to_string(&history).map_err(|e| StoreError::Backend(e.to_string()))?;
    store.set_meta("tier_history", &text)
}

/// The tier counts the sleeps recorded, oldest first.
pub fn tier_history(store: &dyn MemoryStore) -> Result<Vec<TierCounts>, StoreError> {
    Ok(store
        .meta("tier_history")?
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default())
}

/// The error for an empty [`Forget`].
pub fn empty_forget() -> StoreError {
    StoreError::Conflict(
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
        assert_eq!(crate::store::format_minute(t), "2026-11-21 07:00 UTC");
        assert_eq!(
            crate::store::format_minute(t + 59_999),
            "2026-11-21 07:00 UTC"
        );
        assert_eq!(
            crate::store::format_minute(t + 60_000),
            "2026-11-21 07:01 UTC"
        );
    }

    #[test]
    fn an_entry_with_a_key_it_does_not_have_is_refused() {
        let read = |value: Value| NewEntry::from_json(&value, 0);
        let entry = read(serde_json::json!({"content": "x", "source": "s", "importance": 0.9}))
            .expect("an entry");
        assert_eq!(entry.importance, 0.9);
        let (field, message) =
            read(serde_json::json!({"content": "x", "source": "s", "importanse": 0.9}))
                .expect_err("a misspelt key");
        assert_eq!(field, "importanse");
        assert!(message.contains("importance"), "{message}");
        // An export's line reads back, with or without the mark `engram export` gives it.
        let line = crate::session::export::memory_line(&MemoryEntry {
            id: "mem_1".into(),
            tier: Tier::Archive,
            content: "x".into(),
            source: "s".into(),
            session_id: None,
            created_at: 0,
            importance: 0.5,
            metadata: Value::Null,
            summary_of: vec!["mem_0".into()],
        });
        assert_eq!(
            read(line.clone()).expect("reads back").summary_of,
            ["mem_0"]
        );
        let mut other = line;
        other["type"] = "session".into();
        assert_eq!(read(other).expect_err("not a memory line").0, "type");
    }
}
