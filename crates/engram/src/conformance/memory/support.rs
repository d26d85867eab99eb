//! What every check of the suite uses: its imports, the stores' fixtures and helpers.

pub(super) use serde_json::json;

pub(super) use crate::conformance::{Dice, assert_same};

pub(super) use crate::memory::consolidation::{SleepPolicy, sleep};
pub(super) use crate::memory::{
    Forget, MemoryEntry, MemoryStore, NewEntry, SearchQuery, Tier, Timestamp, parse_time,
};

pub(super) const DAY: i64 = 24 * 3600 * 1000;

pub(super) fn entry(
    id: &str,
    content: &str,
    source: &str,
    session: Option<&str>,
    at: Timestamp,
) -> NewEntry {
    NewEntry {
        id: Some(id.into()),
        tier: Tier::Working,
        content: content.into(),
        source: source.into(),
        session_id: session.map(str::to_owned),
        created_at: at,
        importance: 0.5,
        metadata: json!({"k": id}),
        summary_of: Vec::new(),
    }
}

/// One consolidation of `ids` into a summary `summary_id`, as sleep makes them.
pub(super) fn group(ids: &[&str], summary_id: &str, t: Timestamp) -> crate::memory::Consolidation {
    crate::memory::Consolidation {
        ids: ids.iter().map(|&id| id.to_owned()).collect(),
        summary: NewEntry {
            tier: Tier::Episodic,
            ..entry(summary_id, &format!("summary of {ids:?}"), "a", None, t)
        },
        record: crate::memory::ConsolidationRecord {
            id: 0,
            session_id: None,
            source: "a".into(),
            items_consolidated: ids.len(),
            summary_preview: String::new(),
            created_at: t,
            strategy: "extractive".into(),
            model: None,
            duration_ms: 0.1,
            ids_in: ids.iter().map(|&id| id.to_owned()).collect(),
            ids_out: vec![],
        },
    }
}
