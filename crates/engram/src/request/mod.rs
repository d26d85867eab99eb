//! Requests as the fronts receive them: CLI flags, REST bodies and Python's keyword options all
//! become these types, which check themselves and turn into what the core runs. Each mistake
//! has one error text on every surface, naming its field; a surface only spells the field its
//! own way (`--target` on the command line, `"target"` in JSON).
//!
//! JSON (a REST body, Python's and Node's options, a tool call's arguments) is read by
//! [`from_json`]: a field the request does not take is an error naming it and the fields it
//! does take (a misspelt `budegt` would otherwise be a request without a budget), and a field of
//! the wrong type is an error naming it.

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::Error;
use crate::compact::policy::{self, TriggerPolicy};
use crate::compact::{CompactOptions, Compacted, Strategy};
use crate::input::Conversation;
use crate::memory::{Forget, NewEntry, SearchQuery, Tier};
use crate::registry::{ModelRegistry, ResolvedModel};
use crate::session::{NewSession, Session, new_session};
use crate::sleep::SleepSettings;
use crate::timestamp::{Timestamp, now, parse_time};
use crate::tokenize::Tokenizer;
use crate::tools::SchemaFormat;

mod build_context;
mod documents;
pub mod tool_calls;

pub use build_context::{AssemblyParts, PartsRequest, budget_over};
pub use documents::{
    compacted_request, compaction_document, context_document, created_session_document,
};

/// Reads a request from a JSON object; a field the request does not take, or a field of the
/// wrong type, is an error naming the field.
pub fn from_json<T: DeserializeOwned>(value: Value) -> Result<T, Error> {
    let value = match value {
        Value::Null => Value::Object(Default::default()),
        Value::Object(map) => {
            if let Some(e) = unknown_field::<T>(map.keys()) {
                return Err(e);
            }
            Value::Object(map)
        }
        other => {
            return Err(Error::invalid(
                "",
                format!("expected a JSON object, not {}", kind(&other)),
            ));
        }
    };
    serde_path_to_error::deserialize(value).map_err(field_error)
}

/// The error for the first of `keys` that request type `T` does not take, naming the ones it
/// does (aliases included), or `None`. A type that does not list its fields (a map, a struct
/// with a flattened part) takes any.
pub fn unknown_field<'k, T: DeserializeOwned>(
    keys: impl IntoIterator<Item = &'k String>,
) -> Option<Error> {
    let fields = fields_of::<T>()?;
    let key = keys.into_iter().find(|k| !fields.contains(&k.as_str()))?;
    let takes = fields
        .iter()
        .map(|f| format!("`{f}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let message = if fields.is_empty() {
        "unknown field; this takes none".to_owned()
    } else {
        format!("unknown field; expected one of {takes}")
    };
    Some(Error::invalid(key.as_str(), message))
}

/// The field names (and aliases) a struct deriving `Deserialize` takes: serde's derive hands
/// them to `deserialize_struct`, and this deserializer only records them.
fn fields_of<T: DeserializeOwned>() -> Option<&'static [&'static str]> {
    let mut fields = None;
    let _ = T::deserialize(FieldList(&mut fields));
    fields
}

struct FieldList<'a>(&'a mut Option<&'static [&'static str]>);

impl<'de> serde::Deserializer<'de> for FieldList<'_> {
    type Error = serde::de::value::Error;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(serde::de::Error::custom("only a struct lists its fields"))
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = Some(fields);
        Err(serde::de::Error::custom("fields listed"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// The error of a deserializer wrapped by `serde_path_to_error` (a JSON body, a query string),
/// naming the field it was reading in the words every surface uses.
pub fn field_error<E: std::fmt::Display>(e: serde_path_to_error::Error<E>) -> Error {
    let field = match e.path().to_string() {
        // The top level ("." to serde_path_to_error) is no field.
        p if p == "." => String::new(),
        p => p,
    };
    Error::invalid(field, plain_types(&e.into_inner().to_string()))
}

/// serde's messages in words a user reads: a value of the wrong type is named as such ("must
/// be a whole number, not the text \"5\""), never by serde's names for types.
fn plain_types(message: &str) -> String {
    let message = message
        .replace("expected usize", "expected a whole number")
        .replace("expected u64", "expected a whole number")
        .replace("expected u32", "expected a whole number")
        .replace("expected f64", "expected a number")
        .replace("expected a boolean", "expected true or false")
        .replace("expected a sequence", "expected a list")
        .replace("invalid digit found in string", "expected a whole number");
    if message.starts_with("data did not match any variant of untagged enum Names") {
        return "must be a string or a list of strings".to_owned();
    }
    if let Some(rest) = message.strip_prefix("invalid type: ")
        && let Some((found, expected)) = rest.split_once(", expected ")
    {
        let found = if let Some(n) = found
            .strip_prefix("integer `")
            .or_else(|| found.strip_prefix("floating point `"))
        {
            format!("the number {}", n.trim_end_matches('`'))
        } else if let Some(text) = found.strip_prefix("string ") {
            format!("the text {text}")
        } else if let Some(b) = found.strip_prefix("boolean `") {
            b.trim_end_matches('`').to_owned()
        } else {
            match found {
                "sequence" => "a list".to_owned(),
                "map" => "an object".to_owned(),
                "null" => "null".to_owned(),
                other => other.to_owned(),
            }
        };
        return format!("must be {expected}, not {found}");
    }
    message
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn positive(field: &str, value: Option<usize>) -> Result<Option<usize>, Error> {
    match value {
        Some(0) => Err(Error::invalid(field, "must be positive")),
        other => Ok(other),
    }
}

fn share(field: &str, value: Option<f64>) -> Result<Option<f64>, Error> {
    match value {
        Some(v) if !(0.0..=1.0).contains(&v) => Err(Error::invalid(
            field,
            format!("must be between 0 and 1, not {v}"),
        )),
        other => Ok(other),
    }
}

/// Text that says something, trimmed of nothing; blank text is no text.
fn text(value: Option<String>) -> Option<String> {
    value.filter(|t| !t.trim().is_empty())
}

fn strategy(name: Option<&str>) -> Result<Strategy, Error> {
    Strategy::from_name(name.unwrap_or("auto")).map_err(|e| Error::invalid("strategy", e))
}

/// Creating a session (`engram session new`, `POST /v1/sessions`, `Store.session_new`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct NewSessionRequest {
    /// The session's model (its window and tokenizer come from the registry).
    pub model: Option<String>,
    /// A window that overrides the registry's.
    pub window: Option<usize>,
    /// The session's id; a new one when absent.
    pub id: Option<String>,
    /// A name for people.
    pub name: Option<String>,
}

impl NewSessionRequest {
    /// The model this request names, else `default_model` (the configuration's), else the
    /// registry's default.
    pub fn model_name<'a>(
        &'a self,
        registry: &'a ModelRegistry,
        default_model: Option<&'a str>,
    ) -> &'a str {
        self.model
            .as_deref()
            .or(default_model)
            .unwrap_or_else(|| registry.default_model())
    }

    /// The warning for a model the registry does not know, whose window and tokenizer are the
    /// fallback's guess (the CLI prints it, REST returns it as `warning`).
    pub fn model_warning(
        &self,
        registry: &ModelRegistry,
        default_model: Option<&str>,
    ) -> Option<String> {
        registry
            .resolve(self.model_name(registry, default_model))
            .warning()
    }

    /// The session to create at `now`.
    pub fn into_new_session(
        self,
        registry: &ModelRegistry,
        default_model: Option<&str>,
        now: Timestamp,
    ) -> Result<NewSession, Error> {
        let window = positive("window", self.window)?;
        if let Some(id) = &self.id {
            crate::session::check_session_id(id).map_err(|e| Error::invalid("id", e))?;
        }
        let mut new = new_session(
            registry,
            self.model_name(registry, default_model),
            window,
            now,
        );
        new.id = self.id;
        new.name = self.name;
        Ok(new)
    }
}

/// A session's context for a caller (`engram session context`, `GET/POST
/// /v1/sessions/{id}/context`, `Store.session_context`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct ContextRequest {
    /// The most tokens the context may hold.
    pub budget: Option<usize>,
    /// With no budget: the budget of this model's window less its reply's room.
    pub model: Option<String>,
    /// What the context must serve: older messages that match come back verbatim.
    pub query: Option<String>,
    /// Add what long-term memory holds on the query (else the newest user message).
    pub memory: Option<bool>,
    /// The messages' format: `openai` (the default) or `anthropic` (`system` and `messages`,
    /// tool calls as `tool_use` blocks, ready for the Messages API).
    pub format: Option<String>,
}

/// A [`ContextRequest`] checked: what [`crate::session::Session::context`] takes.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextArgs {
    /// The budget, when one was given or a model named.
    pub budget: Option<usize>,
    /// The query, when it says something.
    pub query: Option<String>,
    /// With what long-term memory holds on the topic.
    pub memory: bool,
    /// The messages' format.
    pub format: SchemaFormat,
}

impl ContextArgs {
    /// The session's context for these arguments.
    pub fn context(&self, session: &Session<'_>) -> Result<Compacted, Error> {
        if self.memory {
            session.context_recalling(self.budget, self.query.as_deref())
        } else {
            session.context(self.budget, self.query.as_deref())
        }
    }

    /// The session's context as callers get it: [`context_document`], its messages in the
    /// format asked for. An Anthropic context is the request's `system` (the view's leading
    /// system messages: its summaries) and `messages` beside the report, plain whatever `plain`
    /// says (the Messages API takes no other keys); it starts with a user turn, as the API wants.
    pub fn document(
        &self,
        session: &Session<'_>,
        plain: bool,
    ) -> Result<Map<String, Value>, Error> {
        let compacted = self.context(session)?;
        let mut doc = context_document(session, &compacted, plain);
        if self.format == SchemaFormat::Anthropic {
            let messages: Vec<_> = compacted.messages.into_iter().map(|v| v.message).collect();
            // A session's context has no caller's request to keep: every message is written.
            let origins = vec![crate::compact::Origin::New; messages.len()];
            let request = crate::formats::anthropic::rewrite_request(
                &Value::Object(Map::new()),
                &Conversation::default(),
                &crate::formats::anthropic::Sources::default(),
                messages,
                origins,
            )
            .map_err(|e| {
                Error::Rejected(format!(
                    "the context cannot be written as an Anthropic request: {e}"
                ))
            })?;
            doc.remove("messages");
            if let Value::Object(request) = request {
                doc.extend(request);
            }
        }
        Ok(doc)
    }
}

impl ContextRequest {
    /// Checks the request; a model with no budget gives its default budget.
    pub fn resolve(self, registry: &ModelRegistry) -> Result<ContextArgs, Error> {
        let budget = positive("budget", self.budget)?.or_else(|| {
            self.model.as_deref().map(|m| {
                let spec = registry.resolve(m).spec;
                policy::request_limit(spec.context_window, spec.max_output_tokens, None)
            })
        });
        let format = match self.format.as_deref() {
            None => SchemaFormat::OpenAi,
            Some(name) => SchemaFormat::from_name(name).map_err(|e| Error::invalid("format", e))?,
        };
        Ok(ContextArgs {
            budget,
            query: text(self.query),
            memory: self.memory.unwrap_or(false),
            format,
        })
    }
}

/// Marking a session's place to return to (`POST /v1/sessions/{id}/checkpoints`; the CLI and
/// the bindings take the name alone).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct CheckpointRequest {
    /// The checkpoint's name, which a restore names.
    pub name: Option<String>,
}

impl CheckpointRequest {
    /// The name; a missing or blank one is an error naming `name`.
    pub fn into_name(self) -> Result<String, Error> {
        text(self.name).ok_or_else(|| Error::invalid("name", "is required"))
    }
}

/// Compacting a session now, by hand (`engram session compact`, `POST
/// /v1/sessions/{id}/compact`, `Store.session_compact`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct SessionCompactRequest {
    /// What to compact down to: a number of tokens (`2000`), or a share of the window below 1
    /// (`0.3`, as the configuration's `[session] target` says it). Default: the policy's
    /// target.
    pub target: Option<f64>,
    /// The strategy's name (default `auto`).
    pub strategy: Option<String>,
    /// What the summary should keep in particular.
    pub focus: Option<String>,
    /// A summary prompt instead of the structured handoff prompt.
    pub summary_prompt: Option<String>,
}

/// A [`SessionCompactRequest`] checked against its session.
#[derive(Debug, Clone, PartialEq)]
pub struct ManualCompaction {
    /// The target in tokens.
    pub target: usize,
    /// The strategy.
    pub strategy: Strategy,
    /// The focus, when it says something.
    pub focus: Option<String>,
    /// The summary prompt, when one was given.
    pub prompt: Option<String>,
}

impl ManualCompaction {
    /// The compaction options (no summarizer: the caller adds its own).
    pub fn options(&self) -> CompactOptions {
        let mut options = CompactOptions::new(self.target);
        options.strategy = self.strategy;
        options.prompt.clone_from(&self.prompt);
        options
    }
}

impl SessionCompactRequest {
    /// Checks the request against a session of `window` tokens under `trigger`, whose fixed
    /// head (its instructions and task, [`Session::fixed_tokens`](crate::session::Session::fixed_tokens))
    /// holds `fixed` tokens and whose last steps ([`Session::recent_tokens`](crate::session::Session::recent_tokens))
    /// `recent`.
    pub fn resolve(
        self,
        window: usize,
        fixed: usize,
        recent: usize,
        trigger: &TriggerPolicy,
    ) -> Result<ManualCompaction, Error> {
        let strategy = strategy(self.strategy.as_deref())?;
        let tokens = match self.target {
            None => None,
            Some(t) if t > 0.0 && t < 1.0 => Some(((t * window as f64).round() as usize).max(1)),
            Some(t) if t >= 1.0 && t.fract() == 0.0 && t <= usize::MAX as f64 => Some(t as usize),
            Some(t) => {
                return Err(Error::invalid(
                    "target",
                    format!(
                        "{t} is neither a number of tokens (a whole number, at least 1) nor a share of the window (above 0 and below 1, as 0.3)"
                    ),
                ));
            }
        };
        let target = policy::requested_target(tokens, window, fixed, recent, trigger)
            .map_err(|e| Error::invalid("target", e))?;
        Ok(ManualCompaction {
            target,
            strategy,
            focus: text(self.focus),
            prompt: text(self.summary_prompt),
        })
    }
}

/// Compacting a conversation once (`engram compact`, Python's `compact`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct CompactRequest {
    /// The model whose window, reply room and tokenizer apply (default: the conversation's,
    /// else the registry's default).
    pub model: Option<String>,
    /// A tokenizer instead of the model's.
    pub tokenizer: Option<String>,
    /// The most tokens the result may hold (default: the window less the reply's room).
    pub budget: Option<usize>,
    /// The strategy's name (default `auto`).
    pub strategy: Option<String>,
    /// What the context must serve: older messages that match come back verbatim.
    pub query: Option<String>,
    /// Tool outputs that masking keeps verbatim, counted from the newest.
    pub keep_tool_outputs: Option<usize>,
    /// Messages the extractive strategy keeps verbatim, counted from the newest (at least 1).
    pub keep_recent: Option<usize>,
    /// A preserve window instead of `keep_recent`.
    pub preserve_window: Option<bool>,
    /// The share of the free budget the digest of dropped messages may take.
    pub digest_share: Option<f64>,
    /// The share of the free budget recalled messages may take (more for a history many times
    /// the budget or of many sessions; see [`CompactOptions::recall_share`]).
    pub recall_share: Option<f64>,
    /// How recall finds what serves the query: `meaning` (the default: words and the built-in
    /// model's meaning) or `lexical` (words alone). A caller with a model of its own (MiniLM,
    /// for hybrid recall) sets the options' embedder instead.
    pub recall: Option<String>,
    /// A summary prompt instead of the structured handoff prompt.
    pub summary_prompt: Option<String>,
    /// The window instead of the model's (the default budget is computed from it).
    pub window: Option<usize>,
    /// The reply's room the call asks for, kept out of the default budget (default: the
    /// model's maximum output, at most a quarter of the window).
    pub max_output_tokens: Option<usize>,
}

/// A [`CompactRequest`] checked: the model, the tokenizer and the options.
#[derive(Debug)]
pub struct Compaction {
    /// The model as the registry resolved it.
    pub model: ResolvedModel,
    /// The tokenizer that counts.
    pub tokenizer: Tokenizer,
    /// The options (no summarizer: the caller adds its own).
    pub options: CompactOptions,
}

impl CompactRequest {
    /// Checks the request; `conversation_model` is the model the conversation itself names.
    pub fn resolve(
        self,
        registry: &ModelRegistry,
        conversation_model: Option<&str>,
    ) -> Result<Compaction, Error> {
        let strategy = strategy(self.strategy.as_deref())?;
        let budget = positive("budget", self.budget)?;
        let digest_share = share("digest_share", self.digest_share)?;
        let recall_share = share("recall_share", self.recall_share)?;
        let model = registry.resolve(
            self.model
                .as_deref()
                .or(conversation_model)
                .unwrap_or_else(|| registry.default_model()),
        );
        let tokenizer = match &self.tokenizer {
            Some(name) => Tokenizer::from_name(name),
            None => model.spec.tokenizer(),
        }
        .map_err(|e| Error::invalid("tokenizer", e.to_string()))?;
        let window = positive("window", self.window)?;
        let mut options = CompactOptions::new(budget.unwrap_or_else(|| {
            policy::request_limit(
                window.unwrap_or(model.spec.context_window),
                model.spec.max_output_tokens,
                self.max_output_tokens,
            )
        }));
        options.strategy = strategy;
        options.query = text(self.query);
        if let Some(n) = self.keep_tool_outputs {
            options.mask_keep_last = n;
        }
        if let Some(n) = self.keep_recent {
            options.keep_recent = n.max(1);
        }
        if let Some(b) = self.preserve_window {
            options.preserve_window = b;
        }
        if let Some(s) = digest_share {
            options.digest_share = s;
        }
        if let Some(s) = recall_share {
            options.recall_share = s;
        }
        match self.recall.as_deref().map(str::trim) {
            None | Some("meaning") => {}
            Some("lexical") => options.embedder = None,
            Some(other) => {
                return Err(Error::invalid(
                    "recall",
                    format!("`{other}` is no way of recall: say meaning (the default) or lexical"),
                ));
            }
        }
        options.prompt = text(self.summary_prompt);
        // A one-shot compaction has no history tool to read the originals back with: the
        // caller holds them, and each message's `source_ids` names those it stands for.
        options.read_tool = None;
        Ok(Compaction {
            model,
            tokenizer,
            options,
        })
    }
}

/// One name or several: `"working,episodic"` or `["working", "episodic"]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Names {
    /// One string, names separated by commas.
    One(String),
    /// A list of names.
    Many(Vec<String>),
}

impl Names {
    fn split(&self) -> Vec<&str> {
        match self {
            Names::One(s) => s
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .collect(),
            Names::Many(v) => v.iter().map(|t| t.trim()).collect(),
        }
    }
}

/// Searching memory (`engram memory search`, `GET /v1/memory/search`, `Store.search`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct SearchRequest {
    /// The words to look for (`q` in a URL).
    #[serde(alias = "q")]
    pub text: Option<String>,
    /// The most hits (default [`crate::memory::DEFAULT_MEMORY_HITS`], 10).
    pub limit: Option<usize>,
    /// Only these tiers (default: working and episodic; `tier` in a URL).
    #[serde(alias = "tier")]
    pub tiers: Option<Names>,
    /// Only this session.
    pub session_id: Option<String>,
    /// Only this source.
    pub source: Option<String>,
    /// Only entries written at or after this RFC 3339 time.
    pub since: Option<String>,
    /// Only entries written before this RFC 3339 time.
    pub until: Option<String>,
}

impl SearchRequest {
    /// The query; `text_field` is what the surface calls the text (`q`, `query`).
    pub fn into_query(self, text_field: &str) -> Result<SearchQuery, Error> {
        let text = text(self.text).ok_or_else(|| Error::invalid(text_field, "is required"))?;
        let words: Vec<String> = text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect();
        if words
            .iter()
            .all(|w| crate::retrieval::words::is_stopword(w))
        {
            return Err(Error::invalid(
                text_field,
                format!(
                    "{text:?} has no word to look for: search leaves out words as common as \"the\", \"a\" and \"of\" (name the thing you want)"
                ),
            ));
        }
        let limit = positive("limit", self.limit)?.unwrap_or(crate::memory::DEFAULT_MEMORY_HITS);
        let tiers = match &self.tiers {
            None => Vec::new(),
            Some(names) => names
                .split()
                .into_iter()
                .map(|t| {
                    Tier::parse(t).ok_or_else(|| {
                        Error::invalid(
                            "tiers",
                            format!("unknown tier {t:?}; expected working, episodic, archive, learning or journal"),
                        )
                    })
                })
                .collect::<Result<_, _>>()?,
        };
        let time = |field: &str, value: Option<String>| {
            value
                .map(|v| parse_time(&v).map_err(|e| Error::invalid(field, e)))
                .transpose()
        };
        Ok(SearchQuery {
            tiers,
            session_id: self.session_id,
            source: self.source,
            since: time("since", self.since)?,
            until: time("until", self.until)?,
            ..SearchQuery::new(text, limit)
        })
    }
}

/// Adding memory (`engram memory add` and `import`, `engram import`, `POST /v1/memory`,
/// `Store.add` and `add_many`, the `memory_add` tool): every front reads its entries here, so
/// each is checked by one rule, given an id, and stripped of its secrets as the `[memory] redact`
/// setting says ([`crate::redact`]): no front can store a key in clear by forgetting to.
///
/// An entry is `{"content","source","session_id"?,"created_at"? (RFC 3339),"importance"?,
/// "metadata"?,"id"?}`, plus `"tier"?` and `"summary_of"?` as `memory export` writes them, so
/// that an export reads back as it was (and `"type": "memory"`, as `engram export` marks its
/// memory lines). A key of another name is an error, so that a misspelt `importance` is not
/// left out quietly.
#[derive(Debug, Clone)]
pub struct AddMemory {
    at: Timestamp,
    redact: bool,
    redacted: usize,
}

impl AddMemory {
    /// Entries written now; `redact` is the `[memory] redact` setting.
    pub fn new(redact: bool) -> Self {
        AddMemory {
            at: now(),
            redact,
            redacted: 0,
        }
    }

    /// Entries that give no `created_at` were written at `at`.
    pub fn dated(mut self, at: Timestamp) -> Self {
        self.at = at;
        self
    }

    /// How many secrets the entries read so far had (each replaced by a placeholder).
    pub fn redacted(&self) -> usize {
        self.redacted
    }

    /// One entry, as an import line or a binding's dict gives it.
    pub fn entry(&mut self, value: &Value) -> Result<NewEntry, Error> {
        self.entry_at(value, "")
    }

    /// A list of entries (`entries[2].content` names a field of the third).
    pub fn list(&mut self, value: &Value) -> Result<Vec<NewEntry>, Error> {
        let Value::Array(items) = value else {
            return Err(Error::invalid(
                "entries",
                format!("expected a list of entries, not {}", kind(value)),
            ));
        };
        items
            .iter()
            .enumerate()
            .map(|(i, v)| self.entry_at(v, &format!("entries[{i}]")))
            .collect()
    }

    /// A request body: one entry, or `{"entries": [...]}` for several.
    pub fn body(&mut self, value: &Value) -> Result<Vec<NewEntry>, Error> {
        let Some(entries) = value.get("entries") else {
            return Ok(vec![self.entry(value)?]);
        };
        // A field beside a list of entries reads as if it were each entry's: refused, not dropped.
        if let Some(field) = value
            .as_object()
            .and_then(|o| o.keys().find(|k| *k != "entries"))
        {
            return Err(Error::invalid(
                field.as_str(),
                "a body with `entries` takes no other field; give it to each entry",
            ));
        }
        self.list(entries)
    }

    /// The `memory_add` tool's arguments: the fact (`content`), where it came from (`source`,
    /// default `agent`) and the session it belongs to.
    pub fn tool_call(
        &mut self,
        content: Option<String>,
        source: Option<String>,
        session: Option<&str>,
    ) -> Result<NewEntry, Error> {
        let content = text(content)
            .ok_or_else(|| Error::invalid("content", "is required: the fact to save"))?;
        self.entry(&serde_json::json!({
            "content": content,
            "source": text(source).unwrap_or_else(|| "agent".into()),
            "session_id": session,
        }))
    }

    fn entry_at(&mut self, value: &Value, place: &str) -> Result<NewEntry, Error> {
        let mut entry = read_entry(value, self.at).map_err(|(field, message)| {
            let field = match (place.is_empty(), field.is_empty()) {
                (true, _) => field,
                (false, true) => place.to_owned(),
                (false, false) => format!("{place}.{field}"),
            };
            Error::invalid(field, message)
        })?;
        if entry.id.is_none() {
            entry.id = Some(crate::timestamp::new_id("mem"));
        }
        if self.redact {
            let (content, n) = crate::redact::redact(&entry.content);
            entry.content = content;
            self.redacted += n;
        }
        Ok(entry)
    }
}

/// One entry; an error is `(field, what is wrong)`.
fn read_entry(value: &Value, default_time: Timestamp) -> Result<NewEntry, (String, String)> {
    const FIELDS: [&str; 9] = [
        "content",
        "source",
        "session_id",
        "created_at",
        "importance",
        "metadata",
        "id",
        "tier",
        "summary_of",
    ];
    let Value::Object(map) = value else {
        return Err((
            "".into(),
            format!(
                "expected an entry (an object with `content` and `source`), not {}",
                kind(value)
            ),
        ));
    };
    for (key, value) in map {
        if key == "type" {
            if value.as_str() != Some("memory") {
                return Err((key.clone(), "must be \"memory\" when given".into()));
            }
        } else if !FIELDS.contains(&key.as_str()) {
            return Err((
                key.clone(),
                format!(
                    "is not a field of an entry; its fields: {}",
                    FIELDS.join(", ")
                ),
            ));
        }
    }
    let string = |key: &str, required: bool| -> Result<Option<String>, (String, String)> {
        match map.get(key) {
            None | Some(Value::Null) if required => Err((key.into(), "is required".to_owned())),
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err((key.into(), format!("must be a string, not {}", kind(other)))),
        }
    };
    let content = string("content", true)?.unwrap_or_default();
    if content.trim().is_empty() {
        return Err(("content".into(), "is empty".into()));
    }
    let source = string("source", true)?.unwrap_or_default();
    if source.trim().is_empty() {
        return Err((
            "source".into(),
            "is empty; say where the entry came from (a tool, a channel, an agent)".into(),
        ));
    }
    let created_at = match string("created_at", false)? {
        Some(s) => parse_time(&s).map_err(|e| ("created_at".into(), e.to_string()))?,
        None => default_time,
    };
    let importance = match map.get("importance") {
        None | Some(Value::Null) => crate::memory::DEFAULT_IMPORTANCE,
        Some(Value::Number(n)) => match n.as_f64() {
            Some(x) if (0.0..=1.0).contains(&x) => x,
            _ => return Err(("importance".into(), "must be between 0 and 1".into())),
        },
        Some(_) => return Err(("importance".into(), "must be a number".into())),
    };
    let tier = match string("tier", false)? {
        None => Tier::Working,
        Some(name) => Tier::parse(&name).ok_or_else(|| {
            (
                "tier".to_owned(),
                format!(
                    "unknown tier {name:?}; expected one of working, episodic, archive, learning, journal"
                ),
            )
        })?,
    };
    let summary_of = match map.get("summary_of") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(ids)) => ids
            .iter()
            .map(|id| id.as_str().map(str::to_owned))
            .collect::<Option<Vec<String>>>()
            .ok_or_else(|| {
                (
                    "summary_of".to_owned(),
                    "must be an array of ids (strings)".to_owned(),
                )
            })?,
        Some(_) => {
            return Err((
                "summary_of".into(),
                "must be an array of ids (strings)".into(),
            ));
        }
    };
    let id = string("id", false)?;
    if id.as_deref().is_some_and(|i| i.trim().is_empty()) {
        return Err(("id".into(), "is empty".into()));
    }
    Ok(NewEntry {
        id,
        tier,
        summary_of,
        content,
        source,
        session_id: string("session_id", false)?,
        created_at,
        importance,
        metadata: map.get("metadata").cloned().unwrap_or(Value::Null),
    })
}

/// Forgetting memory entries (`POST /v1/memory/forget`, `Store.forget`): every entry that
/// matches all the filters given, in every tier.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct ForgetRequest {
    /// One entry.
    pub id: Option<String>,
    /// Everything of a session.
    pub session_id: Option<String>,
    /// Everything from a source.
    pub source: Option<String>,
}

impl ForgetRequest {
    /// What to forget; at least one filter is required (blank ones are none), so that a
    /// mistake cannot forget everything.
    pub fn into_forget(self) -> Result<Forget, Error> {
        let what = Forget {
            id: text(self.id),
            session_id: text(self.session_id),
            source: text(self.source),
        };
        if what.is_empty() {
            return Err(Error::invalid(
                "",
                "say what to forget: id, session_id or source",
            ));
        }
        Ok(what)
    }
}

/// Running a sleep now (`engram memory sleep`, `POST /v1/memory/sleep`, `Store.sleep`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct SleepRequest {
    /// The time the sleep runs at (RFC 3339; default: now), for replaying a past day.
    pub now: Option<String>,
    /// Working memory's time to live for this sleep, in hours.
    pub ttl_hours: Option<f64>,
    /// Working memory's cap for this sleep.
    pub max_working: Option<usize>,
}

impl SleepRequest {
    /// Applies the request to `settings`; returns the time the sleep runs at.
    pub fn apply(self, settings: &mut SleepSettings) -> Result<Timestamp, Error> {
        let at = match self.now {
            Some(s) => parse_time(&s).map_err(|e| Error::invalid("now", e))?,
            None => now(),
        };
        if let Some(h) = self.ttl_hours {
            if !(h.is_finite() && h > 0.0) {
                return Err(Error::invalid(
                    "ttl_hours",
                    format!("must be a positive number of hours, not {h}"),
                ));
            }
            settings.policy.ttl_ms = (h * 3600.0 * 1000.0) as i64;
        }
        if let Some(m) = positive("max_working", self.max_working)? {
            settings.policy.max_working = m;
        }
        Ok(at)
    }
}

#[cfg(test)]
mod tests;
