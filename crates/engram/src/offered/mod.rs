//! engram's history tools offered to a model through a provider's API: what lets a model behind
//! the proxy get back what compaction took out of its request.
//!
//! When the proxy sets part of a conversation aside, it offers the model two tools, engram's
//! `search_history` and `read_history` under names that cannot collide with the caller's
//! ([`Offered`]), and the digest and markers name them. A reply that calls them is not relayed:
//! the calls are read from it, whole or streamed ([`read_reply`]), answered from the conversation
//! the request carried (the caller resends its whole history: nothing needs to be stored,
//! [`answer`]), and the upstream is asked again with the model's turn and the answers
//! ([`follow_up`]). The caller gets one reply made of the rounds ([`Relay`]), with the usage
//! the upstream reported for the last of them, never a sum. Calls to the caller's own tools in a turn that also calls engram's are left
//! out of the follow-up: the model makes them again, and the caller never sees a call to a tool
//! it did not define.

mod relay;

pub use relay::{Ended, Relay};

use serde_json::{Map, Value, json};

use crate::Error;
use crate::message::Message;
use crate::registry::ModelRegistry;
use crate::request::tool_calls::run_history_tool;
use crate::session::history::Carried;
use crate::sse::Event;
use crate::tools::{self, ToolReply};

/// The wire formats the proxy speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// Chat Completions (`messages`, `tools: [{type: function, function}]`).
    Chat,
    /// The Responses API (`input` items, `tools: [{type: function, name}]`).
    Responses,
    /// Anthropic Messages (`messages` of blocks, `tools: [{name, input_schema}]`).
    Anthropic,
}

pub use crate::tools::Offered;

const SEARCH: &str = "engram_search_history";
const READ: &str = "engram_read_history";

/// How many times the upstream is asked again in one request, at most; the last time with
/// `tool_choice: none`, so that the model answers.
pub const MAX_ROUNDS: usize = 3;

/// What a cached prompt token costs against a new one, as the caches the proxy keeps warm bill
/// it (Anthropic's cache reads, OpenAI's gpt-5 family: a tenth).
pub const CACHED_PRICE: f64 = 0.1;

/// Whether a compaction that sets `set_aside` tokens of a conversation aside should offer the
/// history tools for the first time, when the request it compacts keeps `kept` tokens of the
/// cached prefix (the instructions, the task and the summaries sent before) and the tools'
/// definitions take `definitions` tokens.
///
/// Tool definitions come before the messages in every provider's prompt, so their first
/// appearance makes that whole prefix new again: a one-time cost of `(1 - CACHED_PRICE) *
/// kept`, and the definitions themselves at full price. They are offered once that is at most
/// what setting the history aside saves on a single request (`CACHED_PRICE * set_aside`, the
/// set-aside tokens no longer read from the cache): while little is set aside, the digest's
/// key lines hold most of it and the way back would cost more than it saves; a long agent run
/// sets aside many times its head, and gets the tools (measured on the dev trajectories:
/// docs/benchmarks.md). Once offered, they stay.
pub fn worth_offering(set_aside: usize, kept: usize, definitions: usize) -> bool {
    CACHED_PRICE * set_aside as f64 >= (1.0 - CACHED_PRICE) * kept as f64 + definitions as f64
}

/// The names of the tools a request defines.
fn tool_names(body: &Value, wire: Wire) -> Vec<String> {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| match wire {
            Wire::Chat => t["function"]["name"].as_str(),
            Wire::Responses | Wire::Anthropic => t["name"].as_str(),
        })
        .map(str::to_owned)
        .collect()
}

impl Offered {
    /// Names that none of the request's own tools has.
    pub fn avoiding(body: &Value, wire: Wire) -> Offered {
        let taken = tool_names(body, wire);
        let free = |base: &str| {
            let mut name = base.to_owned();
            let mut n = 2;
            while taken.contains(&name) {
                name = format!("{base}_{n}");
                n += 1;
            }
            name
        };
        Offered {
            search: free(SEARCH),
            read: free(READ),
        }
    }

    /// The engram tool a name stands for, when it is one of these.
    pub fn tool(&self, name: &str) -> Option<&'static str> {
        if name == self.search {
            Some(tools::SEARCH_HISTORY)
        } else if name == self.read {
            Some(tools::READ_HISTORY)
        } else {
            None
        }
    }

    /// The two definitions in `wire`'s shape (no `session` argument: the conversation is the
    /// request's).
    pub fn definitions(&self, wire: Wire) -> Vec<Value> {
        tools::definitions()
            .into_iter()
            .filter_map(|d| {
                let name = match d.name {
                    tools::SEARCH_HISTORY => &self.search,
                    tools::READ_HISTORY => &self.read,
                    _ => return None,
                };
                // The parameters without `session` (the conversation is the request's) and
                // their descriptions: every request pays for the definitions, read from the
                // cache, so they say what the model needs and no more.
                let mut parameters = d.parameters.clone();
                if let Some(p) = parameters["properties"].as_object_mut() {
                    p.remove("session");
                    p.remove("max_tokens");
                    for (_, property) in p.iter_mut() {
                        if let Some(property) = property.as_object_mut() {
                            property.remove("description");
                            property.remove("default");
                        }
                    }
                }
                let description = match d.name {
                    tools::SEARCH_HISTORY => "Searches this conversation's earlier messages, those compacted out of your context too, for words (a file, an error, a name). Returns message ids and snippets.".to_owned(),
                    _ => format!("Reads earlier messages of this conversation verbatim: by `ids`, or `from` one id `to` another (the ids the digest, markers and {} give).", self.search),
                };
                Some(match wire {
                    Wire::Chat => json!({"type": "function", "function": {
                        "name": name, "description": description, "parameters": parameters}}),
                    Wire::Responses => json!({"type": "function", "name": name,
                        "description": description, "parameters": parameters}),
                    Wire::Anthropic => json!({"name": name, "description": description,
                        "input_schema": parameters}),
                })
            })
            .collect()
    }

    /// Adds the definitions after the request's own tools (those it already holds are not
    /// added twice).
    pub fn offer(&self, body: &mut Value, wire: Wire) {
        let Some(map) = body.as_object_mut() else {
            return;
        };
        let taken = tool_names(&Value::Object(map.clone()), wire);
        let tools = map
            .entry("tools")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(list) = tools {
            for (definition, name) in self
                .definitions(wire)
                .into_iter()
                .zip([&self.search, &self.read])
            {
                if !taken.contains(name) {
                    list.push(definition);
                }
            }
        }
    }
}

/// A call to one of engram's tools in a reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The call's id (`call_id` on the Responses API).
    pub id: String,
    /// The engram tool it calls.
    pub tool: &'static str,
    /// Its arguments (a JSON string or an object).
    pub arguments: Value,
}

/// The model's turn in a reply, as far as engram's tools go.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Turn {
    /// The calls to engram's tools, in order.
    pub calls: Vec<Call>,
    /// How many calls to the caller's own tools the turn made besides.
    pub theirs: usize,
    /// What a follow-up request resends of the turn, in the wire's shape: its text and reasoning
    /// and engram's calls (a Chat or Anthropic message, or Responses items).
    resend: Vec<Value>,
    /// What the reply says it used.
    pub usage: Value,
}

/// The model's turn in a reply body (JSON, or the server-sent events of a stream); `None` when
/// it cannot be read as a reply of `wire`.
pub fn read_reply(wire: Wire, body: &[u8], streamed: bool, offered: &Offered) -> Option<Turn> {
    let (reply, usage) = if streamed {
        let events = crate::sse::events(body);
        match wire {
            Wire::Chat => chat_from_stream(&events)?,
            Wire::Responses => {
                let response = events
                    .iter()
                    .filter_map(|e| e.data.as_ref())
                    .find(|d| d["type"] == "response.completed")?["response"]
                    .clone();
                let usage = response["usage"].clone();
                (response, usage)
            }
            Wire::Anthropic => anthropic_from_stream(&events)?,
        }
    } else {
        let reply: Value = serde_json::from_slice(body).ok()?;
        let usage = reply["usage"].clone();
        (reply, usage)
    };
    let mut turn = Turn {
        usage,
        ..Turn::default()
    };
    match wire {
        Wire::Chat => {
            let message = reply["choices"][0]["message"].as_object()?;
            let mut kept = Vec::new();
            for call in message
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                match call["function"]["name"]
                    .as_str()
                    .and_then(|n| offered.tool(n))
                {
                    Some(tool) => {
                        turn.calls.push(Call {
                            id: call["id"].as_str().unwrap_or_default().to_owned(),
                            tool,
                            arguments: call["function"]["arguments"].clone(),
                        });
                        kept.push(call.clone());
                    }
                    None => turn.theirs += 1,
                }
            }
            let mut resend = json!({"role": "assistant", "content": message.get("content").cloned().unwrap_or(Value::Null)});
            if !kept.is_empty() {
                resend["tool_calls"] = Value::Array(kept);
            }
            turn.resend.push(resend);
        }
        Wire::Responses => {
            for item in reply["output"].as_array()? {
                if item["type"] == "function_call" {
                    match item["name"].as_str().and_then(|n| offered.tool(n)) {
                        Some(tool) => turn.calls.push(Call {
                            id: item["call_id"].as_str().unwrap_or_default().to_owned(),
                            tool,
                            arguments: item["arguments"].clone(),
                        }),
                        None => {
                            turn.theirs += 1;
                            continue;
                        }
                    }
                }
                turn.resend.push(item.clone());
            }
        }
        Wire::Anthropic => {
            let mut blocks = Vec::new();
            for block in reply["content"].as_array()? {
                if block["type"] == "tool_use" {
                    match block["name"].as_str().and_then(|n| offered.tool(n)) {
                        Some(tool) => turn.calls.push(Call {
                            id: block["id"].as_str().unwrap_or_default().to_owned(),
                            tool,
                            arguments: block["input"].clone(),
                        }),
                        None => {
                            turn.theirs += 1;
                            continue;
                        }
                    }
                }
                blocks.push(block.clone());
            }
            turn.resend
                .push(json!({"role": "assistant", "content": blocks}));
        }
    }
    Some(turn)
}

/// A Chat Completions stream as the reply it adds up to (the first choice), and its usage.
fn chat_from_stream(events: &[Event]) -> Option<(Value, Value)> {
    let mut content = String::new();
    let mut calls: Vec<Value> = Vec::new();
    let mut usage = Value::Null;
    let mut any = false;
    for data in events.iter().filter_map(|e| e.data.as_ref()) {
        if data["usage"].is_object() {
            usage = data["usage"].clone();
        }
        let Some(delta) = data["choices"][0].get("delta") else {
            continue;
        };
        any = true;
        if let Some(text) = delta["content"].as_str() {
            content.push_str(text);
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().unwrap_or(calls.len() as u64) as usize;
            while calls.len() <= index {
                calls.push(json!({"id": "", "type": "function", "function": {"name": "", "arguments": ""}}));
            }
            let slot = &mut calls[index];
            if let Some(id) = call["id"].as_str() {
                slot["id"] = json!(id);
            }
            for key in ["name", "arguments"] {
                if let Some(piece) = call["function"][key].as_str() {
                    let joined = format!("{}{piece}", slot["function"][key].as_str().unwrap_or(""));
                    slot["function"][key] = json!(joined);
                }
            }
        }
    }
    if !any {
        return None;
    }
    let mut message = json!({"role": "assistant", "content": if content.is_empty() { Value::Null } else { json!(content) }});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    Some((
        json!({"choices": [{"index": 0, "message": message}]}),
        usage,
    ))
}

/// An Anthropic stream as the message it adds up to, and its usage (`message_start`'s, with
/// `message_delta`'s over it).
fn anthropic_from_stream(events: &[Event]) -> Option<(Value, Value)> {
    let mut blocks: Vec<Value> = Vec::new();
    let mut partial: Vec<String> = Vec::new();
    let mut usage = Map::new();
    let mut started = false;
    for data in events.iter().filter_map(|e| e.data.as_ref()) {
        let index = data["index"].as_u64().unwrap_or(0) as usize;
        match data["type"].as_str() {
            Some("message_start") => {
                started = true;
                if let Some(u) = data["message"]["usage"].as_object() {
                    usage.extend(u.clone());
                }
            }
            Some("content_block_start") => {
                while blocks.len() <= index {
                    blocks.push(Value::Null);
                    partial.push(String::new());
                }
                blocks[index] = data["content_block"].clone();
            }
            Some("content_block_delta") if index < blocks.len() => {
                let delta = &data["delta"];
                let block = &mut blocks[index];
                match delta["type"].as_str() {
                    Some("text_delta") => append(block, "text", &delta["text"]),
                    Some("thinking_delta") => append(block, "thinking", &delta["thinking"]),
                    Some("signature_delta") => block["signature"] = delta["signature"].clone(),
                    Some("input_json_delta") => {
                        partial[index].push_str(delta["partial_json"].as_str().unwrap_or(""));
                    }
                    _ => {}
                }
            }
            Some("content_block_stop")
                if index < blocks.len() && blocks[index]["type"] == "tool_use" =>
            {
                let text = std::mem::take(&mut partial[index]);
                blocks[index]["input"] = if text.trim().is_empty() {
                    json!({})
                } else {
                    serde_json::from_str(&text).unwrap_or(Value::String(text))
                };
            }
            Some("message_delta") => {
                if let Some(u) = data["usage"].as_object() {
                    usage.extend(u.clone());
                }
            }
            _ => {}
        }
    }
    started.then(|| {
        blocks.retain(|b| !b.is_null());
        (json!({"content": blocks}), Value::Object(usage))
    })
}

fn append(block: &mut Value, key: &str, piece: &Value) {
    let joined = format!(
        "{}{}",
        block[key].as_str().unwrap_or(""),
        piece.as_str().unwrap_or("")
    );
    block[key] = Value::String(joined);
}

/// What an answer may hold, and what the model already has: the most tokens a
/// `read_history` answer may bring (the room the follow-up request leaves), and the ids of the
/// messages the request sent holds verbatim (`search_history`'s `in_view`; `None`: all of them).
#[derive(Debug, Clone, Default)]
pub struct Answering {
    /// The most tokens one read may bring back.
    pub read_tokens: usize,
    /// The ids (a message's own, else `m<position>`) the model has verbatim.
    pub in_view: Option<std::collections::HashSet<String>>,
}

/// Answers `calls` from `messages`, the conversation the request carried (the caller's
/// messages, in order: a message without an id is `m<position>`, as the digest and markers of
/// the proxy name them), by the same search and read a session's tools run, over that
/// conversation as a history of its own (no store, no session), within `answering`'s room.
/// `model` picks the tokenizer a read's budget is counted with; the answers' notes name the
/// tools as `offered` names them.
pub fn answer(
    calls: &[Call],
    messages: &[Message],
    registry: &ModelRegistry,
    model: &str,
    offered: &Offered,
    answering: &Answering,
) -> Result<Vec<ToolReply>, Error> {
    // The model's tokenizer, as a session of it would count.
    let new = crate::session::new_session(registry, model, None, crate::timestamp::now());
    let tokenizer = crate::tokenize::Tokenizer::from_name(&new.tokenizer)
        .map_err(|e| Error::Rejected(format!("model {model}: tokenizer: {e}")))?
        .scaled(new.token_factor);
    let mut options = crate::compact::CompactOptions::new(new.window);
    options.read_tool = Some(offered.read.clone());
    let history = Carried::new(
        messages,
        crate::count::TokenCounter::new(tokenizer),
        options,
        answering.in_view.clone(),
    );
    Ok(calls
        .iter()
        .map(|call| {
            let mut arguments = call.arguments.clone();
            if call.tool == tools::READ_HISTORY {
                arguments = within(arguments, answering.read_tokens);
            }
            run_history_tool(&history, call.tool, &arguments)
                .unwrap_or_else(|| ToolReply::error(tools::unknown_tool(call.tool)))
        })
        .collect())
}

/// A read's arguments with its `max_tokens` at most `room` (arguments that are not an object,
/// or a JSON text of one, are left for the tool to refuse).
fn within(arguments: Value, room: usize) -> Value {
    let mut object = match arguments {
        Value::String(text) => match serde_json::from_str::<Value>(&text) {
            Ok(value @ Value::Object(_)) => value,
            _ => return Value::String(text),
        },
        other => other,
    };
    if let Value::Object(map) = &mut object {
        let asked = map
            .get("max_tokens")
            .and_then(Value::as_u64)
            .map_or(crate::session::history::DEFAULT_READ_TOKENS, |n| n as usize);
        map.insert("max_tokens".into(), json!(asked.min(room).max(1)));
    }
    object
}

/// `request` (what was sent upstream) with the model's turn and the answers to its calls after
/// it, ready to be sent again; on the last round allowed, with `tool_choice: none`.
pub fn follow_up(wire: Wire, request: &mut Value, turn: &Turn, replies: &[ToolReply], last: bool) {
    let answers = turn.calls.iter().zip(replies);
    match wire {
        Wire::Chat => {
            let mut added = turn.resend.clone();
            added.extend(answers.map(|(call, reply)| {
                json!({"role": "tool", "tool_call_id": call.id, "content": reply.text})
            }));
            push_all(&mut request["messages"], added);
        }
        Wire::Responses => {
            if let Some(text) = request["input"].as_str().map(str::to_owned) {
                request["input"] = json!([{"role": "user", "content": text}]);
            }
            let mut added = turn.resend.clone();
            added.extend(answers.map(|(call, reply)| {
                json!({"type": "function_call_output", "call_id": call.id, "output": reply.text})
            }));
            push_all(&mut request["input"], added);
        }
        Wire::Anthropic => {
            let results: Vec<Value> = answers
                .map(|(call, reply)| {
                    let mut block = json!({"type": "tool_result", "tool_use_id": call.id, "content": reply.text});
                    if reply.is_error {
                        block["is_error"] = Value::Bool(true);
                    }
                    block
                })
                .collect();
            let mut added = turn.resend.clone();
            added.push(json!({"role": "user", "content": results}));
            push_all(&mut request["messages"], added);
        }
    }
    if last {
        request["tool_choice"] = match wire {
            Wire::Anthropic => json!({"type": "none"}),
            Wire::Chat | Wire::Responses => json!("none"),
        };
    }
}

fn push_all(list: &mut Value, items: Vec<Value>) {
    if !list.is_array() {
        *list = Value::Array(Vec::new());
    }
    if let Value::Array(list) = list {
        list.extend(items);
    }
}

/// `a` with `b`'s numbers added, field by field (objects within objects too).
pub fn sum_usage(a: &Value, b: &Value) -> Value {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut out = x.clone();
            for (k, v) in y {
                let merged = match out.get(k) {
                    Some(old) => sum_usage(old, v),
                    None => v.clone(),
                };
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (Value::Number(x), Value::Number(y)) => match (x.as_u64(), y.as_u64()) {
            (Some(x), Some(y)) => json!(x + y),
            _ => json!(x.as_f64().unwrap_or(0.0) + y.as_f64().unwrap_or(0.0)),
        },
        (Value::Null, other) => other.clone(),
        (other, _) => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tools_are_offered_once_what_is_set_aside_pays_for_the_prefix_they_renew() {
        // Nothing cached to lose: at once (if the set-aside pays for the definitions).
        assert!(worth_offering(2_000, 0, 200));
        assert!(!worth_offering(1_000, 0, 200));
        // A 3,000-token head: a tenth of the set-aside must cover nine tenths of the head and
        // the definitions.
        assert!(!worth_offering(20_000, 3_000, 200));
        assert!(worth_offering(29_000, 3_000, 200));
    }

    #[test]
    fn names_avoid_the_callers_tools() {
        let body =
            json!({"tools": [{"type": "function", "function": {"name": "engram_search_history"}}]});
        let offered = Offered::avoiding(&body, Wire::Chat);
        assert_eq!(offered.search, "engram_search_history_2");
        assert_eq!(offered.read, "engram_read_history");
        let mut body = body;
        offered.offer(&mut body, Wire::Chat);
        offered.offer(&mut body, Wire::Chat);
        assert_eq!(
            body["tools"].as_array().map(Vec::len),
            Some(3),
            "each added once"
        );
        let text = body.to_string();
        assert!(
            text.contains("markers and engram_search_history_2 give"),
            "{text}"
        );
        assert!(!text.contains("\"session\""), "{text}");
    }

    #[test]
    fn a_chat_stream_adds_up_to_its_calls_and_theirs_are_left_out() {
        let offered = Offered::avoiding(&json!({}), Wire::Chat);
        let chunks = [
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Let me look."}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "engram_search_", "arguments": "{\"query\""}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": "history", "arguments": ": \"lexer\"}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "id": "c2", "function": {"name": "bash", "arguments": "{}"}}]}}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 2}}),
        ];
        let body: String = chunks
            .iter()
            .map(|c| format!("data: {c}\n\n"))
            .chain(["data: [DONE]\n\n".to_owned()])
            .collect();
        let turn = read_reply(Wire::Chat, body.as_bytes(), true, &offered).expect("a reply");
        assert_eq!(turn.calls.len(), 1);
        assert_eq!(turn.calls[0].tool, tools::SEARCH_HISTORY);
        assert_eq!(turn.calls[0].arguments, json!("{\"query\": \"lexer\"}"));
        assert_eq!(turn.theirs, 1);
        let mut request = json!({"messages": [{"role": "user", "content": "hi"}]});
        follow_up(
            Wire::Chat,
            &mut request,
            &turn,
            &[ToolReply::ok("found")],
            true,
        );
        let messages = request["messages"].as_array().expect("messages");
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[1]["tool_calls"].as_array().map(Vec::len), Some(1));
        assert_eq!(messages[2]["content"], "found");
        assert_eq!(request["tool_choice"], "none");
    }

    #[test]
    fn an_anthropic_stream_adds_up_to_its_blocks() {
        let offered = Offered::avoiding(&json!({}), Wire::Anthropic);
        let events = [
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 7, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Looking"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t1", "name": "engram_read_history", "input": {}}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"ids\": [\"m3\"]"}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "}"}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
        ];
        let body: String = events
            .iter()
            .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
            .collect();
        let turn = read_reply(Wire::Anthropic, body.as_bytes(), true, &offered).expect("a reply");
        assert_eq!(turn.calls[0].arguments, json!({"ids": ["m3"]}));
        assert_eq!(turn.usage, json!({"input_tokens": 7, "output_tokens": 9}));
    }

    #[test]
    fn answers_come_from_the_conversation_the_request_carried() {
        let messages = vec![
            Message::system("You are an agent."),
            Message::user("The failing test is tests/test_lexer.py::test_comment."),
            Message::assistant("Reading it."),
        ];
        let calls = [
            Call {
                id: "c1".into(),
                tool: tools::SEARCH_HISTORY,
                arguments: json!({"query": "test_comment"}),
            },
            Call {
                id: "c2".into(),
                tool: tools::READ_HISTORY,
                arguments: json!("{\"ids\": [\"m1\"]}"),
            },
            Call {
                id: "c3".into(),
                tool: tools::READ_HISTORY,
                arguments: json!({"ids": 3}),
            },
            Call {
                id: "c4".into(),
                tool: tools::READ_HISTORY,
                arguments: json!({"from": "m1", "max_tokens": 12}),
            },
        ];
        let offered = Offered::avoiding(&json!({}), Wire::Chat);
        let replies = answer(
            &calls,
            &messages,
            &ModelRegistry::builtin(),
            "gpt-4o",
            &offered,
            &Answering {
                read_tokens: 4_000,
                in_view: None,
            },
        )
        .expect("answers");
        assert!(replies[0].text.contains("\"m1\""), "{}", replies[0].text);
        assert!(
            replies[1].text.contains("test_comment"),
            "{}",
            replies[1].text
        );
        assert!(replies[2].is_error, "{}", replies[2].text);
        // The note names the tool as the model has it.
        assert!(
            replies[3]
                .text
                .contains("call engram_read_history with ids="),
            "{}",
            replies[3].text
        );
    }
}
