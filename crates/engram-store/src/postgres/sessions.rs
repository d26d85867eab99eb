//! [`SessionStore`] for PostgreSQL: every method is one transaction, and every write locks the
//! session's row first, so that servers sharing the database append and compact in order.

use engram::embed::TextHash;
use engram::memory::{NewEntry, Timestamp, new_id};
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
use postgres::GenericClient;
use postgres::Transaction;
use serde_json::Value;

use super::{PostgresStore, forget_where, insert_entries, is_unique_violation, pg, put_vectors_in};

const SESSION_COLUMNS: &str = "id, name, model, tokenizer, token_factor, window_tokens, metadata, created_at, updated_at, messages, next_seq, epoch";

fn row_to_session(r: &postgres::Row) -> SessionInfo {
    let metadata: Option<String> = r.get(6);
    SessionInfo {
        id: r.get(0),
        name: r.get(1),
        model: r.get(2),
        tokenizer: r.get(3),
        token_factor: r.get(4),
        window: r.get::<_, i64>(5) as usize,
        metadata: json_or_null(metadata.as_deref()),
        created_at: r.get(7),
        updated_at: r.get(8),
        messages: r.get::<_, i64>(9) as usize,
        next_seq: r.get::<_, i64>(10) as u64,
        epoch: r.get::<_, i64>(11) as u64,
    }
}

fn json_or_null(text: Option<&str>) -> Value {
    text.and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or(Value::Null)
}

fn strings(text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_default()
}

fn to_json(value: &[String]) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// The session's row; `lock` takes its row lock until the transaction ends.
fn session_in(
    client: &mut impl GenericClient,
    tenant: &str,
    id: &str,
    lock: bool,
) -> Result<SessionInfo, engram::Error> {
    let sql = format!(
        "SELECT {SESSION_COLUMNS} FROM engram_session WHERE tenant = $1 AND id = $2{}",
        if lock { " FOR UPDATE" } else { "" }
    );
    client
        .query_opt(&sql, &[&tenant, &id])
        .map_err(pg)?
        .map(|r| row_to_session(&r))
        .ok_or_else(|| no_session(id))
}

const MESSAGE_COLUMNS: &str = "seq, id, created_at, tokens, message, abandoned";

fn rows_to_logged(
    rows: &[postgres::Row],
    session_id: &str,
) -> Result<Vec<LoggedMessage>, engram::Error> {
    rows.iter()
        .map(|r| {
            let id: String = r.get(1);
            let text: &str = r.get(4);
            let value: Value = serde_json::from_str(text).map_err(|e| {
                engram::Error::Backend(format!(
                    "session {session_id:?}, message {id}: stored JSON is damaged: {e}"
                ))
            })?;
            let message = Message::from_stored(value).map_err(|e| {
                engram::Error::Backend(format!(
                    "session {session_id:?}, message {id}: stored message is damaged: {e}"
                ))
            })?;
            Ok(LoggedMessage {
                seq: r.get::<_, i64>(0) as u64,
                id,
                created_at: r.get(2),
                tokens: r.get::<_, i64>(3) as usize,
                message,
                abandoned: r.get(5),
            })
        })
        .collect()
}

const COMPACTION_COLUMNS: &str = "id, session_id, trigger, strategy, log_end, tokens_before, tokens_after, view, report, summary_ids, created_at, abandoned";

fn row_to_compaction(r: &postgres::Row) -> CompactionRecord {
    CompactionRecord {
        id: r.get(0),
        session_id: r.get(1),
        trigger: r.get(2),
        strategy: r.get(3),
        log_end: r.get::<_, i64>(4) as u64,
        tokens_before: r.get::<_, i64>(5) as usize,
        tokens_after: r.get::<_, i64>(6) as usize,
        view: json_or_null(Some(r.get(7))),
        report: json_or_null(Some(r.get(8))),
        summary_ids: strings(r.get(9)),
        created_at: r.get(10),
        abandoned: r.get(11),
    }
}

const CHECKPOINT_COLUMNS: &str =
    "session_id, name, log_end, compaction_id, messages, created_at, abandoned";

fn row_to_checkpoint(r: &postgres::Row) -> Checkpoint {
    Checkpoint {
        session_id: r.get(0),
        name: r.get(1),
        log_end: r.get::<_, i64>(2) as u64,
        compaction_id: r.get(3),
        messages: r.get::<_, i64>(4) as usize,
        created_at: r.get(5),
        abandoned: r.get(6),
    }
}

fn insert_summary(
    tx: &mut Transaction<'_>,
    tenant: &str,
    session_id: &str,
    compaction_id: i64,
    s: &SummaryRecord,
) -> Result<(), engram::Error> {
    tx.execute(
        "INSERT INTO engram_session_summary (tenant, id, session_id, compaction_id, depth, covers, covers_summaries, from_at, to_at, text, tokens, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        &[
            &tenant,
            &s.id,
            &session_id,
            &compaction_id,
            &(s.depth as i32),
            &to_json(&s.covers),
            &to_json(&s.covers_summaries),
            &s.from,
            &s.to,
            &s.text,
            &(s.tokens as i64),
            &s.created_at,
        ],
    )
    .map_err(|e| {
        if is_unique_violation(&e) {
            engram::Error::Conflict(format!("a summary {:?} exists already", s.id))
        } else {
            pg(e)
        }
    })?;
    Ok(())
}

fn insert_journal(
    tx: &mut Transaction<'_>,
    tenant: &str,
    journal: &[NewEntry],
) -> Result<(), engram::Error> {
    if journal.is_empty() {
        return Ok(());
    }
    let ids: Vec<String> = journal
        .iter()
        .map(|e| e.id.clone().unwrap_or_else(|| new_id("jrn")))
        .collect();
    let refs: Vec<&NewEntry> = journal.iter().collect();
    insert_entries(tx, tenant, &refs, &ids, None)?;
    Ok(())
}

impl PostgresStore {
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
        // PostgreSQL reads a NULL limit as no limit.
        let limit = limit.map(|n| n.min(i64::MAX as usize) as i64);
        let rows = self.tx(|tx| {
            session_in(tx, &self.tenant, session_id, false)?;
            tx.query(
                &format!(
                    "SELECT {MESSAGE_COLUMNS} FROM engram_session_message
                     WHERE tenant = $1 AND session_id = $2 AND seq >= $3 AND ($4 OR NOT abandoned)
                     ORDER BY seq LIMIT $5"
                ),
                &[
                    &self.tenant,
                    &session_id,
                    &(from_seq.min(i64::MAX as u64) as i64),
                    &include_abandoned,
                    &limit,
                ],
            )
            .map_err(pg)
        })?;
        rows_to_logged(&rows, session_id)
    }
}

/// Appends `messages` to `info`'s session (its row locked) in `tx`; a taken id fails the whole
/// append.
fn append_in(
    tx: &mut Transaction<'_>,
    tenant: &str,
    info: &SessionInfo,
    messages: &[NewLogMessage],
) -> Result<Vec<(u64, String)>, engram::Error> {
    let session_id = info.id.as_str();
    let insert = tx
        .prepare(
            "INSERT INTO engram_session_message (tenant, session_id, seq, id, created_at, tokens, role, message)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .map_err(pg)?;
    let mut seq = info.next_seq;
    let mut updated = info.updated_at;
    let mut out = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let message = logged_message(&m.message, seq);
        let id = message.id.clone().unwrap_or_default();
        let result = tx.execute(
            &insert,
            &[
                &tenant,
                &session_id,
                &(seq as i64),
                &id,
                &m.created_at,
                &(m.tokens as i64),
                &message.role.as_str(),
                &message.to_value().to_string(),
            ],
        );
        match result {
            Ok(_) => {}
            // The transaction is dropped: nothing of this append stays.
            Err(e) if is_unique_violation(&e) => {
                return Err(duplicate(i, &id, session_id));
            }
            Err(e) => return Err(pg(e)),
        }
        updated = updated.max(m.created_at);
        out.push((seq, id));
        seq += 1;
    }
    tx.execute(
        "UPDATE engram_session SET next_seq = $3, messages = messages + $4, updated_at = $5
         WHERE tenant = $1 AND id = $2",
        &[
            &tenant,
            &session_id,
            &(seq as i64),
            &(messages.len() as i64),
            &updated,
        ],
    )
    .map_err(pg)?;
    Ok(out)
}

impl SessionStore for PostgresStore {
    fn create_session(&self, new: &NewSession) -> Result<SessionInfo, engram::Error> {
        let id = new.id.clone().unwrap_or_else(|| new_id("ses"));
        self.tx(|tx| {
            let row = tx
                .query_opt(
                    &format!(
                        "INSERT INTO engram_session (tenant, id, name, model, tokenizer, token_factor, window_tokens, metadata, created_at, updated_at)
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9)
                         ON CONFLICT (tenant, id) DO NOTHING RETURNING {SESSION_COLUMNS}"
                    ),
                    &[
                        &self.tenant,
                        &id,
                        &new.name,
                        &new.model,
                        &new.tokenizer,
                        &new.token_factor,
                        &(new.window as i64),
                        &(!new.metadata.is_null()).then(|| new.metadata.to_string()),
                        &new.created_at,
                    ],
                )
                .map_err(pg)?;
            row.map(|r| row_to_session(&r)).ok_or_else(|| {
                engram::Error::Conflict(format!("a session {id:?} exists already"))
            })
        })
    }

    fn session(&self, id: &str) -> Result<Option<SessionInfo>, engram::Error> {
        match session_in(&mut *self.pool.get()?, &self.tenant, id, false) {
            Ok(info) => Ok(Some(info)),
            Err(engram::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn sessions(&self) -> Result<Vec<SessionInfo>, engram::Error> {
        let rows = self
            .pool
            .get()?
            .query(
                &format!(
                    "SELECT {SESSION_COLUMNS} FROM engram_session WHERE tenant = $1 ORDER BY updated_at DESC, id"
                ),
                &[&self.tenant],
            )
            .map_err(pg)?;
        Ok(rows.iter().map(row_to_session).collect())
    }

    fn append(
        &self,
        session_id: &str,
        messages: &[NewLogMessage],
    ) -> Result<Vec<(u64, String)>, engram::Error> {
        self.tx(|tx| {
            let info = session_in(tx, &self.tenant, session_id, true)?;
            append_in(tx, &self.tenant, &info, messages)
        })
    }

    fn append_keyed(
        &self,
        session_id: &str,
        messages: &[NewLogMessage],
        key: &AppendKey,
    ) -> Result<KeyedAppend, engram::Error> {
        self.tx(|tx| {
            // The session's row is locked first: a retry racing its first try waits for it.
            let info = session_in(tx, &self.tenant, session_id, true)?;
            tx.execute(
                "DELETE FROM engram_session_append_key
                 WHERE tenant = $1 AND session_id = $2 AND created_at <= $3",
                &[&self.tenant, &session_id, &(key.at - APPEND_KEY_TTL_MS)],
            )
            .map_err(pg)?;
            let kept = tx
                .query_opt(
                    "SELECT fingerprint, positions, answer FROM engram_session_append_key
                     WHERE tenant = $1 AND session_id = $2 AND key = $3",
                    &[&self.tenant, &session_id, &key.key],
                )
                .map_err(pg)?;
            if let Some(row) = kept {
                let (fingerprint, positions, answer): (String, String, Option<String>) =
                    (row.get(0), row.get(1), row.get(2));
                return replayed(key, session_id, &fingerprint, &positions, answer.as_deref());
            }
            let out = append_in(tx, &self.tenant, &info, messages)?;
            let positions =
                serde_json::to_string(&out).map_err(|e| engram::Error::Backend(e.to_string()))?;
            tx.execute(
                "INSERT INTO engram_session_append_key
                     (tenant, session_id, key, fingerprint, positions, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6)",
                &[
                    &self.tenant,
                    &session_id,
                    &key.key,
                    &key.fingerprint,
                    &positions,
                    &key.at,
                ],
            )
            .map_err(pg)?;
            tx.execute(
                "DELETE FROM engram_session_append_key WHERE tenant = $1 AND session_id = $2
                 AND key NOT IN (SELECT key FROM engram_session_append_key
                                 WHERE tenant = $1 AND session_id = $2
                                 ORDER BY created_at DESC, key DESC LIMIT $3)",
                &[&self.tenant, &session_id, &(APPEND_KEYS_KEPT as i64)],
            )
            .map_err(pg)?;
            Ok(KeyedAppend::Stored(out))
        })
    }

    fn keep_append_answer(
        &self,
        session_id: &str,
        key: &str,
        answer: &Value,
    ) -> Result<(), engram::Error> {
        self.tx(|tx| {
            tx.execute(
                "UPDATE engram_session_append_key SET answer = $4
                 WHERE tenant = $1 AND session_id = $2 AND key = $3",
                &[&self.tenant, &session_id, &key, &answer.to_string()],
            )
            .map_err(pg)?;
            Ok(())
        })
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
        let rows = self
            .pool
            .get()?
            .query(
                &format!(
                    "SELECT {MESSAGE_COLUMNS} FROM engram_session_message
                     WHERE tenant = $1 AND session_id = $2 AND id = ANY($3) AND NOT abandoned
                     ORDER BY seq"
                ),
                &[&self.tenant, &session_id, &ids],
            )
            .map_err(pg)?;
        rows_to_logged(&rows, session_id)
    }

    fn record_compaction(&self, c: &NewCompaction) -> Result<CompactionRecord, engram::Error> {
        self.tx(|tx| {
            let info = session_in(tx, &self.tenant, &c.session_id, true)?;
            check_compaction(&info, c)?;
            let summary_ids: Vec<String> = c.summaries.iter().map(|s| s.id.clone()).collect();
            let row = tx
                .query_one(
                    &format!(
                        "INSERT INTO engram_session_compaction (tenant, session_id, trigger, strategy, log_end, tokens_before, tokens_after, view, report, summary_ids, created_at)
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING {COMPACTION_COLUMNS}"
                    ),
                    &[
                        &self.tenant,
                        &c.session_id,
                        &c.trigger,
                        &c.strategy,
                        &(c.log_end as i64),
                        &(c.tokens_before as i64),
                        &(c.tokens_after as i64),
                        &c.view.to_string(),
                        &c.report.to_string(),
                        &to_json(&summary_ids),
                        &c.created_at,
                    ],
                )
                .map_err(pg)?;
            let record = row_to_compaction(&row);
            for s in &c.summaries {
                insert_summary(tx, &self.tenant, &c.session_id, record.id, s)?;
            }
            insert_journal(tx, &self.tenant, &c.journal)?;
            Ok(record)
        })
    }

    fn read_compactions(
        &self,
        session_id: &str,
        which: Compactions,
    ) -> Result<Vec<CompactionRecord>, engram::Error> {
        // PostgreSQL reads a NULL limit as no limit.
        let (include_abandoned, order, limit) = match which {
            Compactions::All { include_abandoned } => (include_abandoned, "", None),
            Compactions::Newest(n) => (false, "DESC", Some(n.min(i64::MAX as usize) as i64)),
        };
        let rows = self.tx(|tx| {
            session_in(tx, &self.tenant, session_id, false)?;
            tx.query(
                &format!(
                    "SELECT {COMPACTION_COLUMNS} FROM engram_session_compaction
                     WHERE tenant = $1 AND session_id = $2 AND ($3 OR NOT abandoned)
                     ORDER BY id {order} LIMIT $4"
                ),
                &[&self.tenant, &session_id, &include_abandoned, &limit],
            )
            .map_err(pg)
        })?;
        Ok(rows.iter().map(row_to_compaction).collect())
    }

    fn tail_tokens(&self, session_id: &str, from_seq: u64) -> Result<usize, engram::Error> {
        self.tx(|tx| {
            session_in(tx, &self.tenant, session_id, false)?;
            let row = tx
                .query_one(
                    "SELECT coalesce(sum(tokens), 0)::int8 FROM engram_session_message
                     WHERE tenant = $1 AND session_id = $2 AND seq >= $3 AND NOT abandoned",
                    &[
                        &self.tenant,
                        &session_id,
                        &(from_seq.min(i64::MAX as u64) as i64),
                    ],
                )
                .map_err(pg)?;
            Ok(row.get::<_, i64>(0) as usize)
        })
    }

    fn user_turns(&self, session_id: &str) -> Result<usize, engram::Error> {
        self.tx(|tx| {
            session_in(tx, &self.tenant, session_id, false)?;
            let row = tx
                .query_one(
                    "SELECT count(*) FROM engram_session_message
                     WHERE tenant = $1 AND session_id = $2 AND NOT abandoned AND role = 'user'",
                    &[&self.tenant, &session_id],
                )
                .map_err(pg)?;
            Ok(row.get::<_, i64>(0) as usize)
        })
    }

    fn summaries(&self, session_id: &str) -> Result<Vec<SummaryRecord>, engram::Error> {
        let rows = self.tx(|tx| {
            session_in(tx, &self.tenant, session_id, false)?;
            tx.query(
                "SELECT s.id, s.session_id, s.compaction_id, s.depth, s.covers, s.covers_summaries, s.from_at, s.to_at, s.text, s.tokens, s.created_at
                 FROM engram_session_summary s JOIN engram_session_compaction c ON c.id = s.compaction_id
                 WHERE s.tenant = $1 AND s.session_id = $2 AND NOT c.abandoned
                 ORDER BY s.compaction_id, s.ord",
                &[&self.tenant, &session_id],
            )
            .map_err(pg)
        })?;
        Ok(rows
            .iter()
            .map(|r| SummaryRecord {
                id: r.get(0),
                session_id: r.get(1),
                compaction_id: r.get(2),
                depth: r.get::<_, i32>(3) as u32,
                covers: strings(r.get(4)),
                covers_summaries: strings(r.get(5)),
                from: r.get(6),
                to: r.get(7),
                text: r.get(8),
                tokens: r.get::<_, i64>(9) as usize,
                created_at: r.get(10),
            })
            .collect())
    }

    fn checkpoint(
        &self,
        session_id: &str,
        name: &str,
        at: Timestamp,
    ) -> Result<Checkpoint, engram::Error> {
        self.tx(|tx| {
            let info = session_in(tx, &self.tenant, session_id, true)?;
            let compaction_id: Option<i64> = tx
                .query_one(
                    "SELECT max(id) FROM engram_session_compaction
                     WHERE tenant = $1 AND session_id = $2 AND NOT abandoned",
                    &[&self.tenant, &session_id],
                )
                .map_err(pg)?
                .get(0);
            let inserted = tx
                .execute(
                    "INSERT INTO engram_session_checkpoint (tenant, session_id, name, log_end, compaction_id, messages, created_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (tenant, session_id, name) DO NOTHING",
                    &[
                        &self.tenant,
                        &session_id,
                        &name,
                        &(info.next_seq as i64),
                        &compaction_id,
                        &(info.messages as i64),
                        &at,
                    ],
                )
                .map_err(pg)?;
            if inserted == 0 {
                return Err(engram::Error::Conflict(format!(
                    "session {session_id:?} has a checkpoint named {name:?} already"
                )));
            }
            Ok(Checkpoint {
                session_id: session_id.to_owned(),
                name: name.to_owned(),
                log_end: info.next_seq,
                compaction_id,
                messages: info.messages,
                created_at: at,
                abandoned: false,
            })
        })
    }

    fn checkpoints(&self, session_id: &str) -> Result<Vec<Checkpoint>, engram::Error> {
        let rows = self.tx(|tx| {
            session_in(tx, &self.tenant, session_id, false)?;
            tx.query(
                &format!(
                    "SELECT {CHECKPOINT_COLUMNS} FROM engram_session_checkpoint
                     WHERE tenant = $1 AND session_id = $2 ORDER BY ord"
                ),
                &[&self.tenant, &session_id],
            )
            .map_err(pg)
        })?;
        Ok(rows.iter().map(row_to_checkpoint).collect())
    }

    fn restore(&self, session_id: &str, name: &str) -> Result<Restored, engram::Error> {
        self.tx(|tx| {
            session_in(tx, &self.tenant, session_id, true)?;
            let found = tx
                .query_opt(
                    &format!(
                        "SELECT {CHECKPOINT_COLUMNS}, ord FROM engram_session_checkpoint
                         WHERE tenant = $1 AND session_id = $2 AND name = $3"
                    ),
                    &[&self.tenant, &session_id, &name],
                )
                .map_err(pg)?;
            let row = found.ok_or_else(|| no_checkpoint(session_id, name))?;
            let cp = row_to_checkpoint(&row);
            let ord: i64 = row.get(7);
            if cp.abandoned {
                return Err(abandoned_checkpoint(session_id, name));
            }
            let messages_abandoned = tx
                .execute(
                    "UPDATE engram_session_message SET abandoned = TRUE
                     WHERE tenant = $1 AND session_id = $2 AND seq >= $3 AND NOT abandoned",
                    &[&self.tenant, &session_id, &(cp.log_end as i64)],
                )
                .map_err(pg)? as usize;
            let compactions_abandoned = tx
                .execute(
                    "UPDATE engram_session_compaction SET abandoned = TRUE
                     WHERE tenant = $1 AND session_id = $2 AND NOT abandoned AND ($3::int8 IS NULL OR id > $3)",
                    &[&self.tenant, &session_id, &cp.compaction_id],
                )
                .map_err(pg)? as usize;
            let checkpoints_abandoned = tx
                .execute(
                    "UPDATE engram_session_checkpoint SET abandoned = TRUE
                     WHERE tenant = $1 AND session_id = $2 AND NOT abandoned AND ord > $3",
                    &[&self.tenant, &session_id, &ord],
                )
                .map_err(pg)? as usize;
            tx.execute(
                "UPDATE engram_session SET epoch = epoch + 1,
                    messages = (SELECT count(*) FROM engram_session_message
                                WHERE tenant = $1 AND session_id = $2 AND NOT abandoned)
                 WHERE tenant = $1 AND id = $2",
                &[&self.tenant, &session_id],
            )
            .map_err(pg)?;
            Ok(Restored {
                messages_abandoned,
                compactions_abandoned,
                checkpoints_abandoned,
            })
        })
    }

    fn import_session(&self, dump: &SessionDump) -> Result<(), engram::Error> {
        let info = &dump.info;
        self.tx(|tx| {
            let inserted = tx
                .execute(
                    "INSERT INTO engram_session (tenant, id, name, model, tokenizer, token_factor, window_tokens, metadata, created_at, updated_at, messages, next_seq, epoch)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
                     ON CONFLICT (tenant, id) DO NOTHING",
                    &[
                        &self.tenant,
                        &info.id,
                        &info.name,
                        &info.model,
                        &info.tokenizer,
                        &info.token_factor,
                        &(info.window as i64),
                        &(!info.metadata.is_null()).then(|| info.metadata.to_string()),
                        &info.created_at,
                        &info.updated_at,
                        &(info.messages as i64),
                        &(info.next_seq as i64),
                        &(info.epoch as i64),
                    ],
                )
                .map_err(pg)?;
            if inserted == 0 {
                return Err(engram::Error::Conflict(format!(
                    "a session {:?} exists already; delete it first to import it again",
                    info.id
                )));
            }
            let insert = tx
                .prepare(
                    "INSERT INTO engram_session_message (tenant, session_id, seq, id, created_at, tokens, role, message, abandoned)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                )
                .map_err(pg)?;
            for m in &dump.messages {
                tx.execute(
                    &insert,
                    &[
                        &self.tenant,
                        &info.id,
                        &(m.seq as i64),
                        &m.id,
                        &m.created_at,
                        &(m.tokens as i64),
                        &m.message.role.as_str(),
                        &m.message.to_value().to_string(),
                        &m.abandoned,
                    ],
                )
                .map_err(|e| {
                    engram::Error::Backend(format!(
                        "message {} (seq {}): {}",
                        m.id,
                        m.seq,
                        super::pool::describe(&e)
                    ))
                })?;
            }
            let mut ids = std::collections::HashMap::new();
            for c in &dump.compactions {
                let row = tx
                    .query_one(
                        "INSERT INTO engram_session_compaction (tenant, session_id, trigger, strategy, log_end, tokens_before, tokens_after, view, report, summary_ids, created_at, abandoned)
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING id",
                        &[
                            &self.tenant,
                            &info.id,
                            &c.trigger,
                            &c.strategy,
                            &(c.log_end as i64),
                            &(c.tokens_before as i64),
                            &(c.tokens_after as i64),
                            &c.view.to_string(),
                            &c.report.to_string(),
                            &to_json(&c.summary_ids),
                            &c.created_at,
                            &c.abandoned,
                        ],
                    )
                    .map_err(pg)?;
                ids.insert(c.id, row.get::<_, i64>(0));
            }
            let remap = |id: i64| ids.get(&id).copied().unwrap_or(id);
            for s in &dump.summaries {
                insert_summary(tx, &self.tenant, &info.id, remap(s.compaction_id), s)?;
            }
            for c in &dump.checkpoints {
                tx.execute(
                    "INSERT INTO engram_session_checkpoint (tenant, session_id, name, log_end, compaction_id, messages, created_at, abandoned)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                    &[
                        &self.tenant,
                        &info.id,
                        &c.name,
                        &(c.log_end as i64),
                        &c.compaction_id.map(remap),
                        &(c.messages as i64),
                        &c.created_at,
                        &c.abandoned,
                    ],
                )
                .map_err(pg)?;
            }
            Ok(())
        })
    }

    fn delete_session(&self, session_id: &str) -> Result<SessionDeleted, engram::Error> {
        self.tx(|tx| {
            session_in(tx, &self.tenant, session_id, true)?;
            let mut count = |table: &str| -> Result<usize, engram::Error> {
                let row = tx
                    .query_one(
                        &format!(
                            "SELECT count(*) FROM {table} WHERE tenant = $1 AND session_id = $2"
                        ),
                        &[&self.tenant, &session_id],
                    )
                    .map_err(pg)?;
                Ok(row.get::<_, i64>(0) as usize)
            };
            let mut out = SessionDeleted {
                messages: count("engram_session_message")?,
                compactions: count("engram_session_compaction")?,
                summaries: count("engram_session_summary")?,
                checkpoints: count("engram_session_checkpoint")?,
                memory_entries: 0,
            };
            out.memory_entries =
                forget_where(tx, &self.tenant, "session_id = $2", &[&session_id])?.entries;
            // The vectors only this session uses; its rows of the table go with the session.
            tx.execute(
                "DELETE FROM engram_vector AS v USING engram_session_vector AS mine
                 WHERE mine.tenant = $1 AND mine.session_id = $2
                   AND v.tenant = $1 AND v.model = mine.model AND v.hash = mine.hash
                   AND NOT EXISTS (
                       SELECT 1 FROM engram_session_vector AS other
                       WHERE other.tenant = $1 AND other.model = mine.model
                         AND other.hash = mine.hash AND other.session_id <> $2)",
                &[&self.tenant, &session_id],
            )
            .map_err(pg)?;
            tx.execute(
                "DELETE FROM engram_session WHERE tenant = $1 AND id = $2",
                &[&self.tenant, &session_id],
            )
            .map_err(pg)?;
            Ok(out)
        })
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
        self.tx(|tx| {
            // Held until the commit: the session cannot be deleted in between.
            tx.query_opt(
                "SELECT 1 FROM engram_session WHERE tenant = $1 AND id = $2 FOR KEY SHARE",
                &[&self.tenant, &session_id],
            )
            .map_err(pg)?
            .ok_or_else(|| no_session(session_id))?;
            put_vectors_in(tx, &self.tenant, model, vectors)?;
            let keys: Vec<&[u8]> = vectors.iter().map(|(h, _)| &h[..]).collect();
            tx.execute(
                "INSERT INTO engram_session_vector (tenant, session_id, model, hash)
                 SELECT $1, $2, $3, h FROM unnest($4::bytea[]) AS t(h)
                 ON CONFLICT DO NOTHING",
                &[&self.tenant, &session_id, &model, &keys],
            )
            .map_err(pg)?;
            Ok(())
        })
    }
}
