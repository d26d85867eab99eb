//! Anthropic's prompt cache: where engram marks `cache_control` breakpoints on a request whose
//! caller marked none.

use serde_json::{Value, json};

use crate::input::Conversation;
use crate::message::Message;

use super::to_anthropic;

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
}
