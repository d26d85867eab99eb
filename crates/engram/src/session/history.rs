//! The agent's way back to what left its context: search and read the session's whole log.
//!
//! [`Session::search_history`] ranks every message of the session's log (in the view, masked,
//! summarised, or set aside by a restore) by compaction's recall rule (`retrieval::order`: BM25
//! over stemmed words, the sessions about the query's topic or time, replies, named speakers;
//! fused with similarity of meaning when the session's options carry an embedder), an exact
//! match of the whole query first (marked `exact`), then what the view does not hold; the
//! leading system prompt only when it holds the query's words. [`Session::read_history`]
//! returns originals verbatim by id or by range, within a token budget. The agent's tools
//! call them through `super::tool_calls`.

use std::collections::{HashMap, HashSet};

use serde::Serialize;
use serde_json::{Value, json};

use super::{LoggedMessage, Session};
use crate::Error;
use crate::compact::{CompactOptions, Kind};
use crate::count::TokenCounter;
use crate::message::{Message, Role};
use crate::retrieval;
use crate::timestamp::format_time;
use crate::tools;

/// The tokens `read_history` returns when the call names no budget.
pub const DEFAULT_READ_TOKENS: usize = 4_000;
/// Characters of context on each side of a hit's match.
const SNIPPET_CHARS: usize = 100;
/// Messages read at a time while looking for an exact match beyond the best-ranked.
const EXACT_BATCH: usize = 256;

/// One `search_history` hit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistoryHit {
    /// The message's id (what `read_history` takes).
    pub id: String,
    /// Its position in the log.
    pub seq: u64,
    /// Its role.
    pub role: String,
    /// For a tool output, the tool that wrote it; for a tool call, the tool called.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// When it was appended (RFC 3339).
    pub time: String,
    /// The text around the match.
    pub snippet: String,
    /// True when the message is in the context verbatim now.
    pub in_view: bool,
    /// True when a restore set it aside.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub abandoned: bool,
    /// True when the message holds the whole query word for word: such hits come first.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub exact: bool,
    /// Relevance (comparable within one search only; hits are ordered by `exact`, then by
    /// what the view does not hold, then by this).
    pub score: f64,
}

/// What `read_history` reads.
#[derive(Debug, Clone, PartialEq)]
pub enum HistorySelection {
    /// These messages, in the order given.
    Ids(Vec<String>),
    /// The messages from one id to another (default: the newest), in log order.
    Range {
        /// The first message.
        from: String,
        /// The last message.
        to: Option<String>,
    },
}

/// What `read_history` returns.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistoryRead {
    /// The messages read, each `{id, seq, time, message}` with the message verbatim.
    pub messages: Vec<Value>,
    /// Ids asked for that the session does not have.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_found: Vec<String>,
    /// When the budget cut the result: what was left out and how to read it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A message as `read_history` returns it: verbatim, without what the log keeps beside it (a
/// model's reasoning, usage) unless `metadata` asks for that too.
fn shown(message: &Message, metadata: bool) -> Value {
    let mut value = message.to_value();
    if !metadata && let Value::Object(map) = &mut value {
        map.retain(|k, _| {
            matches!(
                k.as_str(),
                "id" | "role" | "content" | "name" | "tool_calls" | "tool_call_id"
            )
        });
    }
    value
}

/// How to read `left` (messages a budget left out, in the order read): a range per run of
/// neighbouring messages, not an id each.
fn how_to_read(left: &[&LoggedMessage], read: &str) -> String {
    let mut runs: Vec<(&str, &str)> = Vec::new();
    let mut last_seq = None;
    for m in left {
        match (runs.last_mut(), last_seq) {
            (Some(run), Some(seq)) if m.seq == seq + 1 => run.1 = &m.id,
            _ => runs.push((&m.id, &m.id)),
        }
        last_seq = Some(m.seq);
    }
    let run = |(from, to): &(&str, &str)| {
        if from == to {
            format!("ids=[\"{from}\"]")
        } else {
            format!("from=\"{from}\" to=\"{to}\"")
        }
    };
    match runs.as_slice() {
        [one] => {
            let them = if left.len() == 1 { "it" } else { "them" };
            format!("call {read} with {} to read {them}", run(one))
        }
        many => {
            let shown: Vec<String> = many.iter().take(5).map(run).collect();
            let more = if many.len() > 5 {
                format!(" and {} more runs", many.len() - 5)
            } else {
                String::new()
            };
            format!("read them with {read}: {}{more}", shown.join("; "))
        }
    }
}

/// The text a message is searched by: its content, its tool calls' names and arguments.
fn searchable(m: &Message) -> String {
    let mut text = m.text().into_owned();
    for call in m.calls() {
        text.push('\n');
        text.push_str(&call.name);
        text.push(' ');
        text.push_str(&call.arguments);
    }
    text
}

/// The most places one needle is looked for in a text when a snippet is cut from it.
const SNIPPET_MATCHES: usize = 1_000;

/// The query's needles for snippets: the query itself, its words as written (an identifier such
/// as `test_parse_args` or `src/lib.rs` whole) and their alphanumeric parts, lowercased.
fn snippet_needles(query: &str) -> Vec<String> {
    let mut needles = vec![query.trim().to_lowercase()];
    let tokens = query
        .split_whitespace()
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()));
    let parts = query.split(|c: char| !c.is_alphanumeric());
    for word in tokens.chain(parts) {
        let word = word.to_lowercase();
        if word.chars().count() > 2 && !needles.contains(&word) {
            needles.push(word);
        }
    }
    needles.retain(|n| !n.is_empty());
    needles
}

/// Up to [`SNIPPET_CHARS`] characters before the place where most of `needles` meet and twice as
/// many after it (more when the last of them ends later): the start of the text when nothing
/// matches.
fn snippet(text: &str, needles: &[String]) -> String {
    let (at, last) = best_window(&fold_case(text), needles).unwrap_or((0, 0));
    let start = text[..at]
        .char_indices()
        .rev()
        .nth(SNIPPET_CHARS.saturating_sub(1))
        .map_or(0, |(i, _)| i);
    let end = text[at..]
        .char_indices()
        .nth(SNIPPET_CHARS * 2)
        .map_or(text.len(), |(i, _)| at + i)
        .max(last);
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    out.push_str(text[start..end].trim());
    if end < text.len() {
        out.push('…');
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` lowercased letter by letter where that keeps each letter's length in bytes (a few
/// letters outside ASCII change it, `İ` among them; they stay as they are), so that every place in
/// it is the same place in `text`.
fn fold_case(text: &str) -> String {
    text.chars()
        .map(|c| {
            let mut lower = c.to_lowercase();
            match (lower.next(), lower.next()) {
                (Some(l), None) if l.len_utf8() == c.len_utf8() => l,
                _ => c,
            }
        })
        .collect()
}

/// Where most of `needles` meet in `lower`, as the byte range from the first of their matches
/// to the end of the last. Of the windows of `2 * SNIPPET_CHARS` bytes that start at a match, the
/// one whose distinct needles have the most characters between them wins (a long identifier
/// says more than a short word; the earliest wins a tie); the range is then the shortest that
/// holds each of those needles once (the earliest of the shortest).
fn best_window(lower: &str, needles: &[String]) -> Option<(usize, usize)> {
    let mut matches: Vec<(usize, usize)> = needles
        .iter()
        .enumerate()
        .filter(|(_, n)| !n.is_empty())
        .flat_map(|(i, n)| {
            lower
                .match_indices(n.as_str())
                .take(SNIPPET_MATCHES)
                .map(move |(at, _)| (at, i))
        })
        .collect();
    matches.sort_unstable();
    // The window with the most weight, by two pointers over the matches in text order.
    let span = SNIPPET_CHARS * 2;
    let weight = |i: usize| needles[i].len();
    let mut inside = vec![0usize; needles.len()];
    let (mut total, mut end) = (0, 0);
    let mut best: Option<(usize, usize)> = None;
    for (first, &(start, _)) in matches.iter().enumerate() {
        while end < matches.len() && matches[end].0 < start + span {
            let i = matches[end].1;
            if inside[i] == 0 {
                total += weight(i);
            }
            inside[i] += 1;
            end += 1;
        }
        if best.is_none_or(|(_, w)| total > w) {
            best = Some((first, total));
        }
        let i = matches[first].1;
        inside[i] -= 1;
        if inside[i] == 0 {
            total -= weight(i);
        }
    }
    // Its needles, and the shortest range holding each of them.
    let (first, _) = best?;
    let mut wanted = vec![false; needles.len()];
    for &(at, i) in &matches[first..] {
        if at >= matches[first].0 + span {
            break;
        }
        wanted[i] = true;
    }
    let kept: Vec<(usize, usize)> = matches.into_iter().filter(|&(_, i)| wanted[i]).collect();
    let missing_at_start = wanted.iter().filter(|&&w| w).count();
    let mut inside = vec![0usize; needles.len()];
    let (mut missing, mut left) = (missing_at_start, 0);
    let mut shortest: Option<(usize, usize)> = None;
    for &(at, i) in &kept {
        if inside[i] == 0 {
            missing -= 1;
        }
        inside[i] += 1;
        while inside[kept[left].1] > 1 {
            inside[kept[left].1] -= 1;
            left += 1;
        }
        if missing == 0 {
            let range = (kept[left].0, at + needles[i].len());
            if shortest.is_none_or(|(a, b)| range.1 - range.0 < b - a) {
                shortest = Some(range);
            }
        }
    }
    shortest
}

/// One message as the index knows it.
#[derive(Debug)]
struct Doc {
    id: String,
    seq: u64,
    created_at: crate::timestamp::Timestamp,
    role: Role,
    tool: Option<String>,
    abandoned: bool,
    /// It is a heading ([`retrieval::is_heading`]): it starts a session.
    heading: bool,
    /// Who speaks it (its `name`).
    speaker: Option<String>,
    /// It asks something (a question mark).
    asks: bool,
}

/// An inverted index of one session's whole log (BM25 over stemmed words), kept between calls
/// in the process and extended with what was appended since; rebuilt after a restore.
#[derive(Debug, Default)]
pub(crate) struct HistoryIndex {
    docs: Vec<Doc>,
    /// The messages' words, in the order of `docs`.
    bm25: retrieval::Bm25,
    /// Tool calls' names by call id, for the outputs that answer them.
    calls: HashMap<String, String>,
    /// The sequence number after the last message indexed.
    next_seq: u64,
    /// The first message's id: a check that the cache holds this session's log.
    first_id: Option<String>,
}

impl HistoryIndex {
    fn add(&mut self, m: &LoggedMessage) {
        for call in m.message.calls() {
            self.calls.insert(call.id.clone(), call.name.clone());
        }
        // A tool output's `name` is its tool's; a user's or an assistant's is the speaker's.
        let is_output = m.message.role == Role::Tool;
        let tool = m
            .message
            .name()
            .filter(|_| is_output)
            .map(str::to_owned)
            .or_else(|| {
                m.message
                    .tool_call_id()
                    .and_then(|id| self.calls.get(id).cloned())
            })
            .or_else(|| m.message.calls().first().map(|c| c.name.clone()));
        let text = retrieval::message_lines_text(&m.message);
        // The speaker's name counts as part of the text, as in compaction's recall.
        let speaker = m.message.name().filter(|_| !is_output).map(str::to_owned);
        let (mut terms, joined) = retrieval::terms_and_joined(&text, |_| true);
        if let Some(name) = &speaker {
            terms.extend(retrieval::terms(name));
        }
        // Neighbouring words joined match a query's compound; they are not words of the
        // message (its length stays `terms`), as in compaction's recall.
        let len = terms.len();
        self.bm25.add(terms.into_iter().chain(joined), len);
        if self.first_id.is_none() && !m.abandoned {
            self.first_id = Some(m.id.clone());
        }
        self.next_seq = self.next_seq.max(m.seq + 1);
        self.docs.push(Doc {
            id: m.id.clone(),
            seq: m.seq,
            created_at: m.created_at,
            role: m.message.role,
            tool,
            abandoned: m.abandoned,
            heading: retrieval::is_heading_message(&m.message),
            speaker,
            asks: m.message.text().contains('?'),
        });
    }

    /// What recall knows of each message besides its words.
    fn traits(&self) -> retrieval::Traits<'_> {
        retrieval::Traits {
            asks: self.docs.iter().map(|d| d.asks).collect(),
            headings: self.docs.iter().map(|d| d.heading).collect(),
            speakers: self.docs.iter().map(|d| d.speaker.as_deref()).collect(),
            voices: self
                .docs
                .iter()
                .map(|d| retrieval::voice(d.speaker.as_deref(), d.role))
                .collect(),
            lengths: self.bm25.lengths().iter().map(|&l| l as usize).collect(),
        }
    }
}

/// What a cached index is of: the store (its address), the session, its creation and its
/// restores.
type IndexKey = (usize, String, crate::timestamp::Timestamp, u64);

/// The indexes of the sessions searched lately in this process.
static INDEXES: std::sync::Mutex<Vec<(IndexKey, std::sync::Arc<std::sync::Mutex<HistoryIndex>>)>> =
    std::sync::Mutex::new(Vec::new());

/// Sessions whose index the process keeps.
const CACHED_INDEXES: usize = 16;

/// Candidates re-ranked with their text (an exact match of the whole query first).
const RERANKED: usize = 4;

/// What history search and read read: a conversation's messages as logged (abandoned ones
/// too), the ids the model has verbatim, and where the embedder's vectors are kept. A session
/// is one, read from its store; a request that carries its whole conversation (the proxy's) is
/// another ([`Carried`]).
pub(crate) trait History {
    /// The index of every message, up to date.
    fn index(&self) -> Result<std::sync::Arc<std::sync::Mutex<HistoryIndex>>, Error>;
    /// The active messages of these ids.
    fn by_ids(&self, ids: &[String]) -> Result<Vec<LoggedMessage>, Error>;
    /// The message at `seq`, abandoned or not.
    fn at(&self, seq: u64) -> Result<Option<LoggedMessage>, Error>;
    /// Every message, abandoned ones too.
    fn whole(&self) -> Result<Vec<LoggedMessage>, Error>;
    /// The ids of the messages the model has verbatim; `None`: all of them.
    fn in_view(&self) -> Result<Option<HashSet<String>>, Error>;
    /// Where the embedder's vectors are kept, when anywhere.
    fn vectors(&self) -> Option<Box<dyn crate::embed::VectorStore + '_>>;
    /// The embedder, the recall profile and the read tool's name.
    fn options(&self) -> &CompactOptions;
    /// The counter of the model.
    fn counter(&self) -> &TokenCounter;
}

impl History for Session<'_> {
    fn by_ids(&self, ids: &[String]) -> Result<Vec<LoggedMessage>, Error> {
        self.store.messages_by_id(&self.info.id, ids)
    }

    fn at(&self, seq: u64) -> Result<Option<LoggedMessage>, Error> {
        Ok(self
            .store
            .session_log(&self.info.id, seq, true)?
            .into_iter()
            .next())
    }

    fn whole(&self) -> Result<Vec<LoggedMessage>, Error> {
        self.store.session_log(&self.info.id, 0, true)
    }

    fn vectors(&self) -> Option<Box<dyn crate::embed::VectorStore + '_>> {
        Some(Box::new(Session::vectors(self)))
    }

    fn options(&self) -> &CompactOptions {
        &self.options
    }

    fn counter(&self) -> &TokenCounter {
        &self.counter
    }

    /// The ids of the messages the view holds verbatim; `None` when the view is the whole
    /// active log (no compaction yet).
    fn in_view(&self) -> Result<Option<HashSet<String>>, Error> {
        if let Some(ids) = &self.in_view {
            return Ok(Some(ids.clone()));
        }
        if self.store.latest_compaction(&self.info.id)?.is_none() {
            return Ok(None);
        }
        Ok(Some(
            self.view()?
                .messages
                .into_iter()
                .filter(|m| matches!(m.kind, Kind::Original | Kind::Recalled))
                .flat_map(|m| m.source_ids)
                .collect(),
        ))
    }

    /// This session's index, brought up to date with what was appended since it was built.
    fn index(&self) -> Result<std::sync::Arc<std::sync::Mutex<HistoryIndex>>, Error> {
        let key: IndexKey = (
            std::ptr::from_ref(self.store).cast::<()>() as usize,
            self.info.id.clone(),
            self.info.created_at,
            self.info.epoch,
        );
        let index = {
            let mut cache = INDEXES.lock().unwrap_or_else(|p| p.into_inner());
            match cache.iter().position(|(k, _)| *k == key) {
                Some(i) => {
                    let entry = cache.remove(i);
                    let index = std::sync::Arc::clone(&entry.1);
                    cache.push(entry);
                    index
                }
                None => {
                    if cache.len() >= CACHED_INDEXES {
                        cache.remove(0);
                    }
                    let index = std::sync::Arc::default();
                    cache.push((key, std::sync::Arc::clone(&index)));
                    index
                }
            }
        };
        {
            let mut guard = index.lock().unwrap_or_else(|p| p.into_inner());
            // Another store at the same address holding a session of the same id and creation
            // time would show here: its first message differs. Start again then.
            if let Some(first) = &guard.first_id {
                let now_first = self.store.session_log_page(&self.info.id, 0, 1)?;
                if now_first.first().map(|m| &m.id) != Some(first) {
                    *guard = HistoryIndex::default();
                }
            }
            if guard.next_seq < self.info.next_seq || guard.docs.is_empty() {
                let from = guard.next_seq;
                for m in self.store.session_log(&self.info.id, from, true)? {
                    guard.add(&m);
                }
            }
        }
        Ok(index)
    }
}

impl Session<'_> {
    /// Ranks the session's whole log for `query` as compaction's recall does (`search`).
    pub fn search_history(&self, query: &str, limit: usize) -> Result<Vec<HistoryHit>, Error> {
        search(self, query, limit)
    }

    /// The originals `selection` names, verbatim, within `max_tokens` (`read`).
    pub fn read_history(
        &self,
        selection: &HistorySelection,
        max_tokens: usize,
        metadata: bool,
    ) -> Result<HistoryRead, Error> {
        read(self, selection, max_tokens, metadata)
    }
}

/// A conversation a request carries whole (the proxy's): its messages logged in order, each
/// with its own id or `m<position>`, as the proxy's digest and markers name them.
pub(crate) struct Carried {
    log: Vec<LoggedMessage>,
    in_view: Option<HashSet<String>>,
    options: CompactOptions,
    counter: TokenCounter,
}

impl Carried {
    /// `messages` as a history the model sees `in_view` of (`None`: all), counted by `counter`.
    pub(crate) fn new(
        messages: &[crate::message::Message],
        counter: TokenCounter,
        options: CompactOptions,
        in_view: Option<HashSet<String>>,
    ) -> Carried {
        let now = crate::timestamp::now();
        let log = messages
            .iter()
            .enumerate()
            .map(|(seq, m)| {
                let message = super::store::logged_message(m, seq as u64);
                LoggedMessage {
                    seq: seq as u64,
                    id: message.id.clone().unwrap_or_default(),
                    created_at: now,
                    tokens: counter.count_message(&message).total(),
                    message,
                    abandoned: false,
                }
            })
            .collect();
        Carried {
            log,
            in_view,
            options,
            counter,
        }
    }
}

impl History for Carried {
    fn index(&self) -> Result<std::sync::Arc<std::sync::Mutex<HistoryIndex>>, Error> {
        let mut index = HistoryIndex::default();
        for m in &self.log {
            index.add(m);
        }
        Ok(std::sync::Arc::new(std::sync::Mutex::new(index)))
    }

    fn by_ids(&self, ids: &[String]) -> Result<Vec<LoggedMessage>, Error> {
        Ok(self
            .log
            .iter()
            .filter(|m| ids.contains(&m.id))
            .cloned()
            .collect())
    }

    fn at(&self, seq: u64) -> Result<Option<LoggedMessage>, Error> {
        Ok(self.log.get(seq as usize).cloned())
    }

    fn whole(&self) -> Result<Vec<LoggedMessage>, Error> {
        Ok(self.log.clone())
    }

    fn in_view(&self) -> Result<Option<HashSet<String>>, Error> {
        Ok(self.in_view.clone())
    }

    fn vectors(&self) -> Option<Box<dyn crate::embed::VectorStore + '_>> {
        None
    }

    fn options(&self) -> &CompactOptions {
        &self.options
    }

    fn counter(&self) -> &TokenCounter {
        &self.counter
    }
}

/// Ranks the session's whole log for `query` as compaction's recall does; the best `limit`
/// hits that it reaches at all (a message that matches, the reply to a matching question,
/// the turn a matching reply answers): an exact match of the whole query first, then those
/// the view does not hold verbatim.
pub(crate) fn search(h: &dyn History, query: &str, limit: usize) -> Result<Vec<HistoryHit>, Error> {
    let index = h.index()?;
    let index = index.lock().unwrap_or_else(|p| p.into_inner());
    // Every word the agent gives is searched (a list's numbers aside).
    let query_terms = retrieval::query_terms(query);
    let similar = match &h.options().embedder {
        Some(embedder) => similarities(h, embedder.as_ref(), query, &index)?,
        None => None,
    };
    // Compaction's order (best first; among equals, the newest), merged with the order by
    // words alone by place with hybrid recall, the hits returned standing for the budget.
    // A search lists what matches: the turns around a hit are one `read_history` away, and
    // the shares they borrow in compaction's recall (which fills a budget with context)
    // would push the matches themselves off a short list.
    let profile = &retrieval::RecallProfile {
        neighbour: 0.0,
        answer: 0.0,
        ..h.options().recall.clone()
    };
    let scores = index.bm25.scores(&query_terms);
    // The session's leading instructions (the system prompt) are in every view: listed
    // when they hold the query's words, not for the credit a matching first turn passes
    // back to the message before it.
    let leading_matches: Vec<bool> = index
        .docs
        .iter()
        .zip(&scores)
        .take_while(|(d, _)| d.role.is_instruction())
        .map(|(_, &score)| score > 0.0)
        .collect();
    let retrieval::Ordered {
        fused, words_only, ..
    } = retrieval::order(
        &index.bm25,
        &query_terms,
        &index.traits(),
        query,
        similar.as_deref(),
        profile,
    );
    let mut ranked: Vec<(u32, f64)> = match words_only {
        Some(words) => retrieval::fuse_ranks(&fused, &words, limit as f64, profile.fuse_depth),
        None => fused,
    }
    .into_iter()
    .map(|(doc, score)| (doc as u32, score))
    .collect();
    // An exact match of the whole query first (what the agent asked for, word for word),
    // then what it cannot see: a message its context holds verbatim is there to read
    // already, and compaction kept the best matches, so the next ones are what the search
    // is for. The candidates: the best by score, and as many of the best the view does not
    // hold.
    let in_view = h.in_view()?;
    let seen = |doc: u32| {
        let d = &index.docs[doc as usize];
        !d.abandoned && in_view.as_ref().is_none_or(|ids| ids.contains(&d.id))
    };
    let pool = limit * RERANKED;
    let unseen: Vec<(u32, f64)> = ranked
        .iter()
        .skip(pool)
        .filter(|&&(doc, _)| !seen(doc))
        .take(pool)
        .copied()
        .collect();
    // Every message that holds a query word, for the exact match below.
    let matching: Vec<u32> = ranked.iter().skip(pool).map(|&(doc, _)| doc).collect();
    ranked.truncate(pool);
    ranked.extend(unseen);
    let phrase = query.trim().to_lowercase();
    if ranked.is_empty() && phrase.is_empty() {
        return Ok(Vec::new());
    }
    let needles = snippet_needles(query);
    // The candidates' texts: the active ones in one read, a set-aside one from its place.
    let active: Vec<String> = ranked
        .iter()
        .map(|&(doc, _)| &index.docs[doc as usize])
        .filter(|d| !d.abandoned)
        .map(|d| d.id.clone())
        .collect();
    let mut texts: HashMap<String, String> = h
        .by_ids(&active)?
        .into_iter()
        .map(|m| (m.id, searchable(&m.message)))
        .collect();
    let mut candidates = Vec::with_capacity(ranked.len());
    for (doc, score) in ranked {
        let d = &index.docs[doc as usize];
        let text = match texts.remove(&d.id) {
            Some(text) => text,
            None => match h.at(d.seq)?.filter(|m| m.id == d.id) {
                Some(m) => searchable(&m.message),
                None => continue,
            },
        };
        let exact = !phrase.is_empty() && text.to_lowercase().contains(&phrase);
        if leading_matches.get(doc as usize) == Some(&false) && !exact {
            continue;
        }
        candidates.push((doc, score, text, exact));
    }
    // The words as written are always found: when none of the best holds the query word
    // for word, the other messages holding its words are read, newest first, until one does
    // (and every message, when the query has no word the index keeps, only stop words or
    // signs).
    if !phrase.is_empty()
        && !candidates.iter().any(|c| c.3)
        && let Some(found) = exact_match(h, &index, &matching, query_terms.is_empty(), &phrase)?
    {
        candidates.push(found);
    }
    candidates.sort_by(|a, b| {
        b.3.cmp(&a.3)
            .then(seen(a.0).cmp(&seen(b.0)))
            .then(b.1.total_cmp(&a.1))
            .then(b.0.cmp(&a.0))
    });
    candidates.truncate(limit);
    Ok(candidates
        .into_iter()
        .map(|(doc, score, text, exact)| {
            let d = &index.docs[doc as usize];
            HistoryHit {
                id: d.id.clone(),
                seq: d.seq,
                role: d.role.to_string(),
                tool: d.tool.clone(),
                time: format_time(d.created_at),
                snippet: snippet(&text, &needles),
                in_view: seen(doc),
                abandoned: d.abandoned,
                exact,
                score: (score * 1000.0).round() / 1000.0,
            }
        })
        .collect())
}

/// The newest message holding `phrase` among `matching` (every message of the log when
/// `scan_all`), as a search candidate `(doc, score, text, exact)`.
fn exact_match(
    h: &dyn History,
    index: &HistoryIndex,
    matching: &[u32],
    scan_all: bool,
    phrase: &str,
) -> Result<Option<(u32, f64, String, bool)>, Error> {
    let mut docs: Vec<u32> = if scan_all {
        (0..index.docs.len() as u32).collect()
    } else {
        matching.to_vec()
    };
    docs.sort_unstable_by(|a, b| b.cmp(a));
    for batch in docs.chunks(EXACT_BATCH) {
        let ids: Vec<String> = batch
            .iter()
            .map(|&d| index.docs[d as usize].id.clone())
            .collect();
        let texts: HashMap<String, String> = h
            .by_ids(&ids)?
            .into_iter()
            .map(|m| (m.id, searchable(&m.message)))
            .collect();
        for &doc in batch {
            let d = &index.docs[doc as usize];
            // A message set aside by a restore is read from its place.
            let text = match texts.get(&d.id) {
                Some(text) => Some(text.clone()),
                None => h
                    .at(d.seq)?
                    .filter(|m| m.id == d.id)
                    .map(|m| searchable(&m.message)),
            };
            if let Some(text) = text
                && text.to_lowercase().contains(phrase)
            {
                return Ok(Some((doc, 0.0, text, true)));
            }
        }
    }
    Ok(None)
}

/// Each message's similarity of meaning to `query` (hybrid search, when the session's
/// options carry an embedder), in the index's order; each message's vector is kept in the
/// session's store and embedded once, by the text and sentences compaction embeds it by
/// ([`retrieval::Meaning`]), so either finds the other's. `None` when embedding fails: the
/// search is lexical.
fn similarities(
    h: &dyn History,
    embedder: &dyn crate::embed::Embedder,
    query: &str,
    index: &HistoryIndex,
) -> Result<Option<Vec<f32>>, Error> {
    let mut speakers = retrieval::Speakers::default();
    let mut meanings: HashMap<String, retrieval::Meaning> = h
        .whole()?
        .into_iter()
        .map(|m| {
            let mut meaning = retrieval::Meaning::default();
            meaning.push(&m.message);
            speakers.add(&m.message);
            (m.id, meaning)
        })
        .collect();
    let meanings: Vec<retrieval::Meaning> = index
        .docs
        .iter()
        .map(|d| meanings.remove(&d.id).unwrap_or_default())
        .collect();
    let best_sentence = h.options().recall.best_sentence;
    let vectors = h.vectors();
    match retrieval::similarities(
        embedder,
        vectors.as_deref(),
        query,
        &speakers,
        &meanings,
        best_sentence,
    ) {
        Ok(similar) => Ok(Some(similar)),
        Err(e) => {
            tracing::warn!(error = %e, "embeddings failed; search_history is lexical");
            Ok(None)
        }
    }
}

/// The originals `selection` names, verbatim, within `max_tokens` (at least the first, cut
/// to the budget when it alone is over it); what is left out is said in the note.
pub(crate) fn read(
    h: &dyn History,
    selection: &HistorySelection,
    max_tokens: usize,
    metadata: bool,
) -> Result<HistoryRead, Error> {
    let mut not_found = Vec::new();
    let wanted: Vec<LoggedMessage> = match selection {
        HistorySelection::Ids(ids) => {
            let mut seen = HashSet::new();
            let ids: Vec<String> = ids
                .iter()
                .filter(|id| seen.insert(id.as_str()))
                .cloned()
                .collect();
            let mut found: HashMap<String, LoggedMessage> = h
                .by_ids(&ids)?
                .into_iter()
                .map(|m| (m.id.clone(), m))
                .collect();
            if found.len() < ids.len() {
                // Set aside by a restore, or not the session's: the whole log says which.
                for m in h.whole()? {
                    if m.abandoned && seen.contains(m.id.as_str()) {
                        found.insert(m.id.clone(), m);
                    }
                }
            }
            ids.into_iter()
                .filter_map(|id| {
                    let m = found.remove(&id);
                    if m.is_none() {
                        not_found.push(id);
                    }
                    m
                })
                .collect()
        }
        HistorySelection::Range { from, to } => {
            let log = h.whole()?;
            let at = |id: &str| log.iter().position(|m| m.id == id);
            let start = at(from);
            let end = match to {
                Some(to) => at(to),
                None => log.len().checked_sub(1),
            };
            if start.is_none() {
                not_found.push(from.clone());
            }
            if let (None, Some(to)) = (end, to) {
                not_found.push(to.clone());
            }
            match (start, end) {
                (Some(s), Some(e)) if s <= e => log[s..=e].to_vec(),
                _ => Vec::new(),
            }
        }
    };
    let mut messages = Vec::new();
    let mut used = 0;
    let mut left_out = Vec::new();
    let mut note = None;
    // A range is read in order: once a message is left out, so is the rest, and the note
    // names one range to read next.
    let in_order = matches!(selection, HistorySelection::Range { .. });
    for (n, m) in wanted.iter().enumerate() {
        let entry = |message: Value| {
            json!({
                "id": m.id,
                "seq": m.seq,
                "time": format_time(m.created_at),
                "message": message,
            })
        };
        if (left_out.is_empty() || !in_order) && used + m.tokens <= max_tokens {
            used += m.tokens;
            messages.push(entry(shown(&m.message, metadata)));
            continue;
        }
        if n == 0 {
            // The first message alone is over the budget: its text, cut.
            let text = m.message.text();
            let kept = prefix_within(h.counter(), &text, max_tokens.saturating_sub(20));
            let mut cut = m.message.clone();
            cut.content = Some(crate::message::Content::Text(text[..kept].to_owned()));
            messages.push(entry(shown(&cut, metadata)));
            note = Some(format!(
                "message {} was cut after {} of its {} characters ({} tokens) to stay within max_tokens={max_tokens}; call {} with ids=[\"{}\"] and a larger max_tokens to read it whole",
                m.id,
                kept,
                text.len(),
                m.tokens,
                read_name(h.options()),
                m.id
            ));
            used = max_tokens;
            continue;
        }
        left_out.push(m);
    }
    if !left_out.is_empty() {
        let rest = format!(
            "{} left out to stay within max_tokens={max_tokens}; {}",
            crate::plural(left_out.len(), "message", "messages"),
            how_to_read(&left_out, read_name(h.options()))
        );
        note = Some(match note {
            Some(n) => format!("{n}; {rest}"),
            None => rest,
        });
    }
    Ok(HistoryRead {
        messages,
        not_found,
        note,
    })
}

/// The name the model knows `read_history` by ([`CompactOptions::read_tool`](crate::compact::CompactOptions::read_tool)), for the
/// notes that say how to read more.
fn read_name(options: &CompactOptions) -> &str {
    options.read_tool.as_deref().unwrap_or(tools::READ_HISTORY)
}

/// The longest prefix of `text` (in bytes, on a character boundary) within `tokens`.
fn prefix_within(counter: &TokenCounter, text: &str, tokens: usize) -> usize {
    let boundaries: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain([text.len()])
        .collect();
    let (mut lo, mut hi) = (0, boundaries.len() - 1);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if counter.count_text(&text[..boundaries[mid]]) <= tokens {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    boundaries[lo]
}

#[cfg(test)]
mod tests;
