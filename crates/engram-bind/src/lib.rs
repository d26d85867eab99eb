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

use engram::assembly::{ContextBuilder, TokenBudget};
use engram::compact::compact;
use engram::compact::summarize::{
    DEFAULT_PROMPT, DeterministicSummarizer, Summarizer, SummaryRequest,
};
use engram::config::Config;
use engram::discovery::Discovery;
use engram::request::{
    CompactRequest, Compaction, PartsRequest, budget_over, compacted_request, compaction_document,
    from_json,
};
use engram::session::LoggedMessage;
use engram::tools::Status;
use engram::{Message, ModelRegistry, TokenCounter};
use serde_json::{Value, json};

mod counter;
mod embedded_store;
mod embeddings;
mod summarizer;

pub use counter::Counter;
pub use embedded_store::Store;
pub use embeddings::{Embeddings, Progress};
pub use summarizer::LlmSummarizer;

/// An error as the bindings raise it: the core's, or one of an argument as the binding reads
/// it. The message says what and where (message index, field, line).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The core refused or failed (the input, a value, the store, a model), as it says.
    Engram(engram::Error),
    /// An argument the binding reads itself (JSON text, a count, a list) is wrong, or something
    /// the binding loads (a model's files) is missing.
    Argument(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Engram(e) => e.fmt(f),
            Error::Argument(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Engram(e) => Some(e),
            Error::Argument(_) => None,
        }
    }
}

impl From<engram::Error> for Error {
    fn from(e: engram::Error) -> Self {
        Error::Engram(e)
    }
}

impl From<engram::InputError> for Error {
    fn from(e: engram::InputError) -> Self {
        Error::Engram(e.into())
    }
}

impl From<String> for Error {
    fn from(message: String) -> Self {
        Error::Argument(message)
    }
}

impl From<&str> for Error {
    fn from(message: &str) -> Self {
        Error::Argument(message.to_owned())
    }
}

/// A result of this crate.
pub type Res<T> = Result<T, Error>;

fn err(e: impl Into<Error>) -> Error {
    e.into()
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

fn parse_json(text: &str, what: &str) -> Res<Value> {
    serde_json::from_str(text).map_err(|e| err(format!("{what}: invalid JSON: {e}")))
}

fn to_json(value: &impl serde::Serialize) -> Res<String> {
    serde_json::to_string(value).map_err(|e| err(e.to_string()))
}

/// The messages of `{"messages": [...]}` or a bare array, with the core's errors.
fn conversation(text: &str) -> Res<engram::Conversation> {
    engram::parse_conversation(text.as_bytes()).map_err(err)
}

/// A request as a caller sends it: an Anthropic Messages request (with its JSON, what a
/// compaction is written back into) or, as [`conversation`] reads them, OpenAI messages.
fn request(text: &str) -> Res<(engram::Conversation, Option<Value>)> {
    engram::formats::anthropic::parse_request(text.as_bytes()).map_err(err)
}

/// The messages of a list or a request, OpenAI's or Anthropic's ([`request`]): Anthropic
/// `tool_use` and `tool_result` blocks become the calls and results they are.
fn messages(text: &str) -> Res<Vec<Message>> {
    Ok(request(text)?.0.messages)
}

/// The registry the settings discovery finds (the built-in one with the models file merged
/// over it), loaded once per process.
fn registry() -> Res<&'static ModelRegistry> {
    static REGISTRY: std::sync::OnceLock<Result<ModelRegistry, engram::Error>> =
        std::sync::OnceLock::new();
    REGISTRY
        .get_or_init(|| Discovery::new().registry())
        .as_ref()
        .map_err(|e| err(e.clone()))
}

/// The configuration the settings discovery finds (ENGRAM_CONFIG or config.toml, then the
/// environment), read at each call as the CLI reads it at each command.
fn config() -> Res<Config> {
    Discovery::new().config().map_err(err)
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

/// Responses API items as messages to store, each carrying its own items verbatim.
pub fn responses_items_to_messages_json(items_json: &str) -> Res<String> {
    let items: Vec<Value> = serde_json::from_str(items_json)
        .map_err(|e| err(format!("expected a list of Responses items: {e}")))?;
    let messages = engram::formats::responses::items_to_messages(items).map_err(err)?;
    Ok(Value::Array(messages.iter().map(Message::to_value).collect()).to_string())
}

/// Stored messages (a session's view) as Responses items: verbatim where unchanged.
pub fn responses_messages_to_items_json(messages_json: &str) -> Res<String> {
    let messages = conversation(messages_json)?.messages;
    Ok(Value::Array(engram::formats::responses::messages_to_items(&messages)).to_string())
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
                    "cache_write_per_mtok": m.price.cache_write,
                    "output_per_mtok": m.price.output,
                },
            })
        })
        .collect();
    to_json(&models)
}

/// A compaction's counter and options from a binding's options (a [`CompactRequest`]), with the
/// caller's summarizer and, for hybrid recall, its embeddings.
fn compaction(
    options: Value,
    conversation_model: Option<&str>,
    summarizer: Option<Arc<dyn Summarizer>>,
    embeddings: Option<&Embeddings>,
) -> Res<(TokenCounter, engram::CompactOptions)> {
    let Compaction {
        tokenizer,
        mut options,
        ..
    } = from_json::<CompactRequest>(options)
        .map_err(err)?
        .resolve(registry()?, conversation_model)
        .map_err(err)?;
    options.summarizer = summarizer;
    if let Some(e) = embeddings {
        options.embedder = Some(Arc::clone(&e.cached));
    }
    Ok((TokenCounter::new(tokenizer), options))
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
    let (counter, options) = compaction(
        without(o, &["plain"]),
        conversation.model(),
        summarizer,
        embeddings,
    )?;
    let compacted = compact(&conversation, &counter, &options).map_err(err)?;
    let mut doc = compaction_document(&conversation, &compacted, counter.tokenizer(), plain);
    let report = doc.remove("report").unwrap_or_default();
    if !plain {
        return to_json(&json!({ "messages": doc.remove("messages"), "report": report }));
    }
    let request = compacted_request(
        &conversation,
        anthropic.as_ref(),
        &compacted,
        counter.tokenizer(),
    )
    .map_err(err)?;
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

/// Compacts a Vercel AI SDK prompt by the sessions' policy (`engram::formats::ai_sdk`): `null` while it
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
    let (counter, options) = compaction(o, None, summarizer, embeddings)?;
    let limit = options.budget;
    let trigger = config()?.session_policy().trigger;
    match engram::formats::ai_sdk::compact_prompt(&prompt, &counter, limit, &trigger, &options)
        .map_err(err)?
    {
        None => Ok("null".to_owned()),
        Some((plan, report)) => to_json(&json!({
            "plan": plan.iter().map(engram::formats::ai_sdk::Step::to_json).collect::<Vec<_>>(),
            "report": report,
        })),
    }
}

/// Budgeted assembly. `parts_json`: system, new_message?, history, memory_results,
/// learnings, tool_definitions, summaries (`{depth, messages, from, to, text}`). `budget_json`:
/// the `TokenBudget` fields. With `seed`, the classic arithmetic
/// ([`ContextBuilder::seed_rules`]): reserves kept, the fresh tail regardless of the budget, and
/// the classic characters/4 unless a model or tokenizer is named.
pub fn build_context_json(
    parts_json: &str,
    budget_json: &str,
    model: Option<&str>,
    tokenizer: Option<&str>,
    seed: bool,
) -> Res<String> {
    let parts = PartsRequest::from_value(parse_json(parts_json, "parts")?)
        .and_then(PartsRequest::resolve)
        .map_err(err)?;
    let budget_given = parse_json(budget_json, "budget")?;
    let explicit_tokenizer = tokenizer;
    let tokenizer = match (tokenizer, seed && model.is_none()) {
        (Some(t), _) => Some(t),
        (None, true) => Some("chars/4"),
        (None, false) => None,
    };
    let counter = Counter::build(model, tokenizer)?;
    let start = if seed {
        TokenBudget::default()
    } else {
        TokenBudget::for_window(counter.window, 0)
    };
    let budget = budget_over(start, budget_given).map_err(err)?;
    let seed_count = match (seed, model.is_none() && explicit_tokenizer.is_none()) {
        (false, _) => None,
        (true, true) => Some(engram::assembly::SeedCount::Characters),
        (true, false) => Some(engram::assembly::SeedCount::Exact),
    };
    let (out, report) = ContextBuilder::new(&counter.counter, budget)
        .seed_rules(seed_count)
        .build(&parts.parts())
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

/// The key facts of a list of messages, in order, each once.
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

/// The status update (a system message) as JSON.
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
                e.to_string()
                    .starts_with("`limit` must be a non-negative integer"),
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
        let lexical = json!({"budget": 400, "query": pets.question, "recall": "lexical"});
        let run = |embeddings: Option<&Embeddings>| -> Value {
            let options = lexical.to_string();
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
            assert!(e.to_string().contains("model.safetensors"), "{e}");
        } else {
            assert!(e.to_string().contains("built without embeddings"), "{e}");
        }
    }
}
