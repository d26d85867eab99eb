//! The embedded store as the bindings hold it: memory, sessions and their tools over SQLite.

use crate::{
    Embeddings, Res, config, default_db_path, err, messages, parse_json, registry, to_json,
};
use engram::compact::summarize::Summarizer;
use engram::memory::{ConsolidationRecord, MemoryStore, SearchHit, now};
use engram::request::{
    AddMemory, ContextRequest, NewSessionRequest, SearchRequest, SessionCompactRequest,
    SleepRequest, from_json,
};
use engram::session::{Session, SessionStore, Trigger};
use engram::sleep::{SleepSettings, sleep_tick};
use engram::tools::CompactHistoryArgs;
use engram_store::SqliteStore;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;

/// The embedded store (SQLite, WAL, full-text search): memory tiers, sessions, their logs,
/// compactions and checkpoints.
pub struct Store {
    store: SqliteStore,
    path: String,
    embeddings: Option<Embeddings>,
}

impl Store {
    /// The session, recalling with the store's embeddings when it has them.
    fn open_session(&self, id: &str) -> Res<Session<'_>> {
        let session = Session::open_with(&self.store, id, registry()?, config()?.session_policy())
            .map_err(err)?;
        Ok(match &self.embeddings {
            Some(e) => {
                let mut options = session.options().clone();
                options.embedder = Some(Arc::clone(&e.model));
                session.with_options(options)
            }
            None => session,
        })
    }

    /// The session, summarising with `summarizer` when one is given.
    fn session_with(&self, id: &str, summarizer: Option<Arc<dyn Summarizer>>) -> Res<Session<'_>> {
        let session = self.open_session(id)?;
        Ok(match summarizer {
            Some(s) => {
                let mut options = session.options().clone();
                options.summarizer = Some(s);
                session.with_options(options)
            }
            None => session,
        })
    }
}

impl Store {
    /// Opens the database at `path` (where the settings say when `None`; `:memory:` for one
    /// that lives in memory). With `embeddings`, memory search, the session context for a query,
    /// compactions and `search_history` are hybrid; the vectors are kept in the store.
    pub fn new(path: Option<PathBuf>, embeddings: Option<Embeddings>) -> Res<Self> {
        let path = match path {
            Some(p) => p,
            None => default_db_path()?,
        };
        let store = if path.as_os_str() == ":memory:" {
            SqliteStore::open_in_memory()
        } else {
            SqliteStore::open(&path)
        }
        .map_err(err)?;
        Ok(Store {
            store,
            path: path.display().to_string(),
            embeddings,
        })
    }

    /// Where the database is.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Adds one entry; returns its id. `entry_json`: content, source, tier?, session_id?,
    /// importance?, metadata?, created_at? (RFC 3339), id?.
    pub fn add(&self, entry_json: &str) -> Res<String> {
        let value = parse_json(entry_json, "entry")?;
        let entry = AddMemory::new(config()?.memory.redact)
            .entry(&value)
            .map_err(err)?;
        let id = entry.id.clone().unwrap_or_default();
        self.store
            .insert(&[entry])
            .and_then(|_| self.store.sync_index())
            .map_err(err)?;
        Ok(id)
    }

    /// Adds many entries (a list of entry objects) in one transaction; returns
    /// `{"inserted", "skipped"}`. An invalid entry is reported by its index and nothing is stored.
    pub fn add_many(&self, entries_json: &str) -> Res<String> {
        let value = parse_json(entries_json, "entries")?;
        let entries = AddMemory::new(config()?.memory.redact)
            .list(&value)
            .map_err(err)?;
        let inserted = (|| {
            let mut it = entries.into_iter().map(Ok);
            let r = self.store.insert_stream(&mut it)?;
            self.store.sync_index()?;
            Ok::<_, engram::Error>(r)
        })()
        .map_err(err)?;
        to_json(&json!({"inserted": inserted.inserted, "skipped": inserted.skipped}))
    }

    /// Full-text search (BM25; fused with similarity of meaning when the store has embeddings).
    /// Options: limit, tiers, session_id, source, since, until.
    pub fn search(&self, text: &str, options_json: &str) -> Res<String> {
        let mut o = parse_json(options_json, "options")?;
        if let Value::Object(map) = &mut o {
            map.insert("text".into(), Value::String(text.to_owned()));
        }
        let query = from_json::<SearchRequest>(o)
            // Python and Node call the text `query`.
            .and_then(|r| r.into_query("query"))
            .map_err(err)?;
        // The store's model, else the built-in one, as every compaction recalls by default.
        let embedder = self
            .embeddings
            .as_ref()
            .map_or_else(engram::embed::built_in, |e| Arc::clone(&e.model));
        let hits = engram::memory::search::find(&self.store, &query, Some(embedder.as_ref()))
            .map_err(err)?;
        let results: Vec<Value> = hits.iter().map(SearchHit::to_json).collect();
        to_json(&results)
    }

    /// One sleep: consolidation of working memory and sleep-time compaction of sessions.
    /// Options: now (RFC 3339), ttl_hours, max_working.
    pub fn sleep(
        &self,
        options_json: &str,
        summarizer: Option<Arc<dyn Summarizer>>,
    ) -> Res<String> {
        let mut settings = SleepSettings::from_config(&config()?);
        let at = from_json::<SleepRequest>(parse_json(options_json, "options")?)
            .and_then(|r| r.apply(&mut settings))
            .map_err(err)?;
        settings.compact.summarizer = summarizer;
        let tick = (|| {
            let tick = sleep_tick(&self.store, at, &settings)?;
            self.store.sync_index()?;
            Ok::<_, engram::Error>(tick)
        })()
        .map_err(err)?;
        to_json(&tick.to_document())
    }

    /// The consolidation log, newest first: at most `limit` records
    /// ([`engram::memory::DEFAULT_LOG_LIMIT`] when `None`).
    pub fn log(&self, limit: Option<usize>) -> Res<String> {
        let limit = limit.unwrap_or(engram::memory::DEFAULT_LOG_LIMIT);
        let log = self.store.log(limit).map_err(err)?;
        let records: Vec<Value> = log.iter().map(ConsolidationRecord::to_json).collect();
        to_json(&records)
    }

    /// Entries per tier.
    pub fn stats(&self) -> Res<String> {
        to_json(&self.store.stats().map_err(err)?)
    }

    /// One entry by id, or None.
    pub fn get(&self, id: &str) -> Res<Option<String>> {
        let found = self.store.get(id).map_err(err)?;
        found.map(|e| to_json(&e.to_json())).transpose()
    }

    /// Forgets an entry, a session's entries or a source's (their search rows too; summaries'
    /// lineage is updated). Returns `{"entries", "summaries_updated"}`.
    pub fn forget(
        &self,
        id: Option<String>,
        session_id: Option<String>,
        source: Option<String>,
    ) -> Res<String> {
        let what = engram::request::ForgetRequest {
            id,
            session_id,
            source,
        }
        .into_forget()
        .map_err(err)?;
        let f = self.store.forget(&what).map_err(err)?;
        to_json(&json!({"entries": f.entries, "summaries_updated": f.summaries_updated}))
    }

    /// Memory entries as `memory export` writes them (every tier, lineage kept), optionally only
    /// a session's; `add_many` reads them back.
    pub fn export_memory(&self, session_id: Option<&str>) -> Res<String> {
        let lines = (|| {
            let mut out = Vec::new();
            engram::session::export::export_memory(&self.store, session_id, |line| {
                out.push(line);
                Ok(())
            })?;
            Ok::<_, engram::Error>(out)
        })()
        .map_err(err)?;
        to_json(&lines)
    }

    /// A session as `session export` writes it: its info, every message, compactions,
    /// summaries and checkpoints, as JSON lines' values.
    pub fn export_session(&self, id: &str) -> Res<String> {
        let dump = engram::session::export_session(&self.store, id).map_err(err)?;
        to_json(&engram::session::export::session_lines(&dump))
    }

    /// Creates a session; returns its info (with `warning` when the registry does not know the
    /// model). Options: model, window, id, name.
    pub fn session_new(&self, options_json: &str) -> Res<String> {
        let config = config()?;
        let default_model = config.session.model.as_deref();
        let request =
            from_json::<NewSessionRequest>(parse_json(options_json, "options")?).map_err(err)?;
        let warning = request.model_warning(registry()?, default_model);
        let new = request
            .into_new_session(registry()?, default_model, now())
            .map_err(err)?;
        let session = Session::create(&self.store, &new).map_err(err)?;
        to_json(&engram::request::created_session_document(
            &session, warning,
        ))
    }

    /// Every session, newest first.
    pub fn sessions(&self) -> Res<String> {
        to_json(&self.store.sessions().map_err(err)?)
    }

    /// A session's info, view, compactions, summaries and checkpoints.
    pub fn session_show(&self, id: &str) -> Res<String> {
        let session = self.open_session(id)?;
        let view = session.view().map_err(err)?;
        to_json(&json!({
            "session": session.info(),
            "view": {
                "tokens": view.tokens,
                "compaction_id": view.compaction_id,
                "messages": view.messages.iter().map(|m| m.to_value(true)).collect::<Vec<_>>(),
            },
            "compactions": self.store.compactions(id, false).map_err(err)?,
            "summaries": self.store.summaries(id).map_err(err)?,
            "checkpoints": self.store.checkpoints(id).map_err(err)?,
        }))
    }

    /// The full log (every message ever appended and still active), oldest first.
    pub fn session_log(&self, id: &str) -> Res<String> {
        let session = self.open_session(id)?;
        let log = session.log().map_err(err)?;
        to_json(&log.iter().map(|m| m.message.to_value()).collect::<Vec<_>>())
    }

    /// Appends messages; returns `{"ids", "view_tokens", "window", "compaction"?, "status"?, ...}`.
    pub fn session_append(
        &self,
        id: &str,
        messages_json: &str,
        idempotency_key: Option<&str>,
    ) -> Res<String> {
        let messages = messages(messages_json)?;
        if messages.is_empty() {
            return Err(err("no messages to append"));
        }
        let mut session = self.open_session(id)?;
        let appended = session
            .append_once(messages, idempotency_key)
            .map_err(err)?;
        to_json(&appended)
    }

    /// The context to send now: the view, or (with a budget or a query) the log compacted for
    /// them; with `memory`, relevant memory and learnings in a system section. `{"messages",
    /// "report"}`; with `format` `anthropic`, also `"request"`: `{"system", "messages"}` for the
    /// Messages API, whose messages `messages` are.
    pub fn session_context(
        &self,
        id: &str,
        budget: Option<usize>,
        query: Option<&str>,
        memory: bool,
        format: Option<&str>,
    ) -> Res<String> {
        let args = ContextRequest {
            budget,
            query: query.map(str::to_owned),
            memory: Some(memory),
            format: format.map(str::to_owned),
            ..ContextRequest::default()
        }
        .resolve(registry()?)
        .map_err(err)?;
        let session = self.open_session(id)?;
        let mut doc = args.document(&session, true).map_err(err)?;
        if args.format == engram::tools::SchemaFormat::OpenAi {
            return to_json(&doc);
        }
        // As `compact_json` answers for a request: its messages, the report, the request.
        let report = doc.remove("report");
        let messages = doc.get("messages").cloned();
        to_json(&json!({ "messages": messages, "report": report, "request": doc }))
    }

    /// Compacts the session now (recorded; the log keeps every message). Options: target,
    /// focus, strategy, summary_prompt.
    pub fn session_compact(
        &self,
        id: &str,
        options_json: &str,
        summarizer: Option<Arc<dyn Summarizer>>,
    ) -> Res<String> {
        let request: SessionCompactRequest =
            from_json(parse_json(options_json, "options")?).map_err(err)?;
        let session = self.open_session(id)?;
        let policy = config()?.session_policy();
        let manual = request
            .resolve(
                session.info().window,
                session.fixed_tokens().map_err(err)?,
                session.recent_tokens().map_err(err)?,
                &policy.trigger,
            )
            .map_err(err)?;
        let mut options = manual.options();
        options.summarizer = summarizer;
        options.embedder = session.options().embedder.clone();
        let mut session = session.with_options(options);
        let outcome = session
            .compact(Trigger::Manual, manual.target, manual.focus.as_deref())
            .map_err(err)?;
        to_json(&outcome.to_value())
    }

    /// The status update for the session now, as a system message.
    pub fn session_status(&self, id: &str) -> Res<String> {
        let status = self.open_session(id)?.status().map_err(err)?;
        to_json(&status.to_document())
    }

    /// The session's work ledger (`{"files", "commands", "failures", "plan", "messages",
    /// "text"}`): what the agent read, changed and ran, and the failures left open.
    pub fn session_ledger(&self, id: &str) -> Res<String> {
        let ledger = self.open_session(id)?.ledger().map_err(err)?;
        to_json(&ledger.to_document())
    }

    /// The session's timeline as sleep built it (`{"session_id", "built_to", "parts"}`); with
    /// a query, the parts that carry it, best first, at most `limit`.
    pub fn session_timeline(
        &self,
        id: &str,
        query: Option<&str>,
        limit: Option<usize>,
    ) -> Res<String> {
        let doc = self
            .open_session(id)?
            .timeline_document(query, limit)
            .map_err(err)?;
        to_json(&doc)
    }

    /// Runs the agent's `compact_history` tool call (its arguments as the model sent them, a
    /// JSON string or an object); returns the tool result text.
    pub fn session_compact_history(
        &self,
        id: &str,
        arguments_json: &str,
        summarizer: Option<Arc<dyn Summarizer>>,
    ) -> Res<String> {
        let args = CompactHistoryArgs::parse(&parse_json(arguments_json, "arguments")?)
            .map_err(|e| err(format!("compact_history arguments: {e}")))?;
        let mut session = self.session_with(id, summarizer)?;
        session.compact_history(&args).map_err(err)
    }

    /// Runs one of the agent's tools (its arguments as the model sent them, a JSON string or
    /// an object); returns `{"content", "is_error"}`, or null when `name` is not engram's.
    pub fn session_tool_call(
        &self,
        id: &str,
        name: &str,
        arguments_json: &str,
        summarizer: Option<Arc<dyn Summarizer>>,
    ) -> Res<String> {
        let arguments = parse_json(arguments_json, "arguments")?;
        let mut session = self.session_with(id, summarizer)?;
        let reply = session.handle_tool_call(name, &arguments);
        match reply {
            None => Ok("null".to_owned()),
            Some(reply) => {
                let reply = reply.map_err(err)?;
                to_json(&json!({"content": reply.text, "is_error": reply.is_error}))
            }
        }
    }

    /// Answers a provider's tool call (an OpenAI tool call or an Anthropic `tool_use` block)
    /// when it calls one of engram's tools: the tool message or `tool_result` block as JSON, or
    /// `null` when the tool is not engram's (the caller runs it).
    pub fn session_handle_tool_call(
        &self,
        id: &str,
        call_json: &str,
        summarizer: Option<Arc<dyn Summarizer>>,
    ) -> Res<String> {
        let call = engram::tools::ProviderCall::parse(&parse_json(call_json, "tool call")?)
            .map_err(err)?;
        let mut session = self.session_with(id, summarizer)?;
        match session.handle_tool_call(&call.name, &call.arguments) {
            None => Ok("null".to_owned()),
            Some(reply) => to_json(&call.answer(&reply.map_err(err)?)),
        }
    }

    /// Saves a named checkpoint; returns `{"name", "messages", ...}`.
    pub fn session_checkpoint(&self, id: &str, name: &str) -> Res<String> {
        to_json(&self.open_session(id)?.checkpoint(name).map_err(err)?)
    }

    /// Returns the session to a checkpoint (later messages are kept, set aside).
    pub fn session_restore(&self, id: &str, name: &str) -> Res<String> {
        to_json(&self.open_session(id)?.restore(name).map_err(err)?)
    }

    /// Deletes a session with its log, compactions, summaries, checkpoints and memory entries.
    pub fn session_delete(&self, id: &str) -> Res<String> {
        let d = self.store.delete_session(id).map_err(err)?;
        to_json(&json!({
            "messages": d.messages,
            "compactions": d.compactions,
            "summaries": d.summaries,
            "checkpoints": d.checkpoints,
            "memory_entries": d.memory_entries,
        }))
    }
}
