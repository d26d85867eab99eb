//! [`SessionStore`] for SQLite: every method is one transaction.

use engram::embed::TextHash;
use engram::memory::{Timestamp, new_id};
use engram::message::Message;
use engram::session::store::{
    APPEND_KEY_TTL_MS, APPEND_KEYS_KEPT, AppendKey, Compactions, KeyedAppend, LogRange,
    abandoned_checkpoint, check_compaction, duplicate, logged_message, no_checkpoint, no_session,
    replayed,
};
use engram::session::{
    Checkpoint, CompactionRecord, LoggedMessage, NewCompaction, NewLogMessage, NewSession,
    Restored, SessionDeleted, SessionDump, SessionInfo, SessionStore, SummaryRecord,
};
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

use super::{SqliteStore, backend, insert_one, write_tx};

const SESSION_COLUMNS: &str = "id, name, model, tokenizer, token_factor, window, metadata, created_at, updated_at, messages, next_seq, epoch";

fn row_to_session(r: &rusqlite::Row<'_>) -> rusqlite::Result<SessionInfo> {
    let metadata: Option<String> = r.get(6)?;
    Ok(SessionInfo {
        id: r.get(0)?,
        name: r.get(1)?,
        model: r.get(2)?,
        tokenizer: r.get(3)?,
        token_factor: r.get(4)?,
        window: r.get::<_, i64>(5)? as usize,
        metadata: json_or_null(metadata),
        created_at: r.get(7)?,
        updated_at: r.get(8)?,
        messages: r.get::<_, i64>(9)? as usize,
        next_seq: r.get::<_, i64>(10)? as u64,
        epoch: r.get::<_, i64>(11)? as u64,
    })
}

fn json_or_null(text: Option<String>) -> Value {
    text.and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null)
}

fn strings(text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_default()
}

fn to_json(value: &[String]) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

fn session_in(conn: &Connection, id: &str) -> Result<SessionInfo, engram::Error> {
    conn.prepare_cached(&format!(
        "SELECT {SESSION_COLUMNS} FROM session WHERE id = ?1"
    ))
    .map_err(backend)?
    .query_row([id], row_to_session)
    .optional()
    .map_err(backend)?
    .ok_or_else(|| no_session(id))
}

fn row_to_logged(r: &rusqlite::Row<'_>) -> rusqlite::Result<(LoggedMessage, String)> {
    let text: String = r.get(4)?;
    Ok((
        LoggedMessage {
            seq: r.get::<_, i64>(0)? as u64,
            id: r.get(1)?,
            created_at: r.get(2)?,
            tokens: r.get::<_, i64>(3)? as usize,
            message: Message::user(""),
            abandoned: r.get::<_, i64>(5)? != 0,
        },
        text,
    ))
}

/// Parses the stored message text of rows.
fn parse_logged(
    rows: Vec<(LoggedMessage, String)>,
    session_id: &str,
) -> Result<Vec<LoggedMessage>, engram::Error> {
    rows.into_iter()
        .map(|(mut m, text)| {
            let value: Value = serde_json::from_str(&text).map_err(|e| {
                backend(format!(
                    "session {session_id:?}, message {}: stored JSON is damaged: {e}",
                    m.id
                ))
            })?;
            m.message = Message::from_stored(value).map_err(|e| {
                backend(format!(
                    "session {session_id:?}, message {}: stored message is damaged: {e}",
                    m.id
                ))
            })?;
            Ok(m)
        })
        .collect()
}

const COMPACTION_COLUMNS: &str = "id, session_id, trigger, strategy, log_end, tokens_before, tokens_after, view, report, summary_ids, created_at, abandoned";

fn row_to_compaction(r: &rusqlite::Row<'_>) -> rusqlite::Result<CompactionRecord> {
    let view: String = r.get(7)?;
    let report: String = r.get(8)?;
    let ids: String = r.get(9)?;
    Ok(CompactionRecord {
        id: r.get(0)?,
        session_id: r.get(1)?,
        trigger: r.get(2)?,
        strategy: r.get(3)?,
        log_end: r.get::<_, i64>(4)? as u64,
        tokens_before: r.get::<_, i64>(5)? as usize,
        tokens_after: r.get::<_, i64>(6)? as usize,
        view: serde_json::from_str(&view).unwrap_or(Value::Null),
        report: serde_json::from_str(&report).unwrap_or(Value::Null),
        summary_ids: strings(&ids),
        created_at: r.get(10)?,
        abandoned: r.get::<_, i64>(11)? != 0,
    })
}

fn row_to_checkpoint(r: &rusqlite::Row<'_>) -> rusqlite::Result<Checkpoint> {
    Ok(Checkpoint {
        session_id: r.get(0)?,
        name: r.get(1)?,
        log_end: r.get::<_, i64>(2)? as u64,
        compaction_id: r.get(3)?,
        messages: r.get::<_, i64>(4)? as usize,
        created_at: r.get(5)?,
        abandoned: r.get::<_, i64>(6)? != 0,
    })
}

fn insert_summary(
    tx: &Connection,
    session_id: &str,
    compaction_id: i64,
    s: &SummaryRecord,
) -> Result<(), engram::Error> {
    tx.prepare_cached(
        "INSERT INTO session_summary (id, session_id, compaction_id, depth, covers, covers_summaries, from_at, to_at, text, tokens, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )
    .map_err(backend)?
    .execute(params![
        s.id,
        session_id,
        compaction_id,
        s.depth,
        to_json(&s.covers),
        to_json(&s.covers_summaries),
        s.from,
        s.to,
        s.text,
        s.tokens as i64,
        s.created_at,
    ])
    .map_err(backend)?;
    Ok(())
}

impl SqliteStore {
    /// The messages of the log `range` names ([`SessionStore::read_log`]).
    fn log_rows(
        &self,
        session_id: &str,
        range: LogRange,
    ) -> Result<Vec<LoggedMessage>, engram::Error> {
        let LogRange {
            from_seq,
            include_abandoned,
            limit,
        } = range;
        let conn = self.conn();
        session_in(&conn, session_id)?;
        let mut stmt = conn
            .prepare_cached(
                "SELECT seq, id, created_at, tokens, message, abandoned FROM session_message
                 WHERE session_id = ?1 AND seq >= ?2 AND (?3 OR abandoned = 0) ORDER BY seq
                 LIMIT ?4",
            )
            .map_err(backend)?;
        // SQLite reads a negative limit as no limit.
        let limit = limit.map_or(-1, |n| n.min(i64::MAX as usize) as i64);
        let rows = stmt
            .query_map(
                params![
                    session_id,
                    from_seq.min(i64::MAX as u64) as i64,
                    include_abandoned,
                    limit
                ],
                row_to_logged,
            )
            .map_err(backend)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(backend)?;
        drop(stmt);
        drop(conn);
        parse_logged(rows, session_id)
    }
}

/// Appends `messages` in `tx`; a taken id fails the whole append.
fn append_in(
    tx: &rusqlite::Transaction<'_>,
    session_id: &str,
    messages: &[NewLogMessage],
) -> Result<Vec<(u64, String)>, engram::Error> {
    let info = session_in(tx, session_id)?;
    let mut seq = info.next_seq;
    let mut out = Vec::with_capacity(messages.len());
    let mut updated = info.updated_at;
    {
        let mut insert = tx
            .prepare_cached(
                "INSERT INTO session_message (session_id, seq, id, created_at, tokens, message)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .map_err(backend)?;
        for (i, m) in messages.iter().enumerate() {
            let message = logged_message(&m.message, seq);
            let id = message.id.clone().unwrap_or_default();
            let result = insert.execute(params![
                session_id,
                seq as i64,
                id,
                m.created_at,
                m.tokens as i64,
                message.to_value().to_string(),
            ]);
            match result {
                Ok(_) => {}
                Err(rusqlite::Error::SqliteFailure(e, _))
                    if e.code == rusqlite::ErrorCode::ConstraintViolation =>
                {
                    // The transaction is dropped: nothing of this append stays.
                    return Err(duplicate(i, &id, session_id));
                }
                Err(e) => return Err(backend(e)),
            }
            updated = updated.max(m.created_at);
            out.push((seq, id));
            seq += 1;
        }
    }
    tx.execute(
        "UPDATE session SET next_seq = ?2, messages = messages + ?3, updated_at = ?4 WHERE id = ?1",
        params![session_id, seq as i64, messages.len() as i64, updated],
    )
    .map_err(backend)?;
    Ok(out)
}

impl SessionStore for SqliteStore {
    fn create_session(&self, new: &NewSession) -> Result<SessionInfo, engram::Error> {
        let mut conn = self.conn();
        let tx = write_tx(&mut conn)?;
        let id = new.id.clone().unwrap_or_else(|| new_id("ses"));
        let inserted = tx
            .execute(
                "INSERT OR IGNORE INTO session (id, name, model, tokenizer, token_factor, window, metadata, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8)",
                params![
                    id,
                    new.name,
                    new.model,
                    new.tokenizer,
                    new.token_factor,
                    new.window as i64,
                    (!new.metadata.is_null()).then(|| new.metadata.to_string()),
                    new.created_at,
                ],
            )
            .map_err(backend)?;
        if inserted == 0 {
            return Err(engram::Error::Conflict(format!(
                "a session {id:?} exists already"
            )));
        }
        let info = session_in(&tx, &id)?;
        tx.commit().map_err(backend)?;
        Ok(info)
    }

    fn session(&self, id: &str) -> Result<Option<SessionInfo>, engram::Error> {
        match session_in(&self.conn(), id) {
            Ok(info) => Ok(Some(info)),
            Err(engram::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn sessions(&self) -> Result<Vec<SessionInfo>, engram::Error> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT {SESSION_COLUMNS} FROM session ORDER BY updated_at DESC, id"
            ))
            .map_err(backend)?;
        let rows = stmt.query_map([], row_to_session).map_err(backend)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(backend)
    }

    fn append(
        &self,
        session_id: &str,
        messages: &[NewLogMessage],
    ) -> Result<Vec<(u64, String)>, engram::Error> {
        let mut conn = self.conn();
        let tx = write_tx(&mut conn)?;
        let out = append_in(&tx, session_id, messages)?;
        tx.commit().map_err(backend)?;
        Ok(out)
    }

    fn append_keyed(
        &self,
        session_id: &str,
        messages: &[NewLogMessage],
        key: &AppendKey,
    ) -> Result<KeyedAppend, engram::Error> {
        let mut conn = self.conn();
        let tx = write_tx(&mut conn)?;
        session_in(&tx, session_id)?;
        tx.execute(
            "DELETE FROM session_append_key WHERE session_id = ?1 AND created_at <= ?2",
            params![session_id, key.at - APPEND_KEY_TTL_MS],
        )
        .map_err(backend)?;
        let kept: Option<(String, String, Option<String>)> = tx
            .query_row(
                "SELECT fingerprint, positions, answer FROM session_append_key
                 WHERE session_id = ?1 AND key = ?2",
                params![session_id, key.key],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .map_err(backend)?;
        if let Some((fingerprint, positions, answer)) = kept {
            return replayed(key, session_id, &fingerprint, &positions, answer.as_deref());
        }
        let out = append_in(&tx, session_id, messages)?;
        tx.execute(
            "INSERT INTO session_append_key (session_id, key, fingerprint, positions, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                session_id,
                key.key,
                key.fingerprint,
                serde_json::to_string(&out).map_err(backend)?,
                key.at
            ],
        )
        .map_err(backend)?;
        tx.execute(
            "DELETE FROM session_append_key WHERE session_id = ?1 AND key NOT IN (
                 SELECT key FROM session_append_key WHERE session_id = ?1
                 ORDER BY created_at DESC, rowid DESC LIMIT ?2)",
            params![session_id, APPEND_KEYS_KEPT as i64],
        )
        .map_err(backend)?;
        tx.commit().map_err(backend)?;
        Ok(KeyedAppend::Stored(out))
    }

    fn keep_append_answer(
        &self,
        session_id: &str,
        key: &str,
        answer: &Value,
    ) -> Result<(), engram::Error> {
        let conn = self.conn();
        conn.execute(
            "UPDATE session_append_key SET answer = ?3 WHERE session_id = ?1 AND key = ?2",
            params![session_id, key, answer.to_string()],
        )
        .map_err(backend)?;
        Ok(())
    }

    fn read_log(
        &self,
        session_id: &str,
        range: LogRange,
    ) -> Result<Vec<LoggedMessage>, engram::Error> {
        self.log_rows(session_id, range)
    }

    fn messages_by_id(
        &self,
        session_id: &str,
        ids: &[String],
    ) -> Result<Vec<LoggedMessage>, engram::Error> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(
                "SELECT seq, id, created_at, tokens, message, abandoned FROM session_message
                 WHERE session_id = ?1 AND id = ?2 AND abandoned = 0",
            )
            .map_err(backend)?;
        let mut rows = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(row) = stmt
                .query_row(params![session_id, id], row_to_logged)
                .optional()
                .map_err(backend)?
            {
                rows.push(row);
            }
        }
        rows.sort_by_key(|(m, _)| m.seq);
        drop(stmt);
        drop(conn);
        parse_logged(rows, session_id)
    }

    fn record_compaction(&self, c: &NewCompaction) -> Result<CompactionRecord, engram::Error> {
        let mut conn = self.conn();
        let tx = write_tx(&mut conn)?;
        let info = session_in(&tx, &c.session_id)?;
        check_compaction(&info, c)?;
        let summary_ids: Vec<String> = c.summaries.iter().map(|s| s.id.clone()).collect();
        tx.execute(
            "INSERT INTO session_compaction (session_id, trigger, strategy, log_end, tokens_before, tokens_after, view, report, summary_ids, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![
                c.session_id,
                c.trigger,
                c.strategy,
                c.log_end as i64,
                c.tokens_before as i64,
                c.tokens_after as i64,
                c.view.to_string(),
                c.report.to_string(),
                to_json(&summary_ids),
                c.created_at,
            ],
        )
        .map_err(backend)?;
        let id = tx.last_insert_rowid();
        for s in &c.summaries {
            insert_summary(&tx, &c.session_id, id, s)?;
        }
        for e in &c.journal {
            let entry_id = e.id.clone().unwrap_or_else(|| new_id("jrn"));
            insert_one(&tx, &entry_id, e, None).map_err(backend)?;
        }
        let record = tx
            .query_row(
                &format!("SELECT {COMPACTION_COLUMNS} FROM session_compaction WHERE id = ?1"),
                [id],
                row_to_compaction,
            )
            .map_err(backend)?;
        tx.commit().map_err(backend)?;
        Ok(record)
    }

    fn read_compactions(
        &self,
        session_id: &str,
        which: Compactions,
    ) -> Result<Vec<CompactionRecord>, engram::Error> {
        // SQLite reads a negative limit as no limit.
        let (include_abandoned, order, limit) = match which {
            Compactions::All { include_abandoned } => (include_abandoned, "", -1),
            Compactions::Newest(n) => (false, "DESC", n.min(i64::MAX as usize) as i64),
        };
        let conn = self.conn();
        session_in(&conn, session_id)?;
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT {COMPACTION_COLUMNS} FROM session_compaction
                 WHERE session_id = ?1 AND (?2 OR abandoned = 0) ORDER BY id {order} LIMIT ?3"
            ))
            .map_err(backend)?;
        let rows = stmt
            .query_map(
                params![session_id, include_abandoned, limit],
                row_to_compaction,
            )
            .map_err(backend)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(backend)
    }

    fn tail_tokens(&self, session_id: &str, from_seq: u64) -> Result<usize, engram::Error> {
        let conn = self.conn();
        session_in(&conn, session_id)?;
        conn.query_row(
            "SELECT coalesce(sum(tokens), 0) FROM session_message
             WHERE session_id = ?1 AND seq >= ?2 AND abandoned = 0",
            params![session_id, from_seq as i64],
            |r| r.get::<_, i64>(0),
        )
        .map(|n| n as usize)
        .map_err(backend)
    }

    fn user_turns(&self, session_id: &str) -> Result<usize, engram::Error> {
        let conn = self.conn();
        session_in(&conn, session_id)?;
        conn.query_row(
            "SELECT count(*) FROM session_message
             WHERE session_id = ?1 AND abandoned = 0 AND json_extract(message, '$.role') = 'user'",
            [session_id],
            |r| r.get::<_, i64>(0),
        )
        .map(|n| n as usize)
        .map_err(backend)
    }

    fn summaries(&self, session_id: &str) -> Result<Vec<SummaryRecord>, engram::Error> {
        let conn = self.conn();
        session_in(&conn, session_id)?;
        let mut stmt = conn
            .prepare_cached(
                "SELECT s.id, s.session_id, s.compaction_id, s.depth, s.covers, s.covers_summaries, s.from_at, s.to_at, s.text, s.tokens, s.created_at
                 FROM session_summary s JOIN session_compaction c ON c.id = s.compaction_id
                 WHERE s.session_id = ?1 AND c.abandoned = 0 ORDER BY s.compaction_id, s.rowid",
            )
            .map_err(backend)?;
        let rows = stmt
            .query_map([session_id], |r| {
                let covers: String = r.get(4)?;
                let supersedes: String = r.get(5)?;
                Ok(SummaryRecord {
                    id: r.get(0)?,
                    session_id: r.get(1)?,
                    compaction_id: r.get(2)?,
                    depth: r.get(3)?,
                    covers: strings(&covers),
                    covers_summaries: strings(&supersedes),
                    from: r.get(6)?,
                    to: r.get(7)?,
                    text: r.get(8)?,
                    tokens: r.get::<_, i64>(9)? as usize,
                    created_at: r.get(10)?,
                })
            })
            .map_err(backend)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(backend)
    }

    fn checkpoint(
        &self,
        session_id: &str,
        name: &str,
        at: Timestamp,
    ) -> Result<Checkpoint, engram::Error> {
        let mut conn = self.conn();
        let tx = write_tx(&mut conn)?;
        let info = session_in(&tx, session_id)?;
        let compaction_id: Option<i64> = tx
            .query_row(
                "SELECT max(id) FROM session_compaction WHERE session_id = ?1 AND abandoned = 0",
                [session_id],
                |r| r.get(0),
            )
            .map_err(backend)?;
        let inserted = tx
            .execute(
                "INSERT OR IGNORE INTO session_checkpoint (session_id, name, log_end, compaction_id, messages, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    session_id,
                    name,
                    info.next_seq as i64,
                    compaction_id,
                    info.messages as i64,
                    at
                ],
            )
            .map_err(backend)?;
        if inserted == 0 {
            return Err(engram::Error::Conflict(format!(
                "session {session_id:?} has a checkpoint named {name:?} already"
            )));
        }
        tx.commit().map_err(backend)?;
        Ok(Checkpoint {
            session_id: session_id.to_owned(),
            name: name.to_owned(),
            log_end: info.next_seq,
            compaction_id,
            messages: info.messages,
            created_at: at,
            abandoned: false,
        })
    }

    fn checkpoints(&self, session_id: &str) -> Result<Vec<Checkpoint>, engram::Error> {
        let conn = self.conn();
        session_in(&conn, session_id)?;
        let mut stmt = conn
            .prepare_cached(
                "SELECT session_id, name, log_end, compaction_id, messages, created_at, abandoned
                 FROM session_checkpoint WHERE session_id = ?1 ORDER BY rowid",
            )
            .map_err(backend)?;
        let rows = stmt
            .query_map([session_id], row_to_checkpoint)
            .map_err(backend)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(backend)
    }

    fn restore(&self, session_id: &str, name: &str) -> Result<Restored, engram::Error> {
        let mut conn = self.conn();
        let tx = write_tx(&mut conn)?;
        session_in(&tx, session_id)?;
        let found: Option<(i64, Checkpoint)> = tx
            .query_row(
                "SELECT session_id, name, log_end, compaction_id, messages, created_at, abandoned, rowid
                 FROM session_checkpoint WHERE session_id = ?1 AND name = ?2",
                params![session_id, name],
                |r| Ok((r.get(7)?, row_to_checkpoint(r)?)),
            )
            .optional()
            .map_err(backend)?;
        let (rowid, cp) = found.ok_or_else(|| no_checkpoint(session_id, name))?;
        if cp.abandoned {
            return Err(abandoned_checkpoint(session_id, name));
        }
        let messages_abandoned = tx
            .execute(
                "UPDATE session_message SET abandoned = 1
                 WHERE session_id = ?1 AND seq >= ?2 AND abandoned = 0",
                params![session_id, cp.log_end as i64],
            )
            .map_err(backend)?;
        let compactions_abandoned = tx
            .execute(
                "UPDATE session_compaction SET abandoned = 1
                 WHERE session_id = ?1 AND abandoned = 0 AND (?2 IS NULL OR id > ?2)",
                params![session_id, cp.compaction_id],
            )
            .map_err(backend)?;
        let checkpoints_abandoned = tx
            .execute(
                "UPDATE session_checkpoint SET abandoned = 1
                 WHERE session_id = ?1 AND abandoned = 0 AND rowid > ?2",
                params![session_id, rowid],
            )
            .map_err(backend)?;
        tx.execute(
            "UPDATE session SET epoch = epoch + 1,
                messages = (SELECT count(*) FROM session_message WHERE session_id = ?1 AND abandoned = 0)
             WHERE id = ?1",
            [session_id],
        )
        .map_err(backend)?;
        tx.commit().map_err(backend)?;
        Ok(Restored {
            messages_abandoned,
            compactions_abandoned,
            checkpoints_abandoned,
        })
    }

    fn import_session(&self, dump: &SessionDump) -> Result<(), engram::Error> {
        let mut conn = self.conn();
        let tx = write_tx(&mut conn)?;
        let info = &dump.info;
        let inserted = tx
            .execute(
                "INSERT OR IGNORE INTO session (id, name, model, tokenizer, token_factor, window, metadata, created_at, updated_at, messages, next_seq, epoch)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                params![
                    info.id,
                    info.name,
                    info.model,
                    info.tokenizer,
                    info.token_factor,
                    info.window as i64,
                    (!info.metadata.is_null()).then(|| info.metadata.to_string()),
                    info.created_at,
                    info.updated_at,
                    info.messages as i64,
                    info.next_seq as i64,
                    info.epoch as i64,
                ],
            )
            .map_err(backend)?;
        if inserted == 0 {
            return Err(engram::Error::Conflict(format!(
                "a session {:?} exists already; delete it first to import it again",
                info.id
            )));
        }
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO session_message (session_id, seq, id, created_at, tokens, message, abandoned)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .map_err(backend)?;
            for m in &dump.messages {
                insert
                    .execute(params![
                        info.id,
                        m.seq as i64,
                        m.id,
                        m.created_at,
                        m.tokens as i64,
                        m.message.to_value().to_string(),
                        m.abandoned,
                    ])
                    .map_err(|e| backend(format!("message {} (seq {}): {e}", m.id, m.seq)))?;
            }
        }
        let mut ids = std::collections::HashMap::new();
        for c in &dump.compactions {
            tx.execute(
                "INSERT INTO session_compaction (session_id, trigger, strategy, log_end, tokens_before, tokens_after, view, report, summary_ids, created_at, abandoned)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                params![
                    info.id,
                    c.trigger,
                    c.strategy,
                    c.log_end as i64,
                    c.tokens_before as i64,
                    c.tokens_after as i64,
                    c.view.to_string(),
                    c.report.to_string(),
                    to_json(&c.summary_ids),
                    c.created_at,
                    c.abandoned,
                ],
            )
            .map_err(backend)?;
            ids.insert(c.id, tx.last_insert_rowid());
        }
        let remap = |id: i64| ids.get(&id).copied().unwrap_or(id);
        for s in &dump.summaries {
            insert_summary(&tx, &info.id, remap(s.compaction_id), s)?;
        }
        for c in &dump.checkpoints {
            tx.execute(
                "INSERT INTO session_checkpoint (session_id, name, log_end, compaction_id, messages, created_at, abandoned)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    info.id,
                    c.name,
                    c.log_end as i64,
                    c.compaction_id.map(remap),
                    c.messages as i64,
                    c.created_at,
                    c.abandoned,
                ],
            )
            .map_err(backend)?;
        }
        tx.commit().map_err(backend)?;
        Ok(())
    }

    fn delete_session(&self, session_id: &str) -> Result<SessionDeleted, engram::Error> {
        let mut conn = self.conn();
        let tx = write_tx(&mut conn)?;
        session_in(&tx, session_id)?;
        let count = |table: &str| -> Result<usize, engram::Error> {
            tx.query_row(
                &format!("SELECT count(*) FROM {table} WHERE session_id = ?1"),
                [session_id],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n as usize)
            .map_err(backend)
        };
        let mut out = SessionDeleted {
            messages: count("session_message")?,
            compactions: count("session_compaction")?,
            summaries: count("session_summary")?,
            checkpoints: count("session_checkpoint")?,
            memory_entries: 0,
        };
        out.memory_entries = super::forget_where(&tx, "session_id = ?1", &[&session_id])?.entries;
        // The vectors only this session uses; its rows of `session_vector` go with the session.
        super::vectors::forget_session(&tx, session_id).map_err(backend)?;
        tx.execute("DELETE FROM session WHERE id = ?1", [session_id])
            .map_err(backend)?;
        tx.commit().map_err(backend)?;
        Ok(out)
    }

    fn put_session_vectors(
        &self,
        session_id: &str,
        model: &str,
        vectors: &[(TextHash, &[f32])],
    ) -> Result<(), engram::Error> {
        if vectors.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn();
        let tx = write_tx(&mut conn)?;
        session_in(&tx, session_id)?;
        super::vectors::write_for_session(&tx, session_id, model, vectors).map_err(backend)?;
        tx.commit().map_err(backend)?;
        Ok(())
    }
}
