//! The message model: OpenAI chat messages, plus an optional stable `id`.
//!
//! engram's own decisions only need a few things from a message: its role, its text, its tool
//! calls and the id of the call a tool result answers. Everything else a caller sends (images,
//! `cache_control` markers, Anthropic thinking blocks with their signatures, vendor keys) is
//! carried through verbatim, because dropping a user's data silently is the failure mode engram
//! exists to prevent. Known fields are typed; unknown ones live in `extra` maps at the level
//! they were found (message, content part, tool call, function).

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

use crate::error::InputError;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Instructions from the application.
    System,
    /// Instructions from the developer (OpenAI's newer name for system instructions).
    Developer,
    /// The human (or the harness speaking for them).
    User,
    /// The model.
    Assistant,
    /// The result of a tool call.
    Tool,
}

impl Role {
    /// Every role, in the order they are documented.
    pub const ALL: [Role; 5] = [
        Role::System,
        Role::Developer,
        Role::User,
        Role::Assistant,
        Role::Tool,
    ];

    /// The role's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::Developer => "developer",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    /// Parses a wire name; `None` for anything else.
    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// System and developer messages carry instructions rather than conversation.
    pub fn is_instruction(self) -> bool {
        matches!(self, Role::System | Role::Developer)
    }
}

/// How many messages open `messages` with instructions (system or developer): the prefix
/// every compaction keeps verbatim, and what an Anthropic request puts in `system`.
pub fn leading_instructions(messages: &[Message]) -> usize {
    messages
        .iter()
        .take_while(|m| m.role.is_instruction())
        .count()
}

/// A map of the keys a parser did not take: the input object's map, which keeps the room of
/// every key it had (an empty map that held `role` and `content` still holds their space, about
/// 350 bytes; a history of millions of short messages would keep that per message).
fn shrunk(map: Map<String, Value>) -> Map<String, Value> {
    if map.is_empty() {
        Map::new()
    } else {
        map.into_iter().collect()
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// A message's content: a plain string or a list of parts.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    /// `"content": "..."`.
    Text(String),
    /// `"content": [{"type": "text", "text": "..."}, ...]`.
    Parts(Vec<ContentPart>),
}

/// One element of a list-of-parts content.
#[derive(Debug, Clone, PartialEq)]
pub enum ContentPart {
    /// `{"type": "text", "text": "...", ...}`; keys other than `type` and `text`
    /// (`cache_control`, say) are kept in `extra`.
    Text {
        /// The text.
        text: String,
        /// Other keys of the part, verbatim.
        extra: Map<String, Value>,
    },
    /// Any other part (an image, an Anthropic `thinking` block with its signature, ...),
    /// kept verbatim. It always is an object with a string `type`.
    Other(Map<String, Value>),
}

impl ContentPart {
    /// A plain text part.
    pub fn text(text: impl Into<String>) -> Self {
        ContentPart::Text {
            text: text.into(),
            extra: Map::new(),
        }
    }

    /// The part's `type`.
    pub fn kind(&self) -> &str {
        match self {
            ContentPart::Text { .. } => "text",
            ContentPart::Other(map) => map.get("type").and_then(Value::as_str).unwrap_or(""),
        }
    }
}

/// A function call requested by the assistant (`tool_calls[i]`).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The call id that the answering tool message names in `tool_call_id`.
    pub id: String,
    /// The function's name.
    pub name: String,
    /// The arguments, as the JSON text the model produced (OpenAI sends a string).
    pub arguments: String,
    /// Other keys of the `function` object, verbatim.
    pub function_extra: Map<String, Value>,
    /// Other keys of the tool call (`type` is kept here, normally `"function"`), verbatim.
    pub extra: Map<String, Value>,
}

impl ToolCall {
    /// A function call with the usual `"type": "function"`.
    pub fn function(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        let mut extra = Map::new();
        extra.insert("type".into(), Value::String("function".into()));
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
            function_extra: Map::new(),
            extra,
        }
    }
}

/// One chat message in OpenAI format.
///
/// The fields most messages have (role, content, id) are inline; the rest (a participant's
/// `name`, tool calls, the id of the call a tool result answers, unknown keys) sit behind one
/// pointer that is null for a plain chat turn, so a short message costs 72 bytes before its text.
/// They are read and written through accessors ([`Message::name`], [`Message::tool_calls`],
/// [`Message::tool_call_id`], [`Message::extra`] and their setters).
#[derive(Debug, Clone)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// The content; `None` when absent or `null` (an assistant message with only tool calls).
    pub content: Option<Content>,
    /// A stable id supplied by the caller, used for provenance.
    pub id: Option<String>,
    rest: Option<Box<Rest>>,
}

/// The fields of a message that a plain chat turn does not have.
#[derive(Debug, Clone, Default, PartialEq)]
struct Rest {
    name: Option<String>,
    tool_calls: Option<Vec<ToolCall>>,
    tool_call_id: Option<String>,
    extra: Map<String, Value>,
}

impl Rest {
    fn is_empty(&self) -> bool {
        self.name.is_none()
            && self.tool_calls.is_none()
            && self.tool_call_id.is_none()
            && self.extra.is_empty()
    }
}

static NO_EXTRA: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);

impl PartialEq for Message {
    fn eq(&self, other: &Self) -> bool {
        self.role == other.role
            && self.content == other.content
            && self.id == other.id
            && self.name() == other.name()
            && self.tool_calls() == other.tool_calls()
            && self.tool_call_id() == other.tool_call_id()
            && self.extra() == other.extra()
    }
}

impl Message {
    /// A message with string content.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: Some(Content::Text(content.into())),
            id: None,
            rest: None,
        }
    }

    /// A message with the given content (`None`: no content, as an assistant message with
    /// only tool calls).
    pub fn with_content(role: Role, content: Option<Content>) -> Self {
        Message {
            role,
            content,
            id: None,
            rest: None,
        }
    }

    fn rest_mut(&mut self) -> &mut Rest {
        self.rest.get_or_insert_with(Box::default)
    }

    /// Drops the out-of-line part when nothing is left in it.
    fn tidy(&mut self) {
        if self.rest.as_ref().is_some_and(|r| r.is_empty()) {
            self.rest = None;
        }
    }

    /// The optional `name` of the participant.
    pub fn name(&self) -> Option<&str> {
        self.rest.as_ref()?.name.as_deref()
    }

    /// Sets or clears the participant's `name`.
    pub fn set_name(&mut self, name: Option<String>) {
        if name.is_some() || self.rest.is_some() {
            self.rest_mut().name = name;
            self.tidy();
        }
    }

    /// Tool calls of an assistant message; `None` when the key is absent (see also
    /// [`Message::calls`]).
    pub fn tool_calls(&self) -> Option<&[ToolCall]> {
        self.rest.as_ref()?.tool_calls.as_deref()
    }

    /// The tool calls, to change them in place; `None` when the key is absent.
    pub fn tool_calls_mut(&mut self) -> Option<&mut Vec<ToolCall>> {
        self.rest.as_mut()?.tool_calls.as_mut()
    }

    /// Sets or clears the tool calls (`Some(vec![])` keeps an empty `tool_calls` key).
    pub fn set_tool_calls(&mut self, calls: Option<Vec<ToolCall>>) {
        if calls.is_some() || self.rest.is_some() {
            self.rest_mut().tool_calls = calls;
            self.tidy();
        }
    }

    /// For a tool message, the id of the call it answers.
    pub fn tool_call_id(&self) -> Option<&str> {
        self.rest.as_ref()?.tool_call_id.as_deref()
    }

    /// Sets or clears the id of the call a tool message answers.
    pub fn set_tool_call_id(&mut self, id: Option<String>) {
        if id.is_some() || self.rest.is_some() {
            self.rest_mut().tool_call_id = id;
            self.tidy();
        }
    }

    /// Every other key of the message, verbatim and in order.
    pub fn extra(&self) -> &Map<String, Value> {
        self.rest.as_ref().map_or(&NO_EXTRA, |r| &r.extra)
    }

    /// The other keys, to change them.
    pub fn extra_mut(&mut self) -> &mut Map<String, Value> {
        &mut self.rest_mut().extra
    }

    /// Replaces the other keys.
    pub fn set_extra(&mut self, extra: Map<String, Value>) {
        if !extra.is_empty() || self.rest.is_some() {
            self.rest_mut().extra = extra;
            self.tidy();
        }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Message::new(Role::System, content)
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Message::new(Role::User, content)
    }

    /// An assistant message with text content.
    pub fn assistant(content: impl Into<String>) -> Self {
        Message::new(Role::Assistant, content)
    }

    /// An assistant message that only calls tools.
    pub fn assistant_tool_calls(calls: Vec<ToolCall>) -> Self {
        let mut message = Message::with_content(Role::Assistant, None);
        message.set_tool_calls(Some(calls));
        message
    }

    /// A tool result answering `tool_call_id`.
    pub fn tool(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        let mut message = Message::new(Role::Tool, content);
        message.set_tool_call_id(Some(tool_call_id.into()));
        message
    }

    /// The same message with a stable id.
    #[must_use]
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// The message's text: string content, or the text parts joined with nothing between them
    /// (as OpenAI's accounting and the evaluation harness do). Non-text parts contribute nothing.
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        match &self.content {
            None => std::borrow::Cow::Borrowed(""),
            Some(Content::Text(s)) => std::borrow::Cow::Borrowed(s),
            Some(Content::Parts(parts)) => {
                let mut texts = parts.iter().filter_map(|p| match p {
                    ContentPart::Text { text, .. } => Some(text.as_str()),
                    ContentPart::Other(_) => None,
                });
                match (texts.next(), texts.next()) {
                    (None, _) => std::borrow::Cow::Borrowed(""),
                    (Some(one), None) => std::borrow::Cow::Borrowed(one),
                    (Some(first), Some(second)) => {
                        let mut s = String::from(first);
                        s.push_str(second);
                        texts.for_each(|t| s.push_str(t));
                        std::borrow::Cow::Owned(s)
                    }
                }
            }
        }
    }

    /// Parts that are not text (images, thinking blocks, ...), in order.
    pub fn non_text_parts(&self) -> impl Iterator<Item = &Map<String, Value>> {
        let parts: &[ContentPart] = match &self.content {
            Some(Content::Parts(parts)) => parts,
            _ => &[],
        };
        parts.iter().filter_map(|p| match p {
            ContentPart::Other(map) => Some(map),
            ContentPart::Text { .. } => None,
        })
    }

    /// The tool calls, or an empty slice.
    pub fn calls(&self) -> &[ToolCall] {
        self.tool_calls().unwrap_or(&[])
    }

    /// Parses one message from a JSON value, validating every field it knows. A message other
    /// than an assistant's needs its content: `{"role": "user", "text": "hi"}` is refused with
    /// the key it has, not stored as a message that says nothing.
    ///
    /// The error names the field; the caller adds the message index and line.
    pub fn from_value(value: Value) -> Result<Message, InputError> {
        Self::parse(value, true)
    }

    /// Parses a message a store kept: as [`Message::from_value`], but a message without
    /// content that an earlier version accepted still reads back.
    pub fn from_stored(value: Value) -> Result<Message, InputError> {
        Self::parse(value, false)
    }

    fn parse(value: Value, strict: bool) -> Result<Message, InputError> {
        let Value::Object(mut map) = value else {
            return Err(InputError::new(format!(
                "expected a message object like {{\"role\": \"user\", \"content\": \"...\"}}, found {}",
                type_name(&value)
            )));
        };
        let role = match map.remove("role") {
            Some(Value::String(s)) => Role::parse(&s).ok_or_else(|| {
                let hint = if s == "function" {
                    " (the legacy `function` role is not supported: send it as a `tool` message)"
                } else {
                    ""
                };
                InputError::new(format!(
                    "unknown role {s:?}; expected one of system, developer, user, assistant, tool{hint}"
                ))
                .at_field("role")
            })?,
            Some(other) => {
                return Err(InputError::new(format!(
                    "expected the role as a string, found {}",
                    type_name(&other)
                ))
                .at_field("role"));
            }
            None => {
                return Err(InputError::new(
                    "missing `role` (one of system, developer, user, assistant, tool)",
                )
                .at_field("role"));
            }
        };
        let had_content = map.contains_key("content");
        let content = match map.remove("content") {
            None | Some(Value::Null) => None,
            Some(value) => Some(parse_content(value).map_err(|e| e.under_field("content"))?),
        };
        let name = optional_string(&mut map, "name")?;
        let id = optional_string(&mut map, "id")?;
        let tool_call_id = optional_string(&mut map, "tool_call_id")?;
        let tool_calls = match map.remove("tool_calls") {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) => Some(
                items
                    .into_iter()
                    .enumerate()
                    .map(|(i, v)| {
                        parse_tool_call(v).map_err(|e| e.under_field(&format!("tool_calls[{i}]")))
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            Some(other) => {
                return Err(InputError::new(format!(
                    "expected a list of tool calls, found {}",
                    type_name(&other)
                ))
                .at_field("tool_calls"));
            }
        };
        // A call's result is matched by its id: two calls of one message with the same id
        // would leave the second result with no call of its own.
        if let Some(calls) = &tool_calls {
            for (i, call) in calls.iter().enumerate() {
                if let Some(first) = calls[..i].iter().position(|c| c.id == call.id) {
                    return Err(InputError::new(format!(
                        "{:?} is also the id of tool_calls[{first}]; each call of a message needs an id of its own",
                        call.id
                    ))
                    .at_field(format!("tool_calls[{i}].id")));
                }
            }
        }
        if role == Role::Tool && tool_call_id.is_none() {
            return Err(InputError::new(
                "a tool message needs `tool_call_id`: the id of the assistant tool call it answers",
            )
            .at_field("tool_call_id"));
        }
        if role != Role::Assistant && tool_calls.as_ref().is_some_and(|c| !c.is_empty()) {
            return Err(InputError::new(format!(
                "only assistant messages may carry tool calls; this one has role {role}"
            ))
            .at_field("tool_calls"));
        }
        if strict && content.is_none() && role != Role::Assistant {
            return Err(no_content(role, had_content, &map));
        }
        let rest = Rest {
            name,
            tool_calls,
            tool_call_id,
            extra: shrunk(map),
        };
        Ok(Message {
            role,
            content,
            id,
            rest: (!rest.is_empty()).then(|| Box::new(rest)),
        })
    }

    /// The message as a JSON value (the same shape it was parsed from).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

impl AsRef<Message> for Message {
    fn as_ref(&self) -> &Message {
        self
    }
}

impl Serialize for Message {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        if let Some(id) = &self.id {
            map.serialize_entry("id", id)?;
        }
        map.serialize_entry("role", self.role.as_str())?;
        match &self.content {
            None => map.serialize_entry("content", &Value::Null)?,
            Some(Content::Text(s)) => map.serialize_entry("content", s)?,
            Some(Content::Parts(parts)) => map.serialize_entry("content", parts)?,
        }
        if let Some(rest) = &self.rest {
            if let Some(name) = &rest.name {
                map.serialize_entry("name", name)?;
            }
            if let Some(calls) = &rest.tool_calls {
                map.serialize_entry("tool_calls", calls)?;
            }
            if let Some(id) = &rest.tool_call_id {
                map.serialize_entry("tool_call_id", id)?;
            }
            for (k, v) in &rest.extra {
                map.serialize_entry(k, v)?;
            }
        }
        map.end()
    }
}

impl<'de> serde::Deserialize<'de> for Message {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Message::from_value(value).map_err(serde::de::Error::custom)
    }
}

impl Serialize for ContentPart {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ContentPart::Text { text, extra } => {
                let mut map = serializer.serialize_map(None)?;
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", text)?;
                for (k, v) in extra {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
            ContentPart::Other(map) => map.serialize(serializer),
        }
    }
}

impl Serialize for ToolCall {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        struct Function<'a>(&'a ToolCall);
        impl Serialize for Function<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut map = serializer.serialize_map(None)?;
                map.serialize_entry("name", &self.0.name)?;
                map.serialize_entry("arguments", &self.0.arguments)?;
                for (k, v) in &self.0.function_extra {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("id", &self.id)?;
        // `type` keeps its place before `function`, as every SDK writes it.
        if let Some(kind) = self.extra.get("type") {
            map.serialize_entry("type", kind)?;
        }
        map.serialize_entry("function", &Function(self))?;
        for (k, v) in self.extra.iter().filter(|(k, _)| *k != "type") {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// `value` as the object a list of a request holds at `field` (`what`: "a message", "an
/// item"), or the error naming the place and what it found instead.
pub(crate) fn object_at<'v>(
    value: &'v Value,
    what: &str,
    field: &str,
) -> Result<&'v Map<String, Value>, InputError> {
    match value {
        Value::Object(map) => Ok(map),
        other => Err(InputError::new(format!(
            "expected {what} object, found {}",
            type_name(other)
        ))
        .at_field(field.to_owned())),
    }
}

/// A short name for a JSON value's type, for error messages.
pub(crate) fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn optional_string(map: &mut Map<String, Value>, key: &str) -> Result<Option<String>, InputError> {
    match map.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(InputError::new(format!(
            "expected a string, found {}",
            type_name(&other)
        ))
        .at_field(key)),
    }
}

/// The error for a message of `role` without content: it names the keys the message has
/// instead (`text`, `message`), which is where a client put the text.
fn no_content(role: Role, null: bool, rest: &serde_json::Map<String, Value>) -> InputError {
    let what = if role == Role::Tool {
        "the tool's output"
    } else {
        "its text"
    };
    let keys: Vec<String> = rest
        .keys()
        .filter(|k| !matches!(k.as_str(), "name" | "id" | "tool_call_id" | "pinned"))
        .map(|k| format!("`{k}`"))
        .collect();
    let message = if null {
        format!("`content` is null; a {role} message needs `content`: {what}")
    } else if keys.is_empty() {
        format!("a {role} message needs `content`: {what}")
    } else {
        format!(
            "a {role} message needs `content`: {what}; this one has {} instead (put the text under `content`)",
            keys.join(", ")
        )
    };
    InputError::new(message).at_field("content")
}

/// Parses `content`: a string or a list of typed parts.
pub(crate) fn parse_content(value: Value) -> Result<Content, InputError> {
    match value {
        Value::String(s) => Ok(Content::Text(s)),
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| parse_part(item).map_err(|e| e.under_field(&format!("[{i}]"))))
            .collect::<Result<Vec<_>, _>>()
            .map(Content::Parts),
        other => Err(InputError::new(format!(
            "expected a string or a list of content parts, found {}",
            type_name(&other)
        ))),
    }
}

fn parse_part(value: Value) -> Result<ContentPart, InputError> {
    let Value::Object(mut map) = value else {
        return Err(InputError::new(format!(
            "expected a content part object like {{\"type\": \"text\", \"text\": \"...\"}}, found {}",
            type_name(&value)
        )));
    };
    match map.get("type") {
        Some(Value::String(t)) if t == "text" => {}
        Some(Value::String(_)) => return Ok(ContentPart::Other(map)),
        Some(other) => {
            return Err(InputError::new(format!(
                "expected the part's type as a string, found {}",
                type_name(other)
            ))
            .at_field("type"));
        }
        None => return Err(InputError::new("a content part needs a `type`").at_field("type")),
    }
    match map.remove("text") {
        Some(Value::String(text)) => {
            map.remove("type");
            Ok(ContentPart::Text {
                text,
                extra: shrunk(map),
            })
        }
        Some(other) => Err(InputError::new(format!(
            "expected the text as a string, found {}",
            type_name(&other)
        ))
        .at_field("text")),
        None => Err(InputError::new("a text part needs `text`").at_field("text")),
    }
}

fn parse_tool_call(value: Value) -> Result<ToolCall, InputError> {
    let Value::Object(mut map) = value else {
        return Err(InputError::new(format!(
            "expected a tool call object, found {}",
            type_name(&value)
        )));
    };
    let id = match map.remove("id") {
        Some(Value::String(s)) => s,
        Some(other) => {
            return Err(InputError::new(format!(
                "expected the call id as a string, found {}",
                type_name(&other)
            ))
            .at_field("id"));
        }
        None => {
            return Err(InputError::new(
                "a tool call needs an `id` (the tool message answering it names it)",
            )
            .at_field("id"));
        }
    };
    let mut function = match map.remove("function") {
        Some(Value::Object(f)) => f,
        Some(other) => {
            return Err(InputError::new(format!(
                "expected an object with `name` and `arguments`, found {}",
                type_name(&other)
            ))
            .at_field("function"));
        }
        None => {
            return Err(InputError::new(
                "a tool call needs `function` with `name` and `arguments`",
            )
            .at_field("function"));
        }
    };
    let name = match function.remove("name") {
        Some(Value::String(s)) => s,
        Some(other) => {
            return Err(InputError::new(format!(
                "expected the function name as a string, found {}",
                type_name(&other)
            ))
            .at_field("function.name"));
        }
        None => return Err(InputError::new("missing function name").at_field("function.name")),
    };
    // OpenAI sends the arguments as a JSON string. Some providers (Ollama's native API, for one)
    // send an object; it is kept as its JSON text, which is what the model would have written.
    let arguments = match function.remove("arguments") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s,
        Some(other) => other.to_string(),
    };
    Ok(ToolCall {
        id,
        name,
        arguments,
        function_extra: shrunk(function),
        extra: shrunk(map),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_message_without_content_is_refused_naming_the_key_it_has() {
        let e = Message::from_value(json!({"role": "user", "text": "hi"})).expect_err("no content");
        assert_eq!(e.field.as_deref(), Some("content"));
        assert!(e.message.contains("`text`"), "{e}");
        let e = Message::from_value(json!({"role": "system", "content": null})).expect_err("null");
        assert!(e.message.contains("is null"), "{e}");
        let e = Message::from_value(json!({"role": "tool", "tool_call_id": "c1"}))
            .expect_err("a tool result says nothing");
        assert!(e.message.contains("the tool's output"), "{e}");
        // An assistant's turn may be only tool calls, or nothing; empty text is text.
        assert!(Message::from_value(json!({"role": "assistant", "content": null})).is_ok());
        assert!(Message::from_value(json!({"role": "user", "content": ""})).is_ok());
        // What a store kept before the rule still reads back.
        assert!(Message::from_stored(json!({"role": "user", "text": "hi"})).is_ok());
    }

    #[test]
    fn a_plain_message_is_small_and_its_rare_fields_round_trip() {
        // A long history of short turns is mostly `Message` headers: keep them at 72 bytes
        // (208 with every field inline).
        assert!(
            std::mem::size_of::<Message>() <= 72,
            "{}",
            std::mem::size_of::<Message>()
        );
        let mut m = Message::user("hi");
        assert!(m.rest.is_none());
        m.set_name(Some("bob".into()));
        m.set_tool_call_id(Some("c1".into()));
        m.extra_mut().insert("x".into(), json!(1));
        assert_eq!((m.name(), m.tool_call_id()), (Some("bob"), Some("c1")));
        assert_eq!(m.extra().get("x"), Some(&json!(1)));
        m.set_name(None);
        m.set_tool_call_id(None);
        m.set_extra(Map::new());
        assert!(m.rest.is_none(), "emptied rare fields free their room");
        assert_eq!(m, Message::user("hi"));
        // An empty `tool_calls` key is kept (it is not the same as an absent one).
        let mut calls = Message::assistant("ok");
        calls.set_tool_calls(Some(Vec::new()));
        assert_eq!(calls.to_value()["tool_calls"], json!([]));
        assert_ne!(calls, Message::assistant("ok"));
    }

    #[test]
    fn round_trip_keeps_unknown_fields_images_and_cache_control() {
        let input = json!({
            "id": "m7",
            "role": "user",
            "content": [
                {"type": "text", "text": "look", "cache_control": {"type": "ephemeral"}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}}
            ],
            "name": "alice",
            "x_vendor": {"keep": [1, 2, 3]}
        });
        let message = Message::from_value(input.clone()).expect("valid");
        assert_eq!(message.text(), "look");
        assert_eq!(message.to_value(), input);
    }

    #[test]
    fn thinking_blocks_pass_verbatim() {
        let input = json!({
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "let me see", "signature": "EqQBCgIYAhIM"},
                {"type": "text", "text": "done"}
            ],
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{\"path\":\".\"}"}}]
        });
        let message = Message::from_value(input.clone()).expect("valid");
        assert_eq!(message.to_value(), input);
        assert_eq!(message.calls()[0].name, "ls");
    }

    #[test]
    fn errors_name_the_field() {
        let err = Message::from_value(json!({"role": "robot", "content": "x"})).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("role"));
        assert!(err.message.contains("robot"), "{err}");

        let err = Message::from_value(json!({"role": "tool", "content": "x"})).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("tool_call_id"));

        let err = Message::from_value(json!({"role": "user", "content": 5})).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("content"));

        let err =
            Message::from_value(json!({"role": "user", "content": [{"type": "text", "text": 1}]}))
                .unwrap_err();
        assert_eq!(err.field.as_deref(), Some("content[0].text"));

        let err = Message::from_value(
            json!({"role": "assistant", "tool_calls": [{"id": "a", "function": {}}]}),
        )
        .unwrap_err();
        assert_eq!(err.field.as_deref(), Some("tool_calls[0].function.name"));

        let call =
            json!({"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}});
        let err = Message::from_value(json!({"role": "assistant", "tool_calls": [call, call]}))
            .unwrap_err();
        assert_eq!(err.field.as_deref(), Some("tool_calls[1].id"));
        assert!(
            err.message.contains("also the id of tool_calls[0]"),
            "{err}"
        );
    }

    #[test]
    fn object_arguments_become_json_text() {
        let m = Message::from_value(json!({
            "role": "assistant", "content": null,
            "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]
        }))
        .expect("valid");
        assert_eq!(m.calls()[0].arguments, r#"{"x":1}"#);
    }
}
