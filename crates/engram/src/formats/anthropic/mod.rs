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

use serde_json::{Map, Value, json};

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
    let map = match request {
        Value::Object(map) => map,
        Value::Array(items) => {
            let mut conversation = Conversation::default();
            push_messages(&mut conversation.messages, items)?;
            return Ok(conversation);
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
                push_messages(&mut conversation.messages, items)?;
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
    Ok(conversation)
}

/// Appends Anthropic messages `items` as engram's, an error naming the message's index.
fn push_messages(messages: &mut Vec<Message>, items: &[Value]) -> Result<(), InputError> {
    for (index, item) in items.iter().enumerate() {
        messages.extend(message_from_anthropic(item).map_err(|e| e.at_index(index))?);
    }
    Ok(())
}

fn message_from_anthropic(item: &Value) -> Result<Vec<Message>, InputError> {
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
            return Ok(vec![message]);
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
    for (i, block) in blocks.iter().enumerate() {
        let field = format!("content[{i}]");
        let block = object_at(block, "a content block", &field)?;
        match block.get("type").and_then(Value::as_str) {
            Some("tool_result") if role == Role::User => {
                if !parts.is_empty() {
                    out.push(Message::with_content(
                        role,
                        Some(Content::Parts(std::mem::take(&mut parts))),
                    ));
                }
                out.push(tool_result_to_message(block).map_err(|e| e.under_field(&field))?);
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
        out.push(message);
    }
    if let Some(last) = out.last_mut() {
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
    let mut request = Map::new();
    let leading = leading_instructions(&conversation.messages);
    if leading > 0 {
        let system = &conversation.messages[..leading];
        let value = match system {
            [
                Message {
                    content: Some(Content::Text(s)),
                    ..
                },
            ] => Value::String(s.clone()),
            _ => Value::Array(system.iter().flat_map(content_blocks).collect()),
        };
        request.insert("system".into(), value);
    }
    let mut messages: Vec<OutMessage> = Vec::new();
    for (index, message) in conversation.messages.iter().enumerate().skip(leading) {
        let (role, blocks, plain) =
            match message.role {
                Role::User => (
                    Role::User,
                    content_blocks(message),
                    match &message.content {
                        Some(Content::Text(s)) => Some(Value::String(s.clone())),
                        _ => None,
                    },
                ),
                // An instruction given partway through goes as a system message where the API
                // takes one, right after a user turn (or another system message); after an
                // assistant turn it is said in a user turn instead.
                Role::Developer
                    if messages
                        .last()
                        .is_none_or(|last| last.role != Role::Assistant) =>
                {
                    (
                        Role::System,
                        content_blocks(message),
                        match &message.content {
                            Some(Content::Text(s)) => Some(Value::String(s.clone())),
                            _ => None,
                        },
                    )
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
                        blocks.push(tool_use_block(call).map_err(|e| {
                            e.under_field(&format!("tool_calls[{i}]")).at_index(index)
                        })?);
                    }
                    let plain = match (&message.content, message.calls().is_empty()) {
                        (Some(Content::Text(s)), true) => Some(Value::String(s.clone())),
                        _ => None,
                    };
                    (Role::Assistant, blocks, plain)
                }
            };
        match messages.last_mut() {
            // Each system message is its own, as the caller sent it.
            Some(last) if last.role == role && role != Role::System => {
                // The blocks already hold the text a plain string stood for.
                last.plain = None;
                last.blocks.extend(blocks);
            }
            _ => {
                // A tool message's extra keys belong to its tool_result block (see
                // `tool_result_block`), not to the Anthropic message.
                let extra = if message.role == Role::Tool {
                    Map::new()
                } else {
                    message.extra().clone()
                };
                messages.push(OutMessage {
                    role,
                    blocks,
                    plain,
                    extra,
                });
            }
        }
    }
    let messages: Vec<Value> = messages
        .into_iter()
        .map(|out| {
            let mut m = Map::new();
            m.insert("role".into(), Value::String(out.role.as_str().into()));
            m.insert(
                "content".into(),
                out.plain.unwrap_or(Value::Array(out.blocks)),
            );
            m.extend(out.extra);
            Value::Object(m)
        })
        .collect();
    request.insert("messages".into(), Value::Array(messages));
    if !conversation.tools.is_empty() {
        request.insert(
            "tools".into(),
            Value::Array(conversation.tools.iter().map(tool_definition).collect()),
        );
    }
    for (k, v) in &conversation.extra {
        request.entry(k.clone()).or_insert_with(|| v.clone());
    }
    Ok(Value::Object(request))
}

/// An Anthropic message being assembled: consecutive same-role messages merge into one.
struct OutMessage {
    role: Role,
    blocks: Vec<Value>,
    /// Plain string content, kept as a string when nothing merges into it.
    plain: Option<Value>,
    extra: Map<String, Value>,
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

/// Puts the caller's own JSON back into a request [`to_anthropic`] wrote from a compacted
/// conversation: each written message that says what one of the caller's `messages` says
/// becomes that message as the caller sent it, every field in the caller's order, and so does
/// `system` when it is the caller's. "Says the same" is judged by writing the caller's part the
/// same way, so only what engram changed or wrote is engram's JSON.
pub fn keep_callers_json(written: &mut Value, original: &Value) {
    let form = |request: Value, key: &str| -> Option<Value> {
        let conversation = from_anthropic(&request).ok()?;
        let Ok(Value::Object(mut out)) = to_anthropic(&conversation) else {
            return None;
        };
        out.remove(key)
    };
    if let (Some(system), Some(callers)) = (written.get_mut("system"), original.get("system"))
        && form(json!({ "system": callers, "messages": [] }), "system").as_ref() == Some(system)
    {
        system.clone_from(callers);
    }
    let (Some(Value::Array(written)), Some(Value::Array(original))) =
        (written.get_mut("messages"), original.get("messages"))
    else {
        return;
    };
    let mut by_form: std::collections::HashMap<String, &Value> = std::collections::HashMap::new();
    for message in original {
        // A system message is written as one after a user turn: its form is read there.
        let system = message.get("role") == Some(&json!("system"));
        let alone = if system {
            json!({ "messages": [{"role": "user", "content": "."}, message] })
        } else {
            json!({ "messages": [message] })
        };
        if let Some(Value::Array(mut written)) = form(alone, "messages")
            && written.len() == 1 + usize::from(system)
            && let Some(form) = written.pop()
        {
            by_form.entry(form.to_string()).or_insert(message);
        }
    }
    for message in written.iter_mut() {
        if let Some(&callers) = by_form.get(&message.to_string()) {
            message.clone_from(callers);
        }
    }
}

/// The caller's Anthropic request `original` (`read`: its conversation, as [`from_anthropic`]
/// read it; a bare list of messages stands for a request of them alone) with `messages` (a
/// compaction of it) in place of its own: an Anthropic request again, ready to send. What engram
/// kept unchanged goes as the caller wrote it ([`keep_callers_json`]), and every key engram does
/// not model passes through.
///
/// Anthropic wants the first message to be a user turn. When the kept history starts on an
/// assistant turn (a digest went into `system`), a user turn opens it and says where the earlier
/// conversation is: summarised in the system prompt, or left out.
pub fn rewrite_request(
    original: &Value,
    read: &Conversation,
    mut messages: Vec<Message>,
) -> Result<Value, InputError> {
    let leading = leading_instructions(&messages);
    if messages
        .get(leading)
        .is_some_and(|m| m.role == Role::Assistant)
    {
        let summarised = leading > leading_instructions(&read.messages);
        messages.insert(
            leading,
            Message::user(if summarised {
                "[The conversation before this point is summarised in the system prompt.]"
            } else {
                "[Earlier turns of this conversation were left out to fit the context window.]"
            }),
        );
    }
    let conversation = Conversation {
        messages,
        tools: read.tools.clone(),
        extra: read.extra.clone(),
    };
    let mut value = to_anthropic(&conversation)?;
    let listed;
    let original = match original {
        Value::Array(_) => {
            listed = json!({ "messages": original });
            &listed
        }
        _ => original,
    };
    keep_callers_json(&mut value, original);
    if let (Value::Object(out), Value::Object(original)) = (&mut value, original) {
        for (k, v) in original {
            if k != "messages" && k != "system" && !out.contains_key(k) {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(value)
}

/// The most `cache_control` breakpoints Anthropic takes in one request.
pub const MAX_CACHE_BREAKPOINTS: usize = 4;

/// True when an Anthropic request marks a cache breakpoint of its own anywhere (the system
/// prompt, the tools, a message's block): the caller manages its cache, and engram leaves it.
pub fn has_cache_breakpoints(request: &Value) -> bool {
    fn any(v: &Value) -> bool {
        match v {
            Value::Object(map) => map.contains_key("cache_control") || map.values().any(any),
            Value::Array(items) => items.iter().any(any),
            _ => false,
        }
    }
    ["system", "tools", "messages"]
        .iter()
        .any(|k| request.get(*k).is_some_and(any))
}

/// Marks where Anthropic's prompt cache keeps the prefix of `request`, which marks none of its
/// own: the system prompt (or, without one, the last tool), the block that ends the first
/// `head_blocks` blocks of the messages (a view's head: the task and the summaries, when there
/// are some), and the last block of the newest message; each as `{"type": "ephemeral"}`, within
/// [`MAX_CACHE_BREAKPOINTS`]. Returns how many were marked.
pub fn mark_cache_breakpoints(request: &mut Value, head_blocks: Option<usize>) -> usize {
    let mark = |block: &mut Value| {
        if let Value::Object(map) = block {
            map.insert("cache_control".into(), json!({"type": "ephemeral"}));
        }
    };
    let mut marked = 0;
    match request.get_mut("system") {
        Some(Value::String(text)) if !text.is_empty() => {
            let text = std::mem::take(text);
            request["system"] =
                json!([{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]);
            marked += 1;
        }
        Some(Value::Array(blocks)) if !blocks.is_empty() => {
            if let Some(last) = blocks.last_mut() {
                mark(last);
                marked += 1;
            }
        }
        _ => {
            if let Some(last) = request
                .get_mut("tools")
                .and_then(Value::as_array_mut)
                .and_then(|t| t.last_mut())
            {
                mark(last);
                marked += 1;
            }
        }
    }
    let Some(messages) = request.get_mut("messages").and_then(Value::as_array_mut) else {
        return marked;
    };
    // Every message's content as blocks, so that one of them can be marked.
    for m in messages.iter_mut() {
        if let Some(Value::String(text)) = m.get_mut("content") {
            let text = std::mem::take(text);
            m["content"] = json!([{"type": "text", "text": text}]);
        }
    }
    let count = messages.len();
    let mut seen = 0;
    for (i, m) in messages.iter_mut().enumerate() {
        let Some(blocks) = m.get_mut("content").and_then(Value::as_array_mut) else {
            continue;
        };
        let n = blocks.len();
        if let Some(h) = head_blocks
            && h > seen
            && h <= seen + n
            && (i + 1 < count || h < seen + n)
            && marked < MAX_CACHE_BREAKPOINTS - 1
        {
            mark(&mut blocks[h - seen - 1]);
            marked += 1;
        }
        seen += n;
        if i + 1 == count
            && marked < MAX_CACHE_BREAKPOINTS
            && let Some(last) = blocks.last_mut()
        {
            mark(last);
            marked += 1;
        }
    }
    marked
}

/// How many content blocks `messages` (after their leading instructions) make as Anthropic
/// messages: where a view's head ends among the blocks of the request it is the start of.
pub fn block_count(messages: &[Message]) -> usize {
    let conversation = Conversation {
        messages: messages.to_vec(),
        ..Conversation::default()
    };
    to_anthropic(&conversation)
        .ok()
        .and_then(|v| {
            v.get("messages").and_then(Value::as_array).map(|ms| {
                ms.iter()
                    .map(|m| match &m["content"] {
                        Value::Array(b) => b.len(),
                        _ => 1,
                    })
                    .sum()
            })
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request without breakpoints gets them on the system prompt, the end of the head and
    /// the newest message; a caller's own are never moved.
    #[test]
    fn cache_breakpoints_mark_the_stable_prefix_unless_the_caller_did() {
        let mut request = json!({
            "model": "claude-sonnet-4-5", "max_tokens": 64, "system": "Be terse.",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "the task"}, {"type": "text", "text": "[summary]"}, {"type": "text", "text": "an output"}]},
                {"role": "assistant", "content": "a step"},
                {"role": "user", "content": "the newest"}
            ]
        });
        assert!(!has_cache_breakpoints(&request));
        assert_eq!(mark_cache_breakpoints(&mut request, Some(2)), 3);
        let eph = json!({"type": "ephemeral"});
        assert_eq!(request["system"][0]["cache_control"], eph);
        assert_eq!(
            request["messages"][0]["content"][1]["cache_control"], eph,
            "the head ends on the summary"
        );
        assert!(
            request["messages"][0]["content"][0]
                .get("cache_control")
                .is_none()
        );
        assert_eq!(
            request["messages"][2]["content"][0]["cache_control"], eph,
            "the newest message"
        );
        assert!(has_cache_breakpoints(&request));
        assert!(has_cache_breakpoints(
            &json!({"messages": [], "tools": [{"name": "t", "cache_control": eph}]})
        ));
        // Without a system prompt the last tool is marked.
        let mut tools = json!({"tools": [{"name": "a"}, {"name": "b"}], "messages": [{"role": "user", "content": "hi"}]});
        assert_eq!(mark_cache_breakpoints(&mut tools, None), 2);
        assert_eq!(tools["tools"][1]["cache_control"], eph);
        let head = [
            Message::system("s"),
            Message::user("task"),
            Message::system("[summary]"),
        ];
        assert_eq!(block_count(&head[1..]), 2);
    }

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

    /// Claude Code's requests carry system messages among the messages (instructions given
    /// partway through), with `context_management`, `output_config` and adaptive thinking:
    /// read as instructions in place, written back where they were, byte for byte.
    #[test]
    fn system_messages_among_the_messages_stay_where_they_are() {
        let request = json!({
            "model": "claude-opus-5-5", "max_tokens": 128000,
            "system": [{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Fix the build."}]},
                {"role": "system", "content": [{"type": "text", "text": "# Environment\nPrimary working directory: /w"}]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "make"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "error: x"}]},
                {"role": "system", "content": "Remember: run the tests before you finish."},
                {"role": "system", "content": [{"type": "text", "text": "A second note."}]}
            ],
            "thinking": {"type": "adaptive", "display": "omitted"},
            "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
            "output_config": {"effort": "medium"}
        });
        let conversation = from_anthropic(&request).expect("parses");
        let roles: Vec<Role> = conversation.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [
                Role::System,
                Role::User,
                Role::Developer,
                Role::Assistant,
                Role::Tool,
                Role::Developer,
                Role::Developer
            ]
        );
        let back = rewrite_request(&request, &conversation, conversation.messages.clone())
            .expect("writes");
        assert_eq!(back, request, "the request goes back as sent");
        // Without its preceding user turn, an instruction is said in a user turn instead (and
        // the next one follows that turn).
        let mut messages = conversation.messages.clone();
        messages.remove(4);
        let written = rewrite_request(&request, &conversation, messages).expect("writes");
        let roles: Vec<&str> = written["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .map(|m| m["role"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(roles, ["user", "system", "assistant", "user", "system"]);
        assert!(
            written["messages"][3]
                .to_string()
                .contains("[developer] Remember"),
            "{written}"
        );
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
    fn kept_messages_go_back_as_the_caller_sent_them() {
        // Key order of the caller's own, a block with an extra key, a tool result.
        let original = json!({
            "system": [{"text": "Be careful.", "type": "text", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"content": "fix it", "role": "user"},
                {"role": "assistant", "content": [
                    {"text": "Looking.", "type": "text"},
                    {"type": "tool_use", "id": "t1", "name": "sh", "input": {"b": 1, "a": 2}}
                ]},
                {"role": "user", "content": [{"tool_use_id": "t1", "type": "tool_result", "content": "ok", "is_error": false}]}
            ]
        });
        let conversation = from_anthropic(&original).unwrap();
        let mut written = to_anthropic(&conversation).unwrap();
        let canonical = written.to_string();
        keep_callers_json(&mut written, &original);
        assert_eq!(written["messages"], original["messages"]);
        assert_eq!(written["system"], original["system"]);
        for key in ["system", "messages"] {
            assert_eq!(
                written[key].to_string(),
                original[key].to_string(),
                "{key} byte for byte"
            );
        }
        assert_ne!(
            canonical,
            written.to_string(),
            "the canonical form differs in key order"
        );
        // What engram changed keeps engram's form.
        let mut changed =
            json!({"system": "a summary", "messages": [{"role": "user", "content": "fix it now"}]});
        keep_callers_json(&mut changed, &original);
        assert_eq!(changed["messages"][0]["content"], "fix it now");
        assert_eq!(changed["system"], "a summary");
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
