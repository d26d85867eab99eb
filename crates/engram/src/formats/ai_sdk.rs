//! The Vercel AI SDK's prompt (`LanguageModelV2Prompt` / `LanguageModelV3Prompt`), mapped onto
//! engram's messages and back, for the SDK's middleware (`engramMiddleware` in the Node package).
//!
//! The mapping ([`from_prompt`]):
//! - a `system` message (its `content` is a string) is a system message;
//! - a `user` message is one message: its text parts are text, its file parts are kept as parts
//!   counted by their JSON;
//! - an `assistant` message is one message: text parts are text, each `tool-call` part is a
//!   tool call (its `input` as the arguments' JSON), and reasoning, files and provider-executed
//!   tool results are parts counted by their JSON;
//! - a `tool` message holds several results: each `tool-result` part is a tool message of its
//!   own answering its call (so compaction pairs each result with its call); an approval
//!   response rides with the message's first result.
//!
//! Write-back is a plan ([`Step`]), not a new prompt: the caller's objects may hold binary file
//! data that never crossed into Rust, so the front copies what the plan names from the prompt
//! it has. Kept messages go back whole; a tool message goes back with the results engram kept,
//! a masked result with only its `output` replaced; what engram wrote (a summary, a digest, a
//! note) is a new message.

use std::ops::Range;

use serde_json::{Map, Value, json};

use crate::Error;
use crate::compact::policy::{Compactable, Ran, TriggerPolicy, fixed_head, within_target};
use crate::compact::{CallersFormat, Origin, write_back};
use crate::compact::{CompactOptions, CompactReport, Compacted, compact};
use crate::count::TokenCounter;
use crate::error::InputError;
use crate::input::Conversation;
use crate::message::{Content, ContentPart, Message, Role, ToolCall, object_at, type_name};

/// A prompt's conversation, with where each message came from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prompt {
    /// The messages.
    pub conversation: Conversation,
    /// For each message, the prompt message (and, for a tool result, the parts) it stands for.
    pub spans: Vec<Span>,
}

/// Where a message of a [`Prompt`] came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    /// The index of the prompt's message.
    pub message: usize,
    /// The parts of it, for a tool result; `None` for the whole message.
    pub parts: Option<Range<usize>>,
}

/// One message of a compacted prompt, as the front writes it.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// The prompt's message at this index, as it was.
    Keep(usize),
    /// The prompt's tool message at `message` with only these parts: each as it was, or with
    /// its `output` replaced.
    Parts {
        /// The prompt message's index.
        message: usize,
        /// Each kept part's index, with its new `output` when engram masked it.
        parts: Vec<(usize, Option<Value>)>,
    },
    /// A message engram wrote, in the SDK's format.
    New(Value),
}

impl Step {
    /// The step as JSON: `{"keep": i}`, `{"keep": i, "parts": [j, {"part": k, "output": {...}}]}`
    /// or `{"message": {...}}`.
    pub fn to_json(&self) -> Value {
        match self {
            Step::Keep(i) => json!({ "keep": i }),
            Step::Parts { message, parts } => json!({
                "keep": message,
                "parts": parts
                    .iter()
                    .map(|(j, output)| match output {
                        None => json!(j),
                        Some(o) => json!({ "part": j, "output": o }),
                    })
                    .collect::<Vec<_>>(),
            }),
            Step::New(m) => json!({ "message": m }),
        }
    }
}

fn parts_of<'a>(
    message: &'a Map<String, Value>,
    field: &str,
) -> Result<&'a Vec<Value>, InputError> {
    match message.get("content") {
        Some(Value::Array(parts)) => Ok(parts),
        Some(other) => Err(InputError::new(format!(
            "expected a list of parts, found {}",
            type_name(other)
        ))
        .at_field(format!("{field}.content"))),
        None => Err(InputError::new("missing").at_field(format!("{field}.content"))),
    }
}

fn part_object<'a>(part: &'a Value, field: &str) -> Result<&'a Map<String, Value>, InputError> {
    match part {
        Value::Object(p) if p.get("type").is_some_and(Value::is_string) => Ok(p),
        Value::Object(_) => Err(InputError::new("a part needs a string `type`").at_field(field)),
        other => Err(InputError::new(format!(
            "expected a part object, found {}",
            type_name(other)
        ))
        .at_field(field)),
    }
}

fn string_field<'a>(
    part: &'a Map<String, Value>,
    key: &str,
    field: &str,
) -> Result<&'a str, InputError> {
    part.get(key).and_then(Value::as_str).ok_or_else(|| {
        InputError::new(format!("needs a string `{key}`")).at_field(field.to_owned())
    })
}

/// A tool result's `output` as text: text and error text as they are, JSON as its text, a
/// content list's text parts joined (its files counted by their JSON), a denial by its reason.
fn output_content(output: Option<&Value>) -> Content {
    let Some(Value::Object(o)) = output else {
        return Content::Text(output.map(Value::to_string).unwrap_or_default());
    };
    let value = o.get("value");
    match o.get("type").and_then(Value::as_str) {
        Some("text" | "error-text") => {
            Content::Text(value.and_then(Value::as_str).unwrap_or_default().to_owned())
        }
        Some("content") => match value {
            Some(Value::Array(items)) => Content::Parts(
                items
                    .iter()
                    .map(|item| match item {
                        Value::Object(p)
                            if p.get("type").and_then(Value::as_str) == Some("text") =>
                        {
                            ContentPart::text(
                                p.get("text").and_then(Value::as_str).unwrap_or_default(),
                            )
                        }
                        Value::Object(p) => ContentPart::Other(p.clone()),
                        other => ContentPart::text(other.to_string()),
                    })
                    .collect(),
            ),
            _ => Content::Text(String::new()),
        },
        Some("execution-denied") => Content::Text(format!(
            "execution denied{}",
            o.get("reason")
                .and_then(Value::as_str)
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        )),
        _ => Content::Text(value.map(Value::to_string).unwrap_or_default()),
    }
}

/// Maps a prompt (the SDK's list of messages) onto engram's messages.
pub fn from_prompt(prompt: &Value) -> Result<Prompt, InputError> {
    let Value::Array(list) = prompt else {
        return Err(InputError::new(format!(
            "expected the prompt's list of messages, found {}",
            type_name(prompt)
        ))
        .at_field("prompt"));
    };
    let mut messages = Vec::new();
    let mut spans = Vec::new();
    for (i, m) in list.iter().enumerate() {
        let field = format!("prompt[{i}]");
        let map = object_at(m, "a message", &field)?;
        let whole = Span {
            message: i,
            parts: None,
        };
        match map.get("role").and_then(Value::as_str) {
            Some("system") => {
                let text = string_field(map, "content", &field)?;
                messages.push(Message::system(text));
                spans.push(whole);
            }
            Some("user") => {
                let mut content = Vec::new();
                for (j, part) in parts_of(map, &field)?.iter().enumerate() {
                    let pf = format!("{field}.content[{j}]");
                    let p = part_object(part, &pf)?;
                    if p.get("type").and_then(Value::as_str) == Some("text") {
                        content.push(ContentPart::text(string_field(p, "text", &pf)?));
                    } else {
                        content.push(ContentPart::Other(p.clone()));
                    }
                }
                messages.push(Message::with_content(
                    Role::User,
                    Some(Content::Parts(content)),
                ));
                spans.push(whole);
            }
            Some("assistant") => {
                let mut content = Vec::new();
                let mut calls = Vec::new();
                for (j, part) in parts_of(map, &field)?.iter().enumerate() {
                    let pf = format!("{field}.content[{j}]");
                    let p = part_object(part, &pf)?;
                    match p.get("type").and_then(Value::as_str) {
                        Some("text") => {
                            content.push(ContentPart::text(string_field(p, "text", &pf)?));
                        }
                        Some("tool-call")
                            if p.get("providerExecuted") != Some(&Value::Bool(true)) =>
                        {
                            let id = string_field(p, "toolCallId", &pf)?;
                            let name = string_field(p, "toolName", &pf)?;
                            let arguments = match p.get("input") {
                                Some(Value::String(s)) => s.clone(),
                                Some(v) => v.to_string(),
                                None => "{}".to_owned(),
                            };
                            calls.push(ToolCall::function(id, name, arguments));
                        }
                        _ => content.push(ContentPart::Other(p.clone())),
                    }
                }
                let mut message = Message::with_content(
                    Role::Assistant,
                    (!content.is_empty()).then_some(Content::Parts(content)),
                );
                message.set_tool_calls((!calls.is_empty()).then_some(calls));
                messages.push(message);
                spans.push(whole);
            }
            Some("tool") => {
                let parts = parts_of(map, &field)?;
                // The results, each with the parts that ride with it (approval responses before
                // the first result go with it; after it, with the result before them).
                let mut starts = Vec::new();
                for (j, part) in parts.iter().enumerate() {
                    let pf = format!("{field}.content[{j}]");
                    let p = part_object(part, &pf)?;
                    if p.get("type").and_then(Value::as_str) == Some("tool-result") {
                        string_field(p, "toolCallId", &pf)?;
                        starts.push(j);
                    }
                }
                if starts.is_empty() {
                    // Only approval responses: the caller's side, counted by their JSON.
                    messages.push(Message::with_content(
                        Role::User,
                        Some(Content::Parts(
                            parts
                                .iter()
                                .filter_map(|p| p.as_object().cloned().map(ContentPart::Other))
                                .collect(),
                        )),
                    ));
                    spans.push(Span {
                        message: i,
                        parts: Some(0..parts.len()),
                    });
                    continue;
                }
                for (k, &start) in starts.iter().enumerate() {
                    let from = if k == 0 { 0 } else { start };
                    let to = starts.get(k + 1).copied().unwrap_or(parts.len());
                    let result = parts[start].as_object().expect("checked above");
                    let call_id = result
                        .get("toolCallId")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    let mut message = Message::tool(call_id, "");
                    let mut content = match output_content(result.get("output")) {
                        Content::Text(t) => vec![ContentPart::text(t)],
                        Content::Parts(p) => p,
                    };
                    content.extend(
                        (from..to)
                            .filter(|&j| j != start)
                            .filter_map(|j| parts[j].as_object().cloned().map(ContentPart::Other)),
                    );
                    message.content = Some(match content.as_slice() {
                        [ContentPart::Text { text, extra }] if extra.is_empty() => {
                            Content::Text(text.clone())
                        }
                        _ => Content::Parts(content),
                    });
                    messages.push(message);
                    spans.push(Span {
                        message: i,
                        parts: Some(from..to),
                    });
                }
            }
            Some(other) => {
                return Err(InputError::new(format!(
                    "unknown role {other:?}; expected system, user, assistant or tool"
                ))
                .at_field(format!("{field}.role")));
            }
            None => {
                return Err(
                    InputError::new("needs a string `role`").at_field(format!("{field}.role"))
                );
            }
        }
    }
    Ok(Prompt {
        conversation: Conversation::new(messages),
        spans,
    })
}

/// A prompt compacted by the sessions' policy: `None` while its tokens are under `trigger`'s
/// threshold of `limit` (the tokens the context may hold: the window less the reply's room);
/// else the plan that writes it back within the target, with the compaction's report.
pub fn compact_prompt(
    prompt: &Value,
    counter: &TokenCounter,
    limit: usize,
    trigger: &TriggerPolicy,
    options: &CompactOptions,
) -> Result<Option<(Vec<Step>, CompactReport)>, Error> {
    let mapped = from_prompt(prompt)?;
    let tokens = counter.count_conversation(&mapped.conversation).total();
    // A prompt holds no record of earlier compactions: its breaker never opens.
    let mut context = PromptContext {
        conversation: &mapped.conversation,
        counter,
        limit,
        options,
    };
    let Ran::Compacted(compacted) = trigger.run(tokens, limit, &mut context)? else {
        return Ok(None);
    };
    let origins = Origin::of_view(&mapped.conversation.messages, &compacted.messages);
    let view: Vec<Message> = compacted.messages.into_iter().map(|m| m.message).collect();
    Ok(Some((
        to_plan(&mapped, prompt, &view, &origins),
        compacted.report,
    )))
}

/// A prompt as the policy's loop sees it.
struct PromptContext<'a> {
    conversation: &'a Conversation,
    counter: &'a TokenCounter,
    limit: usize,
    options: &'a CompactOptions,
}

impl Compactable for PromptContext<'_> {
    type Compacted = Compacted;

    fn fixed_tokens(&self) -> Result<usize, Error> {
        Ok(fixed_head(&self.conversation.messages, self.counter, self.limit).tokens)
    }

    fn recent_tokens(&self) -> Result<usize, Error> {
        Ok(crate::compact::policy::recent_tokens(
            self.conversation.messages.iter(),
            self.counter,
        ))
    }

    fn compact_to(&mut self, target: usize) -> Result<Compacted, Error> {
        within_target(target, self.limit, 0, |budget| {
            let mut options = self.options.clone();
            options.budget = budget;
            compact(self.conversation, self.counter, &options)
        })
        .result
    }
}

/// The plan that writes a compacted view back: `view` with each message's [`Origin`] among
/// `prompt`'s messages, and `original` the prompt as the caller sent it, by the one rule of
/// `write_back`. The parts of one tool message kept in a row are one step, and a tool message
/// kept with every part as it was is kept whole.
pub fn to_plan(
    prompt: &Prompt,
    original: &Value,
    view: &[Message],
    origins: &[Origin],
) -> Vec<Step> {
    let list = original.as_array().map(Vec::as_slice).unwrap_or_default();
    let parts_of = |message: usize| {
        list.get(message)
            .and_then(|m| m.get("content"))
            .and_then(Value::as_array)
    };
    let mut steps: Vec<Step> = Vec::new();
    for step in write_back(
        &PlanFormat {
            prompt,
            parts_of: &parts_of,
        },
        view,
        origins,
    ) {
        match (steps.last_mut(), step) {
            (
                Some(Step::Parts { message: m, parts }),
                Step::Parts {
                    message,
                    parts: more,
                },
            ) if *m == message => parts.extend(more),
            (_, step) => steps.push(step),
        }
    }
    for step in &mut steps {
        if let Step::Parts { message, parts } = step {
            let len = parts_of(*message).map_or(0, Vec::len);
            let all = parts.len() == len
                && parts
                    .iter()
                    .enumerate()
                    .all(|(k, (j, output))| k == *j && output.is_none());
            if all {
                *step = Step::Keep(*message);
            }
        }
    }
    steps
}

/// A prompt as the caller's format of [`write_back`]: steps of a plan over its messages and
/// their parts.
struct PlanFormat<'a, P> {
    prompt: &'a Prompt,
    /// The parts of the caller's message at an index, as sent.
    parts_of: &'a P,
}

impl<'a, P: Fn(usize) -> Option<&'a Vec<Value>>> PlanFormat<'a, P> {
    /// The parts of the caller's message `index` stands for, each with its new `output` when
    /// `text` replaces a tool result's.
    fn parts(&self, index: usize, text: Option<&str>) -> Option<Step> {
        let span = self.prompt.spans.get(index)?;
        let range = span.parts.clone()?;
        let parts = (self.parts_of)(span.message);
        Some(Step::Parts {
            message: span.message,
            parts: range
                .map(|j| {
                    let is_result = parts
                        .and_then(|p| p.get(j))
                        .and_then(|p| p.get("type"))
                        .and_then(Value::as_str)
                        == Some("tool-result");
                    let output = text
                        .filter(|_| is_result)
                        .map(|t| json!({ "type": "text", "value": t }));
                    (j, output)
                })
                .collect(),
        })
    }
}

impl<'a, P: Fn(usize) -> Option<&'a Vec<Value>>> CallersFormat for PlanFormat<'a, P> {
    type Item = Step;

    fn same(&self, index: usize, out: &mut Vec<Step>) {
        let Some(span) = self.prompt.spans.get(index) else {
            return;
        };
        out.push(self.parts(index, None).unwrap_or(Step::Keep(span.message)));
    }

    fn with_output(&self, index: usize, text: &str) -> Option<Step> {
        self.parts(index, Some(text))
    }

    fn written(&self, _from: Option<usize>, message: &Message, out: &mut Vec<Step>) {
        out.push(Step::New(write(message)));
    }
}

/// Applies a plan to the prompt it was made for (what the Node front does with the caller's
/// own objects).
pub fn apply_plan(original: &Value, steps: &[Step]) -> Vec<Value> {
    let list = original.as_array().map(Vec::as_slice).unwrap_or_default();
    steps
        .iter()
        .map(|step| match step {
            Step::Keep(i) => list[*i].clone(),
            Step::Parts { message, parts } => {
                let mut m = list[*message].clone();
                let source = list[*message]["content"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                m["content"] = Value::Array(
                    parts
                        .iter()
                        .map(|(j, output)| {
                            let mut part = source[*j].clone();
                            if let Some(o) = output {
                                part["output"] = o.clone();
                            }
                            part
                        })
                        .collect(),
                );
                m
            }
            Step::New(m) => m.clone(),
        })
        .collect()
}

/// A message engram wrote, in the SDK's format.
fn write(message: &Message) -> Value {
    let text = message.text();
    match message.role {
        Role::System | Role::Developer => json!({ "role": "system", "content": text }),
        Role::Assistant => {
            let mut content = Vec::new();
            if !text.is_empty() {
                content.push(json!({ "type": "text", "text": text }));
            }
            for call in message.tool_calls().into_iter().flatten() {
                let input = serde_json::from_str::<Value>(&call.arguments)
                    .unwrap_or(Value::String(call.arguments.clone()));
                content.push(json!({
                    "type": "tool-call",
                    "toolCallId": call.id,
                    "toolName": call.name,
                    "input": input,
                }));
            }
            json!({ "role": "assistant", "content": content })
        }
        Role::Tool => json!({
            "role": "tool",
            "content": [{
                "type": "tool-result",
                "toolCallId": message.tool_call_id().unwrap_or_default(),
                "toolName": message.name().unwrap_or_default(),
                "output": { "type": "text", "value": text },
            }],
        }),
        _ => json!({ "role": "user", "content": [{ "type": "text", "text": text }] }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenize::Tokenizer;

    fn prompt() -> Value {
        let mut prompt = vec![
            json!({"role": "system", "content": "You fix bugs."}),
            json!({"role": "user", "content": [{"type": "text", "text": "fix the parser"}]}),
        ];
        for i in 0..30 {
            prompt.push(json!({"role": "assistant", "content": [
                {"type": "reasoning", "text": "look first"},
                {"type": "tool-call", "toolCallId": format!("a{i}"), "toolName": "run", "input": {"cmd": format!("cat src/f{i}.rs")}},
                {"type": "tool-call", "toolCallId": format!("b{i}"), "toolName": "run", "input": {"cmd": "ls"}},
            ]}));
            prompt.push(json!({"role": "tool", "content": [
                {"type": "tool-result", "toolCallId": format!("a{i}"), "toolName": "run", "output": {"type": "text", "value": format!("fn f{i}() {{}}\n").repeat(40)}},
                {"type": "tool-result", "toolCallId": format!("b{i}"), "toolName": "run", "output": {"type": "json", "value": {"files": ["a", "b"]}}, "providerOptions": {"x": {"y": 1}}},
            ]}));
        }
        prompt.push(json!({"role": "user", "content": [{"type": "text", "text": "now run the tests"}, {"type": "file", "mediaType": "image/png", "data": "[3 bytes]"}]}));
        Value::Array(prompt)
    }

    #[test]
    fn every_result_is_a_tool_message_answering_its_call() {
        let p = from_prompt(&prompt()).expect("maps");
        let m = &p.conversation.messages;
        assert_eq!(m.len(), 2 + 30 * 3 + 1);
        assert_eq!(m[2].tool_calls().map(<[_]>::len), Some(2));
        assert_eq!(m[3].tool_call_id(), Some("a0"));
        assert_eq!(m[4].tool_call_id(), Some("b0"));
        assert_eq!(m[4].text(), r#"{"files":["a","b"]}"#);
        assert_eq!(
            p.spans[3],
            Span {
                message: 3,
                parts: Some(0..1)
            }
        );
        assert_eq!(
            p.spans[4],
            Span {
                message: 3,
                parts: Some(1..2)
            }
        );
    }

    #[test]
    fn a_compacted_prompt_keeps_pairs_and_the_callers_objects() {
        let original = prompt();
        let counter = TokenCounter::new(Tokenizer::from_name("o200k").expect("o200k"));
        let trigger = TriggerPolicy::default();
        let (plan, report) =
            compact_prompt(&original, &counter, 2000, &trigger, &CompactOptions::new(1))
                .expect("compacts")
                .expect("over the threshold");
        assert!(report.tokens_after <= 1200, "{}", report.tokens_after);
        let out = apply_plan(&original, &plan);
        let list = original.as_array().expect("list");
        assert_eq!(out[0], list[0]);
        assert_eq!(out.last(), list.last());
        // Every result follows its call, every call has its result, and kept messages and
        // parts are the caller's own (a masked result differs only in its output).
        let mut calls = Vec::new();
        let mut results = Vec::new();
        for m in &out {
            for part in m["content"].as_array().into_iter().flatten() {
                match part["type"].as_str() {
                    Some("tool-call") => calls.push(part["toolCallId"].clone()),
                    Some("tool-result") => {
                        assert!(calls.contains(&part["toolCallId"]));
                        results.push(part["toolCallId"].clone());
                        let source = list
                            .iter()
                            .flat_map(|m| m["content"].as_array().into_iter().flatten())
                            .find(|p| {
                                p["toolCallId"] == part["toolCallId"] && p["type"] == "tool-result"
                            })
                            .expect("from the prompt");
                        let mut same = part.clone();
                        same["output"] = source["output"].clone();
                        assert_eq!(&same, source);
                    }
                    _ => {}
                }
            }
        }
        assert_eq!(calls.len(), results.len());
        assert!(plan.iter().any(|s| matches!(s, Step::Keep(_))));
    }

    #[test]
    fn a_prompt_under_the_threshold_is_left_alone() {
        let small = json!([{"role": "user", "content": [{"type": "text", "text": "hi"}]}]);
        let counter = TokenCounter::new(Tokenizer::from_name("o200k").expect("o200k"));
        let out = compact_prompt(
            &small,
            &counter,
            2000,
            &TriggerPolicy::default(),
            &CompactOptions::new(1),
        );
        assert_eq!(out, Ok(None));
    }

    #[test]
    fn bad_prompts_name_the_place() {
        for (prompt, place) in [
            (json!({"role": "user"}), "prompt"),
            (json!([{"role": "robot", "content": "x"}]), "prompt[0].role"),
            (
                json!([{"role": "user", "content": "x"}]),
                "prompt[0].content",
            ),
            (
                json!([{"role": "user", "content": [{"type": "text", "text": 1}]}]),
                "prompt[0].content[0]",
            ),
            (
                json!([{"role": "assistant", "content": [{"type": "tool-call", "toolName": "x"}]}]),
                "prompt[0].content[0]",
            ),
            (
                json!([{"role": "tool", "content": [{"text": "no type"}]}]),
                "prompt[0].content[0]",
            ),
            (json!([{"role": "system", "content": 5}]), "prompt[0]"),
        ] {
            let e = from_prompt(&prompt).expect_err("refused").to_string();
            assert!(e.contains(place), "{e} names {place}");
        }
    }
}
