//! What the agent itself calls and sees: its tools, defined once here for every surface (the
//! CLI, the REST API, Python and MCP print or serve these definitions and dispatch through
//! [`Session::handle_tool_call`](crate::session::Session::handle_tool_call)), and the status
//! updates that tell it how full its context is.
//!
//! | tool | what it does |
//! |---|---|
//! | `search_history` | ranked hits over the session's whole log, in the view or not |
//! | `read_history` | the originals, verbatim, by id (the ids markers and digests name) or by range |
//! | `compact_history` | compacts now, keeping the newest messages |
//! | `context_status` | the status update as data: tokens in the context, the window, the cost, the work ledger |
//! | `memory_search` | long-term memory's best entries for a query |
//! | `memory_add` | one entry into working memory, tied to the session |

use serde_json::{Value, json};

use crate::Error;
use crate::message::Message;

/// `search_history`: ranked hits over the session's whole log.
pub const SEARCH_HISTORY: &str = "search_history";
/// `read_history`: originals by id or by range.
pub const READ_HISTORY: &str = "read_history";
/// `context_status`: the status update as data.
pub const CONTEXT_STATUS: &str = "context_status";
/// `memory_search`: long-term memory's best entries.
pub const MEMORY_SEARCH: &str = "memory_search";
/// `memory_add`: one entry into working memory.
pub const MEMORY_ADD: &str = "memory_add";

/// Every tool's name, in the order the schemas list them.
pub const TOOL_NAMES: [&str; 6] = [
    SEARCH_HISTORY,
    READ_HISTORY,
    COMPACT_HISTORY,
    CONTEXT_STATUS,
    MEMORY_SEARCH,
    MEMORY_ADD,
];

/// The error for a tool engram does not have, listing the ones it has (every surface says it
/// this way).
pub fn unknown_tool(name: &str) -> String {
    format!(
        "unknown tool {name:?}; engram's tools are {}",
        TOOL_NAMES.join(", ")
    )
}

/// One tool: its name, what the model reads about it, its parameters' JSON schema, and what
/// its answer holds.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDefinition {
    /// The name (a contract: callers dispatch on it).
    pub name: &'static str,
    /// What the model reads.
    pub description: &'static str,
    /// The parameters' JSON schema.
    pub parameters: Value,
    /// The JSON schema of the answer's data ([`ToolReply::structured`]).
    pub output: Value,
    /// True for a tool that changes nothing (a search, a read, a status).
    pub read_only: bool,
}

/// Which session a tool call is about, where the tools are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sessions {
    /// One: the call is about the session it is made in (a session's own tools, an MCP server
    /// bound to one); no call names it.
    One,
    /// Several (an MCP server over a whole store): a call names its `session`, required for
    /// the tools about a session's history, optional for memory's.
    Many,
}

/// The formats tool definitions (and a session's context) are written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaFormat {
    /// `{"type": "function", "function": {name, description, parameters}}`.
    OpenAi,
    /// `{name, description, input_schema}` (also what MCP's `tools/list` carries).
    Anthropic,
}

impl SchemaFormat {
    /// `openai` or `anthropic`.
    pub fn from_name(name: &str) -> Result<Self, Error> {
        match name.to_ascii_lowercase().as_str() {
            "openai" => Ok(SchemaFormat::OpenAi),
            "anthropic" => Ok(SchemaFormat::Anthropic),
            other => Err(Error::UnknownName {
                what: "format",
                given: other.to_owned(),
                expected: "openai or anthropic".to_owned(),
            }),
        }
    }
}

impl ToolDefinition {
    /// The definition in `format`.
    pub fn schema(&self, format: SchemaFormat) -> Value {
        match format {
            SchemaFormat::OpenAi => json!({
                "type": "function",
                "function": {
                    "name": self.name,
                    "description": self.description,
                    "parameters": self.parameters,
                },
            }),
            SchemaFormat::Anthropic => json!({
                "name": self.name,
                "description": self.description,
                "input_schema": self.parameters,
            }),
        }
    }
}

/// Every tool's definition, for a session's own calls ([`Sessions::One`]).
pub fn definitions() -> Vec<ToolDefinition> {
    definitions_for(Sessions::One)
}

/// Every tool's definition where `sessions` are served: with several, each takes the
/// `session` it is about.
pub fn definitions_for(sessions: Sessions) -> Vec<ToolDefinition> {
    let mut out = base_definitions();
    if sessions == Sessions::Many {
        for d in &mut out {
            let memory = d.name == MEMORY_SEARCH || d.name == MEMORY_ADD;
            let description = if memory {
                "The session the entry belongs to or the search is limited to (sessions_list lists them); default: none, the whole store"
            } else {
                "The session whose history this is about (sessions_list lists them)"
            };
            d.parameters["properties"]["session"] =
                json!({"type": "string", "description": description});
            if !memory {
                let required = d.parameters["required"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let mut required: Vec<Value> = required;
                required.push(json!("session"));
                d.parameters["required"] = Value::Array(required);
            }
        }
    }
    out
}

/// The answer schema of a tool whose answer is a sentence.
fn text_output() -> Value {
    json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
}

/// The hits an agent's search tool (`search_history`, `memory_search`) returns when the call
/// names no limit: a handful, for the model's context.
pub const DEFAULT_TOOL_HITS: usize = 5;
/// The most hits one call of an agent's search tool returns.
pub const MAX_TOOL_HITS: usize = 50;

fn base_definitions() -> Vec<ToolDefinition> {
    vec![
        ToolDefinition {
            name: SEARCH_HISTORY,
            description: "Searches this conversation's whole history, including messages that were masked, summarised or compacted out of your context. Returns ranked hits (an exact match of the query first, then messages no longer in your context verbatim) with the message id, role, tool name, time, a snippet around the match, and whether the message is still in your context verbatim. Read a hit in full with read_history.",
            parameters: json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Words to look for: a file name, an error, an identifier"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_TOOL_HITS, "default": DEFAULT_TOOL_HITS, "description": "The most hits to return"},
                },
                "required": ["query"],
                "additionalProperties": false,
            }),
            output: json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "hits": {"type": "array", "items": {"type": "object", "properties": {
                        "id": {"type": "string"}, "seq": {"type": "integer"}, "role": {"type": "string"},
                        "tool": {"type": "string"}, "time": {"type": "string"}, "snippet": {"type": "string"},
                        "in_view": {"type": "boolean"}, "abandoned": {"type": "boolean"},
                        "exact": {"type": "boolean"}, "score": {"type": "number"}},
                        "required": ["id", "role", "snippet", "in_view"]}},
                },
                "required": ["query", "hits"],
            }),
            read_only: true,
        },
        ToolDefinition {
            name: READ_HISTORY,
            description: "Reads messages of this conversation's history verbatim: by id (the ids that archived-output markers, digests, summaries and search_history name) or a range of ids from..to in history order. A long result is cut with a note saying how to read the rest.",
            parameters: json!({
                "type": "object",
                "properties": {
                    "ids": {"type": "array", "items": {"type": "string"}, "description": "Message ids to read"},
                    "from": {"type": "string", "description": "The first message id of a range"},
                    "to": {"type": "string", "description": "The last message id of a range (default: the newest)"},
                    "max_tokens": {"type": "integer", "minimum": 1, "default": 4000, "description": "The most tokens to return"},
                    "metadata": {"type": "boolean", "default": false, "description": "Also return what the log keeps beside each message (a model's reasoning, usage)"},
                },
                "additionalProperties": false,
            }),
            output: json!({
                "type": "object",
                "properties": {
                    "messages": {"type": "array", "items": {"type": "object"}},
                    "not_found": {"type": "array", "items": {"type": "string"}},
                    "note": {"type": "string"},
                },
                "required": ["messages"],
            }),
            read_only: true,
        },
        ToolDefinition {
            name: COMPACT_HISTORY,
            description: DESCRIPTION,
            parameters: parameters(),
            output: text_output(),
            read_only: false,
        },
        ToolDefinition {
            name: CONTEXT_STATUS,
            description: "How full your context is: tokens in it, the window, the share used, the cost so far, the compactions so far, and your work ledger (the files you read and changed with the message each was at, the failures no later step resolved, your latest plan).",
            parameters: json!({
                "type": "object",
                "properties": {},
                "additionalProperties": false,
            }),
            output: json!({
                "type": "object",
                "properties": {
                    "session_id": {"type": "string"}, "total_tokens": {"type": "integer"},
                    "max_tokens": {"type": "integer"}, "percent": {"type": "integer"},
                    "cost_usd": {"type": "number"}, "compactions": {"type": "integer"},
                    "ledger": {"type": "string"},
                },
                "required": ["session_id", "total_tokens", "max_tokens", "percent", "compactions"],
            }),
            read_only: true,
        },
        ToolDefinition {
            name: MEMORY_SEARCH,
            description: "Searches long-term memory (facts and summaries from earlier work, lessons learned) for a query; best entries first.",
            parameters: json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Words to look for"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_TOOL_HITS, "default": DEFAULT_TOOL_HITS, "description": "The most entries to return"},
                    "tier": {"type": "string", "description": "Only these tiers, comma-separated: working, episodic, archive, learning, journal (default: working and episodic)"},
                },
                "required": ["query"],
                "additionalProperties": false,
            }),
            output: json!({
                "type": "object",
                "properties": {"results": {"type": "array", "items": {"type": "object"}}},
                "required": ["results"],
            }),
            read_only: true,
        },
        ToolDefinition {
            name: MEMORY_ADD,
            description: "Saves one fact to long-term working memory (tied to the session, when there is one), to be found later by memory_search and consolidated while the agent sleeps.",
            parameters: json!({
                "type": "object",
                "properties": {
                    "content": {"type": "string", "description": "The fact, in a sentence or two"},
                    "source": {"type": "string", "default": "agent", "description": "Where it comes from"},
                },
                "required": ["content"],
                "additionalProperties": false,
            }),
            output: json!({
                "type": "object",
                "properties": {
                    "id": {"type": "string"}, "tier": {"type": "string"},
                    "session_id": {"type": ["string", "null"]},
                },
                "required": ["id", "tier"],
            }),
            read_only: false,
        },
    ]
}

/// Every tool's definition in `format`.
pub fn schemas(format: SchemaFormat) -> Vec<Value> {
    definitions().iter().map(|d| d.schema(format)).collect()
}

/// A tool call as a provider's message carries it: OpenAI's `{"id", "function": {"name",
/// "arguments"}}` (arguments as JSON text) or Anthropic's `tool_use` block `{"type": "tool_use",
/// "id", "name", "input"}`. Every front answers calls in these shapes through this one reading.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderCall {
    /// The call's id.
    pub id: Value,
    /// The tool's name.
    pub name: String,
    /// The arguments as the model sent them (a JSON string or an object).
    pub arguments: Value,
    anthropic: bool,
}

impl ProviderCall {
    /// Reads a call; the error names what is missing.
    pub fn parse(call: &Value) -> Result<ProviderCall, Error> {
        let id = call.get("id").cloned().unwrap_or(Value::Null);
        if let Some(function) = call.get("function") {
            let name = function
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    Error::Required("an OpenAI tool call needs `function.name`".to_owned())
                })?;
            let arguments = match function.get("arguments") {
                None | Some(Value::Null) => Value::String("{}".into()),
                Some(a) => a.clone(),
            };
            return Ok(ProviderCall {
                id,
                name: name.to_owned(),
                arguments,
                anthropic: false,
            });
        }
        if call.get("type").and_then(Value::as_str) == Some("tool_use") {
            let name = call
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| Error::Required("a tool_use block needs `name`".to_owned()))?;
            let arguments = match call.get("input") {
                None | Some(Value::Null) => json!({}),
                Some(a) => a.clone(),
            };
            return Ok(ProviderCall {
                id,
                name: name.to_owned(),
                arguments,
                anthropic: true,
            });
        }
        Err(Error::Malformed(
            "not a tool call: expected an OpenAI tool call (with `function`) or an Anthropic \
             tool_use block"
                .to_owned(),
        ))
    }

    /// The answer in the call's own format: a tool message (`{"role": "tool", "tool_call_id",
    /// "content"}`) for OpenAI, a `tool_result` block (with `is_error` on a tool error) for
    /// Anthropic.
    pub fn answer(&self, reply: &ToolReply) -> Value {
        if self.anthropic {
            let mut block = json!({
                "type": "tool_result",
                "tool_use_id": self.id,
                "content": reply.text,
            });
            if reply.is_error {
                block["is_error"] = Value::Bool(true);
            }
            block
        } else {
            json!({"role": "tool", "tool_call_id": self.id, "content": reply.text})
        }
    }
}

/// A tool's answer: the text the model reads, and whether the call failed (a tool error: bad
/// arguments, an unknown id; never a crash of the protocol carrying it).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolReply {
    /// What the model reads (JSON for the tools that return data).
    pub text: String,
    /// True for a tool error.
    pub is_error: bool,
    /// The answer as data, for a tool that returns some (the text is its pretty JSON).
    pub data: Option<Value>,
}

impl ToolReply {
    /// A successful answer.
    pub fn ok(text: impl Into<String>) -> Self {
        ToolReply {
            text: text.into(),
            is_error: false,
            data: None,
        }
    }

    /// Data, as pretty JSON.
    pub fn data(value: &Value) -> Self {
        ToolReply {
            data: Some(value.clone()),
            ..ToolReply::ok(
                serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string()),
            )
        }
    }

    /// A tool error.
    pub fn error(text: impl Into<String>) -> Self {
        ToolReply {
            text: text.into(),
            is_error: true,
            data: None,
        }
    }

    /// The answer as the tool's output schema describes it ([`ToolDefinition::output`]): its
    /// data, or `{"text": ...}` for a sentence; `None` for a tool error.
    pub fn structured(&self) -> Option<Value> {
        if self.is_error {
            return None;
        }
        Some(
            self.data
                .clone()
                .unwrap_or_else(|| json!({"text": self.text})),
        )
    }
}

/// A tool call's arguments as an object: OpenAI sends a JSON string, Anthropic and MCP an
/// object; empty or `null` is no arguments.
pub fn arguments_object(arguments: &Value) -> Result<Value, Error> {
    let value = match arguments {
        Value::String(s) if s.trim().is_empty() => return Ok(json!({})),
        Value::String(s) => serde_json::from_str::<Value>(s)
            .map_err(|e| Error::Malformed(format!("the arguments are not JSON: {e}")))?,
        Value::Null => return Ok(json!({})),
        other => other.clone(),
    };
    if value.is_object() {
        Ok(value)
    } else {
        Err(Error::Malformed("the arguments must be an object".into()))
    }
}

/// The tool's name, in OpenAI and Anthropic tool definitions.
pub const COMPACT_HISTORY: &str = "compact_history";

const DESCRIPTION: &str = "Compacts the message history by summarizing older messages to reduce token usage. The most recent messages are kept unchanged; nothing is deleted from the session's log.";

/// The parameters' JSON schema.
fn parameters() -> Value {
    json!({
        "type": "object",
        "properties": {
            "preserveRecentMessages": {
                "type": "integer",
                "minimum": 1,
                "maximum": 50,
                "default": 10,
                "description": "Number of recent messages to preserve unchanged",
            },
            "customPrompt": {
                "type": "string",
                "description": "Optional custom prompt for the summarization",
            },
        },
        "additionalProperties": false,
    })
}

/// `compact_history` in OpenAI's format (`tools: [...]` of a chat completion request).
pub fn compact_history_tool_openai() -> Value {
    compact_history_definition().schema(SchemaFormat::OpenAi)
}

/// `compact_history` in Anthropic's format.
pub fn compact_history_tool_anthropic() -> Value {
    compact_history_definition().schema(SchemaFormat::Anthropic)
}

fn compact_history_definition() -> ToolDefinition {
    definitions()
        .into_iter()
        .find(|d| d.name == COMPACT_HISTORY)
        .unwrap_or_else(|| unreachable!("compact_history is one of the definitions"))
}

/// The tool call's arguments, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactHistoryArgs {
    /// Messages kept unchanged (1 to 50, default 10).
    pub preserve_recent_messages: usize,
    /// Instructions for the summary instead of the default handoff prompt.
    pub custom_prompt: Option<String>,
}

impl Default for CompactHistoryArgs {
    fn default() -> Self {
        CompactHistoryArgs {
            preserve_recent_messages: 10,
            custom_prompt: None,
        }
    }
}

impl CompactHistoryArgs {
    /// Reads the call's `arguments` (a JSON string, as OpenAI sends them, or an object, as
    /// Anthropic does); the error names the field, for the tool result the agent reads.
    pub fn parse(arguments: &Value) -> Result<Self, Error> {
        let parsed;
        let map = match arguments {
            Value::String(s) if s.trim().is_empty() => return Ok(Self::default()),
            Value::String(s) => {
                parsed = serde_json::from_str::<Value>(s)
                    .map_err(|e| Error::Malformed(format!("the arguments are not JSON: {e}")))?;
                &parsed
            }
            other => other,
        };
        let Value::Object(map) = map else {
            if map.is_null() {
                return Ok(Self::default());
            }
            return Err(Error::Malformed("the arguments must be an object".into()));
        };
        let mut args = Self::default();
        for (key, value) in map {
            match key.as_str() {
                "preserveRecentMessages" => {
                    args.preserve_recent_messages = value
                        .as_u64()
                        .filter(|n| (1..=50).contains(n))
                        .ok_or_else(|| {
                            Error::OutOfRange(
                                "`preserveRecentMessages` must be a whole number from 1 to 50"
                                    .to_owned(),
                            )
                        })? as usize;
                }
                "customPrompt" => match value {
                    Value::Null => {}
                    Value::String(s) if s.trim().is_empty() => {}
                    Value::String(s) => args.custom_prompt = Some(s.clone()),
                    _ => {
                        return Err(Error::Malformed("`customPrompt` must be a string".into()));
                    }
                },
                other => {
                    return Err(Error::Malformed(format!(
                        "unknown argument `{other}`; expected preserveRecentMessages, customPrompt"
                    )));
                }
            }
        }
        Ok(args)
    }
}

/// The tool result the agent reads after a compaction (the usual text, with the measured
/// reduction in tokens rather than characters).
pub fn compact_history_result(
    messages_compacted: usize,
    preserved: usize,
    tokens_before: usize,
    tokens_after: usize,
) -> String {
    if messages_compacted == 0 {
        return "Not enough messages to compact. No changes made.".into();
    }
    let reduction = if tokens_before > 0 {
        (100.0 * (1.0 - tokens_after as f64 / tokens_before as f64)).round() as i64
    } else {
        0
    };
    format!(
        "Successfully compacted {} into a summary, preserving the {} most recent {}. Reduced message history size by approximately {reduction}% ({tokens_before} -> {tokens_after} tokens).",
        crate::plural(messages_compacted, "message", "messages"),
        preserved,
        if preserved == 1 {
            "message"
        } else {
            "messages"
        }
    )
}

/// Something the agent has running, listed in a status update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activity {
    /// Its id.
    pub id: String,
    /// What it is.
    pub description: String,
}

/// A status update's content.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Status {
    /// Tokens in the context now.
    pub total_tokens: usize,
    /// The model's window.
    pub max_tokens: usize,
    /// What the session has cost so far, in USD.
    pub cost_usd: f64,
    /// Sections of running things (`Sub-Agents`, `Shell Processes`, `Browser Sessions`), each
    /// listed as `Active {name}: n`; empty sections are left out.
    pub activities: Vec<(String, Vec<Activity>)>,
}

impl Status {
    /// The share of the window in use, in percent.
    pub fn percent(&self) -> u32 {
        if self.max_tokens == 0 {
            return 0;
        }
        (100.0 * self.total_tokens as f64 / self.max_tokens as f64).round() as u32
    }

    /// The status's numbers as every front returns them: `total_tokens`, `max_tokens`,
    /// `percent` and `cost_usd`.
    pub fn numbers(&self) -> serde_json::Map<String, Value> {
        let Value::Object(map) = json!({
            "total_tokens": self.total_tokens,
            "max_tokens": self.max_tokens,
            "percent": self.percent(),
            "cost_usd": self.cost_usd,
        }) else {
            unreachable!("a JSON object literal")
        };
        map
    }

    /// The status as a session's status route returns it: its message and [`Status::numbers`].
    pub fn to_document(&self) -> Value {
        let mut doc = serde_json::Map::new();
        doc.insert("message".into(), self.to_message().to_value());
        doc.extend(self.numbers());
        Value::Object(doc)
    }

    /// The message to insert (a system message).
    pub fn to_message(&self) -> Message {
        let mut lines = vec![
            "--- STATUS UPDATE ---".to_owned(),
            format!(
                "Token Usage: {}/{} ({}%)",
                self.total_tokens,
                self.max_tokens,
                self.percent()
            ),
            format!("Cost So Far: ${:.4}", self.cost_usd),
        ];
        for (name, items) in &self.activities {
            lines.push(String::new());
            lines.push(format!("Active {name}: {}", items.len()));
            lines.extend(
                items
                    .iter()
                    .map(|a| format!("- {}: {}", a.id, a.description)),
            );
        }
        lines.push(String::new());
        lines.push(format!(
            "If token usage is high (>70%), consider using the '{COMPACT_HISTORY}' tool to reduce context size."
        ));
        lines.push("--- END STATUS ---".to_owned());
        Message::system(lines.join("\n"))
    }
}

/// When to send a status update: every `every` turns, and whenever usage crosses one of the
/// thresholds upwards (one every 5 turns, and a suggestion to compact above 70%).
#[derive(Debug, Clone, PartialEq)]
pub struct StatusSchedule {
    /// Turns between updates.
    pub every: usize,
    /// Shares of the window that trigger an update when crossed upwards.
    pub thresholds: Vec<f64>,
    turns: usize,
    last_share: f64,
}

impl Default for StatusSchedule {
    fn default() -> Self {
        StatusSchedule {
            every: 5,
            thresholds: vec![0.5, 0.7, 0.8, 0.9],
            turns: 0,
            last_share: 0.0,
        }
    }
}

impl StatusSchedule {
    /// The same rule for a stored session, without state: true when `added` user turns took
    /// the session to `turns` past a multiple of `every`, or the context went from
    /// `tokens_before` to `tokens_after` across one of the thresholds.
    pub fn due_between(
        &self,
        turns: usize,
        added: usize,
        tokens_before: usize,
        tokens_after: usize,
        max_tokens: usize,
    ) -> bool {
        let every = self.every.max(1);
        if added > 0 && turns / every > turns.saturating_sub(added) / every {
            return true;
        }
        if max_tokens == 0 {
            return false;
        }
        let (before, after) = (
            tokens_before as f64 / max_tokens as f64,
            tokens_after as f64 / max_tokens as f64,
        );
        self.thresholds.iter().any(|&t| before < t && after >= t)
    }

    /// Call once per turn with the context's size; true when an update is due now.
    pub fn due(&mut self, total_tokens: usize, max_tokens: usize) -> bool {
        self.turns += 1;
        let share = if max_tokens == 0 {
            0.0
        } else {
            total_tokens as f64 / max_tokens as f64
        };
        let crossed = self
            .thresholds
            .iter()
            .any(|&t| self.last_share < t && share >= t);
        self.last_share = share;
        if crossed || self.turns >= self.every.max(1) {
            self.turns = 0;
            return true;
        }
        false
    }
}

/// The names engram's tools go by in a conversation: `engram_search_history` and
/// `engram_read_history`, or with `_2`, `_3`... when the caller has a tool of that name.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Offered {
    /// `search_history`'s name.
    pub search: String,
    /// `read_history`'s name.
    pub read: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_update_has_the_seeds_content() {
        let status = Status {
            total_tokens: 91_000,
            max_tokens: 128_000,
            cost_usd: 0.4213,
            activities: vec![(
                "Shell Processes".into(),
                vec![Activity {
                    id: "sh1".into(),
                    description: "cargo test".into(),
                }],
            )],
        };
        let text = status.to_message().text().into_owned();
        assert_eq!(
            text,
            "--- STATUS UPDATE ---\nToken Usage: 91000/128000 (71%)\nCost So Far: $0.4213\n\nActive Shell Processes: 1\n- sh1: cargo test\n\nIf token usage is high (>70%), consider using the 'compact_history' tool to reduce context size.\n--- END STATUS ---"
        );
    }

    #[test]
    fn updates_come_every_n_turns_and_on_crossing_a_threshold() {
        let mut s = StatusSchedule::default();
        let due: Vec<bool> = [10, 20, 30, 40, 45, 46, 72, 73, 74, 75, 76, 95]
            .iter()
            .map(|&used| s.due(used, 100))
            .collect();
        assert_eq!(
            due,
            [
                false, false, false, false, true, false, true, false, false, false, false, true
            ]
        );
    }

    #[test]
    fn tool_definitions_and_arguments() {
        let openai = compact_history_tool_openai();
        assert_eq!(openai["function"]["name"], "compact_history");
        let props = &openai["function"]["parameters"]["properties"];
        assert_eq!(props["preserveRecentMessages"]["default"], 10);
        assert_eq!(props["preserveRecentMessages"]["maximum"], 50);
        assert_eq!(
            compact_history_tool_anthropic()["input_schema"],
            openai["function"]["parameters"]
        );
        assert_eq!(
            CompactHistoryArgs::parse(&json!("{\"preserveRecentMessages\": 4}")),
            Ok(CompactHistoryArgs {
                preserve_recent_messages: 4,
                custom_prompt: None
            })
        );
        assert_eq!(
            CompactHistoryArgs::parse(&json!({"customPrompt": "keep the SQL"}))
                .map(|a| (a.preserve_recent_messages, a.custom_prompt)),
            Ok((10, Some("keep the SQL".to_owned())))
        );
        assert_eq!(
            CompactHistoryArgs::parse(&json!("")),
            Ok(CompactHistoryArgs::default())
        );
        for bad in [
            json!({"preserveRecentMessages": 0}),
            json!({"preserveRecentMessages": 51}),
            json!({"preserveRecentMessages": "ten"}),
            json!({"customPrompt": 3}),
            json!({"preserve": 3}),
            json!("{not json"),
        ] {
            let err = CompactHistoryArgs::parse(&bad).expect_err("refused");
            assert!(!err.to_string().is_empty());
        }
        assert_eq!(
            compact_history_result(40, 10, 10_000, 2_500),
            "Successfully compacted 40 messages into a summary, preserving the 10 most recent messages. Reduced message history size by approximately 75% (10000 -> 2500 tokens)."
        );
        assert_eq!(
            compact_history_result(0, 10, 100, 100),
            "Not enough messages to compact. No changes made."
        );
    }

    #[test]
    fn provider_calls_are_read_and_answered_in_their_own_shape() {
        let openai = ProviderCall::parse(&json!({"id": "c1", "type": "function", "function": {"name": "search_history", "arguments": "{\"query\": \"x\"}"}})).expect("openai");
        assert_eq!(openai.name, "search_history");
        assert_eq!(openai.arguments, json!("{\"query\": \"x\"}"));
        let reply = ToolReply::ok("found");
        assert_eq!(
            openai.answer(&reply),
            json!({"role": "tool", "tool_call_id": "c1", "content": "found"})
        );
        let anthropic = ProviderCall::parse(
            &json!({"type": "tool_use", "id": "t1", "name": "read_history", "input": {"ids": 5}}),
        )
        .expect("anthropic");
        let error = ToolReply::error("`ids` must be a list");
        assert_eq!(
            anthropic.answer(&error),
            json!({"type": "tool_result", "tool_use_id": "t1", "content": "`ids` must be a list", "is_error": true})
        );
        assert!(
            ProviderCall::parse(&json!({"function": {}}))
                .unwrap_err()
                .to_string()
                .contains("function.name")
        );
        assert!(
            ProviderCall::parse(&json!({"type": "tool_use"}))
                .unwrap_err()
                .to_string()
                .contains("name")
        );
        assert!(
            ProviderCall::parse(&json!({"x": 1}))
                .unwrap_err()
                .to_string()
                .contains("not a tool call")
        );
    }
}
