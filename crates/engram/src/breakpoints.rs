//! OpenAI's explicit prompt cache breakpoints (GPT-5.6 and later): a content part marked
//! `prompt_cache_breakpoint: {"mode": "explicit"}` ends a prefix the provider caches. Without
//! one, the provider caches only near the newest message, so a request whose stable head is
//! followed by a rewritten middle (a compaction) reads nothing from the cache. The proxy marks
//! the end of the instructions and the task, the prefix every request of a conversation shares,
//! when the caller marks nothing itself. (Anthropic's `cache_control` breakpoints:
//! [`crate::formats::anthropic::mark_cache_breakpoints`].)

use serde_json::{Value, json};

/// The most breakpoints marked: a request takes four cache writes, one of them the provider's
/// own near the newest message.
pub const MAX_MARKED: usize = 3;

const KEY: &str = "prompt_cache_breakpoint";

/// True when a request marks a breakpoint of its own anywhere.
pub fn has_breakpoints(request: &Value) -> bool {
    fn any(v: &Value) -> bool {
        match v {
            Value::Object(map) => map.contains_key(KEY) || map.values().any(any),
            Value::Array(items) => items.iter().any(any),
            _ => false,
        }
    }
    any(request)
}

/// Marks the end of the stable prefix of a Chat Completions (`messages`) or Responses
/// (`input`) request that marks none: the last of the leading system or developer messages, and
/// the task (the first user message after them). A message's text content becomes a part to
/// carry the mark. Returns how many were marked.
pub fn mark(request: &mut Value) -> usize {
    if has_breakpoints(request) {
        return 0;
    }
    let responses = request.get("input").is_some();
    let list = if responses { "input" } else { "messages" };
    let Some(messages) = request.get_mut(list).and_then(Value::as_array_mut) else {
        return 0;
    };
    let role = |m: &Value| {
        m.get("role")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let is_message = |m: &Value| m.get("type").is_none_or(|t| t == "message");
    // The instructions: the leading system and developer items (Codex's tool definitions
    // among them), of which the last message can carry a mark.
    let leading = messages
        .iter()
        .take_while(|m| matches!(role(m).as_str(), "system" | "developer"))
        .count();
    let mut marks = Vec::new();
    if let Some(last) = messages[..leading].iter().rposition(is_message) {
        marks.push(last);
    }
    if let Some(task) = messages
        .get(leading)
        .filter(|m| is_message(m) && role(m) == "user")
        && task.get("content").is_some()
    {
        marks.push(leading);
    }
    let mut marked = 0;
    for at in marks.into_iter().take(MAX_MARKED) {
        let text_type = if responses { "input_text" } else { "text" };
        let message = &mut messages[at];
        if let Some(Value::String(text)) = message.get("content") {
            let text = text.clone();
            message["content"] = json!([{"type": text_type, "text": text}]);
        }
        if let Some(last) = message
            .get_mut("content")
            .and_then(Value::as_array_mut)
            .and_then(|parts| parts.last_mut())
            .and_then(Value::as_object_mut)
        {
            last.insert(KEY.into(), json!({"mode": "explicit"}));
            marked += 1;
        }
    }
    marked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_instructions_and_the_task_are_marked_unless_the_caller_marked() {
        let mut chat = json!({"model": "gpt-6.2-sol", "messages": [
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": [{"type": "text", "text": "Fix the build."}]},
            {"role": "assistant", "content": "On it."}
        ]});
        assert_eq!(mark(&mut chat), 2);
        assert_eq!(
            chat["messages"][0]["content"][0]["prompt_cache_breakpoint"]["mode"],
            "explicit"
        );
        assert_eq!(chat["messages"][1]["content"][0]["text"], "Fix the build.");
        assert!(chat["messages"][1]["content"][0].get(KEY).is_some());
        assert!(
            chat["messages"][2]
                .get("content")
                .is_some_and(Value::is_string),
            "never an assistant's"
        );
        assert_eq!(mark(&mut chat), 0, "marked already: left as it is");

        let mut responses = json!({"model": "gpt-6.2-sol", "input": [
            {"type": "additional_tools", "role": "developer", "tools": []},
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are Codex."}]},
            {"type": "message", "role": "user", "content": "say hi"}
        ]});
        assert_eq!(
            mark(&mut responses),
            2,
            "the instructions' message and the task"
        );
        assert_eq!(
            responses["input"][0].get(KEY),
            None,
            "the tools item carries none"
        );
        assert!(responses["input"][1]["content"][0].get(KEY).is_some());
        let mut responses = json!({"model": "gpt-6.2-sol", "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are Codex."}]},
            {"type": "message", "role": "user", "content": "say hi"}
        ]});
        assert_eq!(mark(&mut responses), 2);
        assert_eq!(responses["input"][1]["content"][0]["type"], "input_text");
    }
}
