//! The native half of the `engram` Node package.
//!
//! A thin adapter over `engram-bind`, the JSON surface the Python package wraps too: structured
//! values cross as JSON text (the JavaScript half calls `JSON.stringify` and `JSON.parse`, V8's
//! fastest way across), errors carry the core's message (the JavaScript half raises them as
//! `EngramError`), and heavy calls (compaction, appends that may compact, sleep, imports, the
//! agent's tools) run on libuv's worker threads and return promises.

use std::path::PathBuf;
use std::sync::Arc;

use engram_bind as bind;
use napi::bindgen_prelude::{AsyncTask, Unknown};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Env, Error, Result, Status, Task};
use napi_derive::napi;

fn err(e: bind::Error) -> Error {
    Error::new(Status::GenericFailure, e.to_string())
}

/// Work for a libuv worker thread: a call into `engram-bind` that returns JSON text.
pub struct Job(Option<Box<dyn FnOnce() -> bind::Res<String> + Send>>);

impl Job {
    fn new(work: impl FnOnce() -> bind::Res<String> + Send + 'static) -> AsyncTask<Job> {
        AsyncTask::new(Job(Some(Box::new(work))))
    }
}

impl Task for Job {
    type Output = String;
    type JsValue = String;

    fn compute(&mut self) -> Result<String> {
        match self.0.take() {
            Some(work) => work().map_err(err),
            None => Err(Error::new(Status::GenericFailure, "the job ran twice")),
        }
    }

    fn resolve(&mut self, _env: Env, output: String) -> Result<String> {
        Ok(output)
    }
}

/// A token counter for one model (or one tokenizer), with the model's window from the registry.
#[napi]
pub struct Counter(bind::Counter);

#[napi]
impl Counter {
    /// A counter for `model` (the default model when omitted), or for a tokenizer by name.
    #[napi(constructor)]
    pub fn new(model: Option<String>, tokenizer: Option<String>) -> Result<Self> {
        bind::Counter::new(model.as_deref(), tokenizer.as_deref())
            .map(Counter)
            .map_err(err)
    }

    /// Tokens of one text.
    #[napi]
    pub fn count(&self, text: String) -> u32 {
        self.0.count(&text) as u32
    }

    /// Tokens of each text.
    #[napi]
    pub fn count_batch(&self, texts: Vec<String>) -> Vec<u32> {
        self.0
            .count_batch(texts)
            .into_iter()
            .map(|n| n as u32)
            .collect()
    }

    /// A conversation's count as JSON: total, per message, tools.
    #[napi]
    pub fn count_messages(
        &self,
        messages_json: String,
        tools_json: Option<String>,
    ) -> Result<String> {
        self.0
            .count_messages(&messages_json, tools_json.as_deref())
            .map_err(err)
    }

    /// The model name asked for.
    #[napi(getter)]
    pub fn model(&self) -> String {
        self.0.model().to_owned()
    }

    /// The model's context window.
    #[napi(getter)]
    pub fn window(&self) -> u32 {
        self.0.window() as u32
    }

    /// The model's output limit.
    #[napi(getter)]
    pub fn max_output_tokens(&self) -> u32 {
        self.0.max_output_tokens() as u32
    }

    /// The tokenizer's id (`o200k_base`, `chars/4`, ...).
    #[napi(getter)]
    pub fn tokenizer(&self) -> String {
        self.0.tokenizer()
    }

    /// True when counts are exact for the model (not an estimate).
    #[napi(getter)]
    pub fn exact(&self) -> bool {
        self.0.exact()
    }

    /// Why the model's numbers are a guess, when the registry does not know it.
    #[napi(getter)]
    pub fn warning(&self) -> Option<String> {
        self.0.warning()
    }
}

/// A JS callback given each progress line: called without an error argument, and weak (a
/// model that is still loaded does not hold the process open).
type Progress = ThreadsafeFunction<String, Unknown<'static>, String, Status, false, true>;

/// Each progress line handed to the JS callback, without waiting for it.
fn progress_lines(report: Progress) -> bind::Progress {
    Box::new(move |line| {
        report.call(line, ThreadsafeFunctionCallMode::NonBlocking);
    })
}

/// Loading a model on a libuv worker thread: reading its weights takes about half a second,
/// which the event loop need not wait for.
pub struct LoadEmbeddings {
    path: Option<String>,
    progress: Option<Progress>,
}

impl Task for LoadEmbeddings {
    type Output = bind::Embeddings;
    type JsValue = Embeddings;

    fn compute(&mut self) -> Result<bind::Embeddings> {
        bind::Embeddings::load(
            self.path.as_deref(),
            self.progress.take().map(progress_lines),
        )
        .map_err(err)
    }

    fn resolve(&mut self, _env: Env, output: bind::Embeddings) -> Result<Embeddings> {
        Ok(Embeddings(output))
    }
}

/// The `Embeddings` constructor's work on a worker thread: resolves to the loaded model, or
/// rejects with the error the constructor throws.
#[napi(
    ts_args_type = "path?: string | undefined | null, progress?: ((line: string) => void) | undefined | null",
    ts_return_type = "Promise<Embeddings>"
)]
pub fn load_embeddings(
    path: Option<String>,
    progress: Option<Progress>,
) -> AsyncTask<LoadEmbeddings> {
    AsyncTask::new(LoadEmbeddings { path, progress })
}

/// A sentence-embedding model (all-MiniLM-L6-v2, from a directory on disk) for hybrid recall,
/// loaded once and shared by the calls given it. See `engram_bind::Embeddings`.
#[napi]
pub struct Embeddings(bind::Embeddings);

#[napi]
impl Embeddings {
    /// Loads the model from `path` (or the directory `ENGRAM_EMBEDDING_MODEL` names); fails when
    /// it is not there or this build has no embeddings. `progress` is called on the JS thread
    /// with a line each time the model has embedded a few hundred more texts; it does not keep
    /// the process alive.
    #[napi(
        constructor,
        ts_args_type = "path?: string | undefined | null, progress?: ((line: string) => void) | undefined | null"
    )]
    pub fn new(path: Option<String>, progress: Option<Progress>) -> Result<Self> {
        bind::Embeddings::load(path.as_deref(), progress.map(progress_lines))
            .map(Embeddings)
            .map_err(err)
    }

    /// The model's name.
    #[napi(getter)]
    pub fn name(&self) -> String {
        self.0.name()
    }

    /// Why the embedding cache could not be opened, when it could not (the model still works).
    #[napi(getter)]
    pub fn warning(&self) -> Option<String> {
        self.0.warning().map(str::to_owned)
    }

    /// Each text's vector (unit length) as JSON, computed on a worker thread.
    #[napi(ts_return_type = "Promise<string>")]
    pub fn embed_json(&self, texts: Vec<String>) -> AsyncTask<Job> {
        let embeddings = self.0.clone();
        Job::new(move || embeddings.embed_json(texts))
    }
}

/// Compacts a conversation (`{"messages", "tools"?, ...}` or a list) to a budget; options as
/// JSON (snake_case keys). Resolves to `{"messages", "report"}` as JSON. With `embeddings`,
/// recall for the query is hybrid.
#[napi(ts_return_type = "Promise<string>")]
pub fn compact_json(
    conversation_json: String,
    options_json: String,
    embeddings: Option<&Embeddings>,
) -> AsyncTask<Job> {
    let embeddings = embeddings.map(|e| e.0.clone());
    Job::new(move || {
        bind::compact_json(&conversation_json, &options_json, None, embeddings.as_ref())
    })
}

/// Compacts an AI SDK prompt by the sessions' policy: resolves to `null` while it is under the
/// threshold, else `{"plan", "report"}` as JSON. With `embeddings`, recall for the query is
/// hybrid.
#[napi(ts_return_type = "Promise<string>")]
pub fn compact_prompt_json(
    prompt_json: String,
    options_json: String,
    embeddings: Option<&Embeddings>,
) -> AsyncTask<Job> {
    let embeddings = embeddings.map(|e| e.0.clone());
    Job::new(move || {
        bind::compact_prompt_json(&prompt_json, &options_json, None, embeddings.as_ref())
    })
}

/// The agent's tools' definitions (`openai` or `anthropic`), as JSON.
#[napi]
pub fn tool_schemas_json(format: String) -> Result<String> {
    bind::tool_schemas_json(&format).map_err(err)
}

/// The `compact_history` tool's definition (`openai` or `anthropic`), as JSON.
#[napi]
pub fn compact_history_tool_json(format: String) -> Result<String> {
    bind::compact_history_tool_json(&format).map_err(err)
}

/// The status update (a system message) as JSON.
#[napi]
pub fn status_message_json(
    total_tokens: f64,
    max_tokens: f64,
    cost_usd: f64,
    activities_json: Option<String>,
) -> Result<String> {
    bind::status_message_json(
        bind::count_arg(total_tokens, "total_tokens").map_err(err)?,
        bind::count_arg(max_tokens, "max_tokens").map_err(err)?,
        cost_usd,
        activities_json.as_deref(),
    )
    .map_err(err)
}

/// The registry's models as JSON.
#[napi]
pub fn models_json() -> Result<String> {
    bind::models_json().map_err(err)
}

/// The embedded store (SQLite, WAL, full-text search): memory tiers, sessions, their logs,
/// compactions and checkpoints. Each method is `engram_bind::Store`'s.
#[napi]
pub struct NativeStore(Arc<bind::Store>);

#[napi]
impl NativeStore {
    /// Opens the database at `path` (where the settings say when omitted; `:memory:` for one
    /// that lives in memory). With `embeddings`, memory search, a session's context for a query,
    /// its compactions and `search_history` are hybrid.
    #[napi(constructor)]
    pub fn new(path: Option<String>, embeddings: Option<&Embeddings>) -> Result<Self> {
        bind::Store::new(path.map(PathBuf::from), embeddings.map(|e| e.0.clone()))
            .map(|s| NativeStore(Arc::new(s)))
            .map_err(err)
    }

    /// Where the database is.
    #[napi(getter)]
    pub fn path(&self) -> String {
        self.0.path().to_owned()
    }

    fn job(
        &self,
        work: impl FnOnce(&bind::Store) -> bind::Res<String> + Send + 'static,
    ) -> AsyncTask<Job> {
        let store = Arc::clone(&self.0);
        Job::new(move || work(&store))
    }

    /// Adds one entry; returns its id.
    #[napi]
    pub fn add(&self, entry_json: String) -> Result<String> {
        self.0.add(&entry_json).map_err(err)
    }

    /// Adds entries in one transaction; resolves to `{"inserted", "skipped"}` as JSON.
    #[napi(ts_return_type = "Promise<string>")]
    pub fn add_many(&self, entries_json: String) -> AsyncTask<Job> {
        self.job(move |s| s.add_many(&entries_json))
    }

    /// Full-text search (hybrid with embeddings); resolves to the hits as JSON. Off the JS
    /// thread: a store's first hybrid search embeds every entry that has no vector yet.
    #[napi(ts_return_type = "Promise<string>")]
    pub fn search(&self, text: String, options_json: String) -> AsyncTask<Job> {
        self.job(move |s| s.search(&text, &options_json))
    }

    /// One sleep (consolidation and sleep-time compaction); its report as JSON.
    #[napi(ts_return_type = "Promise<string>")]
    pub fn sleep(&self, options_json: String) -> AsyncTask<Job> {
        self.job(move |s| s.sleep(&options_json, None))
    }

    /// The consolidation log, newest first, as JSON.
    #[napi]
    pub fn log(&self, limit: Option<f64>) -> Result<String> {
        let limit = bind::opt_count_arg(limit, "limit").map_err(err)?;
        self.0.log(limit).map_err(err)
    }

    /// Entries per tier, as JSON.
    #[napi]
    pub fn stats(&self) -> Result<String> {
        self.0.stats().map_err(err)
    }

    /// One entry as JSON, or null.
    #[napi]
    pub fn get(&self, id: String) -> Result<Option<String>> {
        self.0.get(&id).map_err(err)
    }

    /// Forgets an entry, a session's entries or a source's.
    #[napi]
    pub fn forget(
        &self,
        id: Option<String>,
        session_id: Option<String>,
        source: Option<String>,
    ) -> Result<String> {
        self.0.forget(id, session_id, source).map_err(err)
    }

    /// Memory entries as `memory export` writes them, as JSON.
    #[napi(ts_return_type = "Promise<string>")]
    pub fn export_memory(&self, session_id: Option<String>) -> AsyncTask<Job> {
        self.job(move |s| s.export_memory(session_id.as_deref()))
    }

    /// A session as `session export` writes it, as JSON.
    #[napi]
    pub fn export_session(&self, id: String) -> Result<String> {
        self.0.export_session(&id).map_err(err)
    }

    /// Creates a session; its info as JSON.
    #[napi]
    pub fn session_new(&self, options_json: String) -> Result<String> {
        self.0.session_new(&options_json).map_err(err)
    }

    /// Every session, newest first, as JSON.
    #[napi]
    pub fn sessions(&self) -> Result<String> {
        self.0.sessions().map_err(err)
    }

    /// A session's info, view, compactions, summaries and checkpoints, as JSON.
    #[napi]
    pub fn session_show(&self, id: String) -> Result<String> {
        self.0.session_show(&id).map_err(err)
    }

    /// A session's whole log, as JSON.
    #[napi]
    pub fn session_log(&self, id: String) -> Result<String> {
        self.0.session_log(&id).map_err(err)
    }

    /// Appends messages (compacting when the view passes the threshold).
    #[napi(ts_return_type = "Promise<string>")]
    pub fn session_append(
        &self,
        id: String,
        messages_json: String,
        idempotency_key: Option<String>,
    ) -> AsyncTask<Job> {
        self.job(move |s| s.session_append(&id, &messages_json, idempotency_key.as_deref()))
    }

    /// The context to send now.
    #[napi(ts_return_type = "Promise<string>")]
    pub fn session_context(
        &self,
        id: String,
        budget: Option<f64>,
        query: Option<String>,
        memory: Option<bool>,
        format: Option<String>,
    ) -> AsyncTask<Job> {
        self.job(move |s| {
            s.session_context(
                &id,
                bind::opt_count_arg(budget, "budget")?,
                query.as_deref(),
                memory.unwrap_or(false),
                format.as_deref(),
            )
        })
    }

    /// Compacts the session now (recorded).
    #[napi(ts_return_type = "Promise<string>")]
    pub fn session_compact(&self, id: String, options_json: String) -> AsyncTask<Job> {
        self.job(move |s| s.session_compact(&id, &options_json, None))
    }

    /// The status update now, as JSON.
    #[napi]
    pub fn session_status(&self, id: String) -> Result<String> {
        self.0.session_status(&id).map_err(err)
    }

    /// The session's work ledger (files, commands, failures, plan and its text), as JSON.
    #[napi]
    pub fn session_ledger(&self, id: String) -> Result<String> {
        self.0.session_ledger(&id).map_err(err)
    }

    /// The session's timeline as sleep built it, as JSON.
    #[napi]
    pub fn session_timeline(
        &self,
        id: String,
        query: Option<String>,
        limit: Option<u32>,
    ) -> Result<String> {
        self.0
            .session_timeline(&id, query.as_deref(), limit.map(|n| n as usize))
            .map_err(err)
    }

    /// Runs the agent's `compact_history` tool call; resolves to the tool result text.
    #[napi(ts_return_type = "Promise<string>")]
    pub fn session_compact_history(&self, id: String, arguments_json: String) -> AsyncTask<Job> {
        self.job(move |s| s.session_compact_history(&id, &arguments_json, None))
    }

    /// Runs one of the agent's tools; resolves to `{"content", "is_error"}` or `null` as JSON.
    #[napi(ts_return_type = "Promise<string>")]
    pub fn session_tool_call(
        &self,
        id: String,
        name: String,
        arguments_json: String,
    ) -> AsyncTask<Job> {
        self.job(move |s| s.session_tool_call(&id, &name, &arguments_json, None))
    }

    /// Answers a provider's tool call when it is one of engram's; JSON or `null`.
    #[napi(ts_return_type = "Promise<string>")]
    pub fn session_handle_tool_call(&self, id: String, call_json: String) -> AsyncTask<Job> {
        self.job(move |s| s.session_handle_tool_call(&id, &call_json, None))
    }

    /// Saves a named checkpoint.
    #[napi]
    pub fn session_checkpoint(&self, id: String, name: String) -> Result<String> {
        self.0.session_checkpoint(&id, &name).map_err(err)
    }

    /// Returns the session to a checkpoint.
    #[napi]
    pub fn session_restore(&self, id: String, name: String) -> Result<String> {
        self.0.session_restore(&id, &name).map_err(err)
    }

    /// Deletes a session with everything it owns.
    #[napi]
    pub fn session_delete(&self, id: String) -> Result<String> {
        self.0.session_delete(&id).map_err(err)
    }
}
