//! The in-memory backend: memory and sessions in one process, for tests and short-lived
//! processes. It implements both store traits ([`MemoryStore`] here, the
//! [`SessionStore`](crate::session::SessionStore) in `sessions.rs`) and passes both
//! conformance suites, as the SQLite and PostgreSQL stores do.

mod sessions;

use std::collections::HashMap;
use std::sync::Mutex;

use crate::Error;
use crate::memory::{
    Consolidation, ConsolidationRecord, Forget, Forgotten, Inserted, MemoryEntry, MemoryStore,
    NewEntry, SearchHit, SearchQuery, Stats, Tier, empty_forget,
};
use crate::retrieval;
use crate::timestamp::{Timestamp, new_id};

/// A store in memory, for tests and short-lived processes.
#[derive(Debug, Default)]
pub struct InMemoryStore {
    state: Mutex<State>,
    vectors: crate::embed::VectorsInMemory,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    entries: Vec<MemoryEntry>,
    by_id: HashMap<String, usize>,
    log: Vec<ConsolidationRecord>,
    pub(crate) sessions: std::collections::BTreeMap<String, sessions::SessionState>,
    pub(crate) next_compaction: i64,
    last_sleep: Option<Timestamp>,
    meta: std::collections::HashMap<String, String>,
    calibrations: HashMap<String, crate::calibrate::Calibration>,
}

impl InMemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        InMemoryStore::default()
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl State {
    /// Inserts one entry; false when its id is stored already.
    pub(crate) fn insert_entry(&mut self, e: &NewEntry) -> bool {
        let entry = materialize(e, e.summary_of.clone());
        if self.by_id.contains_key(&entry.id) {
            return false;
        }
        self.by_id.insert(entry.id.clone(), self.entries.len());
        self.entries.push(entry);
        true
    }

    /// Removes the entries `doomed` selects and drops their ids from the remaining summaries'
    /// `summary_of`: how many, how many summaries lost a source, and the hashes under which the
    /// removed entries' vectors are kept ([`crate::memory::hybrid::vector_hashes`]), which go too.
    pub(crate) fn remove_entries(
        &mut self,
        doomed: impl Fn(&MemoryEntry) -> bool,
    ) -> (usize, usize, Vec<crate::embed::TextHash>) {
        let before = self.entries.len();
        let mut gone = std::collections::HashSet::new();
        let mut texts = Vec::new();
        self.entries.retain(|e| {
            if doomed(e) {
                gone.insert(e.id.clone());
                texts.extend(crate::memory::hybrid::vector_hashes(&e.content));
                false
            } else {
                true
            }
        });
        let mut updated = 0;
        for e in &mut self.entries {
            let n = e.summary_of.len();
            e.summary_of.retain(|id| !gone.contains(id));
            if e.summary_of.len() != n {
                updated += 1;
            }
        }
        self.by_id = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.id.clone(), i))
            .collect();
        (before - self.entries.len(), updated, texts)
    }
}

impl crate::calibrate::CalibrationStore for InMemoryStore {
    fn calibration(&self, model: &str) -> Result<Option<crate::calibrate::Calibration>, Error> {
        Ok(self.lock().calibrations.get(model).cloned())
    }

    fn observe_count(
        &self,
        model: &str,
        seen: crate::calibrate::Observation,
    ) -> Result<crate::calibrate::Calibration, Error> {
        let mut state = self.lock();
        let slot = state.calibrations.entry(model.to_owned()).or_default();
        *slot = slot.observed_one(seen);
        Ok(slot.clone())
    }
}

fn materialize(e: &NewEntry, summary_of: Vec<String>) -> MemoryEntry {
    MemoryEntry {
        id: e.id.clone().unwrap_or_else(|| new_id("mem")),
        tier: e.tier,
        content: e.content.clone(),
        source: e.source.clone(),
        session_id: e.session_id.clone(),
        created_at: e.created_at,
        importance: e.importance,
        metadata: e.metadata.clone(),
        summary_of,
    }
}

impl crate::embed::VectorStore for InMemoryStore {
    fn vectors(
        &self,
        model: &str,
        hashes: &[crate::embed::TextHash],
    ) -> Result<Vec<Option<Vec<f32>>>, Error> {
        self.vectors.vectors(model, hashes)
    }

    fn put_vectors(
        &self,
        model: &str,
        vectors: &[(crate::embed::TextHash, &[f32])],
    ) -> Result<(), Error> {
        self.vectors.put_vectors(model, vectors)
    }
}

impl MemoryStore for InMemoryStore {
    fn insert(&self, entries: &[NewEntry]) -> Result<Inserted, Error> {
        let mut state = self.lock();
        let mut out = Inserted::default();
        for e in entries {
            if state.insert_entry(e) {
                out.inserted += 1;
            } else {
                out.skipped += 1;
            }
        }
        Ok(out)
    }

    fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, Error> {
        let state = self.lock();
        let candidates: Vec<&MemoryEntry> =
            state.entries.iter().filter(|e| query.admits(e)).collect();
        let bm25 = retrieval::Bm25::new(
            candidates
                .iter()
                .map(|e| retrieval::terms(&e.content))
                .collect(),
        );
        let scores = bm25.scores(&retrieval::terms(&query.text));
        let mut hits: Vec<SearchHit> = candidates
            .into_iter()
            .zip(scores)
            .filter(|(_, s)| *s > 0.0)
            .map(|(e, score)| SearchHit {
                entry: e.clone(),
                score,
            })
            .collect();
        SearchHit::best_first(&mut hits, query.clamped_limit());
        Ok(hits)
    }

    fn get(&self, id: &str) -> Result<Option<MemoryEntry>, Error> {
        let state = self.lock();
        Ok(state.by_id.get(id).map(|&i| state.entries[i].clone()))
    }

    fn stats(&self) -> Result<Stats, Error> {
        let state = self.lock();
        let mut s = Stats::default();
        for e in &state.entries {
            match e.tier {
                Tier::Working => s.working += 1,
                Tier::Episodic => s.episodic += 1,
                Tier::Archive => s.archive += 1,
                Tier::Learning => s.learnings += 1,
                Tier::Journal => s.journal += 1,
            }
        }
        Ok(s)
    }

    fn working_before(&self, before: Timestamp, limit: usize) -> Result<Vec<MemoryEntry>, Error> {
        let state = self.lock();
        let mut out: Vec<MemoryEntry> = state
            .entries
            .iter()
            .filter(|e| e.tier == Tier::Working && e.created_at < before)
            .cloned()
            .collect();
        out.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        out.truncate(limit);
        Ok(out)
    }

    fn oldest_working(&self, n: usize) -> Result<Vec<MemoryEntry>, Error> {
        self.working_before(Timestamp::MAX, n)
    }

    fn consolidate(&self, c: &Consolidation) -> Result<ConsolidationRecord, Error> {
        let mut state = self.lock();
        let not_working: Vec<String> = c
            .ids
            .iter()
            .filter(|id| {
                state
                    .by_id
                    .get(*id)
                    .is_none_or(|&i| state.entries[i].tier != Tier::Working)
            })
            .cloned()
            .collect();
        if !not_working.is_empty() {
            return Err(Error::NotWorking(not_working));
        }
        let summary = materialize(&c.summary, c.ids.clone());
        for id in &c.ids {
            if let Some(&i) = state.by_id.get(id) {
                state.entries[i].tier = Tier::Archive;
            }
        }
        let mut record = c.record.clone();
        record.id = state.log.len() as i64 + 1;
        record.ids_out = vec![summary.id.clone()];
        let index = state.entries.len();
        state.by_id.insert(summary.id.clone(), index);
        state.entries.push(summary);
        state.log.push(record.clone());
        Ok(record)
    }

    fn log(&self, limit: usize) -> Result<Vec<ConsolidationRecord>, Error> {
        let state = self.lock();
        Ok(state.log.iter().rev().take(limit).cloned().collect())
    }

    fn forget(&self, what: &Forget) -> Result<Forgotten, Error> {
        if what.is_empty() {
            return Err(empty_forget());
        }
        let (entries, summaries_updated, texts) = self.lock().remove_entries(|e| what.matches(e));
        self.vectors.forget(&texts);
        Ok(Forgotten {
            entries,
            summaries_updated,
        })
    }

    fn delete_archived_before(&self, before: Timestamp) -> Result<Forgotten, Error> {
        let (entries, summaries_updated, texts) = self
            .lock()
            .remove_entries(|e| e.tier == Tier::Archive && e.created_at < before);
        self.vectors.forget(&texts);
        Ok(Forgotten {
            entries,
            summaries_updated,
        })
    }

    fn claim_sleep(&self, now: Timestamp, interval_ms: i64) -> Result<bool, Error> {
        let mut state = self.lock();
        if state
            .last_sleep
            .is_some_and(|last| now - last < interval_ms)
        {
            return Ok(false);
        }
        state.last_sleep = Some(now);
        Ok(true)
    }

    fn meta(&self, key: &str) -> Result<Option<String>, Error> {
        Ok(self.lock().meta.get(key).cloned())
    }

    fn set_meta(&self, key: &str, value: &str) -> Result<(), Error> {
        self.lock().meta.insert(key.to_owned(), value.to_owned());
        Ok(())
    }

    fn forget_all(&self) -> Result<Forgotten, Error> {
        let mut state = self.lock();
        let (entries, _, texts) = state.remove_entries(|_| true);
        self.vectors.forget(&texts);
        state.log.clear();
        Ok(Forgotten::everything(entries))
    }

    fn entries(
        &self,
        session_id: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<MemoryEntry>, Error> {
        let state = self.lock();
        let mut out: Vec<MemoryEntry> = state
            .entries
            .iter()
            .filter(|e| session_id.is_none_or(|s| e.session_id.as_deref() == Some(s)))
            .filter(|e| after.is_none_or(|a| e.id.as_str() > a))
            .cloned()
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out.truncate(limit);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_in_memory_store_passes_the_memory_conformance_suite() {
        crate::conformance::memory::run(&|| Box::new(InMemoryStore::new()));
    }

    #[test]
    fn the_in_memory_store_passes_the_session_conformance_suite() {
        crate::conformance::session::run(&|| Box::new(InMemoryStore::new()));
    }
}
