//! A session's timeline: one short dated line per part of its history, built at sleep time
//! and kept with its sources, so that a question about a topic finds the parts that carried it
//! without ranking the whole log, and a reader sees the path of a topic through time.
//!
//! A part starts where the history starts anew: at a heading (a short system message after
//! the first turns: in a chat log, a session's date), after a pause of [`PAUSE_MS`], or at the
//! first user turn once a part holds [`PART_MESSAGES`] messages (a long working run reads as
//! several steps). Each part's line is extractive by default (its most telling sentences and
//! the words it dwells on, rarest among the parts first), or written by the summarizer when one is
//! configured; either way it names the messages it was drawn from, and the part's first and
//! last message ids are what `read_history` takes to read it whole.
//!
//! The lines are what `search_history` lists beside its hits, what the inspector shows and
//! what `GET /v1/sessions/{id}/timeline` and `engram session timeline` return.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::compact::summarize::{Summarizer, SummaryRequest};
use crate::message::{Message, Role};
use crate::retrieval::{self, is_heading_message};
use crate::session::LoggedMessage;
use crate::timestamp::{Timestamp, format_minute, format_time};

/// A pause this long between two messages starts a new part (a new sitting of the agent).
pub const PAUSE_MS: i64 = 30 * 60 * 1000;

/// A part this long ends before its next user turn.
pub const PART_MESSAGES: usize = 40;

/// The sentences an extractive line quotes.
const LINE_SENTENCES: usize = 2;

/// The words each quoted sentence keeps.
const QUOTED_SENTENCE_WORDS: usize = 24;

/// The words a part dwells on, listed after its sentences.
const TOPIC_WORDS: usize = 8;

/// The most words a part is found by in a search of the timeline, besides those of its line
/// (every word it says at least twice, in a part of usual length). Measured on LoCoMo's
/// whole-history questions: the 40 it dwells on most reached fewer of the sessions the
/// evidence is in, and every word it says (once too) fewer again.
const SEARCH_TERMS: usize = 200;

/// How often a part uses a word before the word reads as what the part dwells on (once is in
/// passing).
const TOPIC_USES: f64 = 2.0;

/// The most tokens a summarizer's line may have.
const LINE_TOKENS: usize = 80;

/// The most parts a search of the timeline lists when it names no limit.
pub const DEFAULT_SEARCH_PARTS: usize = 10;

/// How `written_by` names an extractive line.
pub const EXTRACTIVE: &str = "extractive";

/// The instructions a summarizer is given for one part.
pub const TIMELINE_PROMPT: &str = "In one line of at most 30 words, say what this part of a \
conversation covered: its topics, what was decided or done, and the facts stated, naming who \
said them. Write only the line.";

/// A session's timeline, as the store keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// The log's `next_seq` when it was built: messages before it are covered.
    pub built_to: u64,
    /// The session's epoch when it was built (a restore since then rebuilds it).
    pub epoch: u64,
    /// The parts, in log order.
    pub parts: Vec<TimelinePart>,
}

/// One part of the history and its line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimelinePart {
    /// The first message's id (`read_history`'s `from`).
    pub from_id: String,
    /// The last message's id (`read_history`'s `to`).
    pub to_id: String,
    /// The first message's position in the log.
    pub from_seq: u64,
    /// The last message's position in the log.
    pub to_seq: u64,
    /// When the first message was appended.
    pub from: Timestamp,
    /// When the last message was appended.
    pub to: Timestamp,
    /// The heading that opens the part (a chat log's session date), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heading: Option<String>,
    /// What the part covered.
    pub line: String,
    /// The words (stemmed) the part dwells on most, which a search finds it by besides its
    /// line: a short line cannot name every topic of a long part.
    #[serde(default)]
    pub terms: Vec<String>,
    /// The ids of the messages the line was drawn from (every message, for a summarizer's).
    pub sources: Vec<String>,
    /// `extractive`, or the summarizer's name.
    pub written_by: String,
}

impl TimelinePart {
    /// The part's date: its heading, else when it started (to the minute).
    pub fn date(&self) -> String {
        match &self.heading {
            Some(h) => h.clone(),
            None => format_minute(self.from),
        }
    }

    /// The part as one line of text: its date, then what it covered.
    pub fn render(&self) -> String {
        format!("{}: {}", self.date(), self.line)
    }
}

impl crate::stored::StoredJson for Timeline {
    const WHAT: &'static str = "a session timeline";
}

impl Timeline {
    /// The parts whose lines (with their headings) or search terms (the words each says at
    /// least twice, [`TimelinePart::terms`]) share words with `query`, best first, at most
    /// `limit`: each part's index with its score (BM25: comparable within one search).
    pub fn search(&self, query: &str, limit: usize) -> Vec<(usize, f64)> {
        let docs = self
            .parts
            .iter()
            .map(|p| {
                let mut words = retrieval::terms(&p.render());
                words.extend(p.terms.iter().cloned());
                words
            })
            .collect();
        let scores = retrieval::Bm25::new(docs).scores(&retrieval::terms(query));
        let mut hits: Vec<(usize, f64)> = scores
            .into_iter()
            .enumerate()
            .filter(|(_, s)| *s > 0.0)
            .collect();
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        hits.truncate(limit);
        hits
    }

    /// The parts [`Timeline::search`] finds, as JSON ([`part_json`] with the `score`).
    pub fn search_json(&self, query: &str, limit: usize) -> Vec<serde_json::Value> {
        self.search(query, limit)
            .into_iter()
            .map(|(i, score)| {
                let mut v = part_json(i, &self.parts[i]);
                v["score"] = serde_json::json!(score);
                v
            })
            .collect()
    }
}

/// One part as the fronts show it: its index and date beside its fields (its search terms
/// left out).
pub fn part_json(index: usize, part: &TimelinePart) -> serde_json::Value {
    let mut v = serde_json::to_value(part).unwrap_or(serde_json::Value::Null);
    // The search terms are for finding the part, not for reading it.
    if let Some(fields) = v.as_object_mut() {
        fields.remove("terms");
    }
    v["part"] = serde_json::json!(index);
    v["date"] = serde_json::json!(part.date());
    v["from"] = serde_json::json!(format_time(part.from));
    v["to"] = serde_json::json!(format_time(part.to));
    v
}

/// Where a session's timeline is kept. Deleting the session deletes it.
pub trait TimelineStore: Send + Sync {
    /// The session's timeline, if one was built.
    fn timeline(&self, session_id: &str) -> Result<Option<Timeline>, Error>;

    /// Replaces the session's timeline (`NotFound` when there is no such session).
    fn put_timeline(&self, session_id: &str, timeline: &Timeline) -> Result<(), Error>;
}

/// What building a timeline did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct TimelineBuilt {
    /// Parts in the timeline.
    pub parts: usize,
    /// Lines written now (the others were kept from the timeline before).
    pub written: usize,
    /// Lines the summarizer failed to write, written extractively instead.
    pub summarizer_failed: usize,
}

impl super::Session<'_> {
    /// The session's timeline as last built (at sleep time), if any.
    pub fn timeline(&self) -> Result<Option<Timeline>, Error> {
        self.store.timeline(&self.info.id)
    }

    /// The timeline as every front returns it: `{"session_id", "built_to", "parts"}`, each
    /// part as [`part_json`] gives it; with a `query`, only the parts whose lines carry it,
    /// best first, at most `limit` (default [`DEFAULT_SEARCH_PARTS`]), each with its `score`.
    /// Before sleep first builds it, `built_to` is null and there are no parts.
    pub fn timeline_document(
        &self,
        query: Option<&str>,
        limit: Option<usize>,
    ) -> Result<serde_json::Value, Error> {
        let limit = match limit {
            Some(0) => {
                return Err(Error::Rejected(
                    "`limit` must be positive: the most parts to list".into(),
                ));
            }
            Some(n) => n,
            None => DEFAULT_SEARCH_PARTS,
        };
        let query = query.map(str::trim).filter(|q| !q.is_empty());
        let timeline = self.timeline()?;
        let parts: Vec<serde_json::Value> = match (&timeline, query) {
            (None, _) => Vec::new(),
            (Some(t), Some(q)) => t.search_json(q, limit),
            (Some(t), None) => t
                .parts
                .iter()
                .enumerate()
                .map(|(i, p)| part_json(i, p))
                .collect(),
        };
        Ok(serde_json::json!({
            "session_id": self.info.id,
            "built_to": timeline.map(|t| t.built_to),
            "parts": parts,
        }))
    }

    /// Builds the session's timeline again when its history changed since the last one (new
    /// messages, or a restore), keeping the lines of unchanged parts: what sleep runs. The
    /// lines are written by the session's summarizer when it has one, and redacted as memory is.
    pub fn update_timeline(&self) -> Result<TimelineBuilt, Error> {
        let info = self
            .store
            .session(&self.info.id)?
            .ok_or_else(|| crate::session::store::no_session(&self.info.id))?;
        let previous = self.store.timeline(&info.id)?;
        if previous
            .as_ref()
            .is_some_and(|t| t.built_to == info.next_seq && t.epoch == info.epoch)
        {
            return Ok(TimelineBuilt {
                parts: previous.map_or(0, |t| t.parts.len()),
                ..TimelineBuilt::default()
            });
        }
        let log = self.log()?;
        let (timeline, built) = build(
            &log,
            info.next_seq,
            info.epoch,
            previous.as_ref(),
            self.options.summarizer.as_deref(),
            &|text| self.for_memory(text),
        );
        self.store.put_timeline(&info.id, &timeline)?;
        Ok(built)
    }
}

/// The parts of `log` (its active messages, in order), as index ranges.
pub fn parts(log: &[LoggedMessage]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..log.len() {
        let (before, m) = (&log[i - 1], &log[i]);
        // A heading opens a part unless the part so far is only system messages (a system
        // prompt before the first session's heading stays with it).
        let heading = is_heading_message(&m.message)
            && log[start..i].iter().any(|m| m.message.role != Role::System);
        let pause = m.created_at - before.created_at >= PAUSE_MS;
        let long = i - start >= PART_MESSAGES && m.message.role == Role::User;
        if heading || pause || long {
            out.push(start..i);
            start = i;
        }
    }
    if start < log.len() {
        out.push(start..log.len());
    }
    out
}

/// The timeline of `log` (the session's active messages) at `next_seq` and `epoch`. The lines
/// of `previous` whose parts are unchanged are kept; the others are written by `summarizer`
/// when given (extractively where it fails), else extractively. `clean` is applied to every
/// line written (the session's redaction).
pub fn build(
    log: &[LoggedMessage],
    next_seq: u64,
    epoch: u64,
    previous: Option<&Timeline>,
    summarizer: Option<&dyn Summarizer>,
    clean: &dyn Fn(String) -> String,
) -> (Timeline, TimelineBuilt) {
    let ranges = parts(log);
    let kept: HashMap<(u64, u64), &TimelinePart> = previous
        .map(|t| {
            t.parts
                .iter()
                .map(|p| ((p.from_seq, p.to_seq), p))
                .collect()
        })
        .unwrap_or_default();
    let rarity = Rarity::of(log, &ranges);
    let mut built = TimelineBuilt {
        parts: ranges.len(),
        ..TimelineBuilt::default()
    };
    let parts = ranges
        .iter()
        .map(|r| {
            let messages = &log[r.clone()];
            let (first, last) = (&messages[0], &messages[messages.len() - 1]);
            if let Some(p) = kept.get(&(first.seq, last.seq)) {
                return (*p).clone();
            }
            built.written += 1;
            let heading = messages
                .iter()
                .take_while(|m| m.message.role == Role::System)
                .map(|m| &m.message)
                .find(|m| is_heading_message(m))
                .map(|m| m.text().trim().trim_matches(['[', ']']).trim().to_owned());
            let dwells = Dwells::of(messages);
            let (line, sources, written_by) = match summarizer.map(|s| (s, summarized(s, messages)))
            {
                Some((s, Some(line))) => (
                    line,
                    messages.iter().map(|m| m.id.clone()).collect(),
                    s.name().to_owned(),
                ),
                failed => {
                    if failed.is_some() {
                        built.summarizer_failed += 1;
                    }
                    let (line, sources) = extractive(messages, &dwells, &rarity);
                    (line, sources, EXTRACTIVE.to_owned())
                }
            };
            TimelinePart {
                from_id: first.id.clone(),
                to_id: last.id.clone(),
                from_seq: first.seq,
                to_seq: last.seq,
                from: first.created_at,
                to: last.created_at,
                heading: heading.map(clean),
                line: clean(line),
                terms: dwells.search_terms(&rarity),
                sources,
                written_by,
            }
        })
        .collect();
    (
        Timeline {
            built_to: next_seq,
            epoch,
            parts,
        },
        built,
    )
}

/// The summarizer's line for a part, or `None` when it fails or writes nothing.
fn summarized(summarizer: &dyn Summarizer, messages: &[LoggedMessage]) -> Option<String> {
    let turns: Vec<&Message> = messages
        .iter()
        .map(|m| &m.message)
        .filter(|m| !is_heading_message(m))
        .collect();
    if turns.is_empty() {
        return None;
    }
    let line = summarizer
        .summarize(&SummaryRequest {
            messages: &turns,
            prompt: TIMELINE_PROMPT,
            focus: None,
            max_tokens: LINE_TOKENS,
            previous: None,
        })
        .ok()?;
    let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
    (!line.is_empty()).then_some(line)
}

/// How rare each word is among the parts (a word every part uses says nothing of one).
struct Rarity {
    idf: HashMap<String, f64>,
}

impl Rarity {
    fn of(log: &[LoggedMessage], ranges: &[std::ops::Range<usize>]) -> Rarity {
        let mut df: HashMap<String, usize> = HashMap::new();
        for r in ranges {
            let words: HashSet<String> = log[r.clone()]
                .iter()
                .filter(|m| said(&m.message))
                .flat_map(|m| retrieval::terms(&m.message.text()))
                .collect();
            for w in words {
                *df.entry(w).or_default() += 1;
            }
        }
        let n = ranges.len().max(1) as f64;
        Rarity {
            idf: df
                .into_iter()
                .map(|(w, d)| (w, (1.0 + n / d as f64).ln()))
                .collect(),
        }
    }

    fn of_word(&self, word: &str) -> f64 {
        self.idf.get(word).copied().unwrap_or(0.0)
    }
}

/// True for what a participant said: user and assistant text (not tool outputs, not headings).
fn said(m: &Message) -> bool {
    matches!(m.role, Role::User | Role::Assistant)
}

/// The words of a part with how much it dwells on each: how often it uses the word times how
/// rare the word is among the parts (a topic the history comes back to is rarer than a word
/// every part uses), and the word as first written.
struct Dwells {
    uses: HashMap<String, f64>,
    surface: HashMap<String, String>,
}

impl Dwells {
    fn of(messages: &[LoggedMessage]) -> Dwells {
        let mut uses: HashMap<String, f64> = HashMap::new();
        let mut surface: HashMap<String, String> = HashMap::new();
        for m in messages.iter().filter(|m| said(&m.message)) {
            let text = m.message.text();
            for word in text.split(|c: char| !c.is_alphanumeric()) {
                if let Some(stem) = retrieval::terms(word).into_iter().next() {
                    *uses.entry(stem.clone()).or_default() += 1.0;
                    surface.entry(stem).or_insert_with(|| word.to_lowercase());
                }
            }
        }
        Dwells { uses, surface }
    }

    /// The words said at least [`TOPIC_USES`] times, most dwelt on first, with their weights.
    fn topics(&self, rarity: &Rarity) -> Vec<(&String, f64)> {
        let mut topics: Vec<(&String, f64)> = self
            .uses
            .iter()
            .filter(|(_, n)| **n >= TOPIC_USES)
            .map(|(w, n)| (w, n * rarity.of_word(w)))
            .filter(|(_, weight)| *weight > 0.0)
            .collect();
        topics.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
        topics
    }

    /// The words a search of the timeline finds the part by: the [`SEARCH_TERMS`] it dwells on
    /// most, each as often as it is said up to four times (counted, they rank the parts better
    /// than listed once each).
    fn search_terms(&self, rarity: &Rarity) -> Vec<String> {
        self.topics(rarity)
            .into_iter()
            .take(SEARCH_TERMS)
            .flat_map(|(w, _)| {
                let n = self.uses.get(w).copied().unwrap_or(1.0).min(4.0) as usize;
                std::iter::repeat_n(w.clone(), n)
            })
            .collect()
    }
}

/// An extractive line for a part: its most telling sentences, in the order they were said,
/// each with its speaker, then the words it dwells on; and the ids of the messages quoted.
fn extractive(
    messages: &[LoggedMessage],
    dwells: &Dwells,
    rarity: &Rarity,
) -> (String, Vec<String>) {
    let weight = |w: &str| dwells.uses.get(w).copied().unwrap_or(0.0) * rarity.of_word(w);
    // Sentences, scored by the weight of their distinct words over the root of their number.
    let mut sentences: Vec<(usize, usize, f64, String)> = Vec::new();
    for (mi, m) in messages
        .iter()
        .enumerate()
        .filter(|(_, m)| said(&m.message))
    {
        let text = m.message.text();
        for (si, sentence) in retrieval::sentences(&text).enumerate() {
            let words: HashSet<String> = retrieval::terms(sentence).into_iter().collect();
            if words.len() < 3 {
                continue;
            }
            let score = words.iter().map(|w| weight(w)).sum::<f64>() / (words.len() as f64).sqrt();
            sentences.push((mi, si, score, sentence.to_owned()));
        }
    }
    let mut best: Vec<&(usize, usize, f64, String)> = Vec::new();
    let mut ranked: Vec<&(usize, usize, f64, String)> = sentences.iter().collect();
    ranked.sort_by(|a, b| b.2.total_cmp(&a.2).then((a.0, a.1).cmp(&(b.0, b.1))));
    for s in ranked {
        if best.len() == LINE_SENTENCES {
            break;
        }
        // One sentence per message, and no sentence twice (two greetings alike): the line
        // covers more of the part.
        if best
            .iter()
            .all(|b| b.0 != s.0 && !b.3.trim().eq_ignore_ascii_case(s.3.trim()))
        {
            best.push(s);
        }
    }
    best.sort_by_key(|s| (s.0, s.1));
    let quoted: Vec<String> = best
        .iter()
        .map(|(mi, _, _, sentence)| {
            let m = &messages[*mi].message;
            let who = m.name().unwrap_or(m.role.as_str());
            format!("{who}: {}", clip(sentence, QUOTED_SENTENCE_WORDS))
        })
        .collect();
    let topics: Vec<&str> = dwells
        .topics(rarity)
        .into_iter()
        .take(TOPIC_WORDS)
        .filter_map(|(w, _)| dwells.surface.get(w).map(String::as_str))
        .collect();
    let mut line = quoted.join(" · ");
    if !topics.is_empty() {
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&format!("({})", topics.join(", ")));
    }
    if line.is_empty() {
        line = "(no text)".to_owned();
    }
    let sources = best.iter().map(|s| messages[s.0].id.clone()).collect();
    (line, sources)
}

/// `text` cut to its first `words` words (with an ellipsis when cut).
fn clip(text: &str, words: usize) -> String {
    let all: Vec<&str> = text.split_whitespace().collect();
    if all.len() <= words {
        all.join(" ")
    } else {
        format!("{}…", all[..words].join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stored::StoredJson;

    fn logged(seq: u64, at: Timestamp, message: Message) -> LoggedMessage {
        LoggedMessage {
            seq,
            id: format!("m{seq}"),
            created_at: at,
            tokens: 1,
            message,
            abandoned: false,
        }
    }

    fn chat() -> Vec<LoggedMessage> {
        let (user, assistant, heading) = (Message::user, Message::assistant, Message::system);
        // The last turn comes an hour later, with no heading: a new sitting.
        const HOUR: Timestamp = 3_600_000;
        let turns = [
            (0, heading("[Session 1 - 8 May, 2023]")),
            (0, user("I made a pottery bowl at class yesterday.")),
            (0, assistant("A pottery bowl! What glaze is on the bowl?")),
            (0, user("A blue glaze. The kiln fired it overnight.")),
            (0, heading("[Session 2 - 25 May, 2023]")),
            (0, user("My sister is moving to Lisbon for a new job.")),
            (0, assistant("Lisbon is lovely. Will you visit her?")),
            (HOUR, user("Back again: the bowl cracked in the kiln.")),
        ];
        turns
            .into_iter()
            .enumerate()
            .map(|(i, (at, m))| logged(i as u64, at, m))
            .collect()
    }

    #[test]
    fn a_part_starts_at_a_heading_and_after_a_pause() {
        let log = chat();
        assert_eq!(parts(&log), vec![0..4, 4..7, 7..8]);
    }

    #[test]
    fn a_long_run_is_cut_before_a_user_turn() {
        let log: Vec<LoggedMessage> = (0..100)
            .map(|i| {
                let m = if i % 2 == 0 {
                    Message::user(format!("step {i}"))
                } else {
                    Message::assistant("done")
                };
                logged(i, 0, m)
            })
            .collect();
        let ranges = parts(&log);
        assert_eq!(ranges, vec![0..40, 40..80, 80..100]);
    }

    #[test]
    fn a_system_prompt_is_not_a_heading() {
        let long = "You are a careful coding agent. ".repeat(10);
        let log = vec![
            logged(0, 0, Message::system(long)),
            logged(1, 0, Message::user("Fix the build.")),
        ];
        let (t, _) = build(&log, 2, 0, None, None, &|s| s);
        assert_eq!(t.parts.len(), 1);
        assert_eq!(t.parts[0].heading, None);
    }

    #[test]
    fn a_one_line_system_prompt_is_not_the_first_parts_heading() {
        let mut log = vec![logged(
            0,
            0,
            Message::system("You are a helpful assistant."),
        )];
        log.extend(chat().into_iter().map(|mut m| {
            m.seq += 1;
            m.id = format!("m{}", m.seq);
            m
        }));
        assert_eq!(parts(&log), vec![0..5, 5..8, 8..9]);
        let (t, _) = build(&log, 9, 0, None, None, &|s| s);
        assert_eq!(
            t.parts[0].heading.as_deref(),
            Some("Session 1 - 8 May, 2023")
        );
        assert_eq!(
            t.parts[1].heading.as_deref(),
            Some("Session 2 - 25 May, 2023")
        );
        // Without a heading of its own, a part is dated by its first message, not by a prompt.
        let log = vec![
            logged(0, 0, Message::system("You are a helpful assistant.")),
            logged(1, 0, Message::user("Fix the build.")),
        ];
        let (t, _) = build(&log, 2, 0, None, None, &|s| s);
        assert_eq!(t.parts[0].heading, None);
    }

    #[test]
    fn a_line_quotes_no_sentence_twice() {
        let log: Vec<LoggedMessage> = [
            Message::user("Hey Mel! Good to see you again today!"),
            Message::assistant("Hey Caroline! Good to see you again today!"),
        ]
        .into_iter()
        .enumerate()
        .map(|(i, m)| logged(i as u64, 0, m))
        .collect();
        let (t, _) = build(&log, 2, 0, None, None, &|s| s);
        assert_eq!(
            t.parts[0].line.matches("Good to see you").count(),
            1,
            "{}",
            t.parts[0].line
        );
    }

    #[test]
    fn each_part_has_a_dated_line_with_its_sources() {
        let log = chat();
        let (t, built) = build(&log, 8, 0, None, None, &|s| s);
        assert_eq!(built.parts, 3);
        assert_eq!(built.written, 3);
        let first = &t.parts[0];
        assert_eq!(first.heading.as_deref(), Some("Session 1 - 8 May, 2023"));
        assert_eq!((first.from_id.as_str(), first.to_id.as_str()), ("m0", "m3"));
        assert!(first.line.contains("pottery"), "{}", first.line);
        assert!(!first.sources.is_empty());
        for id in &first.sources {
            let seq: u64 = id[1..].parse().expect("an id of the log");
            assert!((first.from_seq..=first.to_seq).contains(&seq));
        }
        assert!(t.parts[1].line.contains("Lisbon"), "{}", t.parts[1].line);
        assert_eq!(
            t.parts[1].render().split(':').next(),
            Some("Session 2 - 25 May, 2023")
        );
        // A part without a heading is dated by its first message.
        assert_eq!(t.parts[2].date(), "1970-01-01 01:00 UTC");
        assert_eq!(first.written_by, EXTRACTIVE);
    }

    #[test]
    fn the_search_finds_the_parts_of_a_topic_in_time_order_of_score() {
        let (t, _) = build(&chat(), 8, 0, None, None, &|s| s);
        let hits = t.search("what happened to the pottery bowl", 5);
        let seqs: Vec<u64> = hits.iter().map(|&(i, _)| t.parts[i].from_seq).collect();
        assert!(seqs.contains(&0) && seqs.contains(&7), "{seqs:?}");
        assert!(!seqs.contains(&4), "{seqs:?}");
        assert!(t.search("zebra", 5).is_empty());
    }

    #[test]
    fn a_part_is_found_by_the_words_it_dwells_on_which_its_json_leaves_out() {
        let (mut t, _) = build(&chat(), 8, 0, None, None, &|s| s);
        let pottery = retrieval::terms("pottery").remove(0);
        // Said twice in the first part, counted twice; the others never say it.
        assert_eq!(
            t.parts[0].terms.iter().filter(|w| **w == pottery).count(),
            2
        );
        assert!(!t.parts[2].terms.contains(&pottery));
        t.parts[1].line = "(nothing)".into();
        t.parts[1].terms = vec![retrieval::terms("zeppelin").remove(0)];
        assert_eq!(t.search("zeppelin", 5).first().map(|h| h.0), Some(1));
        assert!(part_json(1, &t.parts[1]).get("terms").is_none());
    }

    #[test]
    fn unchanged_parts_keep_their_lines_and_new_ones_are_written() {
        let mut log = chat();
        let (before, _) = build(&log, 8, 0, None, None, &|s| s);
        log.push(logged(
            8,
            3_600_000,
            Message::assistant("Sorry to hear the bowl cracked."),
        ));
        let mut edited = before.clone();
        edited.parts[0].line = "kept".into();
        let (after, built) = build(&log, 9, 0, Some(&edited), None, &|s| s);
        assert_eq!(built.written, 1, "only the grown last part");
        assert_eq!(after.parts[0].line, "kept");
        assert_eq!(after.parts[2].to_seq, 8);
    }

    /// A summarizer that writes how many turns it was given, or fails when `fails`.
    #[derive(Debug)]
    struct Lines {
        fails: bool,
    }
    impl Summarizer for Lines {
        fn name(&self) -> &str {
            "lines"
        }
        fn summarize(&self, r: &SummaryRequest<'_>) -> Result<String, Error> {
            assert_eq!(r.prompt, TIMELINE_PROMPT);
            assert!(r.messages.iter().all(|m| m.role != Role::System));
            if self.fails {
                return Err(Error::Summarizer {
                    summarizer: "lines".into(),
                    reason: "down".into(),
                });
            }
            Ok(format!("  {} turns\nabout things ", r.messages.len()))
        }
    }

    #[test]
    fn a_summarizer_writes_the_lines_and_a_failure_falls_back() {
        let (t, _) = build(&chat(), 8, 0, None, Some(&Lines { fails: false }), &|s| s);
        assert_eq!(t.parts[0].line, "3 turns about things");
        assert_eq!(t.parts[0].written_by, "lines");
        assert_eq!(t.parts[0].sources, vec!["m0", "m1", "m2", "m3"]);
        let (t, built) = build(&chat(), 8, 0, None, Some(&Lines { fails: true }), &|s| s);
        assert_eq!(built.summarizer_failed, 3);
        assert_eq!(t.parts[0].written_by, EXTRACTIVE);
    }

    #[test]
    fn every_line_is_cleaned() {
        let (t, _) = build(&chat(), 8, 0, None, None, &|s| s.replace("pottery", "[x]"));
        assert!(t.parts.iter().all(|p| !p.line.contains("pottery")));
    }

    #[test]
    fn a_timeline_reads_back_as_stored() {
        let (t, _) = build(&chat(), 8, 0, None, None, &|s| s);
        let back = Timeline::from_stored(&t.to_stored().expect("stores")).expect("reads");
        assert_eq!(back, t);
        assert!(Timeline::from_stored("{").is_err());
    }
}
