//! A reply relayed to the caller while engram's history tools are offered, round by round.
//!
//! The model's reply may call engram's tools, which the caller never defined: such a call is
//! answered by engram and the model asked again, and the caller gets one reply made of the
//! rounds. A [`Relay`] is fed each round's reply as it arrives and says what goes to the caller
//! now; when a round ends it says whether to ask again ([`Ended::Recall`]) or what ends the
//! reply ([`Ended::Done`]).
//!
//! A streamed reply streams: text and thinking go to the caller as they come, in every round;
//! tool calls are held until the model's turn ends (a caller acts on them only then), so that a
//! turn that also calls engram's tools can be asked again without the caller having seen its
//! other calls (the model makes them again). The later rounds continue the same reply: their
//! opening events are left out, their blocks, items and tool calls numbered on from those the
//! caller has, and their closing events end it. A reply that is not streamed is read whole and
//! the caller gets the last round's.
//!
//! Whatever the upstream does, the caller never sees a call to a tool it did not define: in the
//! last round (asked with `tool_choice: none`, which an upstream may ignore) engram's calls are
//! left out and the turn ends as if the model had stopped. The usage the caller reads is the
//! upstream's for the rounds it describes, never a sum of rounds (a client sizes its context
//! from it).

use std::collections::HashMap;

use serde_json::{Value, json};

use super::{Offered, Turn, Wire, read_reply};

/// What a round's end calls for.
#[derive(Debug)]
pub enum Ended {
    /// The model called engram's tools: answer `Turn::calls`, send the follow-up, and feed its
    /// reply to the relay.
    Recall(Turn),
    /// The reply is over: these bytes end it (a reply that is not streamed: its whole body).
    Done(Vec<u8>),
}

/// A tool call, block or item of the current round, as the caller gets it.
#[derive(Debug, Clone)]
enum Slot {
    /// Forwarded under this index.
    Forward(usize),
    /// Held until the turn ends: its events (their data), in order.
    Hold(Vec<Value>),
}

/// One reply relayed to the caller over its rounds.
#[derive(Debug)]
pub struct Relay {
    wire: Wire,
    offered: Offered,
    streamed: bool,
    round: usize,
    /// What has arrived of the current round: its raw bytes.
    raw: Vec<u8>,
    /// The text of an event not yet complete.
    partial: String,
    /// The current round's blocks (Anthropic), items (Responses) or tool calls (Chat), by the
    /// upstream's index.
    slots: HashMap<usize, Slot>,
    /// The upstream's indexes in the order they started.
    order: Vec<usize>,
    /// The next index the caller gets.
    next: usize,
    /// The events that end the current round, held: `message_delta` (Anthropic), the finishing
    /// chunks (Chat), `response.completed` (Responses).
    tail: Vec<Value>,
    /// Chat: the first round's chunk id, which every chunk the caller gets carries.
    chat_id: Option<Value>,
    /// Responses: the next sequence number, and the items the caller has been given whole.
    sequence: u64,
    items: Vec<Value>,
    /// What the caller is owed from the end of the last round, sent with the next bytes.
    carry: Vec<u8>,
}

impl Relay {
    /// A relay for a reply of `wire` (streamed or not) to a request that offered `offered`.
    pub fn new(wire: Wire, offered: Offered, streamed: bool) -> Relay {
        Relay {
            wire,
            offered,
            streamed,
            round: 0,
            raw: Vec::new(),
            partial: String::new(),
            slots: HashMap::new(),
            order: Vec::new(),
            next: 0,
            tail: Vec::new(),
            chat_id: None,
            sequence: 0,
            items: Vec::new(),
            carry: Vec::new(),
        }
    }

    /// Which round is being fed (0: the reply to the caller's request).
    pub fn round(&self) -> usize {
        self.round
    }

    /// Feeds what arrived of the current round's reply; returns what goes to the caller now.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<u8> {
        self.raw.extend_from_slice(bytes);
        if !self.streamed {
            return Vec::new();
        }
        self.partial
            .push_str(&String::from_utf8_lossy(bytes).replace("\r\n", "\n"));
        let mut out = std::mem::take(&mut self.carry);
        while let Some(at) = self.partial.find("\n\n") {
            let event: String = self.partial.drain(..at + 2).collect();
            self.event(&event, &mut out);
        }
        out
    }

    /// The current round's reply has ended. With `last` (no more rounds allowed), engram's
    /// calls are left out of it rather than answered.
    pub fn finish(&mut self, last: bool) -> Ended {
        // An event the stream ended without its blank line is complete all the same.
        let mut left = Vec::new();
        if self.streamed && !self.partial.trim().is_empty() {
            let rest = std::mem::take(&mut self.partial) + "\n\n";
            self.event(&rest, &mut left);
        }
        let turn = read_reply(self.wire, &self.raw, self.streamed, &self.offered);
        if let Some(turn) = turn.filter(|t| !t.calls.is_empty() && !last) {
            self.next_round();
            self.carry = left;
            return Ended::Recall(turn);
        }
        let out = if self.streamed {
            left.extend(self.close());
            left
        } else {
            without_engrams_calls(self.wire, &self.raw, &self.offered)
        };
        Ended::Done(out)
    }

    fn next_round(&mut self) {
        self.round += 1;
        self.raw.clear();
        self.partial.clear();
        self.slots.clear();
        self.order.clear();
        self.tail.clear();
        if self.wire == Wire::Chat {
            // Tool calls are numbered per turn: the held ones went nowhere.
            self.next = 0;
        }
    }

    /// One event of a stream: forwarded into `out`, held, or dropped.
    fn event(&mut self, text: &str, out: &mut Vec<u8>) {
        let data = crate::sse::data_of(text);
        if data.is_empty() {
            // A comment or a keep-alive: nothing to number.
            if !text.trim().is_empty() {
                out.extend_from_slice(text.as_bytes());
            }
            return;
        }
        let Ok(value) = serde_json::from_str::<Value>(&data) else {
            // `[DONE]` ends a Chat stream: written again when the reply ends.
            if self.wire != Wire::Chat || data.trim() != "[DONE]" {
                out.extend_from_slice(text.as_bytes());
            }
            return;
        };
        match self.wire {
            Wire::Anthropic => self.anthropic(value, out),
            Wire::Chat => self.chat(value, out),
            Wire::Responses => self.responses(value, out),
        }
    }

    fn anthropic(&mut self, mut data: Value, out: &mut Vec<u8>) {
        let index = data["index"].as_u64().map(|i| i as usize);
        let kind = data["type"].as_str().unwrap_or_default().to_owned();
        match kind.as_str() {
            "message_start" => {
                if self.round == 0 {
                    write_event(out, Some("message_start"), &data);
                }
            }
            "content_block_start" => {
                let Some(i) = index else { return };
                self.order.push(i);
                if data["content_block"]["type"] == "tool_use" {
                    self.slots.insert(i, Slot::Hold(vec![data]));
                } else {
                    let to = self.next;
                    self.next += 1;
                    self.slots.insert(i, Slot::Forward(to));
                    data["index"] = json!(to);
                    write_event(out, Some("content_block_start"), &data);
                }
            }
            kind @ ("content_block_delta" | "content_block_stop") => {
                let Some(i) = index else { return };
                match self.slots.get_mut(&i) {
                    Some(Slot::Forward(to)) => {
                        data["index"] = json!(*to);
                        write_event(out, Some(kind), &data);
                    }
                    Some(Slot::Hold(events)) => events.push(data),
                    None => {}
                }
            }
            "message_delta" | "message_stop" => self.tail.push(data),
            kind => write_event(out, Some(kind), &data),
        }
    }

    fn chat(&mut self, mut data: Value, out: &mut Vec<u8>) {
        match &self.chat_id {
            None => self.chat_id = data.get("id").cloned(),
            Some(id) => {
                if data.get("id").is_some() {
                    data["id"] = id.clone();
                }
            }
        }
        let usage_only = data["choices"].as_array().is_none_or(Vec::is_empty);
        let (calls, finish) = match data.pointer_mut("/choices/0") {
            Some(choice) => (
                choice
                    .get_mut("delta")
                    .and_then(Value::as_object_mut)
                    .and_then(|d| d.remove("tool_calls")),
                choice
                    .get("finish_reason")
                    .filter(|f| !f.is_null())
                    .cloned(),
            ),
            None => (None, None),
        };
        for call in calls
            .as_ref()
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let i = call["index"].as_u64().unwrap_or(0) as usize;
            if !self.slots.contains_key(&i) {
                self.order.push(i);
                self.slots.insert(i, Slot::Hold(Vec::new()));
            }
            if let Some(Slot::Hold(pieces)) = self.slots.get_mut(&i) {
                pieces.push(call.clone());
            }
        }
        let has_delta = data
            .pointer("/choices/0/delta")
            .and_then(Value::as_object)
            .is_some_and(|d| d.values().any(|v| !v.is_null()));
        if finish.is_some() || usage_only {
            // The turn's end (and its usage): held until the turn is known to be the last.
            if has_delta {
                // (`has_delta` says the first choice is there.)
                let mut delta_only = data.clone();
                delta_only["choices"][0]["finish_reason"] = Value::Null;
                write_event(out, None, &delta_only);
                data["choices"][0]["delta"] = json!({});
            }
            self.tail.push(data);
        } else if has_delta || calls.is_none() {
            write_event(out, None, &data);
        }
    }

    fn responses(&mut self, mut data: Value, out: &mut Vec<u8>) {
        let kind = data["type"].as_str().unwrap_or_default().to_owned();
        match kind.as_str() {
            "response.created" | "response.in_progress" | "response.queued" => {
                if self.round == 0 {
                    self.forward_response_event(data, out);
                }
                return;
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                self.tail.push(data);
                return;
            }
            _ => {}
        }
        let Some(i) = data["output_index"].as_u64().map(|i| i as usize) else {
            self.forward_response_event(data, out);
            return;
        };
        if kind == "response.output_item.added" && !self.slots.contains_key(&i) {
            self.order.push(i);
            if data["item"]["type"] == "function_call" {
                self.slots.insert(i, Slot::Hold(Vec::new()));
            } else {
                self.slots.insert(i, Slot::Forward(self.next));
                self.next += 1;
            }
        }
        match self.slots.get_mut(&i) {
            Some(Slot::Forward(to)) => {
                data["output_index"] = json!(*to);
                if kind == "response.output_item.done" {
                    self.items.push(data["item"].clone());
                }
                self.forward_response_event(data, out);
            }
            Some(Slot::Hold(events)) => events.push(data),
            None => self.forward_response_event(data, out),
        }
    }

    fn forward_response_event(&mut self, mut data: Value, out: &mut Vec<u8>) {
        if data.get("sequence_number").is_some() {
            data["sequence_number"] = json!(self.sequence);
        }
        self.sequence += 1;
        let kind = data["type"].as_str().map(str::to_owned);
        write_event(out, kind.as_deref(), &data);
    }

    /// The end of a streamed reply: the held calls to the caller's own tools, numbered on, then
    /// the round's closing events, saying the turn ended without a tool call when engram's
    /// were all it made.
    fn close(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        let held: Vec<(usize, Vec<Value>)> = self
            .order
            .iter()
            .filter_map(|i| match self.slots.get(i) {
                Some(Slot::Hold(events)) => Some((*i, events.clone())),
                _ => None,
            })
            .collect();
        let mut theirs = 0;
        let mut dropped = 0;
        for (_, events) in held {
            if self.engrams(&events) {
                dropped += 1;
                continue;
            }
            theirs += 1;
            let to = self.next;
            self.next += 1;
            for mut data in events {
                match self.wire {
                    Wire::Anthropic => {
                        data["index"] = json!(to);
                        let kind = data["type"].as_str().map(str::to_owned);
                        write_event(&mut out, kind.as_deref(), &data);
                    }
                    Wire::Chat => {
                        data["index"] = json!(to);
                        let chunk = json!({
                            "id": self.chat_id.clone().unwrap_or(Value::Null),
                            "object": "chat.completion.chunk",
                            "choices": [{"index": 0, "delta": {"tool_calls": [data]}, "finish_reason": null}],
                        });
                        write_event(&mut out, None, &chunk);
                    }
                    Wire::Responses => {
                        data["output_index"] = json!(to);
                        if data["type"] == "response.output_item.done" {
                            self.items.push(data["item"].clone());
                        }
                        self.forward_response_event(data, &mut out);
                    }
                }
            }
        }
        let tail = std::mem::take(&mut self.tail);
        let ended_without_calls = dropped > 0 && theirs == 0;
        for mut data in tail {
            match self.wire {
                Wire::Anthropic => {
                    if ended_without_calls && data["type"] == "message_delta" {
                        data["delta"]["stop_reason"] = json!("end_turn");
                    }
                    let kind = data["type"].as_str().map(str::to_owned);
                    write_event(&mut out, kind.as_deref(), &data);
                }
                Wire::Chat => {
                    if ended_without_calls
                        && let Some(finish) = data.pointer_mut("/choices/0/finish_reason")
                        && !finish.is_null()
                    {
                        *finish = json!("stop");
                    }
                    write_event(&mut out, None, &data);
                }
                Wire::Responses => {
                    if self.round > 0 || dropped > 0 {
                        data["response"]["output"] = Value::Array(self.items.clone());
                    }
                    self.forward_response_event(data, &mut out);
                }
            }
        }
        if self.wire == Wire::Chat {
            out.extend_from_slice(b"data: [DONE]\n\n");
        }
        out
    }

    /// Whether the held events of one call are a call to one of engram's tools.
    fn engrams(&self, events: &[Value]) -> bool {
        let name: String = match self.wire {
            Wire::Anthropic => events
                .first()
                .and_then(|e| e["content_block"]["name"].as_str())
                .unwrap_or_default()
                .to_owned(),
            // A Chat call's name may come in pieces.
            Wire::Chat => events
                .iter()
                .filter_map(|c| c["function"]["name"].as_str())
                .collect(),
            Wire::Responses => events
                .first()
                .and_then(|e| e["item"]["name"].as_str())
                .unwrap_or_default()
                .to_owned(),
        };
        self.offered.tool(&name).is_some()
    }
}

/// Writes one server-sent event.
fn write_event(out: &mut Vec<u8>, event: Option<&str>, data: &Value) {
    if let Some(event) = event {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(event.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(data.to_string().as_bytes());
    out.extend_from_slice(b"\n\n");
}

/// A whole reply with its calls to engram's tools left out (the turn ends as if the model had
/// stopped, when they were all it called); byte for byte when it has none.
fn without_engrams_calls(wire: Wire, body: &[u8], offered: &Offered) -> Vec<u8> {
    let Ok(mut reply) = serde_json::from_slice::<Value>(body) else {
        return body.to_vec();
    };
    let engrams = |name: Option<&str>| name.and_then(|n| offered.tool(n)).is_some();
    let changed = match wire {
        Wire::Chat => {
            let message = &mut reply["choices"][0]["message"];
            let Some(calls) = message.get_mut("tool_calls").and_then(Value::as_array_mut) else {
                return body.to_vec();
            };
            let before = calls.len();
            calls.retain(|c| !engrams(c["function"]["name"].as_str()));
            let (after, changed) = (calls.len(), calls.len() != before);
            if changed && after == 0 {
                if let Some(m) = message.as_object_mut() {
                    m.remove("tool_calls");
                }
                reply["choices"][0]["finish_reason"] = json!("stop");
            }
            changed
        }
        Wire::Anthropic => {
            let Some(blocks) = reply["content"].as_array_mut() else {
                return body.to_vec();
            };
            let before = blocks.len();
            blocks.retain(|b| !(b["type"] == "tool_use" && engrams(b["name"].as_str())));
            let changed = blocks.len() != before;
            if changed && !blocks.iter().any(|b| b["type"] == "tool_use") {
                reply["stop_reason"] = json!("end_turn");
            }
            changed
        }
        Wire::Responses => {
            let Some(items) = reply["output"].as_array_mut() else {
                return body.to_vec();
            };
            let before = items.len();
            items.retain(|i| !(i["type"] == "function_call" && engrams(i["name"].as_str())));
            items.len() != before
        }
    };
    if changed {
        serde_json::to_vec(&reply).unwrap_or_else(|_| body.to_vec())
    } else {
        body.to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sse(events: &[Value], named: bool) -> String {
        events
            .iter()
            .map(|e| {
                if named {
                    format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or(""))
                } else {
                    format!("data: {e}\n\n")
                }
            })
            .collect()
    }

    fn data_of(text: &str) -> Vec<Value> {
        text.split("\n\n")
            .filter_map(|e| {
                e.lines()
                    .find_map(|l| l.strip_prefix("data: "))
                    .and_then(|d| serde_json::from_str(d).ok())
            })
            .collect()
    }

    /// Two Anthropic rounds make one stream: the first round's text streams at once, its call
    /// to engram's tool never reaches the caller, the second round's blocks are numbered on and
    /// its end ends the reply.
    #[test]
    fn anthropic_rounds_stream_as_one_reply() {
        let offered = Offered::avoiding(&json!({}), Wire::Anthropic);
        let mut relay = Relay::new(Wire::Anthropic, offered, true);
        let round1 = sse(
            &[
                json!({"type": "message_start", "message": {"id": "m1", "usage": {"input_tokens": 100}}}),
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Looking back."}}),
                json!({"type": "content_block_stop", "index": 0}),
                json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t1", "name": "engram_search_history", "input": {}}}),
                json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"query\": \"lexer\"}"}}),
                json!({"type": "content_block_stop", "index": 1}),
                json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 20}}),
                json!({"type": "message_stop"}),
            ],
            true,
        );
        // Fed in small pieces, as a network delivers it: the text goes out before the end.
        let mut first = Vec::new();
        for piece in round1.as_bytes().chunks(7) {
            first.extend(relay.feed(piece));
        }
        let first = String::from_utf8(first).expect("utf8");
        assert!(first.contains("Looking back."), "{first}");
        assert!(!first.contains("engram_search_history"), "{first}");
        let Ended::Recall(turn) = relay.finish(false) else {
            panic!("engram's call is answered");
        };
        assert_eq!(turn.calls.len(), 1);
        let round2 = sse(
            &[
                json!({"type": "message_start", "message": {"id": "m2", "usage": {"input_tokens": 300}}}),
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Found it."}}),
                json!({"type": "content_block_stop", "index": 0}),
                json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t2", "name": "Bash", "input": {}}}),
                json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"command\": \"make\"}"}}),
                json!({"type": "content_block_stop", "index": 1}),
                json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"input_tokens": 300, "output_tokens": 9}}),
                json!({"type": "message_stop"}),
            ],
            true,
        );
        let second = String::from_utf8(relay.feed(round2.as_bytes())).expect("utf8");
        let Ended::Done(end) = relay.finish(false) else {
            panic!("no call of engram's: done");
        };
        let whole = format!("{first}{second}{}", String::from_utf8(end).expect("utf8"));
        let events = data_of(&whole);
        let starts: Vec<u64> = events
            .iter()
            .filter(|e| e["type"] == "message_start")
            .map(|e| e["message"]["usage"]["input_tokens"].as_u64().unwrap_or(0))
            .collect();
        assert_eq!(starts, [100], "one message_start, the first round's");
        let blocks: Vec<(u64, String)> = events
            .iter()
            .filter(|e| e["type"] == "content_block_start")
            .map(|e| {
                (
                    e["index"].as_u64().unwrap_or(99),
                    e["content_block"]["type"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect();
        assert_eq!(
            blocks,
            [
                (0, "text".into()),
                (1, "text".into()),
                (2, "tool_use".into())
            ]
        );
        let last = events
            .iter()
            .rev()
            .find(|e| e["type"] == "message_delta")
            .expect("a delta");
        assert_eq!(
            last["usage"]["input_tokens"], 300,
            "the last round's usage, not a sum"
        );
        assert!(whole.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
        assert!(!whole.contains("engram_search_history"));
    }

    /// An upstream that still calls engram's tool on the last round: the call is left out and
    /// the turn ends as if the model stopped, streamed or not.
    #[test]
    fn the_last_round_never_passes_on_a_call_to_engrams_tools() {
        let offered = Offered::avoiding(&json!({}), Wire::Chat);
        let chunks = sse(
            &[
                json!({"id": "c9", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Partial answer."}}]}),
                json!({"id": "c9", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "x1", "function": {"name": "engram_read_", "arguments": "{}"}}]}}]}),
                json!({"id": "c9", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": "history"}}]}}]}),
                json!({"id": "c9", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            ],
            false,
        ) + "data: [DONE]\n\n";
        let mut relay = Relay::new(Wire::Chat, offered.clone(), true);
        let mut out = relay.feed(chunks.as_bytes());
        let Ended::Done(end) = relay.finish(true) else {
            panic!("the last round is done");
        };
        out.extend(end);
        let text = String::from_utf8(out).expect("utf8");
        assert!(!text.contains("engram_read_"), "{text}");
        assert!(text.contains("Partial answer."));
        assert!(text.contains("\"finish_reason\":\"stop\""), "{text}");
        assert!(text.ends_with("data: [DONE]\n\n"));

        let whole = json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": "So far.",
            "tool_calls": [{"id": "x1", "type": "function", "function": {"name": "engram_read_history", "arguments": "{}"}}]}}],
            "usage": {"prompt_tokens": 50}});
        let mut relay = Relay::new(Wire::Chat, offered, false);
        relay.feed(whole.to_string().as_bytes());
        let Ended::Done(body) = relay.finish(true) else {
            panic!("done");
        };
        let reply: Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(reply["choices"][0]["finish_reason"], "stop");
        assert!(reply["choices"][0]["message"].get("tool_calls").is_none());
        assert_eq!(reply["usage"]["prompt_tokens"], 50);
    }

    /// Responses: the second round's items follow the first's, sequence numbers run on, and
    /// the completed response lists what the caller was given.
    #[test]
    fn responses_rounds_number_on() {
        let offered = Offered::avoiding(&json!({}), Wire::Responses);
        let mut relay = Relay::new(Wire::Responses, offered, true);
        let round1 = sse(
            &[
                json!({"type": "response.created", "sequence_number": 0, "response": {"id": "r1", "output": []}}),
                json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": {"type": "reasoning", "id": "rs1"}}),
                json!({"type": "response.output_item.done", "sequence_number": 2, "output_index": 0, "item": {"type": "reasoning", "id": "rs1", "summary": []}}),
                json!({"type": "response.output_item.added", "sequence_number": 3, "output_index": 1, "item": {"type": "function_call", "name": "engram_search_history", "call_id": "k1", "arguments": ""}}),
                json!({"type": "response.output_item.done", "sequence_number": 4, "output_index": 1, "item": {"type": "function_call", "name": "engram_search_history", "call_id": "k1", "arguments": "{\"query\":\"x\"}"}}),
                json!({"type": "response.completed", "sequence_number": 5, "response": {"id": "r1", "output": [
                    {"type": "reasoning", "id": "rs1", "summary": []},
                    {"type": "function_call", "name": "engram_search_history", "call_id": "k1", "arguments": "{\"query\":\"x\"}"}],
                    "usage": {"input_tokens": 10}}}),
            ],
            true,
        );
        let mut out = relay.feed(round1.as_bytes());
        assert!(matches!(relay.finish(false), Ended::Recall(_)));
        let round2 = sse(
            &[
                json!({"type": "response.created", "sequence_number": 0, "response": {"id": "r2", "output": []}}),
                json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": {"type": "message", "id": "msg"}}),
                json!({"type": "response.output_text.delta", "sequence_number": 2, "output_index": 0, "delta": "done"}),
                json!({"type": "response.output_item.done", "sequence_number": 3, "output_index": 0, "item": {"type": "message", "id": "msg", "content": [{"type": "output_text", "text": "done"}]}}),
                json!({"type": "response.completed", "sequence_number": 4, "response": {"id": "r2", "output": [], "usage": {"input_tokens": 40}}}),
            ],
            true,
        );
        out.extend(relay.feed(round2.as_bytes()));
        let Ended::Done(end) = relay.finish(false) else {
            panic!("done")
        };
        out.extend(end);
        let events = data_of(&String::from_utf8(out).expect("utf8"));
        let sequence: Vec<u64> = events
            .iter()
            .filter_map(|e| e["sequence_number"].as_u64())
            .collect();
        assert_eq!(sequence, (0..sequence.len() as u64).collect::<Vec<_>>());
        let indexes: Vec<u64> = events
            .iter()
            .filter_map(|e| e["output_index"].as_u64())
            .collect();
        assert_eq!(indexes, [0, 0, 1, 1, 1]);
        let completed = events.last().expect("an end");
        assert_eq!(completed["type"], "response.completed");
        assert_eq!(completed["response"]["usage"]["input_tokens"], 40);
        let kinds: Vec<&str> = completed["response"]["output"]
            .as_array()
            .expect("output")
            .iter()
            .map(|i| i["type"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(kinds, ["reasoning", "message"]);
    }
}
