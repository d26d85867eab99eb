//! What a compaction is asked for ([`Strategy`], [`CompactOptions`]) and what it reports
//! ([`CompactReport`], [`Error`], [`Compacted`]).

use serde::Serialize;

use super::summarize;

use super::view::ViewMessage;

use crate::Error;

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
    /// The classic consolidation: the last `keep_recent` messages verbatim and one
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
    pub fn from_name(name: &str) -> Result<Strategy, Error> {
        Strategy::parse(name).ok_or_else(|| {
            let names: Vec<&str> = Strategy::ALL.iter().map(|s| s.as_str()).collect();
            Error::UnknownName {
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

/// Options of [`compact`](super::compact).
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
    /// The preserve window of the extractive strategy: keep the last 20 messages or
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
    /// The weights of recall's order ([`crate::retrieval::RecallProfile`]); its default everywhere.
    pub recall: crate::retrieval::RecallProfile,
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
    /// The model recall fuses with BM25 (similarity of meaning): by default the built-in static
    /// model ([`crate::embed::built_in`]), MiniLM for hybrid recall; `None`: words alone.
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
    pub(super) fn position(self, index: usize) -> usize {
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
            recall: crate::retrieval::RecallProfile::default(),
            summarizer: None,
            prompt: None,
            focus: None,
            previous_summary: None,
            pinned_ids: Vec::new(),
            embedder: Some(crate::embed::built_in()),
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

/// What compaction did: an audit event, and more.
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
    /// Of those, units cut to the sentences with the query's words: longer than recall's whole
    /// budget, or ranked inside it and too long for what was left of it.
    pub excerpted: usize,
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

/// The result of [`compact`](super::compact).
#[derive(Debug, Clone)]
pub struct Compacted {
    /// The view to send, in order.
    pub messages: Vec<ViewMessage>,
    /// What was done.
    pub report: CompactReport,
}
