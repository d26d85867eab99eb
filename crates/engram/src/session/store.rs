//! What a session store keeps, and the [`SessionStore`] trait every backend implements.
//!
//! The store is deliberately simple: it keeps rows and enforces the rules that need a
//! transaction (ids unique among a session's active messages, compactions recorded together
//! with their summaries and journal entries, restores that abandon rows without deleting
//! them). What to compact and how lives in [`super::Session`].

use serde::Serialize;
use serde_json::Value;

use crate::Error;
use crate::error::Missing;
use crate::memory::NewEntry;
use crate::message::Message;
use crate::timestamp::Timestamp;

/// Which of a session's compactions to read ([`SessionStore::read_compactions`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compactions {
    /// All of them, oldest first; abandoned ones only when asked.
    All {
        /// Whether compactions a restore set aside are read too.
        include_abandoned: bool,
    },
    /// The `n` latest active ones, newest first.
    Newest(usize),
}

/// Which messages of a session's log to read ([`SessionStore::read_log`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogRange {
    /// The first sequence number read.
    pub from_seq: u64,
    /// Whether messages a restore set aside are read too.
    pub include_abandoned: bool,
    /// At most this many messages (`None`: all from `from_seq` on).
    pub limit: Option<usize>,
}

/// A session to create.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NewSession {
    /// Its id; the store makes one when absent.
    pub id: Option<String>,
    /// A human name.
    pub name: Option<String>,
    /// The model the session talks to (its registry id).
    pub model: String,
    /// The tokenizer that counts for that model ([`crate::Tokenizer::from_name`]).
    pub tokenizer: String,
    /// The tokenizer's correction factor.
    pub token_factor: f64,
    /// The context window, in tokens.
    pub window: usize,
    /// The caller's metadata, verbatim.
    pub metadata: Value,
    /// When it was created.
    pub created_at: Timestamp,
}

/// A stored session.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionInfo {
    /// Id.
    pub id: String,
    /// A human name.
    pub name: Option<String>,
    /// The model.
    pub model: String,
    /// The tokenizer.
    pub tokenizer: String,
    /// Its correction factor.
    pub token_factor: f64,
    /// The window, in tokens.
    pub window: usize,
    /// The caller's metadata.
    pub metadata: Value,
    /// When it was created.
    #[serde(serialize_with = "crate::timestamp::serialize_time")]
    pub created_at: Timestamp,
    /// When a message was last appended (or the session created).
    #[serde(serialize_with = "crate::timestamp::serialize_time")]
    pub updated_at: Timestamp,
    /// Messages in the active log.
    pub messages: usize,
    /// The sequence number the next message gets (counting abandoned ones).
    pub next_seq: u64,
    /// Incremented by every restore; a compaction computed before a restore is refused.
    pub epoch: u64,
}

/// A message to append, counted already.
#[derive(Debug, Clone, PartialEq)]
pub struct NewLogMessage {
    /// The message; its `id`, when set, must be unique among the session's active messages.
    /// Without one the store names it `m<seq>` (its sequence number), under the same lock that
    /// assigns the number, so that writers in several processes never pick the same id.
    pub message: Message,
    /// Its tokens, as the session's counter counts them.
    pub tokens: usize,
    /// When it was appended.
    pub created_at: Timestamp,
}

/// The key of an append that may be retried (REST's `Idempotency-Key`): an append whose key the
/// session keeps stores nothing and answers as the first did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendKey {
    /// The caller's key.
    pub key: String,
    /// A hash of the messages first appended with it: the same key with other messages is
    /// refused, not replayed.
    pub fingerprint: String,
    /// When it was first used.
    pub at: Timestamp,
}

/// How long a session keeps an append's key (24 hours).
pub const APPEND_KEY_TTL_MS: i64 = 24 * 3600 * 1000;

/// How many append keys a session keeps at most (the newest).
pub const APPEND_KEYS_KEPT: usize = 1_000;

/// What an append with a key did.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyedAppend {
    /// The messages were stored: each one's position and id.
    Stored(Vec<(u64, String)>),
    /// The key was used before: nothing was stored. What the first append stored, and the
    /// answer it gave when that was kept.
    Replayed {
        /// The first append's positions and ids.
        positions: Vec<(u64, String)>,
        /// Its answer, when the first append got as far as keeping it.
        answer: Option<Value>,
    },
}

/// What a retry with `key` gets from what a store kept of the key's first append: that
/// append's positions and answer (each as the JSON the store keeps), or, when the key came with
/// other messages (`fingerprint`), a conflict ([`key_reused`]).
pub fn replayed(
    key: &AppendKey,
    session_id: &str,
    fingerprint: &str,
    positions: &str,
    answer: Option<&str>,
) -> Result<KeyedAppend, Error> {
    if fingerprint != key.fingerprint {
        return Err(key_reused(&key.key, session_id));
    }
    Ok(KeyedAppend::Replayed {
        positions: serde_json::from_str(positions).map_err(|e| {
            Error::Backend(format!("an append key's positions do not read back: {e}"))
        })?,
        answer: answer.and_then(|a| serde_json::from_str(a).ok()),
    })
}

/// The error for a key used again with other messages.
pub fn key_reused(key: &str, session_id: &str) -> Error {
    Error::Conflict(format!(
        "Idempotency-Key {key:?} was used for another append to session {session_id:?}; nothing was appended (give new messages a new key)"
    ))
}

/// A message of a session's log./// A message of a session's log.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggedMessage {
    /// Its position in the log (abandoned messages keep theirs).
    pub seq: u64,
    /// Its id.
    pub id: String,
    /// When it was appended.
    pub created_at: Timestamp,
    /// Its tokens.
    pub tokens: usize,
    /// The message, verbatim (with `id`).
    pub message: Message,
    /// True when a restore abandoned it: kept, but no longer in the session's history.
    pub abandoned: bool,
}

impl AsRef<Message> for LoggedMessage {
    fn as_ref(&self) -> &Message {
        &self.message
    }
}

/// A summary written by a compaction, with its lineage (the summary header's fields).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SummaryRecord {
    /// Id.
    pub id: String,
    /// The session.
    pub session_id: String,
    /// The compaction that wrote it.
    pub compaction_id: i64,
    /// 1 for a summary of messages; one more than the deepest summary it supersedes.
    pub depth: u32,
    /// The ids of the log messages it stands for.
    pub covers: Vec<String>,
    /// The earlier summaries it supersedes (their messages are among `covers`).
    pub covers_summaries: Vec<String>,
    /// When the first covered message was appended.
    #[serde(serialize_with = "crate::timestamp::serialize_time")]
    pub from: Timestamp,
    /// When the last one was.
    #[serde(serialize_with = "crate::timestamp::serialize_time")]
    pub to: Timestamp,
    /// The summary's text.
    pub text: String,
    /// Its tokens.
    pub tokens: usize,
    /// When it was written.
    #[serde(serialize_with = "crate::timestamp::serialize_time")]
    pub created_at: Timestamp,
}

/// A compaction to record.
#[derive(Debug, Clone, PartialEq)]
pub struct NewCompaction {
    /// The session.
    pub session_id: String,
    /// The session's epoch when the compaction was computed; a restore since then refuses it.
    pub expected_epoch: u64,
    /// What started it: `threshold`, `manual`, `sleep`.
    pub trigger: String,
    /// The strategy that ran.
    pub strategy: String,
    /// The view covers the log up to (not including) this sequence number.
    pub log_end: u64,
    /// Tokens of the history before.
    pub tokens_before: usize,
    /// Tokens of the view.
    pub tokens_after: usize,
    /// The view, encoded by [`super::encode_view`].
    pub view: Value,
    /// The compaction's report.
    pub report: Value,
    /// The summaries it wrote; their `compaction_id` is assigned by the store.
    pub summaries: Vec<SummaryRecord>,
    /// Journal entries (`context_synthesis`), stored in the same transaction.
    pub journal: Vec<NewEntry>,
    /// When it ran.
    pub created_at: Timestamp,
}

/// A recorded compaction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompactionRecord {
    /// Assigned by the store, increasing.
    pub id: i64,
    /// The session.
    pub session_id: String,
    /// What started it.
    pub trigger: String,
    /// The strategy.
    pub strategy: String,
    /// The view covers the log up to this sequence number.
    pub log_end: u64,
    /// Tokens before.
    pub tokens_before: usize,
    /// Tokens of the view.
    pub tokens_after: usize,
    /// The encoded view.
    #[serde(skip)]
    pub view: Value,
    /// The report.
    pub report: Value,
    /// Ids of the summaries it wrote.
    pub summary_ids: Vec<String>,
    /// When it ran.
    #[serde(serialize_with = "crate::timestamp::serialize_time")]
    pub created_at: Timestamp,
    /// True when a restore abandoned it.
    pub abandoned: bool,
}

/// A named point a session can return to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Checkpoint {
    /// The session.
    pub session_id: String,
    /// The name, unique within the session.
    pub name: String,
    /// The log's end at the time (messages with a lower sequence number).
    pub log_end: u64,
    /// The latest compaction at the time.
    pub compaction_id: Option<i64>,
    /// Active messages at the time.
    pub messages: usize,
    /// When it was made.
    #[serde(serialize_with = "crate::timestamp::serialize_time")]
    pub created_at: Timestamp,
    /// True when restoring an earlier checkpoint abandoned it.
    pub abandoned: bool,
}

/// What a restore did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Restored {
    /// Messages set aside (kept in the log, marked abandoned).
    pub messages_abandoned: usize,
    /// Compactions set aside.
    pub compactions_abandoned: usize,
    /// Later checkpoints set aside.
    pub checkpoints_abandoned: usize,
}

/// What deleting a session removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct SessionDeleted {
    /// Log messages (active and abandoned).
    pub messages: usize,
    /// Compactions.
    pub compactions: usize,
    /// Summaries.
    pub summaries: usize,
    /// Checkpoints.
    pub checkpoints: usize,
    /// Memory entries with this session id (every tier).
    pub memory_entries: usize,
}

/// Everything a session owns, for export and import.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionDump {
    /// The session.
    pub info: SessionInfo,
    /// Its whole log, abandoned messages included.
    pub messages: Vec<LoggedMessage>,
    /// Its compactions, abandoned ones included.
    pub compactions: Vec<CompactionRecord>,
    /// The summaries of its active compactions.
    pub summaries: Vec<SummaryRecord>,
    /// Its checkpoints.
    pub checkpoints: Vec<Checkpoint>,
}

/// A session backend. Every method is atomic: it changes everything it says or nothing.
/// Errors use [`Error`]: `NotFound` for an unknown session or checkpoint, `Conflict` for
/// a duplicate id or name and for a compaction computed before a restore.
pub trait SessionStore: crate::embed::VectorStore + Send + Sync {
    /// Creates a session; an existing id is a conflict.
    fn create_session(&self, new: &NewSession) -> Result<SessionInfo, Error>;
    /// A session by id.
    fn session(&self, id: &str) -> Result<Option<SessionInfo>, Error>;
    /// Every session, most recently updated first.
    fn sessions(&self) -> Result<Vec<SessionInfo>, Error>;
    /// Appends messages; an id already active in the session is a conflict (nothing appended).
    /// Returns each message's position and id (not the messages: a long append would be held
    /// twice).
    fn append(
        &self,
        session_id: &str,
        messages: &[NewLogMessage],
    ) -> Result<Vec<(u64, String)>, Error>;
    /// Appends as [`SessionStore::append`] does, once per key: when the session keeps `key`
    /// (used within [`APPEND_KEY_TTL_MS`], among its newest [`APPEND_KEYS_KEPT`]), nothing is
    /// stored and what the first append stored is returned; the same key with other messages
    /// is a conflict ([`key_reused`]). The key is kept in the transaction that stores the
    /// messages, so a crash between the store and the answer leaves both or neither.
    fn append_keyed(
        &self,
        session_id: &str,
        messages: &[NewLogMessage],
        key: &AppendKey,
    ) -> Result<KeyedAppend, Error>;
    /// Keeps the answer an append with `key` gave, for its retries (nothing when the key is not
    /// kept).
    fn keep_append_answer(&self, session_id: &str, key: &str, answer: &Value) -> Result<(), Error>;
    /// The messages of the log that `range` names, in order: what every backend reads, and
    /// [`SessionStore::session_log`] and [`SessionStore::session_log_page`] ask for. A page
    /// (`range.limit`) should cost its size.
    fn read_log(&self, session_id: &str, range: LogRange) -> Result<Vec<LoggedMessage>, Error>;
    /// The log from `from_seq` on, in order; abandoned messages only when asked.
    fn session_log(
        &self,
        session_id: &str,
        from_seq: u64,
        include_abandoned: bool,
    ) -> Result<Vec<LoggedMessage>, Error> {
        let range = LogRange {
            from_seq,
            include_abandoned,
            limit: None,
        };
        self.read_log(session_id, range)
    }
    /// At most `limit` active messages from `from_seq` on, in order: a page of the log.
    fn session_log_page(
        &self,
        session_id: &str,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<LoggedMessage>, Error> {
        let range = LogRange {
            from_seq,
            include_abandoned: false,
            limit: Some(limit),
        };
        self.read_log(session_id, range)
    }
    /// The active messages with these ids, in log order (unknown ids are left out).
    fn messages_by_id(&self, session_id: &str, ids: &[String])
    -> Result<Vec<LoggedMessage>, Error>;
    /// Records a compaction with its summaries and journal entries.
    fn record_compaction(&self, compaction: &NewCompaction) -> Result<CompactionRecord, Error>;
    /// The session's compactions that `which` names: what every backend reads, and
    /// [`SessionStore::compactions`] and [`SessionStore::recent_compactions`] ask for.
    fn read_compactions(
        &self,
        session_id: &str,
        which: Compactions,
    ) -> Result<Vec<CompactionRecord>, Error>;
    /// The session's compactions, oldest first; abandoned ones only when asked.
    fn compactions(
        &self,
        session_id: &str,
        include_abandoned: bool,
    ) -> Result<Vec<CompactionRecord>, Error> {
        self.read_compactions(session_id, Compactions::All { include_abandoned })
    }
    /// The `n` latest active compactions, newest first.
    fn recent_compactions(
        &self,
        session_id: &str,
        n: usize,
    ) -> Result<Vec<CompactionRecord>, Error> {
        self.read_compactions(session_id, Compactions::Newest(n))
    }
    /// The latest active compaction.
    fn latest_compaction(&self, session_id: &str) -> Result<Option<CompactionRecord>, Error> {
        Ok(self.recent_compactions(session_id, 1)?.pop())
    }
    /// The tokens of the active messages from `from_seq` on (what was appended since a
    /// compaction), without reading the messages.
    fn tail_tokens(&self, session_id: &str, from_seq: u64) -> Result<usize, Error> {
        Ok(self
            .session_log(session_id, from_seq, false)?
            .iter()
            .map(|m| m.tokens)
            .sum())
    }
    /// The user messages in the active log (the turns status updates are scheduled by).
    fn user_turns(&self, session_id: &str) -> Result<usize, Error> {
        Ok(self
            .session_log(session_id, 0, false)?
            .iter()
            .filter(|m| m.message.role == crate::message::Role::User)
            .count())
    }
    /// The summaries of the session's active compactions, oldest first.
    fn summaries(&self, session_id: &str) -> Result<Vec<SummaryRecord>, Error>;
    /// Names the session's current state; an existing name is a conflict.
    fn checkpoint(&self, session_id: &str, name: &str, at: Timestamp) -> Result<Checkpoint, Error>;
    /// The session's checkpoints, oldest first.
    fn checkpoints(&self, session_id: &str) -> Result<Vec<Checkpoint>, Error>;
    /// Returns the session to a checkpoint: later messages, compactions and checkpoints are
    /// marked abandoned (never deleted) and the epoch moves on.
    fn restore(&self, session_id: &str, name: &str) -> Result<Restored, Error>;
    /// Stores an exported session as it was (a session with its id is a conflict; compaction
    /// ids are assigned anew and the summaries and checkpoints follow them).
    fn import_session(&self, dump: &SessionDump) -> Result<(), Error>;
    /// Deletes a session with everything it owns, including memory entries with its id and the
    /// vectors of its messages that no other session uses.
    fn delete_session(&self, session_id: &str) -> Result<SessionDeleted, Error>;
    /// Keeps these vectors of the session's texts as [`put_vectors`] does, and that the session
    /// uses them, in one transaction: deleting the session forgets those no other session
    /// uses. A missing session is [`Error::NotFound`].
    ///
    /// [`put_vectors`]: crate::embed::VectorStore::put_vectors
    fn put_session_vectors(
        &self,
        session_id: &str,
        model: &str,
        vectors: &[(crate::embed::TextHash, &[f32])],
    ) -> Result<(), Error>;
}

/// The message as logged at `seq`: its own id, or `m<seq>` when it has none.
pub fn logged_message(message: &Message, seq: u64) -> Message {
    let mut message = message.clone();
    if message.id.is_none() {
        message.id = Some(format!("m{seq}"));
    }
    message
}

/// The error for an unknown session.
pub fn no_session(id: &str) -> Error {
    Error::NotFound {
        missing: Missing::Session { id: id.to_owned() },
        message: format!("no session {id:?}"),
    }
}

/// The error for a message id already in the session.
pub fn duplicate(index: usize, id: &str, session_id: &str) -> Error {
    Error::Conflict(format!(
        "message {index}, field `id`: {id:?} is already in session {session_id:?}; nothing was appended"
    ))
}

/// The checks a compaction must pass before it is recorded.
pub fn check_compaction(info: &SessionInfo, c: &NewCompaction) -> Result<(), Error> {
    if info.epoch != c.expected_epoch {
        return Err(Error::Conflict(format!(
            "session {:?} was restored to a checkpoint while compacting; the compaction was not recorded (run it again)",
            info.id
        )));
    }
    if c.log_end > info.next_seq {
        return Err(Error::Conflict(format!(
            "a compaction of session {:?} covers messages the log does not have",
            info.id
        )));
    }
    Ok(())
}

/// The error for an unknown checkpoint.
pub fn no_checkpoint(session_id: &str, name: &str) -> Error {
    Error::NotFound {
        missing: Missing::Checkpoint {
            session: session_id.to_owned(),
            name: name.to_owned(),
        },
        message: format!("session {session_id:?} has no checkpoint named {name:?}"),
    }
}

/// The error for a checkpoint an earlier restore set aside.
pub fn abandoned_checkpoint(session_id: &str, name: &str) -> Error {
    Error::Conflict(format!(
        "checkpoint {name:?} of session {session_id:?} was made after a checkpoint the session was restored to; its messages were set aside"
    ))
}
