//! Compaction: make a conversation fit a token budget without losing what the agent needs next.
//!
//! The pipeline works on *units* (a tool call with its results, or a single message) and gives
//! each older unit one of three fidelities: verbatim, masked (a tool output's head and tail
//! with a marker that says what was hidden and how to get it back), or dropped into a digest
//! (the `[Session context consolidated]` message, which keeps the lines that carry the
//! identifiers no longer visible elsewhere). When the caller says what the context must serve
//! (a query), the older units that match it best are recalled verbatim.
//!
//! Every step is a pure function of the messages, the counter and the options; nothing is
//! deleted from the caller's data (the output only *selects* and *describes*), and every output
//! message says which input messages it stands for.
//!
//! Invariants (DESIGN.md), enforced here for every strategy:
//! 1. units are kept or dropped whole, after [`units::repair`] made the history well formed;
//! 2. leading system/developer messages are kept verbatim and first;
//! 3. the newest unit is kept verbatim and last;
//! 4. the output's exact count is at most the budget, or [`CompactError::CannotFit`] says why;
//! 5. every output message carries the source ids of what it stands for.

pub mod live;
pub mod policy;
pub mod salient;
pub mod stable;
pub mod summarize;
pub mod units;

mod digest;
pub(crate) mod recall;

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::count::TokenCounter;
use crate::input::Conversation;
use crate::message::{Content, Message, Role};
use recall::Ranking;

/// What an output message is, relative to the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// An input message, verbatim.
    Original,
    /// An input tool output with most of its text replaced by a marker.
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

/// Which steps to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// Cheapest first: dedupe, mask, digest (and recall with a query), newest-first fill.
    #[default]
    Auto,
    /// A sliding window: the newest units that fit, pinned messages kept.
    Truncate,
    /// Older copies of repeated tool outputs replaced by a pointer, then the window.
    Dedupe,
    /// Observation masking: tool outputs older than the last `mask_keep_last` masked, then the
    /// window.
    Mask,
    /// Seed 000's consolidation: the last `keep_recent` messages verbatim and one
    /// `[Session context consolidated]` digest of the older ones.
    Extractive,
    /// Like `Extractive`, with the summary written by the configured [`summarize::Summarizer`]
    /// (the extractive digest when there is none or it fails).
    Summarize,
}

impl Strategy {
    /// Every strategy, in the order they are documented.
    pub const ALL: [Strategy; 6] = [
        Strategy::Auto,
        Strategy::Truncate,
        Strategy::Dedupe,
        Strategy::Mask,
        Strategy::Extractive,
        Strategy::Summarize,
    ];

    /// Parses a strategy name; the error (the same on every surface) lists the names.
    pub fn from_name(name: &str) -> Result<Strategy, crate::ValueError> {
        Strategy::parse(name).ok_or_else(|| {
            let names: Vec<&str> = Strategy::ALL.iter().map(|s| s.as_str()).collect();
            crate::ValueError::UnknownName {
                what: "strategy",
                given: name.to_owned(),
                expected: format!("one of {}", names.join(", ")),
            }
        })
    }

    /// Parses a strategy name.
    pub fn parse(name: &str) -> Option<Strategy> {
        Some(match name {
            "auto" => Strategy::Auto,
            "truncate" => Strategy::Truncate,
            "dedupe" => Strategy::Dedupe,
            "mask" => Strategy::Mask,
            "extractive" => Strategy::Extractive,
            "summarize" => Strategy::Summarize,
            _ => return None,
        })
    }

    /// The strategy's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Auto => "auto",
            Strategy::Truncate => "truncate",
            Strategy::Dedupe => "dedupe",
            Strategy::Mask => "mask",
            Strategy::Extractive => "extractive",
            Strategy::Summarize => "summarize",
        }
    }
}

/// Options of [`compact`].
#[derive(Debug, Clone)]
pub struct CompactOptions {
    /// The hard total for the output, tool definitions and overheads included.
    pub budget: usize,
    /// Which steps to run.
    pub strategy: Strategy,
    /// What the context must serve: older units that match it are recalled verbatim.
    pub query: Option<String>,
    /// Tool outputs kept verbatim by masking, counted from the newest (default 10).
    pub mask_keep_last: usize,
    /// Messages the extractive strategy keeps verbatim, counted from the newest (default 4).
    pub keep_recent: usize,
    /// Seed 002's preserve window for the extractive strategy: keep the last 20 messages or
    /// 20% of the budget, whichever is larger (instead of `keep_recent`).
    pub preserve_window: bool,
    /// The share of the free budget the digest may take when older material is dropped.
    pub digest_share: f64,
    /// The share of the free budget recalled units may take when there is a query, for a
    /// history up to 8 times the free budget and of up to 4 sessions. Past that the rest (the
    /// digest and the recent window) shrinks, to a quarter at 24 times or 12 sessions: the
    /// longer the history, the less of it those two hold, and the more the answer is somewhere
    /// only recall can reach.
    pub recall_share: f64,
    /// Writes summaries for `Summarize` (and for `Auto` when set); `None`: the extractive digest.
    pub summarizer: Option<std::sync::Arc<dyn summarize::Summarizer>>,
    /// The summarizer's instructions; `None`: [`summarize::DEFAULT_PROMPT`].
    pub prompt: Option<String>,
    /// What a summary should focus on.
    pub focus: Option<String>,
    /// An earlier summary of this conversation: when every message it covers is dropped again,
    /// the summarizer merges the newly dropped messages into it (incremental summaries).
    pub previous_summary: Option<summarize::PreviousSummary>,
    /// Ids (or index strings) of messages kept verbatim whatever happens, like the leading
    /// system messages. A message with `"pinned": true` is pinned too.
    pub pinned_ids: Vec<String>,
    /// Sentence embeddings for hybrid recall (BM25 fused with similarity of meaning); `None`:
    /// lexical recall.
    pub embedder: Option<std::sync::Arc<dyn crate::embed::Embedder>>,
    /// The first `head` input messages are a head that earlier requests sent and a provider's
    /// prompt cache holds (the system prompt, the task, earlier summaries): they stand first,
    /// byte for byte, as the system prompt does, and what the compaction writes comes after
    /// them; the task statement is among them, not in what is summarised. 0 (the default):
    /// only the leading system messages.
    pub head: usize,
    /// The agent's tool that reads originals back, which markers and digests name
    /// (`read_history`, the default); `None`: the agent has none, and they name none.
    pub read_tool: Option<String>,
    /// Names the input's messages that have no id by their place in a log (`m<position>`,
    /// as a session names them) instead of by their index in the input.
    pub logged_ids: Option<LoggedIds>,
    /// The most of the tokens a summary stands for that it may hold (a compaction asked for
    /// by hand must save: a quarter); `None`: what the budget leaves.
    pub summary_share: Option<f64>,
}

/// Where the input's messages stand in a log ([`CompactOptions::logged_ids`]): the input
/// message `first` and those after it are the log's messages from `at` on; those before it
/// (the head a caller fixed) are its first ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoggedIds {
    /// The first input message of the stretch.
    pub first: usize,
    /// Its place in the log.
    pub at: usize,
}

impl LoggedIds {
    /// The log position of input message `index`.
    fn position(self, index: usize) -> usize {
        if index < self.first {
            index
        } else {
            index - self.first + self.at
        }
    }
}

impl CompactOptions {
    /// The defaults for a budget.
    pub fn new(budget: usize) -> Self {
        CompactOptions {
            budget,
            strategy: Strategy::Auto,
            query: None,
            mask_keep_last: 10,
            keep_recent: 4,
            preserve_window: false,
            digest_share: 0.5,
            recall_share: 0.8,
            summarizer: None,
            prompt: None,
            focus: None,
            previous_summary: None,
            pinned_ids: Vec::new(),
            embedder: None,
            head: 0,
            read_tool: Some(crate::tools::READ_HISTORY.to_owned()),
            logged_ids: None,
            summary_share: None,
        }
    }

    /// Takes the models of `from`: its summarizer and its embedder. A server configures them
    /// once and every compaction and search it runs (REST, MCP) uses them.
    pub fn take_models(&mut self, from: &CompactOptions) {
        self.summarizer.clone_from(&from.summarizer);
        self.embedder.clone_from(&from.embedder);
    }
}

/// What compaction did: seed 000's audit event, and more.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct CompactReport {
    /// The strategy asked for.
    pub strategy: &'static str,
    /// The budget.
    pub budget: usize,
    /// Tokens of the input. Exact when `tokens_before_estimated` is false.
    pub tokens_before: usize,
    /// True when part of `tokens_before` was estimated (chars/4 for text never sent).
    pub tokens_before_estimated: bool,
    /// Tokens of the output, exact.
    pub tokens_after: usize,
    /// The steps that changed something, in order.
    pub steps: Vec<&'static str>,
    /// Messages in the input.
    pub messages_before: usize,
    /// Messages in the output.
    pub messages_after: usize,
    /// Input messages not in the output verbatim (dropped, or standing in a digest).
    pub messages_removed: usize,
    /// Tool outputs masked.
    pub masked: usize,
    /// Tool outputs replaced as duplicates.
    pub deduplicated: usize,
    /// Units recalled for the query.
    pub recalled: usize,
    /// Messages the digest stands for.
    pub summarized: usize,
    /// Tokens of the digest or summary (0 when there is none).
    pub summary_tokens: usize,
    /// The summarizer that wrote the summary, when one did.
    pub summarizer: Option<String>,
    /// The embedder recall fused with BM25, when it did (hybrid recall).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recall_embedder: Option<String>,
    /// Why the summarizer's summary was not used (the extractive digest was), when it was not.
    pub summary_fallback: Option<String>,
    /// How the previous summary was used: `merged` (the summarizer was given it with the
    /// messages dropped since) or `reused` (nothing new was dropped: no call was made).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary_previous: Option<&'static str>,
    /// Orphan tool results turned into user messages, and calls given a "no result" note.
    pub repaired: usize,
    /// Wall time in milliseconds.
    pub duration_ms: f64,
}

/// Why a compaction cannot produce a valid output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CompactError {
    /// What must be kept is larger than the budget.
    #[error(
        "cannot fit the budget of {budget} tokens: {what} need {required} tokens on their own, {over} more than the budget"
    )]
    CannotFit {
        /// The budget.
        budget: usize,
        /// Tokens of what must be kept.
        required: usize,
        /// `required - budget`.
        over: usize,
        /// What must be kept, in words.
        what: String,
    },
    /// The conversation has no messages.
    #[error("there are no messages to compact")]
    Empty,
}

/// The result of [`compact`].
#[derive(Debug, Clone)]
pub struct Compacted {
    /// The view to send, in order.
    pub messages: Vec<ViewMessage>,
    /// What was done.
    pub report: CompactReport,
}

/// A message of the repaired history with where it came from.
struct Item<'a> {
    message: units::RepairedMessage<'a>,
    /// The input index, `None` for a note engram added.
    input: Option<usize>,
    /// The message's place in a log, when the caller names messages by it
    /// ([`CompactOptions::logged_ids`]).
    logged: Option<usize>,
}

impl std::borrow::Borrow<Message> for Item<'_> {
    fn borrow(&self) -> &Message {
        &self.message
    }
}

impl Item<'_> {
    /// The input message's id, or its index when it has none; empty for a note engram added.
    /// Made on demand: most messages never need it, and a string per message is a large share
    /// of a long history's memory.
    fn source_id(&self) -> std::borrow::Cow<'_, str> {
        match self.input {
            None => std::borrow::Cow::Borrowed(""),
            Some(i) => self
                .message
                .id
                .as_deref()
                .map_or_else(|| i.to_string().into(), Into::into),
        }
    }

    /// The id the agent's tools know the message by, which markers and digests name: its own
    /// id, else its place in the log the caller names ([`CompactOptions::logged_ids`]), else
    /// [`Item::source_id`].
    fn shown_id(&self) -> std::borrow::Cow<'_, str> {
        match (self.input, &self.message.id, self.logged) {
            (Some(_), None, Some(p)) => format!("m{p}").into(),
            _ => self.source_id(),
        }
    }
}

/// A unit's version for the view, and what it costs.
struct Version {
    messages: Vec<ViewMessage>,
    tokens: usize,
    /// Tool outputs masked (not counting duplicates replaced by a pointer).
    masked: usize,
}

/// Compacts a conversation to `options.budget` tokens as counted by `counter`.
pub fn compact(
    conversation: &Conversation,
    counter: &TokenCounter,
    options: &CompactOptions,
) -> Result<Compacted, CompactError> {
    compact_messages(
        &conversation.messages,
        &conversation.tools,
        counter,
        options,
    )
}

/// [`compact`] on messages held by something else (a session's log rows, say), with the
/// conversation's tool definitions: no copy of the messages is made.
pub fn compact_messages<M: AsRef<Message>>(
    input: &[M],
    tools: &[Value],
    counter: &TokenCounter,
    options: &CompactOptions,
) -> Result<Compacted, CompactError> {
    compact_keeping_vectors(input, tools, counter, options, None)
}

/// [`compact_messages`], keeping hybrid recall's vectors in `vectors` (a session's store, so
/// that its messages are embedded once however many compactions read them): each text's
/// vector is read from there when kept, else embedded and kept.
pub fn compact_keeping_vectors<M: AsRef<Message>>(
    input: &[M],
    tools: &[Value],
    counter: &TokenCounter,
    options: &CompactOptions,
    vectors: Option<&dyn crate::embed::VectorStore>,
) -> Result<Compacted, CompactError> {
    let started = Instant::now();
    if input.is_empty() {
        return Err(CompactError::Empty);
    }
    let (repaired, repairs) = units::repair(input);
    let items: Vec<Item<'_>> = repaired
        .into_iter()
        .map(|(message, index)| Item {
            message,
            input: index,
            logged: options
                .logged_ids
                .zip(index)
                .map(|(ids, i)| ids.position(i)),
        })
        .collect();
    let instructions_end = items
        .iter()
        .take_while(|i| i.message.role.is_instruction())
        .count();
    // A head the caller fixed stands first as the instructions do; never the newest message.
    let head_end = items
        .iter()
        .take_while(|i| i.input.is_some_and(|at| at < options.head))
        .count()
        .min(items.len().saturating_sub(1));
    let pinned_end = instructions_end.max(head_end);
    let mut older: Vec<units::Unit> = units::units(&items[pinned_end..]);
    for u in &mut older {
        u.start += pinned_end;
        u.end += pinned_end;
    }
    let newest = older.pop();
    let accounting = counter.accounting();
    let tools_tokens = counter.count_tools(tools);
    let overhead = accounting.per_conversation + tools_tokens;
    let pinned_tokens: usize = items[..pinned_end]
        .iter()
        .map(|i| counter.count_message(&i.message).total())
        .sum();
    let newest_tokens: usize = newest.map_or(0, |u| {
        items[u.start..u.end]
            .iter()
            .map(|i| counter.count_message(&i.message).total())
            .sum()
    });
    // Messages the caller pinned, later in the history: kept verbatim with their unit.
    let is_pinned = |item: &Item<'_>| {
        item.input.is_some()
            && (item.message.extra().get("pinned") == Some(&Value::Bool(true))
                || (!options.pinned_ids.is_empty() && {
                    let id = item.source_id();
                    options.pinned_ids.iter().any(|p| *p == id)
                }))
    };
    // Split in place: a long history has a unit per message or two.
    let mut pinned_units: Vec<units::Unit> = Vec::new();
    older.retain(|u| {
        let pinned = items[u.start..u.end].iter().any(is_pinned);
        if pinned {
            pinned_units.push(*u);
        }
        !pinned
    });
    let older = older.as_slice();
    let pinned_mid_tokens: usize = pinned_units
        .iter()
        .flat_map(|u| items[u.start..u.end].iter())
        .map(|i| counter.count_message(&i.message).total())
        .sum();
    let required = overhead + pinned_tokens + newest_tokens + pinned_mid_tokens;
    if required > options.budget {
        let mut parts = Vec::new();
        if pinned_tokens > 0 {
            parts.push(format!("the system prompt ({pinned_tokens} tokens)"));
        }
        if pinned_mid_tokens > 0 {
            parts.push(format!("the pinned messages ({pinned_mid_tokens} tokens)"));
        }
        if newest_tokens > 0 {
            parts.push(format!("the newest message ({newest_tokens} tokens)"));
        }
        if tools_tokens > 0 {
            parts.push(format!("the tool definitions ({tools_tokens} tokens)"));
        }
        parts.push(format!(
            "the overhead ({} tokens)",
            accounting.per_conversation
        ));
        return Err(CompactError::CannotFit {
            budget: options.budget,
            required,
            over: required - options.budget,
            what: parts.join(", "),
        });
    }
    let free = options.budget - required;

    let mut plan = Planner {
        items: &items,
        counter,
        options,
        vectors,
        report: CompactReport {
            strategy: options.strategy.as_str(),
            budget: options.budget,
            tokens_before: 0,
            tokens_before_estimated: false,
            tokens_after: 0,
            steps: Vec::new(),
            messages_before: input.len(),
            messages_after: 0,
            messages_removed: 0,
            masked: 0,
            deduplicated: 0,
            recalled: 0,
            summarized: 0,
            summary_tokens: 0,
            summarizer: None,
            recall_embedder: None,
            summary_fallback: None,
            summary_previous: None,
            repaired: repairs.orphan_results.len() + repairs.unanswered_calls.len(),
            duration_ms: 0.0,
        },
    };

    // Everything fits: nothing to do (beyond repairs).
    let fit = counter.fit_newest(
        &items[pinned_end..items.len() - newest.map_or(0, |u| u.len())],
        free + pinned_mid_tokens,
    );
    let older_messages: usize = older.iter().chain(&pinned_units).map(|u| u.len()).sum();
    let middle = plan.select(older, free, fit.kept == older_messages);
    let removed = removed_count(
        input.len(),
        &items,
        pinned_end,
        &middle,
        &pinned_units,
        newest,
    );
    let middle = with_pinned(middle, &pinned_units, &items, &plan);

    let mut view: Vec<ViewMessage> = items[..pinned_end]
        .iter()
        .map(|i| plan.original(i))
        .collect();
    view.extend(middle);
    if let Some(u) = newest {
        view.extend(items[u.start..u.end].iter().map(|i| plan.original(i)));
    }

    let mut report = plan.report;
    let after: usize = overhead
        + view
            .iter()
            .map(|v| counter.count_message(&v.message).total())
            .sum::<usize>();
    report.tokens_after = after;
    report.messages_after = view.len();
    report.messages_removed = removed;
    let (before, estimated) = tokens_before(input, counter, &fit, overhead);
    report.tokens_before = before;
    report.tokens_before_estimated = estimated;
    report.duration_ms = started.elapsed().as_secs_f64() * 1e3;
    debug_assert!(after <= options.budget, "{after} > {}", options.budget);
    Ok(Compacted {
        messages: view,
        report,
    })
}

/// How many input messages the view does not hold verbatim (dropped, masked, or standing in a
/// digest), counted by place: ids may repeat in a caller's input, so a kept message's id does
/// not say which of its namesakes was kept. `middle` is [`Planner::select`]'s, each message
/// with its unit's first item; a verbatim one is the first not yet counted item of the same id
/// from there.
fn removed_count(
    inputs: usize,
    items: &[Item<'_>],
    pinned_end: usize,
    middle: &[(usize, ViewMessage)],
    pinned: &[units::Unit],
    newest: Option<units::Unit>,
) -> usize {
    let mut kept = vec![false; inputs];
    let whole = items[..pinned_end].iter().chain(
        pinned
            .iter()
            .chain(&newest)
            .flat_map(|u| &items[u.start..u.end]),
    );
    for at in whole.filter_map(|i| i.input) {
        kept[at] = true;
    }
    for (start, v) in middle {
        if !matches!(v.kind, Kind::Original | Kind::Recalled) {
            continue;
        }
        for id in &v.source_ids {
            let namesake = items[*start..].iter().find_map(|i| {
                i.input
                    .filter(|&at| !kept[at] && i.source_id() == id.as_str())
            });
            if let Some(at) = namesake {
                kept[at] = true;
            }
        }
    }
    kept.iter().filter(|k| !**k).count()
}

/// Puts pinned units into the middle of the view in their chronological places (after the
/// digest, which stands before everything it summarises), by the input positions that
/// [`Planner::select`] gives: ids may repeat in a caller's input, so they cannot say where a
/// message stood.
fn with_pinned(
    middle: Vec<(usize, ViewMessage)>,
    pinned: &[units::Unit],
    items: &[Item<'_>],
    plan: &Planner<'_>,
) -> Vec<ViewMessage> {
    let mut out: Vec<ViewMessage> = Vec::with_capacity(middle.len() + pinned.len());
    let mut rest = middle.into_iter().peekable();
    while let Some((_, v)) = rest.next_if(|(_, v)| v.kind == Kind::Summary) {
        out.push(v);
    }
    for unit in pinned {
        while let Some((_, v)) = rest.next_if(|(at, _)| *at < unit.start) {
            out.push(v);
        }
        out.extend(items[unit.start..unit.end].iter().map(|i| plan.original(i)));
    }
    out.extend(rest.map(|(_, v)| v));
    out
}

/// The input's tokens: exact where the fill counted them, chars/4 for the rest.
fn tokens_before<M: AsRef<Message>>(
    messages: &[M],
    counter: &TokenCounter,
    fit: &crate::count::NewestFit,
    overhead: usize,
) -> (usize, bool) {
    let total_chars: usize = messages.iter().map(|m| m.as_ref().text().len()).sum();
    if total_chars < 256 * 1024 {
        let counted: usize = messages
            .iter()
            .map(|m| counter.count_message(m.as_ref()).total())
            .sum();
        return (overhead + counted, false);
    }
    let split = messages.len().saturating_sub(fit.kept + 1);
    let estimate: usize = messages[..split]
        .iter()
        .map(|m| {
            let m = m.as_ref();
            counter.accounting().per_message
                + (m.text().chars().count()
                    + m.calls()
                        .iter()
                        .map(|c| c.name.len() + c.arguments.len())
                        .sum::<usize>())
                .div_ceil(4)
        })
        .sum();
    let exact: usize = messages[split..]
        .iter()
        .map(|m| counter.count_message(m.as_ref()).total())
        .sum();
    (overhead + estimate + exact, split > 0)
}

struct Planner<'a> {
    items: &'a [Item<'a>],
    counter: &'a TokenCounter,
    options: &'a CompactOptions,
    /// Where hybrid recall's vectors are kept, when the caller has a place.
    vectors: Option<&'a dyn crate::embed::VectorStore>,
    report: CompactReport,
}

impl Planner<'_> {
    fn original(&self, item: &Item<'_>) -> ViewMessage {
        ViewMessage {
            message: Message::clone(&item.message),
            kind: if item.input.is_some() {
                Kind::Original
            } else {
                Kind::Status
            },
            source_ids: match item.source_id() {
                id if id.is_empty() => Vec::new(),
                id => vec![id.into_owned()],
            },
        }
    }

    fn tokens(&self, messages: &[ViewMessage]) -> usize {
        messages
            .iter()
            .map(|v| self.counter.count_message(&v.message).total())
            .sum()
    }

    /// Whether `unit` starts a session: it opens with a system message, as a chat log's dated
    /// heading does.
    fn starts_session(&self, unit: &units::Unit) -> bool {
        self.items[unit.start].message.role == Role::System
    }

    fn full(&self, unit: units::Unit) -> Version {
        let messages: Vec<ViewMessage> = self.items[unit.start..unit.end]
            .iter()
            .map(|i| self.original(i))
            .collect();
        Version {
            tokens: self.tokens(&messages),
            messages,
            masked: 0,
        }
    }

    /// Recall's share of `free` for these older units: [`CompactOptions::recall_share`], and more
    /// for a history many times the budget or of many sessions (a unit that starts with a
    /// system message starts one, as in a chat log). Measured on the dev conversations:
    /// LongMemEval-S (about 60 times a 2,048-token budget) and LoCoMo (19 to 32 sessions) need
    /// the larger share to reach evidence spread over sessions, while LongMemEval's short
    /// conversations (about 3 times, at most 5 sessions) lose evidence the recent window held
    /// if recall takes more (docs/benchmarks-history.md, issue 29).
    fn recall_share(&self, older: &[units::Unit], free: usize) -> f64 {
        // Four characters a token: an estimate is enough for a ratio, and counting every
        // message of a long history exactly would cost more than ranking it.
        let chars: usize = older
            .iter()
            .flat_map(|u| &self.items[u.start..u.end])
            .map(|i| i.message.text().len())
            .sum();
        let sessions = older.iter().filter(|u| self.starts_session(u)).count();
        recall_share_for(self.options.recall_share, chars / 4, free, sessions)
    }

    /// Whether the two sides of `units` write alike (a chat between people, not an assistant's
    /// conversation), from the lengths of the user's and the assistant's messages (see
    /// [`recall::alike`]); by characters, as the ratio needs no exact count.
    fn alike(&self, units: &[units::Unit]) -> bool {
        recall::sides_alike(
            units
                .iter()
                .flat_map(|u| &self.items[u.start..u.end])
                .map(|item| (item.message.role, item.message.text().len())),
        )
    }

    /// The middle of the view (between pinned messages and the newest unit) for `free` tokens,
    /// each message with the position in the input of the unit it comes from (the digest's: 0).
    fn select(
        &mut self,
        older: &[units::Unit],
        free: usize,
        all_fit: bool,
    ) -> Vec<(usize, ViewMessage)> {
        if all_fit {
            return older
                .iter()
                .flat_map(|u| self.full(*u).messages.into_iter().map(|v| (u.start, v)))
                .collect();
        }
        let strategy = self.options.strategy;
        let dedupe = matches!(strategy, Strategy::Auto | Strategy::Dedupe);
        let mask = matches!(strategy, Strategy::Auto | Strategy::Mask);
        let digest = matches!(
            strategy,
            Strategy::Auto | Strategy::Extractive | Strategy::Summarize
        );
        let recall = strategy == Strategy::Auto && self.options.query.is_some();

        let replaced = if dedupe {
            self.duplicates(older)
        } else {
            HashMap::new()
        };
        if !replaced.is_empty() {
            self.report.steps.push("dedupe");
            self.report.deduplicated = replaced.len();
        }
        let keep_full = if mask {
            self.recent_outputs(older, self.options.mask_keep_last)
        } else {
            HashSet::new()
        };

        // Budget split: the digest and recall take shares of the free budget, but only what
        // they use; the newest-first window takes the rest.
        let recall_budget = if recall {
            (free as f64 * self.recall_share(older, free)) as usize
        } else {
            0
        };
        let digest_reserve = if digest {
            ((free - recall_budget) as f64 * self.options.digest_share) as usize
        } else {
            0
        };
        let mut window_budget = free - recall_budget - digest_reserve;
        if matches!(strategy, Strategy::Extractive | Strategy::Summarize) {
            // Seed 000: the last `keep_recent` messages, whatever they cost, then the digest.
            window_budget = free - digest_reserve.min(free / 2);
        }

        // Newest-first window.
        let mut taken: Vec<(usize, Version, bool)> = Vec::new(); // (unit index, version, masked)
        let mut used = 0;
        let mut recent_messages = 0;
        for (ui, unit) in older.iter().enumerate().rev() {
            if matches!(strategy, Strategy::Extractive | Strategy::Summarize) {
                let enough = if self.options.preserve_window {
                    recent_messages >= 20 && used as f64 >= 0.2 * self.options.budget as f64
                } else {
                    recent_messages >= self.options.keep_recent
                };
                if enough {
                    break;
                }
            }
            let wants_mask = mask && !keep_full.contains(&ui);
            let version = self.version(*unit, &replaced, wants_mask);
            if used + version.tokens > window_budget {
                break;
            }
            used += version.tokens;
            recent_messages += unit.len();
            let masked = version.masked > 0;
            taken.push((ui, version, masked));
        }
        let first_kept = taken.last().map_or(older.len(), |(ui, _, _)| *ui);
        let dropped = &older[..first_kept];

        // Recall: the dropped units that best serve the query, verbatim.
        let mut recalled: Vec<(usize, Version)> = Vec::new();
        if recall && !dropped.is_empty() {
            let query = self.options.query.as_deref().unwrap_or_default();
            let budget = recall_budget + (window_budget - used);
            let mut recall_used = 0;
            let alike = self.alike(dropped);
            let (fused, words_only) = self.rank(dropped, query, alike);
            // Each ranked unit's recalled version, made once (with hybrid recall a unit is in
            // both rankings).
            let mut versions: HashMap<usize, Version> = HashMap::new();
            for &(ui, _) in fused.iter().chain(words_only.iter().flatten()) {
                if let std::collections::hash_map::Entry::Vacant(slot) = versions.entry(ui) {
                    slot.insert(self.version(dropped[ui], &replaced, false));
                }
            }
            let cost_weight = recall::cost_weight(alike);
            let by_value = |order: Ranking| {
                let mut ranked: Ranking = order
                    .into_iter()
                    .map(|(ui, score)| {
                        let value = recall::value(score, versions[&ui].tokens, cost_weight);
                        (ui, value)
                    })
                    .collect();
                ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
                ranked
            };
            let mut ranked = by_value(fused);
            if let Some(words) = words_only {
                // How many units the budget holds: a place past it counts for less.
                let mean = ranked
                    .iter()
                    .map(|(ui, _)| versions[ui].tokens as f64)
                    .sum::<f64>()
                    / ranked.len().max(1) as f64;
                let holds = budget as f64 / mean.max(1.0);
                ranked = recall::fuse_ranks(&ranked, &by_value(words), holds);
            }
            for (ui, _) in ranked {
                let Some(version) = versions.remove(&ui) else {
                    continue;
                };
                if recall_used + version.tokens <= budget {
                    recall_used += version.tokens;
                    recalled.push((ui, version));
                }
            }
            recalled.sort_by_key(|(ui, _)| *ui);
            if !recalled.is_empty() {
                self.report.steps.push("recall");
                self.report.recalled = recalled.len();
            }
            used += recall_used;
        }

        // Digest of what is neither in the window nor recalled.
        let recalled_units: HashSet<usize> = recalled.iter().map(|(ui, _)| *ui).collect();
        let mut summary: Option<ViewMessage> = None;
        if digest && !dropped.is_empty() {
            let visible: Vec<&Message> = taken
                .iter()
                .flat_map(|(_, v, _)| v.messages.iter().map(|m| &m.message))
                .chain(
                    recalled
                        .iter()
                        .flat_map(|(_, v)| v.messages.iter().map(|m| &m.message)),
                )
                .chain(
                    self.items
                        .iter()
                        .filter(|i| i.message.role.is_instruction())
                        .take(1)
                        .map(|i| i.message.as_ref()),
                )
                // A fixed head stays in view: what it says need not be said again.
                .chain(
                    self.items
                        .iter()
                        .take_while(|i| i.input.is_some_and(|at| at < self.options.head))
                        .map(|i| i.message.as_ref()),
                )
                .collect();
            // The digest holds at most part of the budget, so it reads only the most recent
            // dropped material (16 times what it can hold), plus the task statement: on a
            // history of millions of tokens, older lines would rarely win a place anyway.
            let limit = (free.saturating_sub(used) * 4 * 16).max(256 * 1024);
            let mut read = 0usize;
            let mut sources: Vec<&Item<'_>> = Vec::new();
            for (_, unit) in dropped
                .iter()
                .enumerate()
                .rev()
                .filter(|(ui, _)| !recalled_units.contains(ui))
            {
                if read > limit {
                    break;
                }
                for item in self.items[unit.start..unit.end].iter().rev() {
                    if item.input.is_some() {
                        read += item.message.text().len();
                        sources.push(item);
                    }
                }
            }
            // The task statement, when it was dropped and not recalled whole (a fixed head
            // holds it, when there is one).
            if self.options.head == 0
                && let Some(task) = self.items.iter().find(|i| i.message.role == Role::User)
                && !sources.iter().any(|s| std::ptr::eq(*s, task))
                && dropped.iter().enumerate().any(|(ui, u)| {
                    !recalled_units.contains(&ui)
                        && self.items[u.start..u.end]
                            .iter()
                            .any(|i| std::ptr::eq(i, task))
                })
            {
                sources.push(task);
            }
            sources.reverse();
            let mut budget = free.saturating_sub(used);
            if let Some(share) = self.options.summary_share {
                // A summary asked to stay smaller than what it stands for.
                let replaced: usize = sources
                    .iter()
                    .map(|i| self.counter.count_message(&i.message).total())
                    .sum();
                budget = budget.min(((share * replaced as f64) as usize).max(SUMMARY_FLOOR));
            }
            let built = match self.summary(&sources, budget, dropped) {
                Some(built) => Some(("summarize", built)),
                None => digest::build(
                    &sources,
                    &visible,
                    self.counter,
                    budget,
                    self.options.head == 0,
                    self.options.read_tool.as_deref(),
                )
                .map(|built| ("extractive", built)),
            };
            if let Some((step, built)) = built {
                self.report.steps.push(step);
                self.report.summarized = built.source_ids.len();
                self.report.summary_tokens = built.tokens;
                used += built.tokens;
                summary = Some(ViewMessage {
                    message: built.message,
                    kind: Kind::Summary,
                    source_ids: built.source_ids,
                });
            }
        }

        // Spend what is left on the masked outputs, newest first.
        if mask {
            for (ui, version, masked) in taken.iter_mut() {
                if !*masked {
                    continue;
                }
                let full = self.version(older[*ui], &replaced, false);
                if used - version.tokens + full.tokens <= free {
                    used = used - version.tokens + full.tokens;
                    *version = full;
                    *masked = false;
                }
            }
        }
        let masked = taken.iter().filter(|(_, _, m)| *m).count();
        if masked > 0 {
            self.report.steps.push("mask");
            self.report.masked = taken.iter().map(|(_, v, _)| v.masked).sum();
        }
        if first_kept > 0 {
            self.report.steps.push("truncate");
        }

        let mut out = Vec::new();
        out.extend(summary.map(|s| (0, s)));
        for (ui, version) in recalled {
            let at = older[ui].start;
            out.extend(version.messages.into_iter().map(|mut v| {
                if v.kind == Kind::Original {
                    v.kind = Kind::Recalled;
                }
                (at, v)
            }));
        }
        for (ui, version, _) in taken.into_iter().rev() {
            let at = older[ui].start;
            out.extend(version.messages.into_iter().map(|v| (at, v)));
        }
        out
    }

    /// A summary by the configured summarizer, when there is one and its summary fits;
    /// otherwise `None`, with the reason in the report.
    fn summary(
        &mut self,
        sources: &[&Item<'_>],
        budget: usize,
        dropped: &[units::Unit],
    ) -> Option<digest::Built> {
        let Some(summarizer) = self.options.summarizer.as_ref() else {
            if self.options.strategy == Strategy::Summarize {
                self.report.summary_fallback =
                    Some("no summarizer is configured; the extractive digest was used".into());
            }
            return None;
        };
        if !matches!(self.options.strategy, Strategy::Auto | Strategy::Summarize) {
            return None;
        }
        let header_tokens = self
            .counter
            .count_message(&Message::system(format!("{}\n", summarize::SUMMARY_HEADER)))
            .total();
        // Incremental: an earlier summary whose messages all leave the view again is merged
        // with what was dropped since, not summarised again from the messages.
        let previous = self.options.previous_summary.as_ref().filter(|p| {
            let covers: HashSet<&str> = p.covers.iter().map(String::as_str).collect();
            let leaving: HashSet<std::borrow::Cow<'_, str>> = dropped
                .iter()
                .flat_map(|u| self.items[u.start..u.end].iter())
                .map(|i| i.source_id())
                .filter(|id| covers.contains(id.as_ref()))
                .collect();
            !covers.is_empty() && leaving.len() == covers.len()
        });
        let covered: HashSet<&str> = previous
            .map(|p| p.covers.iter().map(String::as_str).collect())
            .unwrap_or_default();
        let fresh: Vec<&Item<'_>> = sources
            .iter()
            .copied()
            .filter(|i| !covered.contains(i.source_id().as_ref()))
            .collect();
        let messages: Vec<&Message> = fresh.iter().map(|i| i.message.as_ref()).collect();
        let request = summarize::SummaryRequest {
            messages: &messages,
            prompt: self
                .options
                .prompt
                .as_deref()
                .unwrap_or(summarize::DEFAULT_PROMPT),
            focus: self.options.focus.as_deref(),
            max_tokens: budget.saturating_sub(header_tokens),
            previous: previous.map(|p| p.text.as_str()),
        };
        let fallback = |report: &mut CompactReport, reason: String| {
            report.summary_fallback = Some(reason);
            None
        };
        let text = match previous {
            Some(p) if messages.is_empty() => p.text.clone(),
            _ => match summarizer.summarize(&request) {
                Ok(text) if !text.trim().is_empty() => text,
                Ok(_) => {
                    return fallback(
                        &mut self.report,
                        format!("{} returned an empty summary", summarizer.name()),
                    );
                }
                Err(e) => return fallback(&mut self.report, e.to_string()),
            },
        };
        let message = Message::system(format!("{}\n{}", summarize::SUMMARY_HEADER, text.trim()));
        let tokens = self.counter.count_message(&message).total();
        if tokens > budget {
            return fallback(
                &mut self.report,
                format!(
                    "{}'s summary has {tokens} tokens; {budget} were available",
                    summarizer.name()
                ),
            );
        }
        self.report.summarizer = Some(summarizer.name().to_owned());
        self.report.summary_previous = previous.map(|_| {
            if messages.is_empty() {
                "reused"
            } else {
                "merged"
            }
        });
        let mut source_ids: Vec<String> = previous.map(|p| p.covers.clone()).unwrap_or_default();
        source_ids.extend(
            fresh
                .iter()
                .map(|i| i.source_id().into_owned())
                .filter(|s| !s.is_empty()),
        );
        Some(digest::Built {
            message,
            tokens,
            source_ids,
        })
    }

    /// Indices (into `older`) of the units holding the last `n` tool outputs.
    fn recent_outputs(&self, older: &[units::Unit], n: usize) -> HashSet<usize> {
        let mut out = HashSet::new();
        let mut seen = 0;
        for (ui, unit) in older.iter().enumerate().rev() {
            if seen >= n {
                break;
            }
            let outputs = self.items[unit.start..unit.end]
                .iter()
                .filter(|i| i.message.role == Role::Tool && i.input.is_some())
                .count();
            if outputs > 0 {
                out.insert(ui);
                seen += outputs;
            }
        }
        out
    }

    /// Older tool outputs repeated later (same text, or same tool and arguments): item index →
    /// the call id of the newer copy.
    fn duplicates(&self, older: &[units::Unit]) -> HashMap<usize, String> {
        let mut newest_by_text: HashMap<u64, String> = HashMap::new();
        let mut newest_by_call: HashMap<(String, String), String> = HashMap::new();
        let mut out = HashMap::new();
        // Only units that may enter the window matter: the newest `4 x budget` tokens' worth
        // of text (at least 256 KB).
        let limit = (self.options.budget * 16).max(256 * 1024);
        let mut read = 0usize;
        for unit in older.iter().rev() {
            if read > limit {
                break;
            }
            read += self.items[unit.start..unit.end]
                .iter()
                .map(|i| i.message.text().len())
                .sum::<usize>();
            let calls: HashMap<&str, (&str, &str)> = self.items[unit.start..unit.end]
                .iter()
                .flat_map(|i| i.message.calls())
                .map(|c| (c.id.as_str(), (c.name.as_str(), c.arguments.as_str())))
                .collect();
            for index in (unit.start..unit.end).rev() {
                let item = &self.items[index];
                if item.message.role != Role::Tool || item.input.is_none() {
                    continue;
                }
                let text = item.message.text();
                if text.len() < 200 {
                    continue; // Short outputs are cheaper than a pointer to them.
                }
                let id = item
                    .message
                    .tool_call_id()
                    .map(str::to_owned)
                    .unwrap_or_default();
                let hash = xxhash_rust::xxh3::xxh3_64(text.as_bytes());
                let call_key = calls
                    .get(id.as_str())
                    .map(|(n, a)| ((*n).to_owned(), (*a).to_owned()));
                if let Some(newer) = newest_by_text.get(&hash) {
                    out.insert(index, newer.clone());
                } else if let Some(newer) = call_key.as_ref().and_then(|k| newest_by_call.get(k)) {
                    out.insert(index, newer.clone());
                }
                newest_by_text.entry(hash).or_insert_with(|| id.clone());
                if let Some(k) = call_key {
                    newest_by_call.entry(k).or_insert(id);
                }
            }
        }
        out
    }

    /// How a marker says the original of message `id` comes back: `; read_history ids=[id]
    /// returns it whole` with the agent's read tool, nothing without one.
    fn reads_back(&self, id: &str) -> String {
        match &self.options.read_tool {
            Some(tool) => format!("; {tool} ids=[{id}] returns it whole"),
            None => String::new(),
        }
    }

    /// A unit's version: duplicates replaced, and tool outputs masked when asked.
    fn version(
        &self,
        unit: units::Unit,
        replaced: &HashMap<usize, String>,
        masked: bool,
    ) -> Version {
        let names: HashMap<&str, &str> = self.items[unit.start..unit.end]
            .iter()
            .flat_map(|i| i.message.calls())
            .map(|c| (c.id.as_str(), c.name.as_str()))
            .collect();
        let masked_outputs = std::cell::Cell::new(0);
        let messages: Vec<ViewMessage> = (unit.start..unit.end)
            .map(|index| {
                let item = &self.items[index];
                let mut view = self.original(item);
                if item.message.role != Role::Tool || item.input.is_none() {
                    return view;
                }
                let id = item.message.tool_call_id().unwrap_or("?");
                let tool = item
                    .message
                    .name()
                    .or_else(|| names.get(id).copied())
                    .unwrap_or("tool");
                if let Some(newer) = replaced.get(&index) {
                    view.message.content = Some(Content::Text(format!(
                        "[TOOL OUTPUT ARCHIVED - search history for details] `{tool}` output of call {id} is identical to, or superseded by, the output of call {newer} below{}",
                        self.reads_back(&item.shown_id())
                    )));
                    view.kind = Kind::Masked;
                } else if masked
                    && let Some(text) =
                        mask_text(
                            &item.message.text(),
                            tool,
                            id,
                            &self.reads_back(&item.shown_id()),
                            self.counter,
                        )
                {
                    view.message.content = Some(Content::Text(text));
                    view.kind = Kind::Masked;
                    masked_outputs.set(masked_outputs.get() + 1);
                }
                view
            })
            .collect();
        Version {
            tokens: self.tokens(&messages),
            masked: masked_outputs.get(),
            messages,
        }
    }

    /// `dropped` unit indices with their scores, best match for the query first; with hybrid
    /// recall, the order by words alone as well (the two are merged by their places, see
    /// [`recall::fuse_ranks`]). `alike`: the sides write alike (a chat between people).
    fn rank(
        &mut self,
        dropped: &[units::Unit],
        query: &str,
        alike: bool,
    ) -> (Ranking, Option<Ranking>) {
        // Each unit's text is needed whole (and cut into sentences) only for embeddings;
        // otherwise only its terms are kept (a long log's texts would double what ranking holds).
        let keep_texts = self.options.embedder.is_some();
        let mut meanings: Vec<recall::Meaning> = Vec::new();
        let mut speakers = recall::Speakers::default();
        let query_terms = recall::terms(&crate::words::without_asides(query));
        let wanted: HashSet<&str> = query_terms.iter().map(String::as_str).collect();
        let mut lengths = Vec::with_capacity(dropped.len());
        let documents: Vec<Vec<String>> = dropped
            .iter()
            .map(|u| {
                let mut meaning = recall::Meaning::default();
                for item in &self.items[u.start..u.end] {
                    if keep_texts {
                        meaning.push(&item.message);
                        speakers.add(&item.message);
                    } else {
                        recall::push_meaning_text(&item.message, &mut meaning.text);
                    }
                }
                let (mut terms, joined) = recall::terms_and_joined(&meaning.text, |first| {
                    query_terms.iter().any(|q| q.starts_with(first))
                });
                lengths.push(terms.len());
                terms.extend(joined.into_iter().filter(|j| wanted.contains(j.as_str())));
                if keep_texts {
                    meanings.push(meaning);
                }
                terms
            })
            .collect();
        let similar =
            self.options.embedder.as_ref().and_then(|embedder| {
                match recall::similarities(
                    embedder.as_ref(),
                    self.vectors,
                    query,
                    &speakers,
                    &meanings,
                ) {
                    Ok(similar) => {
                        self.report.recall_embedder = Some(embedder.name().to_owned());
                        Some(similar)
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "embeddings failed; recall is lexical");
                        None
                    }
                }
            });
        let traits = recall::Traits {
            asks: dropped
                .iter()
                .map(|u| {
                    self.items[u.start..u.end]
                        .iter()
                        .any(|i| i.message.text().contains('?'))
                })
                .collect(),
            headings: dropped.iter().map(|u| self.starts_session(u)).collect(),
            speakers: dropped
                .iter()
                .map(|u| {
                    self.items[u.start..u.end]
                        .iter()
                        .find_map(|i| i.message.name())
                })
                .collect(),
            users: dropped
                .iter()
                .map(|u| {
                    self.items[u.start..u.end]
                        .iter()
                        .any(|i| i.message.role == Role::User)
                })
                .collect(),
        };
        let bm25 = recall::Bm25::with_lengths(documents, lengths);
        recall::order(
            bm25.scores(&query_terms),
            |sessions, count| bm25.grouped(sessions, count).scores(&query_terms),
            &traits,
            query,
            alike,
            similar.as_deref(),
        )
    }
}

/// The tokens a summary held to a share of what it stands for
/// ([`CompactOptions::summary_share`]) may take however little that is.
const SUMMARY_FLOOR: usize = 200;

/// Lines kept from the start and the end of a masked output.
const MASK_HEAD_LINES: usize = 4;
const MASK_TAIL_LINES: usize = 2;
const MASK_LINE_CHARS: usize = 160;

/// A tool output's masked form: its first and last lines around seed 002's archived-output
/// marker, which names the tool, the call, the size and where the original is. `None` when the
/// output is too short for masking to save anything.
fn mask_text(
    text: &str,
    tool: &str,
    call_id: &str,
    reads_back: &str,
    counter: &TokenCounter,
) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let tokens = counter.count_text(text);
    if tokens < 60 {
        return None;
    }
    let clip = |l: &str| -> String {
        if l.chars().count() > MASK_LINE_CHARS {
            let cut: String = l.chars().take(MASK_LINE_CHARS).collect();
            format!("{cut}…")
        } else {
            l.to_owned()
        }
    };
    let (head, tail) = if lines.len() > MASK_HEAD_LINES + MASK_TAIL_LINES {
        (
            &lines[..MASK_HEAD_LINES],
            &lines[lines.len() - MASK_TAIL_LINES..],
        )
    } else {
        (&lines[..lines.len().min(2)], &[][..])
    };
    let hidden_lines = lines.len() - head.len() - tail.len();
    let mut out: Vec<String> = head.iter().map(|l| clip(l)).collect();
    out.push(format!(
        "[TOOL OUTPUT ARCHIVED - search history for details] engram masked {hidden_lines} of {} lines ({tokens} tokens) of `{tool}` output, call {call_id}{reads_back}",
        lines.len()
    ));
    out.extend(tail.iter().map(|l| clip(l)));
    let masked = out.join("\n");
    (counter.count_text(&masked) < tokens).then_some(masked)
}

/// Recall's share of `free` tokens for a history of `history` tokens in `sessions` sessions,
/// given the configured `share`. The rest (the digest and the recent window) shrinks linearly,
/// to a quarter of it, as the history grows from 8 to 24 times `free`, or as it spans from 4 to
/// 12 sessions, whichever shrinks it more: the newest session is then a small part of the
/// history, and the answer is more likely in one that only recall reaches.
fn recall_share_for(share: f64, history: usize, free: usize, sessions: usize) -> f64 {
    const FROM: f64 = 8.0;
    const FULL: f64 = 24.0;
    const FROM_SESSIONS: f64 = 4.0;
    const FULL_SESSIONS: f64 = 12.0;
    let share = share.clamp(0.0, 1.0);
    let times = history as f64 / free.max(1) as f64;
    let by_length = ((times - FROM) / (FULL - FROM)).clamp(0.0, 1.0);
    let by_sessions =
        ((sessions as f64 - FROM_SESSIONS) / (FULL_SESSIONS - FROM_SESSIONS)).clamp(0.0, 1.0);
    let grown = by_length.max(by_sessions);
    1.0 - (1.0 - share) * (1.0 - 0.75 * grown)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenize::Tokenizer;

    #[test]
    fn recall_takes_more_of_the_budget_the_longer_the_history_and_the_more_its_sessions() {
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        // Up to 8 times the free budget: the configured share.
        assert!(close(recall_share_for(0.8, 0, 1000, 0), 0.8));
        assert!(close(recall_share_for(0.8, 8_000, 1000, 0), 0.8));
        // Halfway to 24 times: the rest is five eighths of what it was.
        assert!(close(
            recall_share_for(0.8, 16_000, 1000, 0),
            1.0 - 0.2 * 0.625
        ));
        // From 24 times on: a quarter of the rest.
        assert!(close(recall_share_for(0.8, 24_000, 1000, 0), 0.95));
        assert!(close(recall_share_for(0.8, 1_000_000, 1000, 0), 0.95));
        // A caller's share is kept in proportion, and never leaves 0..=1.
        assert!(close(recall_share_for(0.0, 24_000, 1000, 0), 0.75));
        assert!(close(recall_share_for(1.0, 24_000, 1000, 0), 1.0));
        assert!(close(recall_share_for(0.8, 24_000, 0, 0), 0.95));
        let mut last = 0.0;
        for history in (0..40_000).step_by(500) {
            let s = recall_share_for(0.5, history, 1000, 0);
            assert!(s >= last && s <= 1.0, "{history}: {s}");
            last = s;
        }
        // Up to 4 sessions: by length alone. From 12 on: a quarter of the rest, however short.
        assert!(close(recall_share_for(0.8, 0, 1000, 4), 0.8));
        assert!(close(recall_share_for(0.8, 0, 1000, 8), 1.0 - 0.2 * 0.625));
        assert!(close(recall_share_for(0.8, 0, 1000, 12), 0.95));
        assert!(close(recall_share_for(0.8, 0, 1000, 500), 0.95));
        // The two rises do not add up: the larger one counts.
        assert!(close(
            recall_share_for(0.8, 16_000, 1000, 8),
            1.0 - 0.2 * 0.625
        ));
        assert!(close(recall_share_for(0.8, 24_000, 1000, 8), 0.95));
    }

    #[test]
    fn a_history_of_many_sessions_leaves_the_recent_window_less() {
        // The same 48 turns, every one about the garden, in 12 sessions or in 3; the history is
        // about twice the budget, too short for its length to matter.
        let kinds = |sessions: usize| {
            let mut messages = vec![Message::system("You are a helpful companion.")];
            for k in 0..48 {
                if k % (48 / sessions) == 0 {
                    messages.push(Message::system(format!(
                        "[Session {}]",
                        k / (48 / sessions)
                    )));
                }
                messages.push(Message::user(format!(
                    "The garden grew a little more, {k}."
                )));
            }
            messages.push(Message::user("How is the garden?"));
            let out = compact_asked_last(messages, 400);
            let count = |kind: Kind| out.messages.iter().filter(|m| m.kind == kind).count();
            (count(Kind::Recalled), count(Kind::Original))
        };
        let (recalled_few, recent_few) = kinds(3);
        let (recalled_many, recent_many) = kinds(12);
        assert!(
            recalled_many > recalled_few && recent_many < recent_few,
            "12 sessions: {recalled_many} recalled, {recent_many} recent; \
             3 sessions: {recalled_few} recalled, {recent_few} recent"
        );
    }

    #[test]
    fn a_dated_heading_lends_to_its_session_first_turn() {
        // Twelve sessions, a month each; each opens with news that shares no word with the
        // question, then small talk. The question names a month: its session's heading
        // matches, and lends to the turn after it.
        let months = [
            "January",
            "February",
            "March",
            "April",
            "May",
            "June",
            "July",
            "August",
            "September",
            "October",
            "November",
            "December",
        ];
        let mut messages = vec![Message::system("You are a helpful companion.")];
        for (i, month) in months.iter().enumerate() {
            messages.push(Message::system(format!(
                "[Session {} - 1:00 pm on 3 {month}, 2023]",
                i + 1
            )));
            let news = if *month == "August" {
                "Since we last talked I started mentoring kids at the local school.".to_owned()
            } else {
                format!("Since we last talked I repainted room {i} of the house.")
            };
            messages.push(Message::user(news).with_id(format!("news-{month}")));
            for k in 0..4 {
                messages.push(Message::assistant(format!(
                    "That sounds lovely, tell me more {k}."
                )));
                messages.push(Message::user(format!("Sure, it went fine overall {k}.")));
            }
        }
        messages.push(Message::user("What was going on in August 2023?"));
        let out = compact_asked_last(messages, 300);
        let text: Vec<String> = out
            .messages
            .iter()
            .map(|m| m.message.text().into_owned())
            .collect();
        assert!(
            text.iter().any(|t| t.contains("mentoring kids")),
            "{text:#?}"
        );
        assert!(
            !text.iter().any(|t| t.contains("repainted room 3 ")),
            "another month's news stays out: {text:#?}"
        );
    }

    /// `messages` compacted to `budget` (four characters a token) with the newest message, the
    /// question, as the query.
    fn compact_asked_last(messages: Vec<Message>, budget: usize) -> Compacted {
        let counter = TokenCounter::new(Tokenizer::chars_per_token(4));
        let mut options = CompactOptions::new(budget);
        options.query = messages.last().map(|m| m.text().into_owned());
        compact(&Conversation::new(messages), &counter, &options).expect("compacts")
    }

    /// A chat with one long turn that answers the question and one short turn that shares a
    /// single word with it; the rest is small talk. With `long_replies` the assistant's lines
    /// run to five times the user's, else both say lines of the same middling length (and as
    /// many words in all, so each turn matches the question about as well either way).
    fn chat_with_one_long_answer(long_replies: bool) -> Vec<Message> {
        let mut messages = vec![Message::system("You are a helpful companion.")];
        for k in 0..30 {
            let (user, assistant) = if long_replies {
                (
                    format!("Quiet day {k}."),
                    format!("Nothing much happened today, I stayed in and read a novel {k}."),
                )
            } else {
                (
                    format!("Nothing much today, I read a while {k}."),
                    format!("Quiet day in, read a novel too {k}."),
                )
            };
            messages.push(Message::user(user));
            messages.push(Message::assistant(assistant));
            if k == 10 {
                messages.push(
                    Message::user(
                        "For the garden party by the old stone wall we baked a lemon cake, \
                         three trays of scones and a pot of plum jam, and my aunt brought \
                         her famous cherry pie; everyone stayed until the lanterns were lit \
                         and the neighbours sang until midnight.",
                    )
                    .with_id("answer"),
                );
                messages.push(Message::assistant("What a wonderful evening."));
            }
            if k == 20 {
                messages.push(Message::user("The garden was green.").with_id("one-word"));
                messages.push(Message::assistant("Lovely."));
            }
        }
        messages.push(Message::user(
            "What did we bake for the garden party by the old stone wall?",
        ));
        messages
    }

    #[test]
    fn in_a_chat_between_people_the_best_match_is_recalled_whatever_its_length() {
        let counter = TokenCounter::new(Tokenizer::chars_per_token(4));
        // 110 tokens leave recall room for the answer or the one-word match, not both.
        let kept = |long_replies: bool| {
            let messages = chat_with_one_long_answer(long_replies);
            let mut options = CompactOptions::new(110);
            options.query = messages.last().map(|m| m.text().into_owned());
            let out = compact(&Conversation::new(messages), &counter, &options).expect("compacts");
            out.messages
                .iter()
                .filter_map(|m| m.message.id.clone())
                .collect::<Vec<_>>()
        };
        // Turns alike in length: the answer matches best, and is recalled.
        assert_eq!(kept(false), ["answer"]);
        // Beside long replies the cost counts, and the short match goes first.
        assert_eq!(kept(true), ["one-word"]);
    }

    #[test]
    fn a_compound_the_query_writes_as_one_word_finds_it_written_as_two() {
        let mut messages = vec![Message::system("You are a helpful companion.")];
        for k in 0..30 {
            messages.push(Message::user(format!("Quiet day {k}, I read a novel.")));
            messages.push(Message::assistant(format!("Sounds restful {k}.")));
            if k == 12 {
                messages.push(
                    Message::user("We drove along the coast on our road trip.")
                        .with_id("road trip"),
                );
                messages.push(Message::assistant("What a view that must have been."));
            }
        }
        messages.push(Message::user("Where did they go on the roadtrip?"));
        let kept: Vec<_> = compact_asked_last(messages, 60)
            .messages
            .iter()
            .filter_map(|m| m.message.id.clone())
            .collect();
        assert_eq!(kept, ["road trip"]);
    }

    #[test]
    fn a_question_in_the_first_person_recalls_what_the_user_said() {
        // An assistant's conversation: short turns from the user, longer replies. The user once
        // said what they made for a friend; the assistant once gave a reply that shares more of
        // the question's words. (The long turn before that reply keeps the share it inherits
        // from the reply from making it a match worth recalling.)
        let mut messages = vec![Message::system("You are a helpful assistant.")];
        for k in 0..30 {
            messages.push(Message::user(format!("Quiet day {k}.")));
            messages.push(Message::assistant(format!(
                "Nothing much happened today, so I stayed in and read a long novel {k}."
            )));
            if k == 10 {
                messages.push(
                    Message::user("I baked a chocolate cake for my friend's birthday.")
                        .with_id("user"),
                );
                messages.push(Message::assistant("How kind."));
            }
            if k == 20 {
                messages.push(Message::user(
                    "Let me think about the weekend plans and the weather forecast for a while \
                     before deciding anything else about the trip today.",
                ));
                messages.push(
                    Message::assistant(
                        "Making candles with a friend is fun, and so is making soap or pottery together.",
                    )
                    .with_id("reply"),
                );
            }
        }
        let counter = TokenCounter::new(Tokenizer::chars_per_token(4));
        // 65 tokens leave recall room for one of the two.
        let kept = |question: &str| {
            let mut messages = messages.clone();
            messages.push(Message::user(question));
            let mut options = CompactOptions::new(65);
            options.query = Some(question.to_owned());
            let out = compact(&Conversation::new(messages), &counter, &options).expect("compacts");
            out.messages
                .iter()
                .filter_map(|m| m.message.id.clone())
                .collect::<Vec<_>>()
        };
        // Asked in the first person, the user's own turn is recalled...
        assert_eq!(
            kept("I mentioned making something for my friend. What was it?"),
            ["user"]
        );
        // ...asked what the assistant said, or about someone else, the reply that matches best.
        assert_eq!(
            kept("What did you suggest making for my friend?"),
            ["reply"]
        );
        assert_eq!(
            kept("What did Sam suggest making for his friend?"),
            ["reply"]
        );
    }

    #[test]
    fn a_question_searches_its_topic_not_its_asides() {
        // The user's turns: small talk that says "mentioned" and "days ago", and once what they
        // made for a friend, in words the question shares only "friend" with.
        let mut messages = vec![Message::system("You are a helpful assistant.")];
        for k in 0..30 {
            let user = if k % 6 == 0 {
                format!("As I mentioned, the rain two days ago was heavy {k}.")
            } else {
                format!("Quiet day {k}.")
            };
            messages.push(Message::user(user));
            messages.push(Message::assistant(format!("I see, thank you {k}.")));
            if k == 10 {
                messages.push(
                    Message::user("I baked a chocolate cake for my friend's birthday.")
                        .with_id("cake"),
                );
                messages.push(Message::assistant("How kind."));
            }
        }
        messages.push(Message::user(
            "I mentioned cooking something for my friend a couple of days ago. What was it?",
        ));
        let kept: Vec<_> = compact_asked_last(messages, 60)
            .messages
            .iter()
            .filter_map(|m| m.message.id.clone())
            .collect();
        assert_eq!(kept, ["cake"]);
    }

    #[test]
    fn a_source_id_names_a_message_by_its_id_else_by_its_index() {
        let messages = vec![
            Message::system("s"),
            Message::user("u").with_id("1"),
            Message::assistant("a"),
        ];
        let index = SourceIndex::new(&messages);
        assert_eq!(index.get("0"), Some(0));
        // "1" is message 1's own id; "2" is message 2's index (it has no id).
        assert_eq!(index.get("1"), Some(1));
        assert_eq!(index.get("2"), Some(2));
        assert_eq!(index.get("3"), None);
        let view = |message: Message, kind: Kind, id: &str| ViewMessage {
            message,
            kind,
            source_ids: vec![id.into()],
        };
        assert_eq!(
            index.unchanged(&view(Message::assistant("a"), Kind::Original, "2")),
            Some(2)
        );
        assert_eq!(
            index.unchanged(&view(Message::assistant("[masked]"), Kind::Masked, "2")),
            None
        );
        assert_eq!(
            index.unchanged(&view(Message::assistant("b"), Kind::Original, "2")),
            None
        );
    }
}
