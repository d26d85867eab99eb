//! [`SessionStore`] for the in-memory store.

use super::InMemoryStore;
use crate::Error;
use crate::message::Message;
use crate::session::store::{
    APPEND_KEY_TTL_MS, APPEND_KEYS_KEPT, AppendKey, Checkpoint, CompactionRecord, Compactions,
    KeyedAppend, LogRange, LoggedMessage, NewCompaction, NewLogMessage, NewSession, Restored,
    SessionDeleted, SessionDump, SessionInfo, SessionStore, SummaryRecord, abandoned_checkpoint,
    check_compaction, duplicate, logged_message, no_checkpoint, no_session, replayed,
};
use crate::session::timeline::{Timeline, TimelineStore};
use crate::stored::StoredJson;
use crate::timestamp::{Timestamp, new_id};
use serde_json::Value;

#[derive(Debug)]
pub(crate) struct SessionState {
    info: SessionInfo,
    log: Vec<LoggedMessage>,
    compactions: Vec<CompactionRecord>,
    summaries: Vec<SummaryRecord>,
    checkpoints: Vec<Checkpoint>,
    /// The vectors (model, text hash) kept for this session's texts.
    vectors: std::collections::HashSet<(String, crate::embed::TextHash)>,
    /// The keys of appends that may be retried, oldest first.
    keys: Vec<KeptKey>,
    /// The timeline, as stored ([`crate::stored::StoredJson::to_stored`]).
    timeline: Option<String>,
}

/// An append's key as the other stores keep it: its positions and answer as JSON.
#[derive(Debug)]
struct KeptKey {
    key: AppendKey,
    positions: String,
    answer: Option<String>,
}

impl SessionState {
    fn active_count(&self) -> usize {
        self.log.iter().filter(|m| !m.abandoned).count()
    }
}

fn session_of<'s>(state: &'s super::State, session_id: &str) -> Result<&'s SessionState, Error> {
    state
        .sessions
        .get(session_id)
        .ok_or_else(|| no_session(session_id))
}

/// Appends `messages` to `s`, or nothing when an id is taken.
fn append_to(
    s: &mut SessionState,
    session_id: &str,
    messages: &[NewLogMessage],
) -> Result<Vec<(u64, String)>, Error> {
    let named: Vec<Message> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| logged_message(&m.message, s.info.next_seq + i as u64))
        .collect();
    for (i, m) in named.iter().enumerate() {
        let id = m.id.as_deref().unwrap_or_default();
        if s.log.iter().any(|l| !l.abandoned && l.id == id)
            || named[..i].iter().any(|o| o.id.as_deref() == Some(id))
        {
            return Err(duplicate(i, id, session_id));
        }
    }
    let mut out = Vec::with_capacity(messages.len());
    for (m, message) in messages.iter().zip(named) {
        let logged = LoggedMessage {
            seq: s.info.next_seq,
            id: message.id.clone().unwrap_or_default(),
            created_at: m.created_at,
            tokens: m.tokens,
            message,
            abandoned: false,
        };
        s.info.next_seq += 1;
        s.info.updated_at = s.info.updated_at.max(m.created_at);
        out.push((logged.seq, logged.id.clone()));
        s.log.push(logged);
    }
    s.info.messages = s.active_count();
    Ok(out)
}

impl SessionStore for InMemoryStore {
    fn create_session(&self, new: &NewSession) -> Result<SessionInfo, Error> {
        let mut state = self.lock();
        let id = new.id.clone().unwrap_or_else(|| new_id("ses"));
        if state.sessions.contains_key(&id) {
            return Err(Error::Conflict(format!("a session {id:?} exists already")));
        }
        let info = SessionInfo {
            id: id.clone(),
            name: new.name.clone(),
            model: new.model.clone(),
            tokenizer: new.tokenizer.clone(),
            token_factor: new.token_factor,
            window: new.window,
            metadata: new.metadata.clone(),
            created_at: new.created_at,
            updated_at: new.created_at,
            messages: 0,
            next_seq: 0,
            epoch: 0,
        };
        state.sessions.insert(
            id,
            SessionState {
                info: info.clone(),
                log: Vec::new(),
                compactions: Vec::new(),
                summaries: Vec::new(),
                checkpoints: Vec::new(),
                vectors: Default::default(),
                keys: Vec::new(),
                timeline: None,
            },
        );
        Ok(info)
    }

    fn session(&self, id: &str) -> Result<Option<SessionInfo>, Error> {
        Ok(self.lock().sessions.get(id).map(|s| s.info.clone()))
    }

    fn sessions(&self) -> Result<Vec<SessionInfo>, Error> {
        let mut out: Vec<SessionInfo> = self
            .lock()
            .sessions
            .values()
            .map(|s| s.info.clone())
            .collect();
        out.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(a.id.cmp(&b.id)));
        Ok(out)
    }

    fn append(
        &self,
        session_id: &str,
        messages: &[NewLogMessage],
    ) -> Result<Vec<(u64, String)>, Error> {
        let mut state = self.lock();
        let s = state
            .sessions
            .get_mut(session_id)
            .ok_or_else(|| no_session(session_id))?;
        append_to(s, session_id, messages)
    }

    fn append_keyed(
        &self,
        session_id: &str,
        messages: &[NewLogMessage],
        key: &AppendKey,
    ) -> Result<KeyedAppend, Error> {
        let mut state = self.lock();
        let s = state
            .sessions
            .get_mut(session_id)
            .ok_or_else(|| no_session(session_id))?;
        s.keys.retain(|k| k.key.at > key.at - APPEND_KEY_TTL_MS);
        if let Some(kept) = s.keys.iter().find(|k| k.key.key == key.key) {
            return replayed(
                key,
                session_id,
                &kept.key.fingerprint,
                &kept.positions,
                kept.answer.as_deref(),
            );
        }
        let positions = append_to(s, session_id, messages)?;
        s.keys.push(KeptKey {
            key: key.clone(),
            positions: serde_json::to_string(&positions)
                .map_err(|e| Error::Backend(e.to_string()))?,
            answer: None,
        });
        let over = s.keys.len().saturating_sub(APPEND_KEYS_KEPT);
        s.keys.drain(..over);
        Ok(KeyedAppend::Stored(positions))
    }

    fn keep_append_answer(&self, session_id: &str, key: &str, answer: &Value) -> Result<(), Error> {
        let mut state = self.lock();
        let s = state
            .sessions
            .get_mut(session_id)
            .ok_or_else(|| no_session(session_id))?;
        if let Some(kept) = s.keys.iter_mut().find(|k| k.key.key == key) {
            kept.answer = Some(answer.to_string());
        }
        Ok(())
    }

    fn read_log(&self, session_id: &str, range: LogRange) -> Result<Vec<LoggedMessage>, Error> {
        let state = self.lock();
        let s = session_of(&state, session_id)?;
        Ok(s.log
            .iter()
            .filter(|m| m.seq >= range.from_seq && (range.include_abandoned || !m.abandoned))
            .take(range.limit.unwrap_or(usize::MAX))
            .cloned()
            .collect())
    }

    fn messages_by_id(
        &self,
        session_id: &str,
        ids: &[String],
    ) -> Result<Vec<LoggedMessage>, Error> {
        let wanted: std::collections::HashSet<&str> = ids.iter().map(String::as_str).collect();
        let state = self.lock();
        let s = session_of(&state, session_id)?;
        Ok(s.log
            .iter()
            .filter(|m| !m.abandoned && wanted.contains(m.id.as_str()))
            .cloned()
            .collect())
    }

    fn record_compaction(&self, c: &NewCompaction) -> Result<CompactionRecord, Error> {
        let mut state = self.lock();
        let s = state
            .sessions
            .get(&c.session_id)
            .ok_or_else(|| no_session(&c.session_id))?;
        check_compaction(&s.info, c)?;
        state.next_compaction += 1;
        let id = state.next_compaction;
        for e in &c.journal {
            state.insert_entry(e);
        }
        let s = state
            .sessions
            .get_mut(&c.session_id)
            .ok_or_else(|| no_session(&c.session_id))?;
        let record = CompactionRecord {
            id,
            session_id: c.session_id.clone(),
            trigger: c.trigger.clone(),
            strategy: c.strategy.clone(),
            log_end: c.log_end,
            tokens_before: c.tokens_before,
            tokens_after: c.tokens_after,
            view: c.view.clone(),
            report: c.report.clone(),
            summary_ids: c.summaries.iter().map(|x| x.id.clone()).collect(),
            created_at: c.created_at,
            abandoned: false,
        };
        s.summaries
            .extend(c.summaries.iter().map(|x| SummaryRecord {
                compaction_id: id,
                ..x.clone()
            }));
        s.compactions.push(record.clone());
        Ok(record)
    }

    fn read_compactions(
        &self,
        session_id: &str,
        which: Compactions,
    ) -> Result<Vec<CompactionRecord>, Error> {
        let state = self.lock();
        let s = session_of(&state, session_id)?;
        Ok(match which {
            Compactions::All { include_abandoned } => s
                .compactions
                .iter()
                .filter(|c| include_abandoned || !c.abandoned)
                .cloned()
                .collect(),
            Compactions::Newest(n) => s
                .compactions
                .iter()
                .rev()
                .filter(|c| !c.abandoned)
                .take(n)
                .cloned()
                .collect(),
        })
    }

    fn summaries(&self, session_id: &str) -> Result<Vec<SummaryRecord>, Error> {
        let state = self.lock();
        let s = session_of(&state, session_id)?;
        Ok(s.summaries
            .iter()
            .filter(|x| {
                s.compactions
                    .iter()
                    .any(|c| c.id == x.compaction_id && !c.abandoned)
            })
            .cloned()
            .collect())
    }

    fn checkpoint(&self, session_id: &str, name: &str, at: Timestamp) -> Result<Checkpoint, Error> {
        let mut state = self.lock();
        let s = state
            .sessions
            .get_mut(session_id)
            .ok_or_else(|| no_session(session_id))?;
        if s.checkpoints.iter().any(|c| c.name == name) {
            return Err(Error::Conflict(format!(
                "session {session_id:?} has a checkpoint named {name:?} already"
            )));
        }
        let checkpoint = Checkpoint {
            session_id: session_id.to_owned(),
            name: name.to_owned(),
            log_end: s.info.next_seq,
            compaction_id: s
                .compactions
                .iter()
                .rev()
                .find(|c| !c.abandoned)
                .map(|c| c.id),
            messages: s.active_count(),
            created_at: at,
            abandoned: false,
        };
        s.checkpoints.push(checkpoint.clone());
        Ok(checkpoint)
    }

    fn checkpoints(&self, session_id: &str) -> Result<Vec<Checkpoint>, Error> {
        let state = self.lock();
        let s = session_of(&state, session_id)?;
        Ok(s.checkpoints.clone())
    }

    fn restore(&self, session_id: &str, name: &str) -> Result<Restored, Error> {
        let mut state = self.lock();
        let s = state
            .sessions
            .get_mut(session_id)
            .ok_or_else(|| no_session(session_id))?;
        let position = s
            .checkpoints
            .iter()
            .position(|c| c.name == name)
            .ok_or_else(|| no_checkpoint(session_id, name))?;
        let cp = s.checkpoints[position].clone();
        if cp.abandoned {
            return Err(abandoned_checkpoint(session_id, name));
        }
        let mut out = Restored::default();
        for m in s
            .log
            .iter_mut()
            .filter(|m| m.seq >= cp.log_end && !m.abandoned)
        {
            m.abandoned = true;
            out.messages_abandoned += 1;
        }
        for c in s
            .compactions
            .iter_mut()
            .filter(|c| !c.abandoned && cp.compaction_id.is_none_or(|k| c.id > k))
        {
            c.abandoned = true;
            out.compactions_abandoned += 1;
        }
        for c in s.checkpoints[position + 1..]
            .iter_mut()
            .filter(|c| !c.abandoned)
        {
            c.abandoned = true;
            out.checkpoints_abandoned += 1;
        }
        s.info.epoch += 1;
        s.info.messages = s.active_count();
        Ok(out)
    }

    fn import_session(&self, dump: &SessionDump) -> Result<(), Error> {
        let mut state = self.lock();
        if state.sessions.contains_key(&dump.info.id) {
            return Err(Error::Conflict(format!(
                "a session {:?} exists already; delete it first to import it again",
                dump.info.id
            )));
        }
        let mut ids = std::collections::HashMap::new();
        let mut compactions = Vec::new();
        for c in &dump.compactions {
            state.next_compaction += 1;
            ids.insert(c.id, state.next_compaction);
            compactions.push(CompactionRecord {
                id: state.next_compaction,
                ..c.clone()
            });
        }
        let remap = |id: i64| ids.get(&id).copied().unwrap_or(id);
        state.sessions.insert(
            dump.info.id.clone(),
            SessionState {
                info: dump.info.clone(),
                log: dump.messages.clone(),
                compactions,
                summaries: dump
                    .summaries
                    .iter()
                    .map(|x| SummaryRecord {
                        compaction_id: remap(x.compaction_id),
                        ..x.clone()
                    })
                    .collect(),
                checkpoints: dump
                    .checkpoints
                    .iter()
                    .map(|c| Checkpoint {
                        compaction_id: c.compaction_id.map(remap),
                        ..c.clone()
                    })
                    .collect(),
                vectors: Default::default(),
                keys: Vec::new(),
                timeline: None,
            },
        );
        Ok(())
    }

    fn delete_session(&self, session_id: &str) -> Result<SessionDeleted, Error> {
        let mut state = self.lock();
        let s = state
            .sessions
            .remove(session_id)
            .ok_or_else(|| no_session(session_id))?;
        let (memory_entries, _, texts) =
            state.remove_entries(|e| e.session_id.as_deref() == Some(session_id));
        self.vectors.forget(&texts);
        self.vectors.forget_keys(
            s.vectors
                .iter()
                .filter(|key| !state.sessions.values().any(|o| o.vectors.contains(*key))),
        );
        Ok(SessionDeleted {
            messages: s.log.len(),
            compactions: s.compactions.len(),
            summaries: s.summaries.len(),
            checkpoints: s.checkpoints.len(),
            memory_entries,
        })
    }

    fn put_session_vectors(
        &self,
        session_id: &str,
        model: &str,
        vectors: &[(crate::embed::TextHash, &[f32])],
    ) -> Result<(), Error> {
        if vectors.is_empty() {
            return Ok(());
        }
        let mut state = self.lock();
        let s = state
            .sessions
            .get_mut(session_id)
            .ok_or_else(|| no_session(session_id))?;
        s.vectors
            .extend(vectors.iter().map(|(h, _)| (model.to_owned(), *h)));
        crate::embed::VectorStore::put_vectors(&self.vectors, model, vectors)
    }
}

impl TimelineStore for InMemoryStore {
    fn timeline(&self, session_id: &str) -> Result<Option<Timeline>, Error> {
        let state = self.lock();
        session_of(&state, session_id)?
            .timeline
            .as_deref()
            .map(Timeline::from_stored)
            .transpose()
    }

    fn put_timeline(&self, session_id: &str, timeline: &Timeline) -> Result<(), Error> {
        let stored = timeline.to_stored()?;
        let mut state = self.lock();
        let s = state
            .sessions
            .get_mut(session_id)
            .ok_or_else(|| no_session(session_id))?;
        s.timeline = Some(stored);
        Ok(())
    }
}
