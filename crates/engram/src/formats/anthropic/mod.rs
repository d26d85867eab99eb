//! Conversion between the Anthropic Messages format and engram's OpenAI-format model.
//!
//! Anthropic puts the system prompt at the top level, interleaves tool results into user
//! messages as `tool_result` blocks, and writes tool calls as `tool_use` blocks with a JSON
//! `input`. engram maps these onto OpenAI messages (a system message, `tool` messages,
//! `tool_calls`) so that one compaction pipeline serves both, and maps them back.
//!
//! What survives a round trip Anthropic → engram → Anthropic verbatim: the system prompt (string
//! or blocks, with `cache_control`), text blocks and their extra keys, images and documents,
//! `thinking` and `redacted_thinking` blocks with their signatures, `tool_use` blocks (input
//! re-parsed from the same JSON text, key order kept), `tool_result` blocks with `is_error` and
//! their content, and any other top-level keys. Two canonicalisations apply: consecutive
//! user-side messages are merged into one user message (as the API itself does), and within an
//! assistant message the tool calls come after the other blocks.

use std::ops::Range;

use serde_json::{Map, Value, json};

mod cache;
mod callers;

pub use cache::{
    MAX_CACHE_BREAKPOINTS, block_count, has_cache_breakpoints, mark_cache_breakpoints,
};
pub use callers::rewrite_request;

use crate::error::InputError;
use crate::input::Conversation;
use crate::message::{
    Content, ContentPart, Message, Role, ToolCall, leading_instructions, object_at, parse_content,
    type_name,
};

/// Whether `request` is an Anthropic Messages request rather than an OpenAI one: an object with
/// a top-level `system` key, or messages (the object's, or a bare list of them) with `tool_use` /
/// `tool_result` blocks. (Each format's other messages read alike; engram reads those as OpenAI
/// messages, the same either way.)
pub fn is_request(request: &Value) -> bool {
    let messages = match request {
        Value::Object(map) if map.contains_key("system") => return true,
        Value::Object(map) => map.get("messages").and_then(Value::as_array),
        Value::Array(items) => Some(items),
        _ => None,
    };
    let is_tool_block = |block: &Value| {
        matches!(
            block.get("type").and_then(Value::as_str),
            Some("tool_use" | "tool_result")
        )
    };
    messages.is_some_and(|messages| {
        messages.iter().any(|m| {
            m.get("content")
                .and_then(Value::as_array)
                .is_some_and(|blocks| blocks.iter().any(is_tool_block))
        })
    })
}

/// The JSON of `bytes` when it is an Anthropic Messages request ([`is_request`]); `None` for
/// anything else, invalid JSON included (the OpenAI reader then says what is wrong with it).
/// A large OpenAI input is not parsed here: an Anthropic request has a `"system":` key or
/// `tool_use` / `tool_result` blocks somewhere in its text, and one without them is passed over.
pub fn detect(bytes: &[u8]) -> Option<Value> {
    let has = |needle: &[u8]| memchr::memmem::find(bytes, needle).is_some();
    let system_key = memchr::memmem::find_iter(bytes, b"\"system\"").any(|at| {
        bytes[at + 8..]
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|&b| b == b':')
    });
    if !(system_key || has(b"\"tool_use\"") || has(b"\"tool_result\"")) {
        return None;
    }
    let value: Value = serde_json::from_slice(bytes).ok()?;
    is_request(&value).then_some(value)
}

/// Reads a caller's messages as every front does: an Anthropic request or list of Anthropic
/// messages ([`detect`]) with its JSON (what a compaction is written back into), else OpenAI's
/// ([`crate::parse_conversation`]: an object with `messages`, an array or JSON lines).
pub fn parse_request(bytes: &[u8]) -> Result<(Conversation, Option<Value>), InputError> {
    match detect(bytes) {
        Some(original) => Ok((from_anthropic(&original)?, Some(original))),
        None => Ok((crate::parse_conversation(bytes)?, None)),
    }
}

/// Reads an Anthropic Messages request (`{"system"?, "messages", "tools"?, ...}`), or a bare
/// list of its messages.
pub fn from_anthropic(request: &Value) -> Result<Conversation, InputError> {
    read_request(request).map(|(conversation, _)| conversation)
}

/// Where each message [`read_request`] read came from in the caller's request: what writing a
/// compaction back into that request as the caller sent it needs ([`rewrite_request`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sources {
    /// The messages read before the caller's first message (its top-level `system`): 0 or 1.
    offset: usize,
    /// For each caller message, the messages read from it.
    spans: Vec<Range<usize>>,
    /// For each message read, the blocks of its caller message it was read from (none for a
    /// string content, read whole).
    blocks: Vec<Range<usize>>,
}

/// [`from_anthropic`], with where each message came from.
pub fn read_request(request: &Value) -> Result<(Conversation, Sources), InputError> {
    let mut sources = Sources::default();
    let map = match request {
        Value::Object(map) => map,
        Value::Array(items) => {
            let mut conversation = Conversation::default();
            push_messages(&mut conversation.messages, items, &mut sources)?;
            return Ok((conversation, sources));
        }
        _ => {
            return Err(InputError::new(format!(
                "expected an Anthropic Messages request object, found {}",
                type_name(request)
            )));
        }
    };
    let mut conversation = Conversation::default();
    for (key, value) in map {
        match key.as_str() {
            "system" => {
                if !value.is_null() {
                    let content =
                        parse_content(value.clone()).map_err(|e| e.under_field("system"))?;
                    conversation
                        .messages
                        .insert(0, Message::with_content(Role::System, Some(content)));
                }
            }
            "messages" => {
                let Value::Array(items) = value else {
                    return Err(InputError::new(format!(
                        "expected a list of messages, found {}",
                        type_name(value)
                    ))
                    .at_field("messages"));
                };
                push_messages(&mut conversation.messages, items, &mut sources)?;
            }
            "tools" => match value {
                Value::Array(tools) => conversation.tools = tools.clone(),
                Value::Null => {}
                other => {
                    return Err(InputError::new(format!(
                        "expected a list of tools, found {}",
                        type_name(other)
                    ))
                    .at_field("tools"));
                }
            },
            _ => {
                conversation.extra.insert(key.clone(), value.clone());
            }
        }
    }
    // The system prompt, read first whatever the key order, comes before every message.
    if map.get("system").is_some_and(|s| !s.is_null()) {
        sources.offset = 1;
        sources.blocks.insert(0, 0..0);
        for span in &mut sources.spans {
            *span = span.start + 1..span.end + 1;
        }
    }
    Ok((conversation, sources))
}

/// Appends Anthropic messages `items` as engram's, and where each came from to `sources`; an
/// error names the message's index.
fn push_messages(
    messages: &mut Vec<Message>,
    items: &[Value],
    sources: &mut Sources,
) -> Result<(), InputError> {
    for (index, item) in items.iter().enumerate() {
        let read = message_from_anthropic(item).map_err(|e| e.at_index(index))?;
        let start = sources.blocks.len();
        sources.spans.push(start..start + read.len());
        for (message, blocks) in read {
            messages.push(message);
            sources.blocks.push(blocks);
        }
    }
    Ok(())
}

/// The engram messages one Anthropic message is read as, each with the content blocks it was
/// read from (empty for a string content, read whole).
fn message_from_anthropic(item: &Value) -> Result<Vec<(Message, Range<usize>)>, InputError> {
    let Value::Object(map) = item else {
        return Err(InputError::new(format!(
            "expected a message object, found {}",
            type_name(item)
        )));
    };
    let role = match map.get("role").and_then(Value::as_str) {
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        // A system message among the messages (instructions given partway through, as
        // Claude Code sends them): engram's developer role, an instruction kept in place.
        Some("system") => Role::Developer,
        Some(other) => {
            return Err(InputError::new(format!(
                "unknown role {other:?}; Anthropic messages are user, assistant or system"
            ))
            .at_field("role"));
        }
        None => return Err(InputError::new("missing `role` (user or assistant)").at_field("role")),
    };
    let extra: Map<String, Value> = map
        .iter()
        .filter(|(k, _)| *k != "role" && *k != "content")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let blocks = match map.get("content") {
        Some(Value::String(s)) => {
            let mut message = Message::new(role, s.clone());
            message.set_extra(extra);
            return Ok(vec![(message, 0..0)]);
        }
        Some(Value::Array(blocks)) => blocks,
        Some(other) => {
            return Err(InputError::new(format!(
                "expected a string or a list of content blocks, found {}",
                type_name(other)
            ))
            .at_field("content"));
        }
        None => return Err(InputError::new("missing `content`").at_field("content")),
    };
    let mut out = Vec::new();
    let mut parts: Vec<ContentPart> = Vec::new();
    let mut calls: Vec<ToolCall> = Vec::new();
    // Where the blocks of the message being gathered start.
    let mut from = 0;
    for (i, block) in blocks.iter().enumerate() {
        let field = format!("content[{i}]");
        let block = object_at(block, "a content block", &field)?;
        match block.get("type").and_then(Value::as_str) {
            Some("tool_result") if role == Role::User => {
                if !parts.is_empty() {
                    let parts = Content::Parts(std::mem::take(&mut parts));
                    out.push((Message::with_content(role, Some(parts)), from..i));
                }
                let tool = tool_result_to_message(block).map_err(|e| e.under_field(&field))?;
                out.push((tool, i..i + 1));
                from = i + 1;
            }
            Some("tool_use") if role == Role::Assistant => {
                calls.push(tool_use_to_call(block).map_err(|e| e.under_field(&field))?);
            }
            Some(_) => {
                let part =
                    crate::message::parse_content(Value::Array(vec![Value::Object(block.clone())]))
                        .map_err(|e| e.under_field("content"))?;
                if let Content::Parts(mut p) = part {
                    parts.append(&mut p);
                }
            }
            None => {
                return Err(InputError::new("a content block needs a `type`")
                    .at_field(format!("{field}.type")));
            }
        }
    }
    if !parts.is_empty() || !calls.is_empty() || out.is_empty() {
        let content = if parts.is_empty() && !calls.is_empty() {
            None
        } else {
            Some(Content::Parts(parts))
        };
        let mut message = Message::with_content(role, content);
        message.set_tool_calls((!calls.is_empty()).then_some(calls));
        out.push((message, from..blocks.len()));
    }
    if let Some((last, _)) = out.last_mut() {
        last.set_extra(extra);
    }
    Ok(out)
}

fn tool_result_to_message(block: &Map<String, Value>) -> Result<Message, InputError> {
    let id = block
        .get("tool_use_id")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            InputError::new("a tool_result needs `tool_use_id`").at_field("tool_use_id")
        })?;
    let content = match block.get("content") {
        None | Some(Value::Null) => Content::Text(String::new()),
        Some(value) => parse_content(value.clone()).map_err(|e| e.under_field("content"))?,
    };
    let extra = block
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "type" | "tool_use_id" | "content"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut message = Message::tool(id, "");
    message.content = Some(content);
    message.set_extra(extra);
    Ok(message)
}

fn tool_use_to_call(block: &Map<String, Value>) -> Result<ToolCall, InputError> {
    let id = block
        .get("id")
        .and_then(Value::as_str)
        .ok_or_else(|| InputError::new("a tool_use needs an `id`").at_field("id"))?;
    let name = block
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| InputError::new("a tool_use needs a `name`").at_field("name"))?;
    let arguments = block
        .get("input")
        .map_or_else(|| "{}".to_owned(), Value::to_string);
    let mut call = ToolCall::function(id, name, arguments);
    for (k, v) in block {
        if !matches!(k.as_str(), "type" | "id" | "name" | "input") {
            call.extra.insert(k.clone(), v.clone());
        }
    }
    Ok(call)
}

/// Writes a conversation as an Anthropic Messages request.
///
/// Leading system and developer messages become `system`; a system message later in the history
/// (a date marker, say) becomes a user text block starting with `[system]`, since Anthropic has
/// no system role inside `messages`. Tool messages become `tool_result` blocks; OpenAI
/// `image_url` parts become Anthropic `image` blocks; OpenAI-format tool definitions become
/// Anthropic ones. Message ids are not sent (the API rejects unknown keys).
pub fn to_anthropic(conversation: &Conversation) -> Result<Value, InputError> {
    let leading = leading_instructions(&conversation.messages);
    let system = system_value(&conversation.messages[..leading]);
    let turns = conversation.messages[leading..]
        .iter()
        .enumerate()
        .map(|(i, message)| Turn::Message {
            message,
            index: leading + i,
        });
    let messages = write_turns(turns)?;
    Ok(request_value(
        system,
        messages,
        &conversation.tools,
        &conversation.extra,
    ))
}

/// The `system` of a request whose leading instructions are `system`: one text stays a string.
fn system_value(system: &[Message]) -> Option<Value> {
    match system {
        [] => None,
        [
            Message {
                content: Some(Content::Text(s)),
                ..
            },
        ] => Some(Value::String(s.clone())),
        _ => Some(Value::Array(
            system.iter().flat_map(content_blocks).collect(),
        )),
    }
}

/// A request of `system`, `messages`, the tools (Anthropic's definitions) and the other keys.
fn request_value(
    system: Option<Value>,
    messages: Vec<Value>,
    tools: &[Value],
    extra: &Map<String, Value>,
) -> Value {
    let mut request = Map::new();
    if let Some(system) = system {
        request.insert("system".into(), system);
    }
    request.insert("messages".into(), Value::Array(messages));
    if !tools.is_empty() {
        request.insert(
            "tools".into(),
            Value::Array(tools.iter().map(tool_definition).collect()),
        );
    }
    for (k, v) in extra {
        request.entry(k.clone()).or_insert_with(|| v.clone());
    }
    Value::Object(request)
}

/// One piece of the messages being written, after the leading instructions.
enum Turn<'a> {
    /// A message of engram's, written in Anthropic's form (`index`: its place, for errors).
    Message { message: &'a Message, index: usize },
    /// A caller's message as sent (`message`: what engram read from it, one message for a
    /// system message, which is written anew where the API would not take it).
    Callers {
        value: &'a Value,
        message: &'a Message,
        index: usize,
    },
    /// A caller's blocks of `role` as sent (a `tool_result` block perhaps with its output
    /// replaced).
    Blocks { role: Role, blocks: Vec<Value> },
}

/// The messages of `turns`: consecutive turns of one role merge into one message, as the API
/// itself merges them (a caller's message as sent is opened into its blocks for that), but each
/// system message is its own.
fn write_turns<'a>(turns: impl IntoIterator<Item = Turn<'a>>) -> Result<Vec<Value>, InputError> {
    let mut out: Vec<OutMessage> = Vec::new();
    for turn in turns {
        match turn {
            Turn::Callers {
                value,
                message,
                index,
            } => {
                let role = match message.role {
                    Role::Developer if system_fits(&out) => Role::System,
                    Role::Developer => {
                        push_message(&mut out, message, index)?;
                        continue;
                    }
                    role => role,
                };
                if let Some(last) = out.last_mut().filter(|l| l.merges(role)) {
                    last.open();
                    last.blocks.extend(callers_blocks(value));
                } else {
                    out.push(OutMessage {
                        role,
                        blocks: Vec::new(),
                        plain: None,
                        extra: Map::new(),
                        callers: Some(value.clone()),
                    });
                }
            }
            Turn::Message { message, index } => push_message(&mut out, message, index)?,
            Turn::Blocks { role, blocks } => push(&mut out, role, blocks, None, Map::new()),
        }
    }
    Ok(out.into_iter().map(OutMessage::into_value).collect())
}

/// Whether an instruction goes as a system message here: right after a user turn or another
/// system message (or first), where the API takes one; after an assistant turn it is said in a
/// user turn instead.
fn system_fits(out: &[OutMessage]) -> bool {
    out.last().is_none_or(|last| last.role != Role::Assistant)
}

/// Writes engram's `message` (at `index`) in Anthropic's form onto `out`.
fn push_message(
    out: &mut Vec<OutMessage>,
    message: &Message,
    index: usize,
) -> Result<(), InputError> {
    let plain_text = || match &message.content {
        Some(Content::Text(s)) => Some(Value::String(s.clone())),
        _ => None,
    };
    let (role, blocks, plain) = match message.role {
        Role::User => (Role::User, content_blocks(message), plain_text()),
        Role::Developer if system_fits(out) => {
            (Role::System, content_blocks(message), plain_text())
        }
        Role::System | Role::Developer => {
            let text = format!("[{}] {}", message.role, message.text());
            (
                Role::User,
                vec![json!({"type": "text", "text": text})],
                None,
            )
        }
        Role::Tool => (Role::User, vec![tool_result_block(message)], None),
        Role::Assistant => {
            let mut blocks = content_blocks(message);
            for (i, call) in message.calls().iter().enumerate() {
                blocks.push(
                    tool_use_block(call)
                        .map_err(|e| e.under_field(&format!("tool_calls[{i}]")).at_index(index))?,
                );
            }
            let plain = if message.calls().is_empty() {
                plain_text()
            } else {
                None
            };
            (Role::Assistant, blocks, plain)
        }
    };
    // A tool message's extra keys belong to its tool_result block (see `tool_result_block`),
    // not to the Anthropic message.
    let extra = if message.role == Role::Tool {
        Map::new()
    } else {
        message.extra().clone()
    };
    push(out, role, blocks, plain, extra);
    Ok(())
}

/// Adds blocks of `role` to the last message when they merge into it, else as a message.
fn push(
    out: &mut Vec<OutMessage>,
    role: Role,
    blocks: Vec<Value>,
    plain: Option<Value>,
    extra: Map<String, Value>,
) {
    match out.last_mut().filter(|l| l.merges(role)) {
        Some(last) => {
            last.open();
            // The blocks already hold the text a plain string stood for.
            last.plain = None;
            last.blocks.extend(blocks);
        }
        None => out.push(OutMessage {
            role,
            blocks,
            plain,
            extra,
            callers: None,
        }),
    }
}

/// A caller's message's content as blocks: its own, or its string as one text block.
fn callers_blocks(value: &Value) -> Vec<Value> {
    match value.get("content") {
        Some(Value::Array(blocks)) => blocks.clone(),
        Some(Value::String(s)) if !s.is_empty() => vec![json!({"type": "text", "text": s})],
        _ => Vec::new(),
    }
}

/// An Anthropic message being assembled: consecutive same-role messages merge into one.
struct OutMessage {
    role: Role,
    blocks: Vec<Value>,
    /// Plain string content, kept as a string when nothing merges into it.
    plain: Option<Value>,
    extra: Map<String, Value>,
    /// The caller's message as sent, while nothing merged into it.
    callers: Option<Value>,
}

impl OutMessage {
    /// Whether a turn of `role` merges into this message.
    fn merges(&self, role: Role) -> bool {
        self.role == role && role != Role::System
    }

    /// A caller's message opened for a merge: its blocks and keys, as sent.
    fn open(&mut self) {
        if let Some(Value::Object(callers)) = self.callers.take() {
            self.blocks = callers_blocks(&Value::Object(callers.clone()));
            self.plain = None;
            self.extra = callers
                .into_iter()
                .filter(|(k, _)| k != "role" && k != "content")
                .collect();
        }
    }

    fn into_value(self) -> Value {
        if let Some(callers) = self.callers {
            return callers;
        }
        let mut m = Map::new();
        m.insert("role".into(), Value::String(self.role.as_str().into()));
        m.insert(
            "content".into(),
            self.plain.unwrap_or(Value::Array(self.blocks)),
        );
        m.extend(self.extra);
        Value::Object(m)
    }
}

/// A message's content as Anthropic blocks (empty text is dropped; the API rejects it).
fn content_blocks(message: &Message) -> Vec<Value> {
    match &message.content {
        None => Vec::new(),
        Some(Content::Text(s)) if s.is_empty() => Vec::new(),
        Some(Content::Text(s)) => vec![json!({"type": "text", "text": s})],
        Some(Content::Parts(parts)) => parts.iter().map(part_block).collect(),
    }
}

fn part_block(part: &ContentPart) -> Value {
    match part {
        ContentPart::Text { .. } => serde_json::to_value(part).unwrap_or(Value::Null),
        ContentPart::Other(map) if part.kind() == "image_url" => image_block(map),
        ContentPart::Other(map) => Value::Object(map.clone()),
    }
}

/// OpenAI `{"type": "image_url", "image_url": {"url"}}` → Anthropic `{"type": "image", "source"}`.
fn image_block(map: &Map<String, Value>) -> Value {
    let url = map
        .get("image_url")
        .and_then(|u| u.get("url").or(Some(u)))
        .and_then(Value::as_str)
        .unwrap_or("");
    let source = match url
        .strip_prefix("data:")
        .and_then(|rest| rest.split_once(";base64,"))
    {
        Some((media_type, data)) => {
            json!({"type": "base64", "media_type": media_type, "data": data})
        }
        None => json!({"type": "url", "url": url}),
    };
    json!({"type": "image", "source": source})
}

fn tool_result_block(message: &Message) -> Value {
    let mut block = Map::new();
    block.insert("type".into(), Value::String("tool_result".into()));
    block.insert(
        "tool_use_id".into(),
        Value::String(
            message
                .tool_call_id()
                .map(str::to_owned)
                .unwrap_or_default(),
        ),
    );
    let content = match &message.content {
        None => Value::String(String::new()),
        Some(Content::Text(s)) => Value::String(s.clone()),
        Some(Content::Parts(parts)) => Value::Array(parts.iter().map(part_block).collect()),
    };
    block.insert("content".into(), content);
    block.extend(message.extra().clone());
    Value::Object(block)
}

fn tool_use_block(call: &ToolCall) -> Result<Value, InputError> {
    let input: Value = if call.arguments.trim().is_empty() {
        json!({})
    } else {
        serde_json::from_str(&call.arguments).map_err(|e| {
            InputError::new(format!(
                "the arguments are not valid JSON ({e}); Anthropic's tool_use needs a JSON object"
            ))
            .at_field("function.arguments")
        })?
    };
    let mut block = Map::new();
    block.insert("type".into(), Value::String("tool_use".into()));
    block.insert("id".into(), Value::String(call.id.clone()));
    block.insert("name".into(), Value::String(call.name.clone()));
    block.insert("input".into(), input);
    for (k, v) in &call.extra {
        if k != "type" {
            block.insert(k.clone(), v.clone());
        }
    }
    Ok(Value::Object(block))
}

/// OpenAI `{"type": "function", "function": {name, description, parameters}}` → Anthropic
/// `{name, description, input_schema}`; anything else is passed as it is.
fn tool_definition(tool: &Value) -> Value {
    let Some(function) = tool
        .get("function")
        .filter(|_| tool.get("input_schema").is_none())
    else {
        return tool.clone();
    };
    let mut out = Map::new();
    if let Some(name) = function.get("name") {
        out.insert("name".into(), name.clone());
    }
    if let Some(description) = function.get("description") {
        out.insert("description".into(), description.clone());
    }
    out.insert(
        "input_schema".into(),
        function
            .get("parameters")
            .cloned()
            .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
    );
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two turns of one role in a row become one Anthropic message holding each text once.
    #[test]
    fn consecutive_turns_of_a_role_merge_without_repeating_a_text() {
        let conversation = Conversation {
            messages: vec![Message::user("first"), Message::user("second")],
            ..Conversation::default()
        };
        let out = to_anthropic(&conversation).expect("converts");
        assert_eq!(
            out["messages"],
            json!([{"role": "user", "content": [
                {"type": "text", "text": "first"},
                {"type": "text", "text": "second"}
            ]}])
        );
    }

    fn request() -> Value {
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "system": [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": "List the files."},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "I should call ls.", "signature": "EqQBCgIYAhIMabc"},
                    {"type": "text", "text": "Calling ls."},
                    {"type": "tool_use", "id": "toolu_01", "name": "ls", "input": {"path": ".", "all": true}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01", "content": "a.rs\nb.rs", "is_error": false},
                    {"type": "text", "text": "Now open a.rs", "cache_control": {"type": "ephemeral"}}
                ]},
                {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "opaque"}, {"type": "text", "text": "ok"}]}
            ],
            "tools": [{"name": "ls", "description": "list", "input_schema": {"type": "object"}}]
        })
    }

    #[test]
    fn anthropic_round_trip_is_verbatim() {
        let original = request();
        let conversation = from_anthropic(&original).expect("valid");
        let roles: Vec<Role> = conversation.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [
                Role::System,
                Role::User,
                Role::Assistant,
                Role::Tool,
                Role::User,
                Role::Assistant
            ]
        );
        assert_eq!(
            conversation.messages[2].calls()[0].arguments,
            r#"{"path":".","all":true}"#
        );
        assert_eq!(conversation.messages[3].tool_call_id(), Some("toolu_01"));
        let back = to_anthropic(&conversation).expect("converts");
        assert_eq!(back, original);
    }

    #[test]
    fn openai_history_converts() {
        let conversation = Conversation {
            messages: vec![
                Message::system("sys"),
                Message::user("hi"),
                Message::assistant_tool_calls(vec![ToolCall::function("c1", "f", "{\"a\":1}")]),
                Message::tool("c1", "result"),
                Message::system("[date 2024-01-01]"),
                Message::assistant("done"),
            ],
            tools: vec![
                json!({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}),
            ],
            extra: Map::new(),
        };
        let out = to_anthropic(&conversation).expect("converts");
        assert_eq!(out["system"], json!("sys"));
        let messages = out["messages"].as_array().expect("messages");
        assert_eq!(messages.len(), 4);
        assert_eq!(messages[1]["content"][0]["input"], json!({"a": 1}));
        assert_eq!(messages[2]["content"][0]["type"], "tool_result");
        assert_eq!(
            messages[2]["content"][1]["text"],
            "[system] [date 2024-01-01]"
        );
        assert_eq!(out["tools"][0]["input_schema"], json!({"type": "object"}));
    }

    #[test]
    fn invalid_arguments_name_the_place() {
        let conversation = Conversation::new(vec![Message::assistant_tool_calls(vec![
            ToolCall::function("c1", "f", "{not json"),
        ])]);
        let e = to_anthropic(&conversation).expect_err("bad args");
        assert_eq!(e.index, Some(0));
        assert_eq!(e.field.as_deref(), Some("tool_calls[0].function.arguments"));
    }

    #[test]
    fn bad_anthropic_input_names_the_place() {
        let e = from_anthropic(&json!({"messages": [{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}]}))
            .expect_err("role");
        assert_eq!((e.index, e.field.as_deref()), (Some(1), Some("role")));
        let e = from_anthropic(
            &json!({"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]}),
        )
        .expect_err("tool_use_id");
        assert_eq!(e.field.as_deref(), Some("content[0].tool_use_id"));
    }

    #[test]
    fn a_request_is_detected_by_its_system_key_or_its_tool_blocks() {
        let anthropic = |text: &str| detect(text.as_bytes()).is_some();
        // A system key, however it is spaced.
        assert!(anthropic(r#"{"system":"Be terse.","messages":[]}"#));
        assert!(anthropic(
            "{\"system\"\n  : \"Be terse.\", \"messages\": []}"
        ));
        assert!(anthropic(&request().to_string()));
        // Tool blocks, without a system prompt.
        let tool_use = r#"{"messages": [{"role": "user", "content": "ls"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "ls", "input": {}}]}]}"#;
        assert!(anthropic(tool_use));
        // OpenAI messages, even when their text says "system": or "tool_use".
        let openai = r#"{"model": "gpt-4o", "messages": [
            {"role": "system", "content": "Reply with JSON like {\"system\": 1}."},
            {"role": "user", "content": "what is a \"tool_use\" block?"}]}"#;
        assert!(!anthropic(openai));
        assert!(!anthropic(r#"[{"role": "system", "content": "x"}]"#));
        // Not JSON: the OpenAI reader reports it.
        assert!(!anthropic(r#"{"system": "x", "messages": [}"#));
        assert!(!anthropic(r#"{"system""#));
    }
}
