//! The view compaction produces: each message with what it is ([`Kind`]) and the input messages
//! it stands for, its repair before it is sent, and its rendering for a terminal.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::count::TokenCounter;
use crate::message::Message;

use super::units;

/// What an output message is, relative to the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// An input message, verbatim.
    Original,
    /// An input message with most of its text replaced by a marker that says what was left out
    /// and how to read it whole: a tool output masked to its first and last lines, or a recalled
    /// message too long to fit cut to the lines that hold the query's words.
    Masked,
    /// A digest or summary standing for several input messages.
    Summary,
    /// An older input message brought back verbatim because it serves the query.
    Recalled,
    /// A note engram added (a missing tool result, a status line).
    Status,
}

/// One message of a compacted view, with its provenance.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewMessage {
    /// The message to send.
    pub message: Message,
    /// What it is.
    pub kind: Kind,
    /// The ids of the input messages it stands for (their `id`, or their index as a string).
    pub source_ids: Vec<String>,
}

impl AsRef<Message> for ViewMessage {
    fn as_ref(&self) -> &Message {
        &self.message
    }
}

/// A view's tokens as it is sent: the conversation's overhead and each message's total.
pub(crate) fn view_tokens(counter: &TokenCounter, view: &[ViewMessage]) -> usize {
    counter.accounting().per_conversation
        + view
            .iter()
            .map(|v| counter.count_message(&v.message).total())
            .sum::<usize>()
}

/// A view made well formed as compaction makes its input ([`units::repair`]): a tool result
/// whose call is not before it becomes a user message quoting it (with the same provenance),
/// and a call no result answers gets one saying so (a [`Kind::Status`] note), but for the
/// newest message's calls, which the caller is about to answer. Returns the repaired view and
/// how many repairs were made, or `None` when the view is well formed as it is.
pub fn repair_view(view: &[ViewMessage]) -> Option<(Vec<ViewMessage>, usize)> {
    let (repaired, repairs) = units::repair(view);
    let count = repairs.orphan_results.len() + repairs.unanswered_calls.len();
    if count == 0 {
        return None;
    }
    let messages = repaired
        .into_iter()
        .map(|(message, index)| match (message, index) {
            (units::RepairedMessage::Input(_), Some(i)) => view[i].clone(),
            (units::RepairedMessage::Made(m), Some(i)) => ViewMessage {
                message: *m,
                kind: view[i].kind,
                source_ids: view[i].source_ids.clone(),
            },
            (message, _) => ViewMessage {
                message: message.into_owned(),
                kind: Kind::Status,
                source_ids: Vec::new(),
            },
        })
        .collect();
    Some((messages, count))
}

/// Where a message of a compacted view comes from, for a front that writes the caller's own
/// format back: the input message exactly as it came, an input message engram changed (a
/// masked tool output), or a message engram wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Origin {
    /// The input message at this index, unchanged.
    Same(usize),
    /// The input message at this index, changed (masked).
    Edited(usize),
    /// A message engram wrote (a summary, a digest, a note).
    New,
}

impl Origin {
    /// Each view message's origin among `input`.
    pub fn of_view<M: AsRef<Message>>(input: &[M], view: &[ViewMessage]) -> Vec<Origin> {
        let index = SourceIndex::new(input);
        view.iter()
            .map(|v| {
                if let Some(i) = index.unchanged(v) {
                    return Origin::Same(i);
                }
                match (v.kind, v.source_ids.as_slice()) {
                    (Kind::Original | Kind::Masked | Kind::Recalled, [id]) => {
                        index.get(id).map_or(Origin::New, Origin::Edited)
                    }
                    _ => Origin::New,
                }
            })
            .collect()
    }

    /// The input index of an unchanged message.
    pub fn same(self) -> Option<usize> {
        match self {
            Origin::Same(i) => Some(i),
            _ => None,
        }
    }
}

/// Finds the input message a source id names: the inverse of how compaction names them (a
/// message's `id`, else its index in the input as a string).
pub struct SourceIndex<'a, M> {
    messages: &'a [M],
    ids: HashMap<&'a str, usize>,
}

impl<'a, M: AsRef<Message>> SourceIndex<'a, M> {
    /// The index of `messages`' ids.
    pub fn new(messages: &'a [M]) -> Self {
        let ids = messages
            .iter()
            .enumerate()
            .filter_map(|(i, m)| m.as_ref().id.as_deref().map(|id| (id, i)))
            .collect();
        SourceIndex { messages, ids }
    }

    /// The input index `source_id` names, if any.
    pub fn get(&self, source_id: &str) -> Option<usize> {
        if let Some(&i) = self.ids.get(source_id) {
            return Some(i);
        }
        let i: usize = source_id.parse().ok()?;
        (self.messages.get(i)?.as_ref().id.is_none()).then_some(i)
    }

    /// The input index of a view message that is an input message exactly as it came (not
    /// masked, repaired or made by engram).
    pub fn unchanged(&self, view: &ViewMessage) -> Option<usize> {
        let [id] = view.source_ids.as_slice() else {
            return None;
        };
        let i = self.get(id)?;
        (matches!(view.kind, Kind::Original | Kind::Recalled)
            && *self.messages[i].as_ref() == view.message)
            .then_some(i)
    }
}

impl ViewMessage {
    /// The message as JSON. With `plain`, without the `engram` provenance object and without
    /// `id` (ready for an API); otherwise with both.
    pub fn to_value(&self, plain: bool) -> Value {
        let mut value = self.message.to_value();
        if let Value::Object(map) = &mut value {
            if plain {
                map.remove("id");
            } else {
                let mut engram = Map::new();
                engram.insert("kind".into(), json!(self.kind));
                engram.insert("source_ids".into(), json!(self.source_ids));
                map.insert("engram".into(), Value::Object(engram));
            }
        }
        value
    }
}

/// Renders a view as compact text, one line per message (`03 masked tool [m7]: …`), for
/// reviews and snapshot tests: what the model will see, at a glance. Long texts are cut to
/// `width` characters with their newlines shown as `⏎`; summaries are shown in full, indented.
pub fn render(view: &[ViewMessage], width: usize) -> String {
    let mut out = String::new();
    for (i, v) in view.iter().enumerate() {
        let kind = match v.kind {
            Kind::Original => "",
            Kind::Masked => "masked ",
            Kind::Summary => "summary ",
            Kind::Recalled => "recalled ",
            Kind::Status => "status ",
        };
        if v.kind == Kind::Summary {
            let body = v.message.text().replace('\n', "\n    ");
            out.push_str(&format!(
                "{i:02} summary {} [{} messages]:\n    {body}\n",
                v.message.role,
                v.source_ids.len()
            ));
            continue;
        }
        let mut text: String = v.message.text().replace('\n', "⏎");
        for call in v.message.calls() {
            text.push_str(&format!(
                " -> {}({})",
                call.name,
                call.arguments.replace('\n', "⏎")
            ));
        }
        if text.chars().count() > width {
            text = format!("{}…", text.chars().take(width).collect::<String>());
        }
        let sources = match v.source_ids.as_slice() {
            [] => String::new(),
            [one] => format!(" [{one}]"),
            [first, .., last] => format!(" [{first}..{last}, {}]", v.source_ids.len()),
        };
        out.push_str(&format!(
            "{i:02} {kind}{}{sources}: {text}\n",
            v.message.role
        ));
    }
    out
}
