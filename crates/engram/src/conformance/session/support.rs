//! What every check of the suite uses: its imports, the stores' fixtures and helpers.

pub(super) use crate::compact::{CompactOptions, Kind};
pub(super) use crate::conformance::{Dice, assert_same};
pub(super) use crate::memory::{NewEntry, SearchQuery, Tier};
pub(super) use crate::message::{Message, ToolCall};
pub(super) use crate::session::{
    EngramStore, NewSession, Session, SessionPolicy, SessionStore, Trigger, sleep_sessions,
};
pub(super) use serde_json::json;

pub(super) fn new_session(id: &str, window: usize) -> NewSession {
    NewSession {
        id: Some(id.into()),
        name: Some(format!("{id} name")),
        model: "test-model".into(),
        tokenizer: "chars4".into(),
        token_factor: 1.0,
        window,
        metadata: json!({"team": "infra"}),
        created_at: 1_000,
    }
}

/// An agent turn: a request, a tool call, its (long) result, and a reply naming a file.
pub(super) fn turn(i: usize) -> Vec<Message> {
    vec![
        Message::user(format!(
            "Step {i}: fix the failing test in src/module_{i}.rs"
        )),
        Message::assistant_tool_calls(vec![ToolCall::function(
            format!("call_{i}"),
            "shell",
            format!("{{\"cmd\": \"cargo test module_{i}\"}}"),
        )]),
        Message::tool(
            format!("call_{i}"),
            format!(
                "error: test module_{i}::works failed at src/module_{i}.rs:{}\n{}",
                10 + i,
                "stack frame ".repeat(40)
            ),
        ),
        Message::assistant(format!(
            "Result: fixed module_{i} by handling the empty case."
        )),
    ]
}

/// What a backend shows of a session after a step, as far as it must agree with the reference:
/// the view, the active log, and the checkpoints (compaction ids and times are each store's own).
pub(super) fn observed(store: &dyn EngramStore, s: &Session<'_>) -> String {
    let view = s.view().expect("view");
    let log: Vec<(u64, String, usize, Message)> = s
        .log()
        .expect("log")
        .into_iter()
        .map(|m| (m.seq, m.id, m.tokens, m.message))
        .collect();
    let checkpoints: Vec<(String, u64, bool, usize, bool)> = store
        .checkpoints(&s.info().id)
        .expect("checkpoints")
        .into_iter()
        .map(|c| {
            (
                c.name,
                c.log_end,
                c.compaction_id.is_some(),
                c.messages,
                c.abandoned,
            )
        })
        .collect();
    // What sleep wrote into memory for the session: its key facts (ids are the store's own).
    let mut facts: Vec<(Tier, String, String)> = store
        .entries(Some(&s.info().id), None, 10_000)
        .expect("the session's memory")
        .into_iter()
        .map(|e| (e.tier, e.content, e.source))
        .collect();
    facts.sort_by(|a, b| (a.1.as_str(), a.2.as_str()).cmp(&(b.1.as_str(), b.2.as_str())));
    without_times(&format!(
        "view {:?} ({} tokens, compacted {})\nlog {log:?}\ncheckpoints {checkpoints:?}\n\
         memory {facts:?}",
        view.messages,
        view.tokens,
        view.compaction_id.is_some()
    ))
}

/// `text` without times: a summary's header says when its messages were appended (to the
/// minute, `2026-11-21 07:00 UTC`), and tool results and answers carry RFC 3339 times, which
/// differ between two stores written one after the other.
pub(super) fn without_times(text: &str) -> String {
    let bytes = text.as_bytes();
    let is_date = |b: &[u8]| {
        b.len() >= 11
            && b[..4].iter().all(u8::is_ascii_digit)
            && b[4] == b'-'
            && b[7] == b'-'
            && (b[10] == b'T' || b[10] == b' ')
    };
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        if is_date(&bytes[i..]) {
            let end = if bytes[i + 10] == b' ' {
                text[i..].find(" UTC").map(|e| e + " UTC".len())
            } else {
                text[i..].find('Z').map(|e| e + 1)
            };
            if let Some(end) = end {
                out.push_str("TIME");
                i += end;
                continue;
            }
        }
        let c = text[i..].chars().next().expect("a char");
        out.push(c);
        i += c.len_utf8();
    }
    out
}
