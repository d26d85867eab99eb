//! The OpenAI Responses API's items, mapped onto engram's messages and back.
//!
//! A Responses request carries `instructions` and a list of `input` items: messages, tool calls
//! and their outputs (paired by `call_id`), reasoning items, built-in tool calls (web search,
//! file search, ...). engram compacts messages, so [`from_request`] maps the items onto them and
//! remembers which items each message came from; [`to_items`] writes a compacted view back as
//! items, copying every item engram kept exactly as the caller sent it.
//!
//! The mapping:
//! - `instructions` become a leading system message (pinned by every compaction; written back
//!   by leaving `instructions` as it was);
//! - a user, system or developer message is one message;
//! - each maximal run of the assistant's items (assistant messages, reasoning, tool calls of any
//!   kind, built-in tool calls, items engram does not know) is one assistant message: its text
//!   from the messages, a tool call for each item with a `call_id`, and every other item as a
//!   part counted by its JSON. So a reasoning item stays with the call or message it precedes,
//!   and the calls of one turn are one unit with their outputs;
//! - each tool output (`function_call_output`, `custom_tool_call_output`, any `*_output` with a
//!   `call_id`) is a tool message answering its call;
//! - an item of the caller's side that engram does not know (an `*_output` or `*_response`
//!   without a `call_id`) is a user message holding it as a part.
//!
//! Items the mapping keeps whole go back byte for byte (every field, in the caller's order); a
//! masked tool output goes back as the caller's item with only its `output` replaced; what
//! engram wrote (a summary, a note) becomes a plain message item.

use std::collections::HashMap;
use std::ops::Range;

use serde_json::{Map, Value, json};

use crate::compact::{CallersFormat, Origin, write_back};
use crate::error::InputError;
use crate::input::Conversation;
use crate::message::{Content, ContentPart, Message, Role, ToolCall, object_at, type_name};

/// A Responses request's conversation, with where each message came from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Items {
    /// The messages (the instructions first, when there are any) and the request's `tools`.
    pub conversation: Conversation,
    /// The request's `input` as a list of items (a string input is one user message item).
    pub items: Vec<Value>,
    /// For each message, the range of `items` it stands for; `None` for the instructions.
    pub spans: Vec<Option<Range<usize>>>,
}

/// Reads a Responses request's `instructions`, `input` and `tools`.
pub fn from_request(request: &Value) -> Result<Items, InputError> {
    let Value::Object(map) = request else {
        return Err(InputError::new(format!(
            "expected a Responses request object, found {}",
            type_name(request)
        )));
    };
    let items = match map.get("input") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![json!({"role": "user", "content": s})],
        Some(Value::Array(items)) => items.clone(),
        Some(other) => {
            return Err(InputError::new(format!(
                "expected a string or a list of items, found {}",
                type_name(other)
            ))
            .at_field("input"));
        }
    };
    let mut out = from_items(items)?;
    match map.get("instructions") {
        None | Some(Value::Null) => {}
        Some(instructions) => {
            let text = match instructions {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            out.conversation.messages.insert(0, Message::system(text));
            out.spans.insert(0, None);
        }
    }
    match map.get("tools") {
        None | Some(Value::Null) => {}
        Some(Value::Array(tools)) => out.conversation.tools.clone_from(tools),
        Some(other) => {
            return Err(InputError::new(format!(
                "expected a list of tools, found {}",
                type_name(other)
            ))
            .at_field("tools"));
        }
    }
    Ok(out)
}

/// The side of the conversation an item belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// A user, system or developer message.
    Caller(Role),
    /// The output of the call `call_id` names.
    Output,
    /// The caller's side, an item engram does not know.
    CallerOpaque,
    /// An item of another type that says whose it is (Codex's `additional_tools`, the tool
    /// definitions given as a developer's item): that role's message, kept as it is.
    CallerItem(Role),
    /// The assistant's side: its messages, reasoning, calls and built-in tool calls.
    Assistant,
}

fn side(item: &Map<String, Value>) -> Side {
    let kind = item.get("type").and_then(Value::as_str);
    let role = item.get("role").and_then(Value::as_str);
    if matches!(kind, None | Some("message")) {
        return match role {
            Some("user") => Side::Caller(Role::User),
            Some("system") => Side::Caller(Role::System),
            Some("developer") => Side::Caller(Role::Developer),
            _ => Side::Assistant,
        };
    }
    // A provider's compaction item stands for everything before it, opaque: pinned, kept
    // whole and in its place, as a developer's instructions among the items are.
    if kind == Some(crate::formats::remote_compaction::COMPACTION) {
        return Side::CallerItem(Role::Developer);
    }
    match role {
        Some("user") => return Side::CallerItem(Role::User),
        Some("system") => return Side::CallerItem(Role::System),
        Some("developer") => return Side::CallerItem(Role::Developer),
        _ => {}
    }
    let kind = kind.unwrap_or_default();
    let has_call_id = item.get("call_id").is_some_and(Value::is_string);
    if kind.ends_with("_output") && has_call_id {
        Side::Output
    } else if kind.ends_with("_output") || kind.ends_with("_response") {
        Side::CallerOpaque
    } else {
        Side::Assistant
    }
}

/// Reads a list of Responses items (a request's `input`, or a session's items).
pub fn from_items(items: Vec<Value>) -> Result<Items, InputError> {
    let mut messages: Vec<Message> = Vec::new();
    let mut spans: Vec<Option<Range<usize>>> = Vec::new();
    // The assistant message being gathered from a run of the assistant's items.
    let mut run: Option<(usize, Vec<ContentPart>, Vec<ToolCall>)> = None;
    let flush = |run: &mut Option<(usize, Vec<ContentPart>, Vec<ToolCall>)>,
                 end: usize,
                 messages: &mut Vec<Message>,
                 spans: &mut Vec<Option<Range<usize>>>| {
        if let Some((start, parts, calls)) = run.take() {
            let content = (!parts.is_empty()).then_some(Content::Parts(parts));
            let mut message = Message::with_content(Role::Assistant, content);
            message.set_tool_calls((!calls.is_empty()).then_some(calls));
            messages.push(message);
            spans.push(Some(start..end));
        }
    };
    for (i, item) in items.iter().enumerate() {
        let field = format!("input[{i}]");
        let map = object_at(item, "an item", &field)?;
        if map.get("type").is_some_and(|t| !t.is_string()) {
            return Err(InputError::new("an item's `type` is a string").at_field(field + ".type"));
        }
        match side(map) {
            Side::Assistant => {
                let (_, parts, calls) = run.get_or_insert_with(|| (i, Vec::new(), Vec::new()));
                let kind = map.get("type").and_then(Value::as_str).unwrap_or("message");
                if kind == "message" {
                    let content = message_content(map).map_err(|e| e.under_field(&field))?;
                    match content {
                        Content::Text(text) => parts.push(ContentPart::text(text)),
                        Content::Parts(more) => parts.extend(more),
                    }
                } else if let Some(call_id) = map.get("call_id").and_then(Value::as_str) {
                    calls.push(call(kind, call_id, map));
                } else {
                    parts.push(ContentPart::Other(map.clone()));
                }
            }
            other => {
                flush(&mut run, i, &mut messages, &mut spans);
                let message = match other {
                    Side::Caller(role) => Message::with_content(
                        role,
                        Some(message_content(map).map_err(|e| e.under_field(&field))?),
                    ),
                    Side::Output => {
                        let call_id = map.get("call_id").and_then(Value::as_str).unwrap_or("");
                        let mut message = Message::tool(call_id, "");
                        message.content = Some(output_content(map.get("output")));
                        message
                    }
                    Side::CallerItem(role) => Message::with_content(
                        role,
                        Some(Content::Parts(vec![ContentPart::Other(map.clone())])),
                    ),
                    _ => Message::with_content(
                        Role::User,
                        Some(Content::Parts(vec![ContentPart::Other(map.clone())])),
                    ),
                };
                messages.push(message);
                spans.push(Some(i..i + 1));
            }
        }
    }
    flush(&mut run, items.len(), &mut messages, &mut spans);
    Ok(Items {
        conversation: Conversation::new(messages),
        items,
        spans,
    })
}

/// A message item's content: a string, or parts (`input_text`, `output_text` and `refusal` are
/// text; images, files and the rest are kept and counted by their JSON or as images).
fn message_content(item: &Map<String, Value>) -> Result<Content, InputError> {
    match item.get("content") {
        None | Some(Value::Null) => Ok(Content::Text(String::new())),
        Some(Value::String(s)) => Ok(Content::Text(s.clone())),
        Some(Value::Array(parts)) => parts
            .iter()
            .enumerate()
            .map(|(j, part)| {
                let Value::Object(part) = part else {
                    return Err(InputError::new(format!(
                        "expected a content part object, found {}",
                        type_name(part)
                    ))
                    .at_field(format!("content[{j}]")));
                };
                Ok(text_part(part).unwrap_or_else(|| ContentPart::Other(part.clone())))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Content::Parts),
        Some(other) => Err(InputError::new(format!(
            "expected a string or a list of content parts, found {}",
            type_name(other)
        ))
        .at_field("content")),
    }
}

/// A text part of the Responses API as engram's text part (its other keys kept).
fn text_part(part: &Map<String, Value>) -> Option<ContentPart> {
    let key = match part.get("type").and_then(Value::as_str)? {
        "input_text" | "output_text" | "text" => "text",
        "refusal" => "refusal",
        _ => return None,
    };
    let text = part.get(key)?.as_str()?.to_owned();
    // Its other keys, but its type: as an engram text part it is written back as `text`, and
    // reads back the same (the items themselves are what goes to a model).
    let extra = part
        .iter()
        .filter(|(k, _)| k.as_str() != key && k.as_str() != "type")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Some(ContentPart::Text { text, extra })
}

/// A tool output: a string, parts, or any other JSON (counted by its text).
fn output_content(output: Option<&Value>) -> Content {
    match output {
        None | Some(Value::Null) => Content::Text(String::new()),
        Some(Value::String(s)) => Content::Text(s.clone()),
        Some(Value::Array(parts)) => Content::Parts(
            parts
                .iter()
                .map(|p| match p {
                    Value::Object(part) if part.get("type").is_some_and(Value::is_string) => {
                        text_part(part).unwrap_or_else(|| ContentPart::Other(part.clone()))
                    }
                    other => ContentPart::text(other.to_string()),
                })
                .collect(),
        ),
        Some(Value::Object(part)) if part.get("type").is_some_and(Value::is_string) => {
            Content::Parts(vec![ContentPart::Other(part.clone())])
        }
        Some(other) => Content::Text(other.to_string()),
    }
}

/// A call item as a tool call: a function's name and arguments, a custom tool's name and
/// input, or any other call named by its type with its JSON as the arguments.
fn call(kind: &str, call_id: &str, item: &Map<String, Value>) -> ToolCall {
    let name = item
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or(kind)
        .to_owned();
    let arguments = match (item.get("arguments"), item.get("input")) {
        (Some(Value::String(a)), _) | (None, Some(Value::String(a))) => a.clone(),
        _ => {
            let rest: Map<String, Value> = item
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "type" | "call_id" | "id" | "status"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            Value::Object(rest).to_string()
        }
    };
    let mut call = ToolCall::function(call_id, name, arguments);
    call.extra
        .insert("type".into(), Value::String(kind.to_owned()));
    call
}

/// Writes a compacted view back as `input` items: `messages` with each one's [`Origin`] among
/// `source`'s messages, by the one rule of `write_back`. What is unchanged goes back as the
/// caller's items; a masked output as the caller's item with the new `output`; what engram wrote
/// as message items. The instructions are not items (the request's `instructions` stay as they
/// were).
pub fn to_items(source: &Items, messages: &[Message], origins: &[Origin]) -> Vec<Value> {
    let format = ItemsFormat {
        source,
        output_types: output_types(&source.items),
    };
    write_back(&format, messages, origins)
}

/// A request's `input` items as the caller's format of [`write_back`].
struct ItemsFormat<'a> {
    source: &'a Items,
    output_types: HashMap<&'a str, String>,
}

impl CallersFormat for ItemsFormat<'_> {
    type Item = Value;

    fn same(&self, index: usize, out: &mut Vec<Value>) {
        if let Some(Some(span)) = self.source.spans.get(index) {
            out.extend_from_slice(&self.source.items[span.clone()]);
        }
    }

    fn with_output(&self, index: usize, text: &str) -> Option<Value> {
        let span = self.source.spans.get(index)?.as_ref()?;
        if span.len() != 1 {
            return None;
        }
        let mut item = self.source.items[span.start].clone();
        item.as_object_mut()?
            .insert("output".into(), Value::String(text.to_owned()));
        Some(item)
    }

    fn written(&self, from: Option<usize>, message: &Message, out: &mut Vec<Value>) {
        // The instructions are never rewritten.
        if from.is_some_and(|i| matches!(self.source.spans.get(i), Some(None))) {
            return;
        }
        out.extend(new_items(message, &self.output_types));
    }
}

/// The key of a message's `extra` that holds the Responses items it was made from, for a store
/// that keeps items as messages (a session behind the Agents SDK's `Session`).
pub const ITEMS_KEY: &str = "responses_items";

/// Responses items as messages to store: [`from_items`]' messages, each carrying its own items
/// (verbatim) under [`ITEMS_KEY`], so that [`messages_to_items`] gives them back.
pub fn items_to_messages(items: Vec<Value>) -> Result<Vec<Message>, InputError> {
    let read = from_items(items)?;
    let mut out = read.conversation.messages;
    for (message, span) in out.iter_mut().zip(&read.spans) {
        if let Some(span) = span {
            message.extra_mut().insert(
                ITEMS_KEY.into(),
                Value::Array(read.items[span.clone()].to_vec()),
            );
        }
    }
    Ok(out)
}

/// Stored messages (a session's view, say) as Responses items: a message that still says what
/// its items say gives them back verbatim; a masked tool output gives its item with the new
/// `output`; anything else (a summary, a note, a message changed) becomes new items.
pub fn messages_to_items(messages: &[Message]) -> Vec<Value> {
    let carried = |m: &Message| -> Option<Vec<Value>> {
        match m.extra().get(ITEMS_KEY)? {
            Value::Array(items) => Some(items.clone()),
            _ => None,
        }
    };
    // Call types by id, for the outputs engram writes (a missing result, say).
    let all: Vec<Value> = messages.iter().filter_map(carried).flatten().collect();
    let output_types = output_types(&all);
    let mut out = Vec::new();
    for message in messages {
        let Some(items) = carried(message) else {
            out.extend(new_items(message, &output_types));
            continue;
        };
        // Compared without what storage adds (the log's id) and without the items themselves.
        let mut plain = message.clone();
        plain.extra_mut().remove(ITEMS_KEY);
        plain.id = None;
        let unchanged = from_items(items.clone())
            .ok()
            .is_some_and(|read| read.conversation.messages == [plain]);
        if unchanged {
            out.extend(items);
        } else if let ([item], Role::Tool) = (items.as_slice(), message.role) {
            let mut item = item.clone();
            if let Value::Object(map) = &mut item {
                map.insert("output".into(), Value::String(message.text().into_owned()));
            }
            out.push(item);
        } else {
            out.extend(new_items(message, &output_types));
        }
    }
    out
}

/// The output item type for each call id among `items` (`function_call` → `function_call_output`).
fn output_types(items: &[Value]) -> HashMap<&str, String> {
    items
        .iter()
        .filter_map(|item| {
            let kind = item.get("type")?.as_str()?;
            let call_id = item.get("call_id")?.as_str()?;
            (!kind.ends_with("_output")).then(|| (call_id, format!("{kind}_output")))
        })
        .collect()
}

/// Items for a message engram wrote or changed.
fn new_items(message: &Message, output_types: &HashMap<&str, String>) -> Vec<Value> {
    let text = message.text().into_owned();
    match message.role {
        Role::Tool => {
            let call_id = message.tool_call_id().unwrap_or_default();
            let kind = output_types
                .get(call_id)
                .map_or("function_call_output", String::as_str);
            vec![json!({"type": kind, "call_id": call_id, "output": text})]
        }
        Role::Assistant => {
            let mut out = Vec::new();
            if !text.is_empty() {
                out.push(json!({"type": "message", "role": "assistant", "content": text}));
            }
            for call in message.calls() {
                out.push(json!({
                    "type": "function_call",
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": call.arguments,
                }));
            }
            out
        }
        role => vec![json!({"type": "message", "role": role.as_str(), "content": text})],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Value {
        json!({
            "model": "gpt-4o",
            "instructions": "You are a coding agent.",
            "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}}],
            "input": [
                {"role": "user", "content": "fix the build"},
                {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
                {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "shell", "arguments": "{\"cmd\":\"make\"}", "status": "completed"},
                {"type": "function_call", "id": "fc_2", "call_id": "call_2", "name": "shell", "arguments": "{\"cmd\":\"ls\"}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "error: missing ;"},
                {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "src"}]},
                {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "rust E0308"}},
                {"type": "message", "role": "assistant", "id": "msg_1", "content": [{"type": "output_text", "text": "Fixed.", "annotations": []}]},
                {"type": "custom_tool_call", "call_id": "call_3", "name": "apply_patch", "input": "*** Begin Patch"},
                {"type": "custom_tool_call_output", "call_id": "call_3", "output": "done"},
                {"type": "mcp_approval_response", "approval_request_id": "a1", "approve": true},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "thanks"}, {"type": "input_image", "image_url": "data:", "detail": "low"}]}
            ]
        })
    }

    /// Codex gives its tool definitions as a developer's `additional_tools` item before its
    /// instructions: an instruction of the caller's, kept first and whole, never an assistant's
    /// turn that compaction may drop.
    #[test]
    fn an_item_that_names_a_callers_role_is_that_callers() {
        let request = json!({"model": "gpt-6.2-sol", "input": [
            {"type": "additional_tools", "id": "at_1", "role": "developer", "tools": [{"type": "namespace", "name": "functions", "tools": []}]},
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are Codex."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "say hi"}]}
        ]});
        let items = from_request(&request).unwrap();
        let roles: Vec<&str> = items
            .conversation
            .messages
            .iter()
            .map(|m| m.role.as_str())
            .collect();
        assert_eq!(roles, ["developer", "developer", "user"]);
        assert_eq!(
            crate::message::leading_instructions(&items.conversation.messages),
            2
        );
        let origins: Vec<Origin> = (0..3).map(Origin::Same).collect();
        assert_eq!(
            to_items(&items, &items.conversation.messages, &origins),
            request["input"].as_array().unwrap().clone()
        );
    }

    #[test]
    fn items_map_onto_messages_with_their_spans() {
        let items = from_request(&request()).unwrap();
        let m = &items.conversation.messages;
        let roles: Vec<&str> = m.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(
            roles,
            [
                "system",
                "user",
                "assistant",
                "tool",
                "tool",
                "assistant",
                "tool",
                "user",
                "user"
            ]
        );
        assert_eq!(
            items.spans,
            [
                None,
                Some(0..1),
                Some(1..4),
                Some(4..5),
                Some(5..6),
                Some(6..9),
                Some(9..10),
                Some(10..11),
                Some(11..12)
            ]
        );
        // The reasoning item rides with the calls it precedes, both calls in one turn.
        let ids: Vec<&str> = m[2].calls().iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["call_1", "call_2"]);
        assert_eq!(m[2].non_text_parts().count(), 1, "the reasoning item");
        assert_eq!(m[3].tool_call_id(), Some("call_1"));
        assert_eq!(m[4].text(), "src");
        // A web search, the answer and a custom tool call make one assistant turn.
        assert_eq!(m[5].text(), "Fixed.");
        assert_eq!(m[5].calls()[0].name, "apply_patch");
        assert_eq!(m[5].calls()[0].arguments, "*** Begin Patch");
        assert_eq!(m[8].text(), "thanks");
        assert_eq!(items.conversation.tools.len(), 1);
        let (_, repairs) = crate::compact::units::repair(m);
        assert_eq!(
            repairs,
            Default::default(),
            "every call answered, every output after its call"
        );
    }

    #[test]
    fn unchanged_messages_go_back_as_the_callers_items() {
        let items = from_request(&request()).unwrap();
        let n = items.conversation.messages.len();
        let origins: Vec<Origin> = (0..n).map(Origin::Same).collect();
        let back = to_items(&items, &items.conversation.messages, &origins);
        assert_eq!(back, items.items);
    }

    #[test]
    fn a_masked_output_keeps_the_callers_fields_and_new_messages_are_message_items() {
        let items = from_request(&request()).unwrap();
        let mut masked = items.conversation.messages[6].clone();
        masked.content = Some(Content::Text("[masked]".into()));
        let summary = Message::system("[summary]");
        let back = to_items(
            &items,
            &[
                items.conversation.messages[0].clone(),
                summary,
                masked,
                Message::tool("call_3", "note"),
            ],
            &[Origin::Same(0), Origin::New, Origin::Edited(6), Origin::New],
        );
        assert_eq!(
            back,
            [
                json!({"type": "message", "role": "system", "content": "[summary]"}),
                json!({"type": "custom_tool_call_output", "call_id": "call_3", "output": "[masked]"}),
                json!({"type": "custom_tool_call_output", "call_id": "call_3", "output": "note"}),
            ]
        );
    }

    #[test]
    fn a_string_input_is_one_user_message_and_bad_items_are_named() {
        let items = from_request(&json!({"model": "m", "input": "hello"})).unwrap();
        assert_eq!(items.conversation.messages.len(), 1);
        assert_eq!(items.conversation.messages[0].text(), "hello");
        let e = from_request(&json!({"input": [{"role": "user", "content": "a"}, 3]})).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("input[1]"), "{e}");
        let e = from_request(&json!({"input": [{"role": "user", "content": [1]}]})).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("input[0].content[0]"), "{e}");
        let e = from_request(&json!({"input": 7})).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("input"), "{e}");
    }

    #[test]
    fn stored_messages_give_their_items_back() {
        let items = from_request(&request()).unwrap().items;
        let messages = items_to_messages(items.clone()).unwrap();
        assert_eq!(messages_to_items(&messages), items, "unchanged: verbatim");
        // Stored as JSON and read back (a session's log), still the same items.
        let stored: Vec<Message> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                Message::from_value(m.to_value())
                    .unwrap()
                    .with_id(format!("m{i}"))
            })
            .collect();
        assert_eq!(
            messages_to_items(&stored),
            items,
            "through storage: verbatim"
        );
        // A masked output, a summary in front.
        let mut view = vec![Message::system("[summary]")];
        view.extend(messages[3..].iter().cloned());
        view[1].content = Some(Content::Text("[masked]".into()));
        let back = messages_to_items(&view);
        assert_eq!(
            back[0],
            json!({"type": "message", "role": "system", "content": "[summary]"})
        );
        assert_eq!(
            back[1],
            json!({"type": "function_call_output", "call_id": "call_2", "output": "[masked]"})
        );
        assert_eq!(&back[2..], &items[6..]);
    }
}
