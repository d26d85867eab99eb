//! The Responses API's compaction in a conversation, as Codex asks for it: an ordinary
//! `POST /v1/responses` whose `input` ends with a `{"type": "compaction_trigger"}` item, answered
//! by exactly one `{"type": "compaction"}` output item. The agent then keeps that item in place of
//! everything it stands for and sends it back in every later request, opaque.
//!
//! A provider writes the item's `encrypted_content` itself; an upstream that cannot (a local
//! model server, another provider behind a gateway) answers the trigger as a turn, and the agent
//! stops. For those, engram writes the item: its `encrypted_content` carries the compacted items
//! themselves, marked as engram's, and engram puts them back in place of the item in every later
//! request before anything else reads it, so that the upstream gets plain items it understands.

use serde_json::{Value, json};

use crate::error::InputError;

/// The type of the item that asks for a compaction.
pub const TRIGGER: &str = "compaction_trigger";

/// The type of the item that answers it.
pub const COMPACTION: &str = "compaction";

/// How the `encrypted_content` of an item engram wrote starts; the items it stands for follow,
/// as JSON.
pub const MARK: &str = "engram-compaction-v1:";

/// True when `request`'s `input` ends with the compaction trigger.
pub fn asks_compaction(request: &Value) -> bool {
    request["input"]
        .as_array()
        .and_then(|items| items.last())
        .is_some_and(|item| item["type"] == TRIGGER)
}

/// `request` without its trailing trigger: the conversation to compact.
pub fn without_trigger(request: &Value) -> Value {
    let mut out = request.clone();
    if let Some(items) = out["input"].as_array_mut()
        && items.last().is_some_and(|item| item["type"] == TRIGGER)
    {
        items.pop();
    }
    out
}

/// The compaction item that stands for `compacted` (the conversation compacted, as Responses
/// items) in a conversation whose items the caller sent as `input` (before [`expand`]). The
/// caller's own items (those of a user, developer or system role: its messages, instructions,
/// tool lists) are left out: the agent keeps its user messages and sends its instructions beside
/// the item itself, so the item holds engram's summaries, what an earlier item stood for, and
/// the model's side of the work. engram's summaries go in as a developer's messages, which
/// compaction keeps whole: at the agent's next compaction they are kept as they are (with their
/// work ledger) rather than summarised again, while they fit ([`unpin_summaries`]).
pub fn item_for(compacted: &[Value], input: &[Value]) -> Value {
    let callers = |item: &Value| {
        matches!(item["role"].as_str(), Some("user" | "developer" | "system"))
            && input.contains(item)
    };
    let kept: Vec<Value> = compacted
        .iter()
        .filter(|i| !callers(i))
        .map(|i| {
            let mut i = i.clone();
            if i["role"] == "system" && is_summary(&i) {
                i["role"] = json!("developer");
            }
            i
        })
        .collect();
    let content = format!("{MARK}{}", Value::Array(kept));
    let id = format!(
        "cmp_engram_{:016x}",
        xxhash_rust::xxh3::xxh3_64(content.as_bytes())
    );
    json!({"type": COMPACTION, "id": id, "encrypted_content": content})
}

/// Replaces, in `request`'s `input`, every compaction item engram wrote by the items it stands
/// for. Returns how many it replaced; an item marked as engram's whose content is not a list of
/// items is an error naming it (a provider's own items are left as they are).
pub fn expand(request: &mut Value) -> Result<usize, InputError> {
    let Some(items) = request.get_mut("input").and_then(Value::as_array_mut) else {
        return Ok(0);
    };
    if !items.iter().any(is_engrams) {
        return Ok(0);
    }
    let mut out = Vec::with_capacity(items.len());
    let mut replaced = 0;
    for (i, item) in std::mem::take(items).into_iter().enumerate() {
        if !is_engrams(&item) {
            out.push(item);
            continue;
        }
        let content = item["encrypted_content"].as_str().unwrap_or_default();
        match serde_json::from_str::<Value>(&content[MARK.len()..]) {
            Ok(Value::Array(inner)) => {
                out.extend(inner);
                replaced += 1;
            }
            _ => {
                return Err(InputError::new(
                    "a compaction item engram wrote, whose content is not the items it stands for (was it edited?)",
                )
                .at_field(format!("input[{i}].encrypted_content")));
            }
        }
    }
    *items = out;
    Ok(replaced)
}

/// A request's JSON `body` with the compaction items engram wrote expanded ([`expand`]); `None`
/// when it holds none (the caller's bytes go on as they came).
pub fn expand_body(body: &[u8]) -> Result<Option<String>, InputError> {
    if memchr::memmem::find(body, MARK.as_bytes()).is_none() {
        return Ok(None);
    }
    let Ok(mut request) = serde_json::from_slice::<Value>(body) else {
        return Ok(None);
    };
    Ok((expand(&mut request)? > 0).then(|| request.to_string()))
}

/// True for a request's JSON `body` whose input ends with the trigger ([`asks_compaction`]).
pub fn body_asks_compaction(body: &[u8]) -> bool {
    memchr::memmem::find(body, TRIGGER.as_bytes()).is_some()
        && serde_json::from_slice::<Value>(body).is_ok_and(|request| asks_compaction(&request))
}

/// Turns the summaries [`item_for`] kept whole back into system messages, which compaction
/// summarises with the rest: for a conversation whose kept summaries no longer fit its budget.
/// Returns how many it turned.
pub fn unpin_summaries(request: &mut Value) -> usize {
    let Some(items) = request.get_mut("input").and_then(Value::as_array_mut) else {
        return 0;
    };
    let mut turned = 0;
    for item in items.iter_mut() {
        if item["role"] == "developer" && is_summary(item) {
            item["role"] = json!("system");
            turned += 1;
        }
    }
    turned
}

/// A message of engram's summaries: its text starts with the digest's or a summary's header.
fn is_summary(item: &Value) -> bool {
    let text = match &item["content"] {
        Value::String(text) => text.as_str(),
        Value::Array(parts) => parts
            .first()
            .and_then(|p| p["text"].as_str())
            .unwrap_or_default(),
        _ => "",
    };
    text.starts_with(crate::compact::DIGEST_HEADER)
        || text.starts_with(crate::compact::summarize::SUMMARY_HEADER)
}

fn is_engrams(item: &Value) -> bool {
    item["type"] == COMPACTION
        && item["encrypted_content"]
            .as_str()
            .is_some_and(|c| c.starts_with(MARK))
}

/// How many compaction items an upstream's reply to a trigger holds: a response object, or its
/// server-sent events (each `response.output_item.done` counted once).
pub fn compactions_in_reply(body: &[u8]) -> usize {
    let count_output = |response: &Value| {
        response["output"].as_array().map_or(0, |output| {
            output.iter().filter(|i| i["type"] == COMPACTION).count()
        })
    };
    if let Ok(response) = serde_json::from_slice::<Value>(body) {
        return count_output(&response);
    }
    crate::sse::events(body)
        .iter()
        .filter_map(|event| event.data.as_ref())
        .filter(|data| {
            data["type"] == "response.output_item.done" && data["item"]["type"] == COMPACTION
        })
        .count()
}

/// The reply to a trigger that engram answers itself, with `item` as its one output: the
/// events of a streamed response when `stream`, else the response object. `usage` is the
/// response's `usage`.
pub fn reply(request: &Value, item: &Value, usage: &Value, stream: bool) -> String {
    let id = format!(
        "resp_{}",
        item["id"]
            .as_str()
            .unwrap_or("cmp_engram")
            .trim_start_matches("cmp_")
    );
    let response = |status: &str, output: Vec<Value>| {
        json!({
            "id": id,
            "object": "response",
            "created_at": crate::timestamp::now() / 1000,
            "status": status,
            "model": request["model"],
            "output": output,
            "usage": usage,
        })
    };
    if !stream {
        return response("completed", vec![item.clone()]).to_string();
    }
    let events = [
        json!({"type": "response.created", "response": response("in_progress", Vec::new())}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": item}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        json!({"type": "response.completed", "response": response("completed", vec![item.clone()])}),
    ];
    let mut out = String::new();
    for (n, mut event) in events.into_iter().enumerate() {
        event["sequence_number"] = json!(n);
        out.push_str(&format!(
            "event: {}\ndata: {event}\n\n",
            event["type"].as_str().unwrap_or_default()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_item_engram_wrote_comes_back_as_the_items_it_stands_for() {
        let kept = vec![
            json!({"type": "message", "role": "user", "content": "[summary of steps 1-9]"}),
            json!({"type": "function_call", "call_id": "call_9", "name": "shell", "arguments": "{}"}),
            json!({"type": "function_call_output", "call_id": "call_9", "output": "ok"}),
        ];
        let task = json!({"type": "message", "role": "user", "content": "fix it"});
        let mut compacted = vec![task.clone()];
        compacted.extend(kept.clone());
        let item = item_for(&compacted, std::slice::from_ref(&task));
        assert_eq!(item["type"], "compaction");
        let theirs = json!({"type": "compaction", "encrypted_content": "gAAAA-opaque"});
        let next = json!({"type": "message", "role": "user", "content": "go on"});
        let mut request = json!({"input": [task, theirs, item, next]});
        assert_eq!(expand(&mut request).expect("expands"), 1);
        let mut want = vec![task, theirs];
        want.extend(kept);
        want.push(next);
        assert_eq!(
            request["input"],
            Value::Array(want),
            "a provider's item stays"
        );

        let mut edited =
            json!({"input": [{"type": "compaction", "encrypted_content": format!("{MARK}[oops")}]});
        let err = expand(&mut edited).expect_err("not items");
        assert!(
            err.to_string().contains("input[0].encrypted_content"),
            "{err}"
        );
    }

    #[test]
    fn engrams_summaries_are_kept_whole_until_unpinned() {
        let summary = json!({"type": "message", "role": "system",
            "content": format!("{} (key lines of 9 earlier messages)\n- src/a.rs", crate::compact::DIGEST_HEADER)});
        let note = json!({"type": "message", "role": "system", "content": "Reminder: be brief."});
        let item = item_for(&[summary.clone(), note.clone()], &[]);
        let mut request = json!({"input": [item]});
        expand(&mut request).expect("expands");
        assert_eq!(
            request["input"][0]["role"], "developer",
            "a summary is pinned"
        );
        assert_eq!(
            request["input"][1], note,
            "any other message stays as it was"
        );
        assert_eq!(unpin_summaries(&mut request), 1);
        assert_eq!(request["input"][0], summary);
    }

    #[test]
    fn the_trigger_is_the_last_item_and_the_reply_holds_one_compaction() {
        let asked =
            json!({"model": "m", "input": [{"role": "user", "content": "x"}, {"type": TRIGGER}]});
        assert!(asks_compaction(&asked));
        assert!(!asks_compaction(&without_trigger(&asked)));
        assert!(!asks_compaction(&json!({"input": "text"})));
        let item = item_for(&[json!({"role": "user", "content": "summary"})], &[]);
        let usage = json!({"input_tokens": 10, "output_tokens": 0, "total_tokens": 10});
        for stream in [true, false] {
            let text = reply(&asked, &item, &usage, stream);
            assert_eq!(compactions_in_reply(text.as_bytes()), 1, "{text}");
        }
        // A turn is not a compaction.
        let turn = json!({"output": [{"type": "message", "role": "assistant", "content": []}]});
        assert_eq!(compactions_in_reply(turn.to_string().as_bytes()), 0);
    }
}
