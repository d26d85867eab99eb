//! Tool units: an assistant message with tool calls and the tool results that answer it are one
//! unit everywhere (invariant 1). Compaction keeps or drops whole units, so a call is never sent
//! without its result or a result without its call.
//!
//! Real histories are not always well formed: a result may answer no call (its call was trimmed
//! by an earlier tool), or a call may have no result (the agent was interrupted). [`repair`]
//! makes such a history sendable without losing text: an orphan result becomes a user message
//! that quotes it; an unanswered call (other than in the newest message, which the caller is
//! about to answer) gets a result saying that none was recorded.

use std::borrow::Borrow;
use std::collections::HashSet;

use crate::message::{Content, Message, Role};

/// A half-open range of message indices that must be kept or dropped together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unit {
    /// First message.
    pub start: usize,
    /// One past the last message.
    pub end: usize,
}

impl Unit {
    /// The messages of the unit.
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// True for an empty range (never produced by [`units`]).
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
}

/// Splits a well-formed history (see [`repair`]) into units, in order.
pub fn units<M: Borrow<Message>>(messages: &[M]) -> Vec<Unit> {
    let message = |i: usize| -> &Message { messages[i].borrow() };
    let mut out = Vec::with_capacity(messages.len());
    let mut i = 0;
    while i < messages.len() {
        let start = i;
        i += 1;
        let calls = message(start).calls();
        if !calls.is_empty() {
            let ids: HashSet<&str> = calls.iter().map(|c| c.id.as_str()).collect();
            while i < messages.len()
                && message(i).role == Role::Tool
                && message(i).tool_call_id().is_some_and(|id| ids.contains(id))
            {
                i += 1;
            }
        }
        out.push(Unit { start, end: i });
    }
    out
}

/// What [`repair`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Repairs {
    /// Indices (in the input) of tool results that answered no call, now user messages.
    pub orphan_results: Vec<usize>,
    /// Call ids that had no result and got one saying so.
    pub unanswered_calls: Vec<String>,
}

/// A repaired message (borrowed where unchanged) with the input index it came from (`None` for
/// a result engram added).
pub type Repaired<'a> = (RepairedMessage<'a>, Option<usize>);

/// A message of a repaired history: the input's own, or one a repair made. A made message is
/// boxed, so that a history of millions of messages costs a pointer per message here, not a
/// copy of each message's fields.
#[derive(Debug, Clone, PartialEq)]
pub enum RepairedMessage<'a> {
    /// An input message, unchanged.
    Input(&'a Message),
    /// A message the repair made (an orphan result turned into a user message, a note).
    Made(Box<Message>),
}

impl RepairedMessage<'_> {
    /// The message, owned.
    pub fn into_owned(self) -> Message {
        match self {
            RepairedMessage::Input(m) => m.clone(),
            RepairedMessage::Made(m) => *m,
        }
    }
}

impl std::ops::Deref for RepairedMessage<'_> {
    type Target = Message;

    fn deref(&self) -> &Message {
        match self {
            RepairedMessage::Input(m) => m,
            RepairedMessage::Made(m) => m,
        }
    }
}

impl AsRef<Message> for RepairedMessage<'_> {
    fn as_ref(&self) -> &Message {
        self
    }
}

/// The note an unanswered call gets as its result.
pub const NO_RESULT: &str = "[engram: no result was recorded for this tool call]";

/// Makes a history well formed (every result right after its call, every call answered but in
/// the newest message). Returns the repaired messages (borrowed where unchanged), each with the
/// input index it came from (`None` for an added result), and what was changed.
pub fn repair<M: AsRef<Message>>(messages: &[M]) -> (Vec<Repaired<'_>>, Repairs) {
    repair_inner(messages, true)
}

/// Like [`repair`], but the newest message's calls are closed too: for a history that more
/// messages will follow (a new user message, in assembly).
pub fn repair_closed<M: AsRef<Message>>(messages: &[M]) -> (Vec<Repaired<'_>>, Repairs) {
    repair_inner(messages, false)
}

fn repair_inner<M: AsRef<Message>>(
    messages: &[M],
    newest_open: bool,
) -> (Vec<Repaired<'_>>, Repairs) {
    let mut out: Vec<Repaired<'_>> = Vec::with_capacity(messages.len());
    let mut repairs = Repairs::default();
    let mut i = 0;
    while i < messages.len() {
        let message = messages[i].as_ref();
        if message.role == Role::Tool {
            // Reaching a tool message here means no call right before answers it.
            repairs.orphan_results.push(i);
            out.push((
                RepairedMessage::Made(Box::new(orphan_to_user(message))),
                Some(i),
            ));
            i += 1;
            continue;
        }
        out.push((RepairedMessage::Input(message), Some(i)));
        let calls = message.calls();
        i += 1;
        if calls.is_empty() {
            continue;
        }
        let mut answered: HashSet<&str> = HashSet::new();
        let mut orphans = Vec::new();
        while i < messages.len() && messages[i].as_ref().role == Role::Tool {
            let id = messages[i].as_ref().tool_call_id().unwrap_or("");
            if calls.iter().any(|c| c.id == id) && answered.insert(id) {
                out.push((RepairedMessage::Input(messages[i].as_ref()), Some(i)));
            } else {
                repairs.orphan_results.push(i);
                orphans.push((
                    RepairedMessage::Made(Box::new(orphan_to_user(messages[i].as_ref()))),
                    Some(i),
                ));
            }
            i += 1;
        }
        // The newest message's calls stay open: the caller is about to answer them. Orphan
        // results repaired into user messages come after them, so then they are not newest.
        if i < messages.len() || !orphans.is_empty() || !newest_open {
            for call in calls.iter().filter(|c| !answered.contains(c.id.as_str())) {
                repairs.unanswered_calls.push(call.id.clone());
                out.push((
                    RepairedMessage::Made(Box::new(Message::tool(call.id.clone(), NO_RESULT))),
                    None,
                ));
            }
        }
        out.append(&mut orphans);
    }
    (out, repairs)
}

fn orphan_to_user(message: &Message) -> Message {
    let id = message.tool_call_id().unwrap_or("?");
    let text = format!(
        "[result of tool call {id}, whose call is not in this context]\n{}",
        message.text()
    );
    let mut user = message.clone();
    user.role = Role::User;
    user.content = Some(Content::Text(text));
    user.set_tool_call_id(None);
    user.set_tool_calls(None);
    user
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolCall;

    fn call(id: &str) -> ToolCall {
        ToolCall::function(id, "f", "{}")
    }

    #[test]
    fn groups_calls_with_their_results() {
        let messages = vec![
            Message::system("s"),
            Message::user("u"),
            Message::assistant_tool_calls(vec![call("a"), call("b")]),
            Message::tool("a", "ra"),
            Message::tool("b", "rb"),
            Message::assistant("done"),
        ];
        let u = units(&messages);
        assert_eq!(
            u,
            vec![
                Unit { start: 0, end: 1 },
                Unit { start: 1, end: 2 },
                Unit { start: 2, end: 5 },
                Unit { start: 5, end: 6 }
            ]
        );
    }

    #[test]
    fn calls_followed_only_by_orphans_are_closed() {
        let messages = vec![
            Message::assistant_tool_calls(vec![call("a"), call("b")]),
            Message::tool("a", "ra"),
            Message::tool("ghost", "x"),
        ];
        let (out, repairs) = repair(&messages);
        assert_eq!(repairs.unanswered_calls, vec!["b".to_owned()]);
        let roles: Vec<Role> = out.iter().map(|(m, _)| m.role).collect();
        assert_eq!(roles, [Role::Assistant, Role::Tool, Role::Tool, Role::User]);
    }

    #[test]
    fn repairs_orphans_and_unanswered_calls() {
        let messages = vec![
            Message::user("u"),
            Message::tool("zz", "orphan output"),
            Message::assistant_tool_calls(vec![call("a"), call("b")]),
            Message::tool("a", "ra"),
            Message::user("next"),
            Message::assistant_tool_calls(vec![call("c")]),
        ];
        let (out, repairs) = repair(&messages);
        assert_eq!(repairs.orphan_results, vec![1]);
        assert_eq!(repairs.unanswered_calls, vec!["b".to_owned()]);
        let roles: Vec<&str> = out.iter().map(|(m, _)| m.role.as_str()).collect();
        assert_eq!(
            roles.join(" "),
            "user user assistant tool tool user assistant"
        );
        assert!(out[1].0.text().contains("orphan output"));
        assert_eq!(out[4].0.text(), NO_RESULT);
        assert_eq!(out[4].1, None);
        // The newest message's call stays unanswered: the caller is about to answer it.
        assert_eq!(out[6].0.calls()[0].id, "c");
        let fixed: Vec<Message> = out.into_iter().map(|(m, _)| m.into_owned()).collect();
        assert!(units(&fixed).iter().all(|u| !u.is_empty()));
    }
}
