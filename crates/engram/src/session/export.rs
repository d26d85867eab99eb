//! The export format: JSON Lines, one typed record per line, so that a store (or one session)
//! can be written out, read by other tools, and imported back.
//!
//! ```text
//! {"type":"memory", "id", "tier", "content", "source", "session_id", "created_at", ...}
//! {"type":"session", "id", "name", "model", "tokenizer", "token_factor", "window", ...}
//! {"type":"message", "session_id", "seq", "id", "created_at", "tokens", "abandoned", "message"}
//! {"type":"compaction", "session_id", "id", "trigger", ..., "view", "report", "abandoned"}
//! {"type":"summary", "session_id", "id", "compaction_id", "depth", "covers", ...}
//! {"type":"checkpoint", "session_id", "name", "log_end", "compaction_id", ...}
//! ```
//! Times are RFC 3339. A `memory` line is also a valid `engram memory import` line.

use serde_json::{Value, json};

use super::{Checkpoint, CompactionRecord, LoggedMessage, SessionDump, SessionInfo, SummaryRecord};
use crate::Error;
use crate::memory::MemoryEntry;
use crate::message::Message;
use crate::timestamp::{Timestamp, format_time, parse_time};

/// A memory entry as an export line.
pub fn memory_line(e: &MemoryEntry) -> Value {
    json!({
        "type": "memory",
        "id": e.id,
        "tier": e.tier,
        "content": e.content,
        "source": e.source,
        "session_id": e.session_id,
        "created_at": format_time(e.created_at),
        "importance": e.importance,
        "metadata": e.metadata,
        "summary_of": e.summary_of,
    })
}

/// Every memory entry (or a session's), in pages, as `memory export` writes them: one line per
/// entry without the `type` key (what `memory import` reads back).
pub fn export_memory(
    store: &dyn crate::memory::MemoryStore,
    session_id: Option<&str>,
    mut line: impl FnMut(Value) -> Result<(), Error>,
) -> Result<(), Error> {
    let mut after: Option<String> = None;
    loop {
        let page = store.entries(session_id, after.as_deref(), 10_000)?;
        let Some(last) = page.last() else {
            return Ok(());
        };
        after = Some(last.id.clone());
        for e in &page {
            let mut value = memory_line(e);
            if let Value::Object(map) = &mut value {
                map.remove("type");
            }
            line(value)?;
        }
    }
}

/// A session's lines: the session, then its messages, compactions, summaries, checkpoints.
pub fn session_lines(dump: &SessionDump) -> Vec<Value> {
    let i = &dump.info;
    let sid = &i.id;
    let mut out = vec![json!({
        "type": "session", "id": sid, "name": i.name, "model": i.model,
        "tokenizer": i.tokenizer, "token_factor": i.token_factor, "window": i.window,
        "metadata": i.metadata, "created_at": format_time(i.created_at),
        "updated_at": format_time(i.updated_at), "messages": i.messages,
        "next_seq": i.next_seq, "epoch": i.epoch,
    })];
    out.extend(dump.messages.iter().map(|m| {
        json!({
            "type": "message", "session_id": sid, "seq": m.seq, "id": m.id,
            "created_at": format_time(m.created_at), "tokens": m.tokens,
            "abandoned": m.abandoned, "message": m.message.to_value(),
        })
    }));
    out.extend(dump.compactions.iter().map(|c| {
        json!({
            "type": "compaction", "session_id": sid, "id": c.id, "trigger": c.trigger,
            "strategy": c.strategy, "log_end": c.log_end, "tokens_before": c.tokens_before,
            "tokens_after": c.tokens_after, "view": c.view, "report": c.report,
            "summary_ids": c.summary_ids, "created_at": format_time(c.created_at),
            "abandoned": c.abandoned,
        })
    }));
    out.extend(dump.summaries.iter().map(|s| {
        json!({
            "type": "summary", "session_id": sid, "id": s.id, "compaction_id": s.compaction_id,
            "depth": s.depth, "covers": s.covers, "covers_summaries": s.covers_summaries,
            "from": format_time(s.from), "to": format_time(s.to), "text": s.text,
            "tokens": s.tokens, "created_at": format_time(s.created_at),
        })
    }));
    out.extend(dump.checkpoints.iter().map(|c| {
        json!({
            "type": "checkpoint", "session_id": sid, "name": c.name, "log_end": c.log_end,
            "compaction_id": c.compaction_id, "messages": c.messages,
            "created_at": format_time(c.created_at), "abandoned": c.abandoned,
        })
    }));
    out
}

/// Reads one typed line's fields; errors name the field.
struct Fields<'a>(&'a serde_json::Map<String, Value>);

impl Fields<'_> {
    fn get(&self, key: &str) -> Result<&Value, String> {
        self.0
            .get(key)
            .filter(|v| !v.is_null())
            .ok_or_else(|| format!("field `{key}` is missing"))
    }
    fn str(&self, key: &str) -> Result<String, String> {
        self.get(key)?
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("field `{key}` must be a string"))
    }
    fn opt_str(&self, key: &str) -> Result<Option<String>, String> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(_) => self.str(key).map(Some),
        }
    }
    fn u64(&self, key: &str) -> Result<u64, String> {
        self.get(key)?
            .as_u64()
            .ok_or_else(|| format!("field `{key}` must be a whole number"))
    }
    fn f64(&self, key: &str) -> Result<f64, String> {
        self.get(key)?
            .as_f64()
            .ok_or_else(|| format!("field `{key}` must be a number"))
    }
    fn bool(&self, key: &str) -> Result<bool, String> {
        Ok(self.0.get(key).and_then(Value::as_bool).unwrap_or(false))
    }
    fn time(&self, key: &str) -> Result<Timestamp, String> {
        parse_time(&self.str(key)?).map_err(|e| format!("field `{key}`: {e}"))
    }
    fn strings(&self, key: &str) -> Result<Vec<String>, String> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| format!("field `{key}` must be an array of strings")),
            Some(_) => Err(format!("field `{key}` must be an array of strings")),
        }
    }
    fn value(&self, key: &str) -> Value {
        self.0.get(key).cloned().unwrap_or(Value::Null)
    }
}

/// Assembles sessions from typed lines, in the order they come (a session's line first).
#[derive(Debug, Default)]
pub struct SessionReader {
    /// The sessions read so far.
    pub sessions: Vec<SessionDump>,
}

impl SessionReader {
    /// Reads one line of type session, message, compaction, summary or checkpoint; the error
    /// names the field.
    pub fn push(&mut self, kind: &str, map: &serde_json::Map<String, Value>) -> Result<(), Error> {
        self.read(kind, map).map_err(Error::Malformed)
    }

    fn read(&mut self, kind: &str, map: &serde_json::Map<String, Value>) -> Result<(), String> {
        let f = Fields(map);
        if kind == "session" {
            self.sessions.push(SessionDump {
                info: SessionInfo {
                    id: f.str("id")?,
                    name: f.opt_str("name")?,
                    model: f.str("model")?,
                    tokenizer: f.str("tokenizer")?,
                    token_factor: f.f64("token_factor")?,
                    window: f.u64("window")? as usize,
                    metadata: f.value("metadata"),
                    created_at: f.time("created_at")?,
                    updated_at: f.time("updated_at")?,
                    messages: f.u64("messages")? as usize,
                    next_seq: f.u64("next_seq")?,
                    epoch: f.u64("epoch")?,
                },
                messages: Vec::new(),
                compactions: Vec::new(),
                summaries: Vec::new(),
                checkpoints: Vec::new(),
            });
            return Ok(());
        }
        let session_id = f.str("session_id")?;
        let dump = self
            .sessions
            .iter_mut()
            .rev()
            .find(|d| d.info.id == session_id)
            .ok_or_else(|| {
                format!("session {session_id:?} has no `session` line before this one")
            })?;
        match kind {
            "message" => {
                let message = Message::from_stored(f.get("message")?.clone())
                    .map_err(|e| format!("field `message`: {e}"))?;
                dump.messages.push(LoggedMessage {
                    seq: f.u64("seq")?,
                    id: f.str("id")?,
                    created_at: f.time("created_at")?,
                    tokens: f.u64("tokens")? as usize,
                    message,
                    abandoned: f.bool("abandoned")?,
                });
            }
            "compaction" => dump.compactions.push(CompactionRecord {
                id: f.u64("id")? as i64,
                session_id,
                trigger: f.str("trigger")?,
                strategy: f.str("strategy")?,
                log_end: f.u64("log_end")?,
                tokens_before: f.u64("tokens_before")? as usize,
                tokens_after: f.u64("tokens_after")? as usize,
                view: f.get("view")?.clone(),
                report: f.value("report"),
                summary_ids: f.strings("summary_ids")?,
                created_at: f.time("created_at")?,
                abandoned: f.bool("abandoned")?,
            }),
            "summary" => dump.summaries.push(SummaryRecord {
                id: f.str("id")?,
                session_id,
                compaction_id: f.u64("compaction_id")? as i64,
                depth: f.u64("depth")? as u32,
                covers: f.strings("covers")?,
                covers_summaries: f.strings("covers_summaries")?,
                from: f.time("from")?,
                to: f.time("to")?,
                text: f.str("text")?,
                tokens: f.u64("tokens")? as usize,
                created_at: f.time("created_at")?,
            }),
            "checkpoint" => dump.checkpoints.push(Checkpoint {
                session_id,
                name: f.str("name")?,
                log_end: f.u64("log_end")?,
                compaction_id: match map.get("compaction_id") {
                    None | Some(Value::Null) => None,
                    Some(_) => Some(f.u64("compaction_id")? as i64),
                },
                messages: f.u64("messages")? as usize,
                created_at: f.time("created_at")?,
                abandoned: f.bool("abandoned")?,
            }),
            other => {
                return Err(format!(
                    "unknown line type {other:?}; expected memory, session, message, compaction, summary or checkpoint"
                ));
            }
        }
        Ok(())
    }
}
