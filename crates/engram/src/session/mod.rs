//! Sessions: an append-only message log, the view sent to the model, and the compactions,
//! summaries and checkpoints between them.
//!
//! Appending never rewrites: every message stays in the log with a stable id. When the view
//! passes the threshold (0.8 of the window) the active log is compacted down to the target
//! (0.6) and the result is recorded as a compaction: the view (originals stored as references
//! to the log), the summaries it wrote with their lineage (which messages and earlier summaries
//! each covers, its depth and time range, for the `[Summary: depth d, n messages, covers
//! t1 to t2]` header, times to the minute) and a journal entry per summary (the
//! `context_synthesis`).
//! During sleep, sessions above 0.5 of their window are compacted down to 0.3, after their key
//! facts are extracted into working memory first; the two thresholds never
//! chase each other. Checkpoints name a state; restoring one marks what came after it as
//! abandoned, never deleting it.

mod compaction;
mod context;
pub mod export;
pub mod facts;
pub mod history;
pub mod store;
pub mod timeline;
mod view_codec;
pub mod window;

pub use compaction::MANUAL_SUMMARY_SHARE;
pub use view_codec::encode_view;

use std::collections::HashSet;

use serde::Serialize;
use serde_json::{Value, json};

pub use store::{
    Checkpoint, CompactionRecord, Compactions, LogRange, LoggedMessage, NewCompaction,
    NewLogMessage, NewSession, Restored, SessionDeleted, SessionDump, SessionInfo, SessionStore,
    SummaryRecord,
};

use crate::Error;
use crate::compact::policy::{self, Ran, TriggerPolicy};
use crate::compact::{CompactOptions, Kind, ViewMessage};
use crate::count::TokenCounter;
use crate::memory::MemoryStore;
use crate::message::{Message, Role};
use crate::registry::ModelRegistry;
use crate::timestamp::Timestamp;
use crate::tokenize::Tokenizer;

/// A backend that keeps both memory and sessions (one database, one transaction for a
/// compaction and its journal entries).
pub trait EngramStore:
    MemoryStore + SessionStore + crate::calibrate::CalibrationStore + timeline::TimelineStore
{
}
impl<
    T: MemoryStore
        + SessionStore
        + crate::calibrate::CalibrationStore
        + timeline::TimelineStore
        + ?Sized,
> EngramStore for T
{
}

/// When sessions compact.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SessionPolicy {
    /// Emergency compaction: at 0.8 of the window, down to the depth the
    /// bill asks for unless a target is configured ([`TriggerPolicy::target_tokens`]).
    pub trigger: TriggerPolicy,
    /// Sleep-time compaction (phase 1): sessions above this share of the window (0.5) ...
    pub sleep_threshold: f64,
    /// ... are compacted down to this share (0.3).
    pub sleep_target: f64,
    /// What a session writes to memory (its agent's `memory_add`, the key facts of a sleep,
    /// the journal of its compactions) has its secrets replaced by placeholders: the
    /// `[memory] redact` setting, on by default.
    pub redact_memory: bool,
}

impl Default for SessionPolicy {
    fn default() -> Self {
        SessionPolicy {
            trigger: TriggerPolicy::default(),
            sleep_threshold: 0.5,
            sleep_target: 0.3,
            redact_memory: true,
        }
    }
}

impl SessionPolicy {
    /// Sleep-time compaction as a trigger: above `sleep_threshold`, down to `sleep_target`.
    pub fn sleep_trigger(&self) -> TriggerPolicy {
        TriggerPolicy {
            threshold: self.sleep_threshold,
            target: Some(self.sleep_target),
            max_failed_compactions: 0,
        }
    }
}

/// What started a compaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Trigger {
    /// The view passed the threshold on an append.
    Threshold,
    /// Someone asked (the CLI, the agent's `compact_history` tool).
    Manual,
    /// Sleep-time compaction.
    Sleep,
}

impl Trigger {
    /// The name stored in the record.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Threshold => "threshold",
            Trigger::Manual => "manual",
            Trigger::Sleep => "sleep",
        }
    }
}

/// What an append did.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Appended {
    /// The appended messages' ids, in order.
    pub ids: Vec<String>,
    /// Their sequence numbers.
    pub seqs: Vec<u64>,
    /// The view's tokens after the append (and after a compaction, if one ran).
    pub view_tokens: usize,
    /// The window.
    pub window: usize,
    /// The compaction the append triggered, if any.
    pub compaction: Option<CompactionSummary>,
    /// True when the view is over the threshold but automatic compaction gave up (the
    /// circuit breaker is open); a manual compaction still works.
    pub breaker_open: bool,
    /// Why the view stays over the threshold after this append, when automatic compaction
    /// could not bring it down (what must be kept is larger than the window, say). The
    /// messages are stored all the same: the append succeeded, and the caller decides what to
    /// send.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over_threshold: Option<String>,
    /// The status update, when one is due (every few user turns, or the view crossed
    /// one of the schedule's shares of the window): a system message for the caller to insert
    /// before the next model call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Message>,
    /// True when this is the answer of an earlier append with the same idempotency key,
    /// returned again for a retry: nothing was stored.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
}

/// What a session's model calls have used and cost so far. Each assistant message in the log
/// is one call: with a `usage` object (OpenAI's `prompt_tokens`/`completion_tokens`, or
/// Anthropic's `input_tokens`/`output_tokens`, with cached tokens) its numbers are used;
/// without one the call is estimated to have read the view as it stood before the message (at
/// most the window) and written the message.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct SessionUsage {
    /// Model calls (assistant messages).
    pub calls: usize,
    /// Input tokens, cached ones included.
    pub input_tokens: usize,
    /// Input tokens read from the provider's cache.
    pub cached_tokens: usize,
    /// Output tokens.
    pub output_tokens: usize,
    /// The cost in USD at the model's prices.
    pub cost_usd: f64,
    /// Calls whose usage was estimated (no `usage` on the message).
    pub estimated_calls: usize,
}

/// A compaction in brief.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct CompactionSummary {
    /// The record's id.
    pub id: i64,
    /// What started it.
    pub trigger: String,
    /// Tokens before.
    pub tokens_before: usize,
    /// Tokens after.
    pub tokens_after: usize,
    /// Summaries written.
    pub summaries: usize,
    /// Key facts extracted into working memory first (sleep-time compaction).
    pub facts_extracted: usize,
}

impl CompactionSummary {
    fn of(record: &CompactionRecord, facts: usize) -> Self {
        CompactionSummary {
            id: record.id,
            trigger: record.trigger.clone(),
            tokens_before: record.tokens_before,
            tokens_after: record.tokens_after,
            summaries: record.summary_ids.len(),
            facts_extracted: facts,
        }
    }
}

/// What [`Session::compact`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Compaction {
    /// The view was compacted and the compaction recorded.
    Recorded(Box<CompactionRecord>),
    /// Nothing was recorded and the view is as it was: a manual compaction that could not make
    /// the view smaller, or could only do so by dropping messages with no summary of them.
    Unchanged {
        /// The view's tokens (unchanged).
        tokens: usize,
        /// Why, in words.
        reason: String,
    },
}

impl Compaction {
    /// The record, when the compaction was recorded.
    pub fn recorded(self) -> Option<CompactionRecord> {
        match self {
            Compaction::Recorded(record) => Some(*record),
            Compaction::Unchanged { .. } => None,
        }
    }

    /// The view's tokens before and after.
    pub fn tokens(&self) -> (usize, usize) {
        match self {
            Compaction::Recorded(r) => (r.tokens_before, r.tokens_after),
            Compaction::Unchanged { tokens, .. } => (*tokens, *tokens),
        }
    }

    /// As JSON, the same shape over every API: the record's fields with `"compacted": true`,
    /// or `{"compacted": false, "tokens_before", "tokens_after", "reason"}`.
    pub fn to_value(&self) -> Value {
        match self {
            Compaction::Recorded(record) => {
                let mut value = serde_json::to_value(record.as_ref()).unwrap_or(Value::Null);
                if let Value::Object(map) = &mut value {
                    map.insert("compacted".into(), Value::Bool(true));
                }
                value
            }
            Compaction::Unchanged { tokens, reason } => json!({
                "compacted": false,
                "tokens_before": tokens,
                "tokens_after": tokens,
                "reason": reason,
            }),
        }
    }

    /// One line for people: what was done, or why nothing was.
    pub fn describe(&self, session_id: &str) -> String {
        match self {
            Compaction::Recorded(record) => {
                let reduction = if record.tokens_before > 0 {
                    100.0 * (1.0 - record.tokens_after as f64 / record.tokens_before as f64)
                } else {
                    0.0
                };
                format!(
                    "compacted session {session_id}: {} -> {} tokens ({reduction:.0}% smaller), {}; the log keeps every message",
                    record.tokens_before,
                    record.tokens_after,
                    crate::plural(record.summary_ids.len(), "summary", "summaries")
                )
            }
            Compaction::Unchanged { tokens, reason } => {
                format!("session {session_id} left unchanged ({tokens} tokens): {reason}")
            }
        }
    }
}

/// The session's current view.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionView {
    /// The messages to send, with provenance.
    pub messages: Vec<ViewMessage>,
    /// Their tokens, exact for the session's tokenizer.
    pub tokens: usize,
    /// The compaction the view starts from, if any.
    pub compaction_id: Option<i64>,
}

/// A session's view of its store's vectors: it reads them all, and keeps new ones as the
/// session's, so that deleting the session forgets them.
pub(crate) struct SessionVectors<'s> {
    store: &'s dyn EngramStore,
    session_id: String,
}

impl crate::embed::VectorStore for SessionVectors<'_> {
    fn vectors(
        &self,
        model: &str,
        hashes: &[crate::embed::TextHash],
    ) -> Result<Vec<Option<Vec<f32>>>, Error> {
        self.store.vectors(model, hashes)
    }

    fn put_vectors(
        &self,
        model: &str,
        vectors: &[(crate::embed::TextHash, &[f32])],
    ) -> Result<(), Error> {
        self.store
            .put_session_vectors(&self.session_id, model, vectors)
    }
}

/// A session opened on a store.
pub struct Session<'s> {
    store: &'s dyn EngramStore,
    info: SessionInfo,
    counter: TokenCounter,
    policy: SessionPolicy,
    options: CompactOptions,
    price: crate::registry::Pricing,
    schedule: crate::tools::StatusSchedule,
    /// The ids of the messages the model has verbatim, when someone else decided them (the
    /// proxy, whose history lives in the request and whose view is the request it sent).
    in_view: Option<std::collections::HashSet<String>>,
}

impl std::fmt::Debug for Session<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("info", &self.info)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

/// The most characters an append's idempotency key may have.
pub const MAX_APPEND_KEY_CHARS: usize = 255;

/// Checks an append's idempotency key: 1 to [`MAX_APPEND_KEY_CHARS`] characters, no control
/// characters.
fn check_append_key(key: &str) -> Result<(), Error> {
    let chars = key.chars().count();
    if chars == 0 || chars > MAX_APPEND_KEY_CHARS || key.chars().any(char::is_control) {
        return Err(Error::Rejected(format!(
            "Idempotency-Key: an idempotency key is 1 to {MAX_APPEND_KEY_CHARS} characters with no control characters (a UUID, say); this one has {chars}"
        )));
    }
    Ok(())
}

/// A hash of what an append stores, so that a key used again with other messages is noticed.
pub(crate) fn fingerprint(rows: &[NewLogMessage]) -> String {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    for row in rows {
        hasher.update(row.message.to_value().to_string().as_bytes());
        hasher.update(b"\n");
    }
    format!("{:032x}", hasher.digest128())
}

/// The most characters a session id may have.
pub const MAX_SESSION_ID_CHARS: usize = 128;

/// Checks a new session's id: 1 to [`MAX_SESSION_ID_CHARS`] characters, none of them a space,
/// a line break or another control character (an id goes into URLs, file names and log lines).
/// The error states the rule.
pub fn check_session_id(id: &str) -> Result<(), Error> {
    use crate::Error::OutOfRange;
    let rule = format!(
        "a session id is 1 to {MAX_SESSION_ID_CHARS} characters, with no spaces, line breaks or other control characters"
    );
    let chars = id.chars().count();
    if id.trim().is_empty() {
        return Err(OutOfRange("is empty".into()));
    }
    if chars > MAX_SESSION_ID_CHARS {
        return Err(OutOfRange(format!("has {chars} characters; {rule}")));
    }
    if let Some(c) = id.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(OutOfRange(format!("holds {c:?}; {rule}")));
    }
    Ok(())
}

/// A new session for `model` as the registry knows it (window and tokenizer); `window`
/// overrides the registry's.
pub fn new_session(
    registry: &ModelRegistry,
    model: &str,
    window: Option<usize>,
    now: Timestamp,
) -> NewSession {
    let resolved = registry.resolve(model);
    NewSession {
        id: None,
        name: None,
        model: resolved.spec.id.clone(),
        tokenizer: resolved.spec.tokenizer.clone(),
        token_factor: resolved.spec.token_factor,
        window: window.unwrap_or(resolved.spec.context_window),
        metadata: Value::Null,
        created_at: now,
    }
}

impl<'s> Session<'s> {
    /// Creates a session.
    pub fn create(store: &'s dyn EngramStore, new: &NewSession) -> Result<Self, Error> {
        if let Some(id) = &new.id {
            check_session_id(id).map_err(|e| Error::Rejected(format!("field `id`: {e}")))?;
        }
        if new.window == 0 {
            return Err(Error::Rejected(
                "the window must be at least 1 token".into(),
            ));
        }
        Tokenizer::from_name(&new.tokenizer)
            .map_err(|e| Error::Rejected(format!("tokenizer: {e}")))?;
        let info = store.create_session(new)?;
        Self::with_info(store, info)
    }

    /// Opens an existing session.
    pub fn open(store: &'s dyn EngramStore, id: &str) -> Result<Self, Error> {
        let info = store.session(id)?.ok_or_else(|| store::no_session(id))?;
        Self::with_info(store, info)
    }

    /// Opens a session as the fronts run it: under `policy`, with its model's prices from
    /// `registry` (for the cost in status updates).
    pub fn open_with(
        store: &'s dyn EngramStore,
        id: &str,
        registry: &ModelRegistry,
        policy: SessionPolicy,
    ) -> Result<Self, Error> {
        let session = Session::open(store, id)?;
        let price = registry.resolve(&session.info.model).spec.price;
        Ok(session.with_policy(policy).with_price(price))
    }

    fn with_info(store: &'s dyn EngramStore, info: SessionInfo) -> Result<Self, Error> {
        let tokenizer = Tokenizer::from_name(&info.tokenizer)
            .map_err(|e| Error::Rejected(format!("session {}: tokenizer: {e}", info.id)))?
            .scaled(info.token_factor);
        let window = info.window;
        Ok(Session {
            store,
            info,
            counter: TokenCounter::new(tokenizer),
            policy: SessionPolicy::default(),
            options: CompactOptions::new(window),
            price: crate::registry::Pricing::default(),
            schedule: crate::tools::StatusSchedule::default(),
            in_view: None,
        })
    }

    /// `text` as this session writes it to memory: without its secrets unless the policy says
    /// otherwise.
    fn for_memory(&self, text: String) -> String {
        if self.policy.redact_memory {
            crate::redact::redact(&text).0
        } else {
            text
        }
    }

    /// The same session, whose model has verbatim only the messages of these ids (what
    /// `search_history` says of each hit's `in_view`): for a history held elsewhere, whose view
    /// the store does not know.
    #[must_use]
    pub fn seeing(mut self, ids: std::collections::HashSet<String>) -> Self {
        self.in_view = Some(ids);
        self
    }

    /// The same session with another policy.
    #[must_use]
    pub fn with_policy(mut self, policy: SessionPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Where hybrid recall keeps this session's vectors: its store, so that a message is
    /// embedded once however many compactions and searches read it, and forgotten with the
    /// session.
    pub(crate) fn vectors(&self) -> SessionVectors<'s> {
        SessionVectors {
            store: self.store,
            session_id: self.info.id.clone(),
        }
    }

    /// The compaction options this session compacts with (the budget is set per compaction).
    pub fn options(&self) -> &CompactOptions {
        &self.options
    }

    /// The same session with other compaction options (strategy, summarizer, prompt); the
    /// budget is set per compaction.
    #[must_use]
    pub fn with_options(mut self, options: CompactOptions) -> Self {
        self.options = options;
        self
    }

    /// The same session compacting with `models`' summarizer and embedder (the configured
    /// ones, [`CompactOptions::take_models`]), every other option the default for its window:
    /// how every front opens a session it serves.
    #[must_use]
    pub fn with_models(self, models: &CompactOptions) -> Self {
        let mut options = CompactOptions::new(self.info.window);
        options.take_models(models);
        self.with_options(options)
    }

    /// The same session with the model's prices, for the cost in status updates (the
    /// registry's `price` for the session's model; without it costs are zero).
    #[must_use]
    pub fn with_price(mut self, price: crate::registry::Pricing) -> Self {
        self.price = price;
        self
    }

    /// The same session with another schedule for status updates (default: every 5 user
    /// turns and when the view crosses 50, 70, 80 or 90% of the window).
    #[must_use]
    pub fn with_status_schedule(mut self, schedule: crate::tools::StatusSchedule) -> Self {
        self.schedule = schedule;
        self
    }

    /// The session's policy: its trigger, target and what its memory keeps.
    pub fn policy(&self) -> &SessionPolicy {
        &self.policy
    }

    /// The store the session reads and writes.
    pub(crate) fn store(&self) -> &'s dyn EngramStore {
        self.store
    }

    /// The session as stored.
    pub fn info(&self) -> &SessionInfo {
        &self.info
    }

    /// The counter for the session's model.
    pub fn counter(&self) -> &TokenCounter {
        &self.counter
    }

    fn refresh(&mut self) -> Result<(), Error> {
        self.info = self
            .store
            .session(&self.info.id)?
            .ok_or_else(|| store::no_session(&self.info.id))?;
        Ok(())
    }

    /// Appends messages (ids are kept; the store names a message without one `m<seq>`), then
    /// compacts when the view passes the threshold.
    pub fn append(&mut self, messages: Vec<Message>) -> Result<Appended, Error> {
        self.append_once(messages, None)
    }

    /// Appends as [`Session::append`] does, once per `key` (REST's `Idempotency-Key`): a
    /// retry with a key the session keeps (the same messages, within a day, among its newest
    /// thousand keys) stores nothing and returns the first append's answer, marked `replayed`;
    /// the same key with other messages is refused. The key is stored with the messages, so a
    /// client that lost the answer (the server was killed between the two) can retry safely.
    pub fn append_once(
        &mut self,
        messages: Vec<Message>,
        key: Option<&str>,
    ) -> Result<Appended, Error> {
        if let Some(key) = key {
            check_append_key(key)?;
        }
        self.refresh()?;
        let now = crate::timestamp::now();
        let mut seen = HashSet::new();
        let mut rows = Vec::with_capacity(messages.len());
        for (i, message) in messages.into_iter().enumerate() {
            match message.id.as_deref() {
                Some(id) if id.trim().is_empty() => {
                    return Err(Error::Rejected(format!("message {i}, field `id`: empty")));
                }
                Some(id) if !seen.insert(id.to_owned()) => {
                    return Err(Error::Rejected(format!(
                        "message {i}, field `id`: {id:?} appears twice in this append"
                    )));
                }
                _ => {}
            }
            let tokens = self.counter.count_message(&message).total();
            rows.push(NewLogMessage {
                message,
                tokens,
                created_at: now,
            });
        }
        let user_turns = rows.iter().filter(|r| r.message.role == Role::User).count();
        let added: usize = rows.iter().map(|r| r.tokens).sum();
        let logged = match key {
            None => self.store.append(&self.info.id, &rows)?,
            Some(key) => {
                let key = store::AppendKey {
                    key: key.to_owned(),
                    fingerprint: fingerprint(&rows),
                    at: now,
                };
                match self.store.append_keyed(&self.info.id, &rows, &key)? {
                    store::KeyedAppend::Stored(logged) => logged,
                    store::KeyedAppend::Replayed { positions, answer } => {
                        return self.replayed(positions, answer);
                    }
                }
            }
        };
        // Only the ids and positions are reported: let the messages go before a compaction
        // reads the log again (a long append would otherwise be held three times over).
        drop(rows);
        let (seqs, ids): (Vec<u64>, Vec<String>) = logged.into_iter().unzip();
        self.refresh()?;
        let mut view_tokens = self.view_tokens()?;
        // The appended messages join the view's tail: before them it had `added` fewer tokens.
        let turns = if user_turns > 0 {
            self.store.user_turns(&self.info.id)?
        } else {
            0
        };
        let status_due = self.schedule.due_between(
            turns,
            user_turns,
            view_tokens.saturating_sub(added),
            view_tokens,
            self.info.window,
        );
        let mut compaction = None;
        let mut breaker_open = false;
        let mut over_threshold = None;
        let trigger = self.policy.trigger;
        let window = self.info.window;
        let mut automatic = compaction::Automatic {
            session: self,
            trigger: Trigger::Threshold,
        };
        match trigger.run(view_tokens, window, &mut automatic)? {
            Ran::Sent => {}
            Ran::BreakerOpen => breaker_open = true,
            // The messages are stored: a compaction that cannot be done is reported, not
            // returned as the append's failure (a client retrying it would store them twice).
            Ran::Compacted(result) => match result {
                Ok((Compaction::Recorded(record), _)) => {
                    view_tokens = record.tokens_after;
                    compaction = Some(CompactionSummary::of(&record, 0));
                }
                Ok((Compaction::Unchanged { reason, .. }, _)) => over_threshold = Some(reason),
                Err(e @ (Error::CannotFit { .. } | Error::NoMessages)) => {
                    over_threshold = Some(format!("automatic compaction failed: {e}"));
                }
                Err(e) => return Err(e),
            },
        }
        let status = if status_due {
            Some(self.status()?.to_message())
        } else {
            None
        };
        let appended = Appended {
            ids,
            seqs,
            view_tokens,
            window: self.info.window,
            compaction,
            breaker_open,
            over_threshold,
            status,
            replayed: false,
        };
        if let Some(key) = key {
            // Kept for a retry whose first answer was lost. When this fails the messages are
            // stored all the same, and a retry rebuilds the answer from their positions.
            if let Ok(answer) = serde_json::to_value(&appended) {
                let _ = self.store.keep_append_answer(&self.info.id, key, &answer);
            }
        }
        Ok(appended)
    }

    /// How many of the latest compactions, up to the breaker's count, were threshold
    /// compactions that left the view above the threshold (the policy's breaker opens at
    /// `max_failed_compactions` of them).
    fn failed_in_a_row(&self) -> Result<usize, Error> {
        let trigger = &self.policy.trigger;
        let n = trigger.max_failed_compactions as usize;
        if n == 0 {
            return Ok(0);
        }
        Ok(self
            .store
            .recent_compactions(&self.info.id, n)?
            .iter()
            .take_while(|r| {
                r.trigger == "threshold" && trigger.is_over(r.tokens_after, self.info.window)
            })
            .count())
    }

    /// The tokens of what every compaction keeps in front: the leading instructions and the
    /// task statement ([`policy::fixed_head`]), read from the start of the log.
    pub fn fixed_tokens(&self) -> Result<usize, Error> {
        let mut page = 8;
        loop {
            let head = self.store.session_log_page(&self.info.id, 0, page)?;
            let messages: Vec<Message> = head.iter().map(|m| m.message.clone()).collect();
            let lead = crate::message::leading_instructions(&messages);
            // The instructions and the task, and a message after them, must all be read.
            if lead + 2 <= messages.len() || messages.len() < page {
                return Ok(policy::fixed_head(&messages, &self.counter, self.info.window).tokens);
            }
            page *= 4;
        }
    }

    /// The tokens of the view's last steps ([`policy::recent_tokens`]): what a compaction keeps
    /// besides the fixed head is bounded by them.
    pub fn recent_tokens(&self) -> Result<usize, Error> {
        let view = self.view()?;
        Ok(policy::recent_tokens(
            view.messages.iter().map(|v| &v.message),
            &self.counter,
        ))
    }

    /// The work ledger of the session's whole log: the files the agent read and changed, the
    /// commands it ran and the failures still open, its plan; each step is a message's place
    /// in the log (what `read_history` takes).
    pub fn ledger(&self) -> Result<crate::ledger::Ledger, Error> {
        let mut ledger = crate::ledger::Ledger::default();
        for m in self.store.session_log(&self.info.id, 0, false)? {
            ledger.add_message(&m.message, m.seq as usize);
        }
        Ok(ledger)
    }

    /// The view's tokens: the latest compaction's view plus what was appended since.
    pub fn view_tokens(&self) -> Result<usize, Error> {
        let latest = self.store.latest_compaction(&self.info.id)?;
        let (base, from) = match &latest {
            Some(c) => (c.tokens_after, c.log_end),
            None => (self.counter.accounting().per_conversation, 0),
        };
        Ok(base + self.store.tail_tokens(&self.info.id, from)?)
    }

    /// The current view: the latest compaction's view, then every message appended since.
    pub fn view(&self) -> Result<SessionView, Error> {
        let latest = self.store.latest_compaction(&self.info.id)?;
        let (mut messages, tokens, from, id) = match &latest {
            Some(c) => (
                self.decode_view(&c.view)?,
                c.tokens_after,
                c.log_end,
                Some(c.id),
            ),
            None => (
                Vec::new(),
                self.counter.accounting().per_conversation,
                0,
                None,
            ),
        };
        let mut tokens = tokens;
        for m in self.store.session_log(&self.info.id, from, false)? {
            tokens += m.tokens;
            messages.push(ViewMessage {
                source_ids: vec![m.id.clone()],
                message: m.message,
                kind: Kind::Original,
            });
        }
        Ok(SessionView {
            messages,
            tokens,
            compaction_id: id,
        })
    }

    /// The active log, in order.
    pub fn log(&self) -> Result<Vec<LoggedMessage>, Error> {
        self.store.session_log(&self.info.id, 0, false)
    }

    /// The status update for this session now: the view's tokens of the window, and
    /// the cost so far (see [`Session::usage`]).
    pub fn status(&self) -> Result<crate::tools::Status, Error> {
        Ok(crate::tools::Status {
            total_tokens: self.view_tokens()?,
            max_tokens: self.info.window,
            cost_usd: self.usage()?.cost_usd,
            activities: Vec::new(),
        })
    }

    /// What the session's model calls have used and cost so far (see [`SessionUsage`]).
    pub fn usage(&self) -> Result<SessionUsage, Error> {
        let log = self.log()?;
        let mut compactions = self.store.compactions(&self.info.id, false)?;
        compactions.sort_by_key(|c| (c.log_end, c.id));
        let mut compactions = compactions.into_iter().peekable();
        let mut usage = SessionUsage::default();
        // The view's size before each message: what the last compaction before it left, plus
        // the messages since.
        let mut view: i64 = 0;
        for m in &log {
            while let Some(c) = compactions.next_if(|c| c.log_end <= m.seq) {
                view = c.tokens_after as i64;
            }
            if m.message.role == Role::Assistant {
                let call = m
                    .message
                    .extra()
                    .get("usage")
                    .and_then(crate::usage::CallUsage::detect)
                    .unwrap_or_else(|| {
                        usage.estimated_calls += 1;
                        crate::usage::CallUsage {
                            // A call reads at most the window (a history appended in
                            // bulk is over it until the compaction that follows).
                            input_tokens: (view.max(0) as usize).min(self.info.window),
                            cached_tokens: 0,
                            cache_write_tokens: 0,
                            output_tokens: m.tokens,
                        }
                    });
                usage.calls += 1;
                usage.input_tokens += call.input_tokens;
                usage.cached_tokens += call.cached_tokens;
                usage.output_tokens += call.output_tokens;
                usage.cost_usd += call.cost(&self.price);
            }
            view += m.tokens as i64;
        }
        Ok(usage)
    }

    /// The answer to a retried append: the first one's when it was kept, else one rebuilt from
    /// what the first stored (the view as it is now, no compaction: it already ran or not).
    fn replayed(
        &mut self,
        positions: Vec<(u64, String)>,
        answer: Option<Value>,
    ) -> Result<Appended, Error> {
        if let Some(mut first) = answer.and_then(|a| serde_json::from_value::<Appended>(a).ok()) {
            first.replayed = true;
            return Ok(first);
        }
        self.refresh()?;
        let (seqs, ids) = positions.into_iter().unzip();
        Ok(Appended {
            ids,
            seqs,
            view_tokens: self.view_tokens()?,
            window: self.info.window,
            compaction: None,
            breaker_open: false,
            over_threshold: None,
            status: None,
            replayed: true,
        })
    }

    /// Names the current state.
    pub fn checkpoint(&self, name: &str) -> Result<Checkpoint, Error> {
        if name.trim().is_empty() {
            return Err(Error::Rejected("a checkpoint needs a name".into()));
        }
        self.store
            .checkpoint(&self.info.id, name, crate::timestamp::now())
    }

    /// Returns to a checkpoint.
    pub fn restore(&mut self, name: &str) -> Result<Restored, Error> {
        let restored = self.store.restore(&self.info.id, name)?;
        self.refresh()?;
        Ok(restored)
    }
}

/// Everything `session_id` owns, for export.
pub fn export_session(store: &dyn SessionStore, session_id: &str) -> Result<SessionDump, Error> {
    let info = store
        .session(session_id)?
        .ok_or_else(|| store::no_session(session_id))?;
    Ok(SessionDump {
        messages: store.session_log(session_id, 0, true)?,
        compactions: store.compactions(session_id, true)?,
        summaries: store.summaries(session_id)?,
        checkpoints: store.checkpoints(session_id)?,
        info,
    })
}

/// What sleep-time compaction did across sessions.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct SessionsSlept {
    /// Sessions looked at.
    pub sessions: usize,
    /// Sessions compacted, with what was done.
    pub compacted: Vec<(String, CompactionSummary)>,
    /// Sessions that could not be compacted, with why (the others went on).
    pub failed: Vec<(String, String)>,
    /// Timeline lines written (the sessions whose history grew since their timeline).
    pub timeline_lines: usize,
}

/// Sleep-time compaction of every session above the sleep threshold.
pub fn sleep_sessions(
    store: &dyn EngramStore,
    policy: &SessionPolicy,
    options: &CompactOptions,
) -> Result<SessionsSlept, Error> {
    let mut out = SessionsSlept::default();
    for info in store.sessions()? {
        out.sessions += 1;
        let result = Session::with_info(store, info.clone()).and_then(|s| {
            let mut s = s.with_policy(*policy).with_options(options.clone());
            let compacted = s.sleep_compact()?;
            let built = s.update_timeline()?;
            Ok((compacted, built))
        });
        match result {
            Ok((compacted, built)) => {
                out.timeline_lines += built.written;
                if let Some(done) = compacted {
                    out.compacted.push((info.id, done));
                }
            }
            Err(e @ Error::Backend(_)) => return Err(e),
            Err(e) => out.failed.push((info.id, e.to_string())),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
