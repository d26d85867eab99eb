//! Recalling older messages that serve a query: BM25 over stemmed words (Porter2), the
//! speaker's name counted as part of the text and favoured when the query names it (and the
//! user's turns when a question to an assistant is put in the first person), replies
//! that inherit from the turn they answer, and a chat log's sessions lifting their matching
//! turns when the session is about the query's topic or its heading dates it to the time the
//! query names. With hybrid recall, similarity of meaning (of a unit's whole text and its best
//! sentence, [`similarities`]) is fused in ([`fuse`]), the sessions nearest the query in meaning
//! lift their units too ([`favour_sessions_by_meaning`]), and compaction merges that order with
//! the order by words alone by place ([`fuse_ranks`]).
//!
//! Plain BM25 misses "painted" for "paint", "Caroline's" for "Caroline" and "road trip" for
//! "roadtrip" (neighbouring words joined match a query's compound, [`terms_and_joined`]); chat
//! logs name the speaker outside the content (`name`), which is where "what did Caroline say"
//! finds its answer. All are cheap to fix and do not need a model.

use std::collections::{HashMap, HashSet};

use crate::embed::{EmbedError, Embedder, Stored, VectorStore, dot, embed_each};
use crate::message::Role;
use crate::words::{ASKED, ASKER, is_stopword, stem};

/// Lower-case words of `text`, stop words removed, stemmed ([`stem`]).
pub(crate) fn terms(text: &str) -> Vec<String> {
    terms_and_joined(text, |_| false).0
}

/// [`terms`], and in the same pass the neighbouring words of `text` joined into one term ("road
/// trip" as "roadtrip"), so that a query that writes a compound as one word ("roadtrip",
/// "bookstore") finds the text that writes it as two. Both words are letters only, with only
/// spaces between them ([`joins`]); both are topical (no stop word) unless a hyphen joins them,
/// as in "check-up" and "to-do", which a query writes "checkup" and "todo". `wanted(first)` is
/// asked before a pair is built (compaction, which knows the query, builds only the pairs some
/// query term starts with). The joined terms count as matches, not as words: they do not
/// lengthen a document for BM25.
pub(crate) fn terms_and_joined(
    text: &str,
    wanted: impl Fn(&str) -> bool,
) -> (Vec<String>, Vec<String>) {
    let mut terms = Vec::new();
    let mut joined = Vec::new();
    // The previous word if it is letters only: lower-cased, whether it is topical, and where
    // it ends in `text`.
    let mut previous: Option<(String, bool, usize)> = None;
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        // `split` yields slices of `text`: a word starts at its distance from the text's start.
        let start = word.as_ptr() as usize - text.as_ptr() as usize;
        let end = start + word.len();
        let word = word.to_lowercase();
        let topical = !is_stopword(&word);
        if topical {
            terms.push(stem(&word));
        }
        if !word.chars().all(char::is_alphabetic) {
            previous = None;
            continue;
        }
        if let Some((first, first_topical, first_end)) = &previous
            && joins(&text[*first_end..start], *first_topical && topical)
            && wanted(first)
        {
            joined.push(stem(&format!("{first}{word}")));
        }
        previous = Some((word, topical, end));
    }
    (terms, joined)
}

/// Whether two neighbouring words separated by `gap` form a compound: a hyphen joins any two,
/// a space joins two topical words, and punctuation ("a list, check it") ends the compound.
fn joins(gap: &str, both_topical: bool) -> bool {
    gap == "-" || (both_topical && gap.chars().all(char::is_whitespace))
}

/// The query's terms, each once (a word the query repeats counts once).
pub(crate) fn unique_terms(query: &[String]) -> Vec<&String> {
    let mut unique: Vec<&String> = query.iter().collect();
    unique.sort();
    unique.dedup();
    unique
}

pub(crate) use crate::words::bm25_weight;

/// BM25 over a set of documents (each a list of terms).
pub(crate) struct Bm25 {
    docs: Vec<HashMap<String, u32>>,
    lengths: Vec<usize>,
    df: HashMap<String, u32>,
    avg_len: f64,
}

impl Bm25 {
    pub(crate) fn new(documents: Vec<Vec<String>>) -> Self {
        let lengths = documents.iter().map(Vec::len).collect();
        Self::with_lengths(documents, lengths)
    }

    /// BM25 over `documents` whose lengths in words are `lengths` (a document's terms may
    /// hold more than its words: [`terms_and_joined`]).
    pub(crate) fn with_lengths(documents: Vec<Vec<String>>, lengths: Vec<usize>) -> Self {
        let mut df: HashMap<String, u32> = HashMap::new();
        let mut docs = Vec::with_capacity(documents.len());
        for doc in documents {
            let mut tf: HashMap<String, u32> = HashMap::new();
            for t in doc {
                *tf.entry(t).or_default() += 1;
            }
            for t in tf.keys() {
                *df.entry(t.clone()).or_default() += 1;
            }
            docs.push(tf);
        }
        let avg_len = if lengths.is_empty() {
            1.0
        } else {
            (lengths.iter().sum::<usize>() as f64 / lengths.len() as f64).max(1.0)
        };
        Bm25 {
            docs,
            lengths,
            df,
            avg_len,
        }
    }

    /// BM25 over groups of these documents (`group_of[i]` is document `i`'s, below `groups`),
    /// each group one document of all its members' words.
    pub(crate) fn grouped(&self, group_of: &[usize], groups: usize) -> Bm25 {
        let mut docs: Vec<HashMap<String, u32>> = vec![HashMap::new(); groups];
        let mut lengths = vec![0usize; groups];
        for ((tf, &len), &g) in self.docs.iter().zip(&self.lengths).zip(group_of) {
            lengths[g] += len;
            for (t, &f) in tf {
                *docs[g].entry(t.clone()).or_default() += f;
            }
        }
        let mut df: HashMap<String, u32> = HashMap::new();
        for tf in &docs {
            for t in tf.keys() {
                *df.entry(t.clone()).or_default() += 1;
            }
        }
        let avg_len = (lengths.iter().sum::<usize>() as f64 / groups.max(1) as f64).max(1.0);
        Bm25 {
            docs,
            lengths,
            df,
            avg_len,
        }
    }

    /// Each document's score for the query terms.
    pub(crate) fn scores(&self, query: &[String]) -> Vec<f64> {
        let n = self.docs.len() as f64;
        let unique = unique_terms(query);
        self.docs
            .iter()
            .zip(&self.lengths)
            .map(|(tf, &len)| {
                unique
                    .iter()
                    .map(|t| {
                        let Some(&f) = tf.get(*t) else { return 0.0 };
                        let df = f64::from(*self.df.get(*t).unwrap_or(&1));
                        bm25_weight(n, df, f64::from(f), len as f64, self.avg_len)
                    })
                    .sum()
            })
            .collect()
    }
}

/// What recall knows of each unit besides its words, in the log's order.
#[derive(Debug, Default)]
pub(crate) struct Traits<'a> {
    /// The unit asks something (a question mark).
    pub(crate) asks: Vec<bool>,
    /// It starts with a system message: in a chat log, a session's heading (its date, its
    /// topic), which starts the session.
    pub(crate) headings: Vec<bool>,
    /// Who speaks it (a message's `name`).
    pub(crate) speakers: Vec<Option<&'a str>>,
    /// It holds a user message.
    pub(crate) users: Vec<bool>,
    /// The speakers whose own words the query asks for (lower-case; from [`named_speakers`]
    /// when the query asks what someone said): the others' turns weigh less
    /// ([`favour_the_tellers`]). Empty for a search in the agent's own words.
    pub(crate) told_by: Vec<String>,
    /// Which way a topic runs from a good match in a chat between people ([`follow_threads`]).
    pub(crate) threads: Threads,
}

/// A ranking: unit indices with their scores, best first.
pub(crate) type Ranking = Vec<(usize, f64)>;

/// Recall's order of the units for `query`, the one rule that compaction and `search_history`
/// both follow. `lexical` is each unit's BM25 (its speaker's name counted as part of its text);
/// `sessions_bm25(session_of, count)` the BM25 of each whole session (called only when the
/// units hold more than one); `alike`, whether the two sides write alike (a chat between
/// people); `similar`, each unit's similarity of meaning to the query (hybrid recall).
///
/// The sessions about the query's topic and those its time dates lift their matching units; a
/// session's heading that shares the query's words leads to the session's first turn, as a
/// question leads to its answer; replies inherit from the turn they answer, and in a chat
/// between people a topic runs on into the turns after a good match (and back into the turns
/// that lead into it, when `traits` say so); a named speaker
/// and, in a question put to an assistant in the first person, the user weigh more. With
/// `similar`, the scores are fused with meaning and the sessions nearest the query in meaning
/// rise too, and the order by words alone comes second, for the caller to merge by place
/// ([`fuse_ranks`]). Units left at zero are left out.
pub(crate) fn order(
    mut lexical: Vec<f64>,
    sessions_bm25: impl FnOnce(&[usize], usize) -> Vec<f64>,
    traits: &Traits<'_>,
    query: &str,
    alike: bool,
    similar: Option<&[f32]>,
) -> (Ranking, Option<Ranking>) {
    let mut session = 0usize;
    let sessions: Vec<usize> = traits
        .headings
        .iter()
        .enumerate()
        .map(|(i, &heading)| {
            if i > 0 && heading {
                session += 1;
            }
            session
        })
        .collect();
    let mut names_a_time = false;
    if session > 0 {
        // Each session's heading score, read before the topical rise changes it.
        let mut dated = vec![0.0; session + 1];
        for (i, &heading) in traits.headings.iter().enumerate() {
            if heading {
                dated[sessions[i]] = lexical[i];
            }
        }
        // A heading that shares the query's words: the query names what a heading says
        // (in a chat log, the session's date).
        names_a_time = dated.iter().any(|&d| d > 0.0);
        let by_session = sessions_bm25(&sessions, session + 1);
        favour_topical_sessions(&mut lexical, &sessions, &by_session);
        favour_dated_sessions(&mut lexical, &sessions, &dated);
    }
    // A session's heading that shares the query's words leads to the session's first turn, as
    // a question leads to its answer: "what was John doing in August 2023?" is answered by the
    // turn after the heading dated 13 August, 2023 ("since we last chatted, I'm volunteering as
    // a mentor"). By words only: a heading's similarity of meaning says nothing.
    let asks: Vec<bool> = traits
        .asks
        .iter()
        .zip(&traits.headings)
        .zip(&lexical)
        .map(|((&asks, &heading), &score)| asks || (heading && score > 0.0))
        .collect();
    let mut words_only: Option<Vec<f64>> = None;
    if let Some(similar) = similar {
        words_only = Some(lexical.clone());
        lexical = fuse(&lexical, similar, MEANING_MERGED);
        // A question that names a session's time is answered in the sessions of that time (the
        // dated rise above); sessions lifted by their meaning would crowd them out.
        if session > 0 && !names_a_time {
            favour_sessions_by_meaning(&mut lexical, &sessions, &traits.headings, similar);
        }
    }
    let order_of = |matches: &[f64]| {
        let mut scores = with_neighbours(matches, &asks, alike);
        if alike {
            follow_threads(
                &mut scores,
                matches,
                &sessions,
                &traits.headings,
                traits.threads,
            );
        }
        favour_named_speakers(&mut scores, &traits.speakers, query);
        favour_the_tellers(&mut scores, &traits.speakers, &traits.told_by);
        if !alike {
            favour_the_user(&mut scores, &traits.users, query);
        }
        let mut order: Ranking = (0..scores.len())
            .filter(|&i| scores[i] > 0.0)
            .map(|i| (i, scores[i]))
            .collect();
        order.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
        order
    };
    (order_of(&lexical), words_only.map(|w| order_of(&w)))
}

/// The share of the next turn's score a unit gets ([`with_neighbours`]) in an assistant
/// conversation or an agent's run: the turn a matching reply answers. Below it LongMemEval-S
/// loses multi-session evidence.
const FROM_NEXT: f64 = 0.3;

/// The same share in a chat between people (sides that write [`alike`]), where a matching turn
/// is as often a reaction to the turn before as an answer to it. Measured on LoCoMo at 0, 0.1,
/// 0.15, 0.2 and 0.3: from 0.1 to 0.2 open-domain questions keep more (0.591 -> 0.602 at 2,048)
/// and at 0.2 no category falls by more than 0.001 (docs/benchmarks-history.md, issue 29).
const FROM_NEXT_ALIKE: f64 = 0.2;

/// Conversations answer in the next turn: "what did you take away from the book?" matches the
/// query, "it taught me self-acceptance" holds the answer without sharing a word with it. A unit
/// that follows a question (`asks`; compaction counts a session heading that shares the query's
/// words as one, since the session's first turn answers it) gets a share of its score; every
/// unit gets a smaller share of the next one's (the turn a matching reply answers), smaller
/// still in a chat between people (`alike`, [`FROM_NEXT_ALIKE`]).
pub(crate) fn with_neighbours(scores: &[f64], asks: &[bool], alike: bool) -> Vec<f64> {
    const FROM_QUESTION: f64 = 0.6;
    let from_next = if alike { FROM_NEXT_ALIKE } else { FROM_NEXT };
    (0..scores.len())
        .map(|i| {
            let previous = if i > 0 && asks[i - 1] {
                scores[i - 1]
            } else {
                0.0
            };
            let next = scores.get(i + 1).copied().unwrap_or(0.0);
            scores[i] + FROM_QUESTION * previous + from_next * next
        })
        .collect()
}

/// A question about what someone said ("what has Caroline told me about pride?",
/// [`crate::words::asks_what_was_said`]) is answered in that speaker's own turns; the other
/// side's turns that name them only address them ("Thanks, Caroline!") and say nothing of what
/// they said, yet a short one matches the name better than a long answer. The searchable words
/// (`terms`) of a unit spoken by `speaker` lose the words of the other speakers the question
/// names (`told_by`, from [`named_speakers`]). Compaction's recall only: `search_history`
/// searches the agent's own words as written. Measured on LoCoMo and its whole-history
/// questions: the summaries of what one speaker said rise from 0.79 to 0.80 at 2,048 and from
/// 0.88 to 0.90 at 4,096, the order of what came up from 0.95 to 0.97 at 2,048, and LoCoMo's
/// own questions keep their figures (docs/benchmarks-history.md). Applied to every question
/// that names a speaker, it cost LoCoMo's open-domain questions 0.04.
pub(crate) fn leave_out_addressed(
    terms: &mut Vec<String>,
    speaker: Option<&str>,
    told_by: &[(String, String)],
) {
    if told_by.is_empty() {
        return;
    }
    let Some(speaker) = speaker.map(str::to_lowercase) else {
        return;
    };
    for (name, word) in told_by {
        if speaker != *name {
            terms.retain(|t| t != word);
        }
    }
}

/// The speakers (`names`, as the messages give them) that `query` names as a word, each with
/// its searchable word ([`terms`]), lower-case.
pub(crate) fn named_speakers<'a>(
    query: &str,
    names: impl IntoIterator<Item = &'a str>,
) -> Vec<(String, String)> {
    let words = query_words(query);
    let mut named: Vec<(String, String)> = Vec::new();
    for name in names {
        let name = name.to_lowercase();
        if words.contains(&name)
            && !named.iter().any(|(n, _)| *n == name)
            && let Some(word) = terms(&name).into_iter().next()
        {
            named.push((name, word));
        }
    }
    named
}

/// The share of a turn's score that the turn after it gets in a chat between people
/// ([`follow_threads`]), and again the one after that. Measured on LoCoMo and its whole-history
/// questions at 0.4, 0.5 and 0.6 (with [`THREAD_START`] at 0.3, 0.5 and 0.7): 0.4 lifted the
/// whole-history summaries and LoCoMo's single-hop and open-domain questions most, while 0.5
/// and more cost open-domain questions at 2,048 (docs/benchmarks-history.md). A thread that
/// also runs back ([`Threads::BothWays`]) takes the same share: measured back at 0.3, 0.4, 0.5
/// and 0.7, the summaries rose at each, most between 0.4 and 0.5 (docs/benchmarks.md).
const THREAD: f64 = 0.4;

/// How well a turn must match, as a share of the best match, to start a thread: a word said in
/// passing does not make the turns after it about the topic.
const THREAD_START: f64 = 0.5;

/// Where a thread ends ([`follow_threads`]): once its share falls below this share of the best
/// match, seven turns after a best match. Without an end, a thread in a log without sessions
/// reached every later turn with a share too small to rank it above any match but large enough
/// to recall it before nothing: the turns after a match filled what recall had left, where a
/// match too long to fit whole could have been cut to fit ([`super::excerpt`]). Measured on the
/// dev data at 0.01 and 0.001: each costs one multi-hop evidence turn of LoCoMo at 4,096
/// (0.768 -> 0.767) and moves nothing else by words alone, but with hybrid recall 0.01 cost
/// LoCoMo's open-domain questions at 2,048 (0.673 -> 0.664), and 0.001 nothing: hybrid recall
/// merges the rankings by place, and a turn deep in the thread still holds one.
const THREAD_END: f64 = 0.001;

/// Which way a topic runs from a good match ([`follow_threads`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Threads {
    /// Into the turns after it.
    #[default]
    Forward,
    /// Into the turns after it and the turns that lead into it.
    BothWays,
}

/// In a chat between people a topic runs over several short turns: one says "this pride parade
/// I went to", the other asks "did you join in?", and the answer ("yes, it was amazing, I felt
/// so accepted") shares no word with the question about the parade. Each turn after a good
/// match (at least [`THREAD_START`] of the best one's `matches`) gets [`THREAD`] of its score,
/// fading by the same share turn by turn, until the session ends (`session_of`, or a heading
/// in `headings`) or the share is spent ([`THREAD_END`]). Assistant conversations are left
/// alone: one long reply covers a topic there, and the lift cost LongMemEval's multi-session
/// questions.
///
/// [`Threads::BothWays`] runs the same thread back into the turns that lead into the match, for
/// a question about what someone said that lists nothing ("summarise everything Evan told me
/// about stress"; compaction decides): a speaker leads into a topic before naming it
/// ("something happened two weeks ago!" comes two turns before "it was so stressful"), and a
/// summary of what they said needs the lead-in as much as the reply. A question after one fact
/// or a few listed ones does not: for it the turns before each match crowd out other matches
/// (run both ways in every question, it cost LoCoMo's open-domain questions 0.031 at 2,048 and
/// the whole-history order questions 0.020; in an order question whose things say "mentions",
/// hybrid recall lost one thing's turn; docs/benchmarks.md).
pub(crate) fn follow_threads(
    scores: &mut [f64],
    matches: &[f64],
    session_of: &[usize],
    headings: &[bool],
    ways: Threads,
) {
    let best = matches.iter().copied().fold(0.0, f64::max);
    // `from` and `to` are next to each other in one stretch: the same session, not across a
    // heading, and `to` is a turn, not a heading.
    let joined = |from: usize, to: usize| {
        session_of[from] == session_of[to] && !headings[from.max(to)] && !headings[to]
    };
    let n = scores.len();
    thread(scores, matches, best, (1..n).map(|i| (i - 1, i)), joined);
    if ways == Threads::BothWays {
        let back = (0..n.saturating_sub(1)).rev().map(|i| (i + 1, i));
        thread(scores, matches, best, back, joined);
    }
}

/// One direction of [`follow_threads`]: each step `(from, to)` passes on [`THREAD`] of a good
/// match at `from` (or of the thread already running, whichever is more) to `to`.
fn thread(
    scores: &mut [f64],
    matches: &[f64],
    best: f64,
    steps: impl Iterator<Item = (usize, usize)>,
    joined: impl Fn(usize, usize) -> bool,
) {
    let mut flow = 0.0;
    for (from, to) in steps {
        if !joined(from, to) {
            flow = 0.0;
            continue;
        }
        let start = if matches[from] >= THREAD_START * best {
            matches[from]
        } else {
            0.0
        };
        flow = THREAD * start.max(flow);
        if flow < THREAD_END * best {
            flow = 0.0;
        }
        scores[to] += flow;
    }
}

/// Appends the text `message` is embedded by: the speaker's name, then its searchable lines
/// ([`super::salient::message_lines_text`]), then a newline. Compaction (a unit's messages in
/// turn) and `search_history` (one message) embed this same text, so a message's vector is
/// computed once and found again in the store's cache by either.
pub(crate) fn push_meaning_text(message: &crate::Message, text: &mut String) {
    push_named_lines(
        message.name(),
        &super::salient::message_lines_text(message),
        text,
    );
}

/// [`push_meaning_text`] of a message whose speaker is `name` and searchable lines `lines`.
fn push_named_lines(name: Option<&str>, lines: &str, text: &mut String) {
    if let Some(name) = name {
        text.push_str(name);
        text.push(' ');
    }
    text.push_str(lines);
    text.push('\n');
}

/// What a unit of messages is embedded by: its whole text ([`push_meaning_text`]) and its
/// sentences, each on its own ([`Meaning::push`]).
#[derive(Debug, Default)]
pub(crate) struct Meaning {
    pub(crate) text: String,
    sentences: Vec<String>,
}

/// The sentences of one message embedded on their own, the first this many: a tool's output of
/// thousands of lines is not embedded line by line. On the dev data nine in ten messages have
/// at most 25.
const MAX_SENTENCES: usize = 32;

/// A sentence shorter than this many words, its speaker's name counted ("John Wow!", "Thanks
/// again."), says nothing on its own. Measured on LoCoMo against three words without the name
/// (single-hop and temporal questions lost half a point at 2,048) and two.
const SENTENCE_WORDS: usize = 3;

impl Meaning {
    /// Adds `message`: its text as [`push_meaning_text`] writes it, and its sentences, each led
    /// by the speaker's name as the whole text is. A sentence ends at each line's end and after
    /// each run of `.`, `!` or `?` (and the quotes or brackets that close it) followed by a
    /// space: a dot inside a path, a name or a number (`main.py`, `3.5`, `e.g.,`) ends none.
    pub(crate) fn push(&mut self, message: &crate::Message) {
        let lines = super::salient::message_lines_text(message);
        push_named_lines(message.name(), &lines, &mut self.text);
        self.push_sentences(&lines, message.name().unwrap_or_default());
    }

    /// A memory entry's: its `content` whole (embedded as written, so that a vector kept before
    /// sentences were embedded is found again), and its sentences.
    pub(crate) fn of_entry(content: &str) -> Self {
        let mut meaning = Meaning {
            text: content.to_owned(),
            ..Meaning::default()
        };
        meaning.push_sentences(content, "");
        meaning
    }

    /// The texts this unit is embedded by ([`similarities`]): its whole text, then its sentences
    /// when it has more than one (a single sentence says what the whole text says).
    pub(crate) fn texts(&self) -> impl Iterator<Item = &str> {
        let split = if self.sentences.len() > 1 {
            &self.sentences[..]
        } else {
            &[]
        };
        std::iter::once(self.text.as_str()).chain(split.iter().map(String::as_str))
    }

    /// Adds the sentences of one message's `lines` ([`sentences`]), each led by `name` unless it
    /// is empty.
    fn push_sentences(&mut self, lines: &str, name: &str) {
        let name_words = name.split_whitespace().count();
        let said = sentences(lines)
            .filter(|s| name_words + s.split_whitespace().count() >= SENTENCE_WORDS)
            .take(MAX_SENTENCES);
        for sentence in said {
            self.sentences.push(if name.is_empty() {
                sentence.to_owned()
            } else {
                format!("{name} {sentence}")
            });
        }
    }
}

/// The sentences of `text`, trimmed, blank ones left out: one ends at each line's end and where
/// [`sentence_end`] ends one. The one way recall, its excerpts and a session's timeline cut text
/// into sentences.
pub(crate) fn sentences(text: &str) -> impl Iterator<Item = &str> {
    text.lines().flat_map(line_sentences)
}

/// The sentences of one `line` ([`sentences`]).
pub(crate) fn line_sentences(line: &str) -> impl Iterator<Item = &str> {
    let mut rest = line;
    std::iter::from_fn(move || {
        while !rest.is_empty() {
            let end = sentence_end(rest);
            let sentence = rest[..end].trim();
            rest = &rest[end..];
            if !sentence.is_empty() {
                return Some(sentence);
            }
        }
        None
    })
}

/// Where the first sentence of `line` ends: after the first run of `.`, `!` or `?` (with the
/// quotes and brackets that close it) that a space or the line's end follows, else at the
/// line's end.
fn sentence_end(line: &str) -> usize {
    let terminal = |c: char| matches!(c, '.' | '!' | '?');
    let closing =
        |c: char| terminal(c) || matches!(c, '"' | '\'' | ')' | ']' | '\u{201d}' | '\u{2019}');
    let mut from = 0;
    while let Some(i) = line[from..].find(terminal) {
        let run = from + i;
        let end = line[run..]
            .find(|c: char| !closing(c))
            .map_or(line.len(), |j| run + j);
        if line[end..].chars().next().is_none_or(char::is_whitespace) {
            return end;
        }
        from = end;
    }
    line.len()
}

/// The share of a unit's best sentence in its similarity of meaning ([`similarities`]); the
/// whole text has the rest. Measured on LoCoMo at 0.35, 0.5 and 0.65 with the best sentence
/// alone (1) and the larger of the two (docs/benchmarks-history.md, issue 29): 0.65 kept most at both
/// budgets, alone or the larger one lost multi-hop questions at 2,048.
const BEST_SENTENCE: f32 = 0.65;

/// Each unit's similarity of meaning to `query`, by `embedder`: its whole text's cosine
/// similarity mixed with its best sentence's ([`BEST_SENTENCE`]), or the whole text's alone
/// when it has fewer than two sentences. A turn that names what the query asks for in passing
/// ("I'm off to do some taekwondo!" inside a turn about the weekend, for "what martial arts
/// has John done?") is near the query by that sentence while its whole text is not. The query
/// is read as asked and without the names of `speakers` ([`query_vectors`]). The vectors of the
/// texts and sentences are kept in `vectors` when given (and read from there when kept), the
/// query's never are.
pub(crate) fn similarities(
    embedder: &dyn Embedder,
    vectors: Option<&dyn VectorStore>,
    query: &str,
    speakers: &Speakers,
    units: &[Meaning],
) -> Result<Vec<f32>, EmbedError> {
    let readings = query_vectors(embedder, query, speakers)?;
    meaning_similarities(embedder, vectors, &readings, units)
}

/// The words of the names of a conversation's speakers (the `name` of its user and assistant
/// messages), lower-case.
#[derive(Debug, Default)]
pub(crate) struct Speakers(HashSet<String>);

impl Speakers {
    /// Adds the speaker of `message`, if it is a user's or an assistant's and has a name (a
    /// tool result's `name` is its tool's, not a speaker's).
    pub(crate) fn add(&mut self, message: &crate::Message) {
        if matches!(message.role, Role::User | Role::Assistant)
            && let Some(name) = message.name()
        {
            self.0
                .extend(name.split_whitespace().map(str::to_lowercase));
        }
    }

    /// `query` without the words that name a speaker ("Melanie", "Melanie's"), or `None` when
    /// it names none, or nothing else.
    fn left_out_of(&self, query: &str) -> Option<String> {
        if self.0.is_empty() {
            return None;
        }
        let names_one = |word: &str| {
            let core = word
                .trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase();
            let core = ["'s", "\u{2019}s"]
                .iter()
                .find_map(|s| core.strip_suffix(s))
                .unwrap_or(&core);
            self.0.contains(core)
        };
        let words: Vec<&str> = query.split_whitespace().collect();
        let rest: Vec<&str> = words.iter().copied().filter(|w| !names_one(w)).collect();
        (rest.len() < words.len() && !rest.is_empty()).then(|| rest.join(" "))
    }
}

/// The query's vectors for recall among the turns of `speakers`: as asked, and without the
/// speakers' names when it names one ([`Speakers::left_out_of`]); a unit's similarity is the mean
/// of its similarities to the two ([`meaning_similarities`]). A name in a short question weighs
/// much in its vector, and it is near every turn its speaker says or that is said to them
/// ("Thanks, Melanie!"), while the words already find the named speaker's turns
/// ([`favour_named_speakers`]): without it, "what activities does Melanie partake in?" is near
/// "I just signed up for a pottery class". Read as asked too, so that the speaker still counts.
/// Measured on LoCoMo with the name left out alone (temporal questions lost 0.015 at 2,048), with
/// the mean of the two vectors (0.012) and with the mean of the similarities, which kept every
/// category at least where it was (docs/benchmarks-history.md, issue 29).
pub(crate) fn query_vectors(
    embedder: &dyn Embedder,
    query: &str,
    speakers: &Speakers,
) -> Result<Vec<Vec<f32>>, EmbedError> {
    let unnamed = speakers.left_out_of(query);
    let texts: Vec<&str> = std::iter::once(query).chain(unnamed.as_deref()).collect();
    embed_each(embedder, &texts)
}

/// [`similarities`] against a query already embedded: its `readings` ([`query_vectors`]), each
/// unit's similarity the mean of its similarities to each reading (memory search reads its
/// entries page by page and embeds the query once).
pub(crate) fn meaning_similarities(
    embedder: &dyn Embedder,
    vectors: Option<&dyn VectorStore>,
    readings: &[Vec<f32>],
    units: &[Meaning],
) -> Result<Vec<f32>, EmbedError> {
    let embedded = unit_vectors(embedder, vectors, units)?;
    Ok(similarities_to(readings, units, &embedded))
}

/// The vectors of each unit's whole text and then its sentences ([`Meaning::texts`]), all units
/// in turn, kept in `vectors` when given (and read from there when kept): what
/// [`similarities_to`] compares a query with, embedded once for every query asked of the units.
pub(crate) fn unit_vectors(
    embedder: &dyn Embedder,
    vectors: Option<&dyn VectorStore>,
    units: &[Meaning],
) -> Result<Vec<Vec<f32>>, EmbedError> {
    let texts: Vec<&str> = units.iter().flat_map(Meaning::texts).collect();
    match vectors {
        Some(vectors) => embed_each(&Stored::new(embedder, vectors), &texts),
        None => embed_each(embedder, &texts),
    }
}

/// [`meaning_similarities`] from the units' vectors already made (`embedded`, by
/// [`unit_vectors`] of the same `units`).
pub(crate) fn similarities_to(
    readings: &[Vec<f32>],
    units: &[Meaning],
    embedded: &[Vec<f32>],
) -> Vec<f32> {
    let mut rest = embedded;
    units
        .iter()
        .map(|u| {
            // The unit's whole text, then its sentences (`Meaning::texts`).
            let (own, after) = rest.split_at(u.texts().count());
            rest = after;
            let of = |q: &[f32]| {
                let whole = dot(q, &own[0]);
                match own[1..].iter().map(|s| dot(q, s)).reduce(f32::max) {
                    None => whole,
                    Some(best) => (1.0 - BEST_SENTENCE) * whole + BEST_SENTENCE * best,
                }
            };
            let sum: f32 = readings.iter().map(|q| of(q)).sum();
            sum / readings.len().max(1) as f32
        })
        .collect()
}

/// The share of similarity of meaning in hybrid search's score (BM25 has the rest) where the
/// fused ranking stands alone (memory search). Measured on the dev data
/// between 0.2 and 0.5 with compaction's ranking standing alone: more helps open-domain and
/// multi-hop questions and costs single-session and temporal ones; at 0.35 the first gain much
/// and the second lose little.
pub(crate) const MEANING: f64 = 0.35;

/// The share of similarity of meaning in recall's fused ranking ([`order`]), which is merged with
/// the order by words alone ([`fuse_ranks`]): the merge keeps what words rank inside the budget
/// in reach, so meaning can weigh more in its half. Measured on the dev data at 0.35, 0.42, 0.5,
/// 0.55 and 0.65: at 0.5 no category of LoCoMo or LongMemEval is more than a fraction of one
/// question below 0.35, and none is below recall by words alone; above it, single-hop and
/// temporal questions started to lose. Measured again at 0.45, 0.5, 0.55 and 0.6 once a unit's
/// best sentence counted ([`BEST_SENTENCE`]) and the merge's depth fell to a quarter
/// ([`FUSE_DEPTH`]): 0.55 kept most of LoCoMo's multi-hop, open-domain and temporal evidence.
pub(crate) const MEANING_MERGED: f64 = 0.55;

/// BM25 and similarity of meaning in one score: each scaled to its best unit, the similarity
/// counted only above the average (most units of a conversation are about something else), and
/// mixed with `meaning` the similarity's share ([`MEANING`], [`MEANING_MERGED`]). A unit that
/// shares no word with the query can now be recalled when it means the same; the scores stay
/// proportional, as the neighbours' shares and the order by value per cost need.
pub(crate) fn fuse(lexical: &[f64], similar: &[f32], meaning: f64) -> Vec<f64> {
    let best = lexical.iter().copied().fold(0.0, f64::max);
    let similar: Vec<f64> = similar.iter().map(|&s| f64::from(s)).collect();
    lexical
        .iter()
        .zip(above_average(&similar))
        .map(|(&l, s)| {
            let l = if best > 0.0 { l / best } else { 0.0 };
            (1.0 - meaning) * l + meaning * s
        })
        .collect()
}

/// Similarities counted above their average and scaled to the highest: 1 for the nearest, 0 for
/// the average and below. Most of a conversation is about something else, so only what stands
/// out from it counts.
fn above_average(similar: &[f64]) -> Vec<f64> {
    let n = similar.len().max(1) as f64;
    let mean = similar.iter().sum::<f64>() / n;
    let top = similar.iter().copied().fold(f64::MIN, f64::max);
    let spread = (top - mean).max(1e-9);
    similar
        .iter()
        .map(|&s| ((s - mean) / spread).max(0.0))
        .collect()
}

/// The share of the best unit's score that the session most about the query adds to each of
/// its matching units. Measured on the dev data at 0.15, 0.3 and 0.5: 0.3 gained most.
const TOPICAL_SESSION: f64 = 0.3;

/// A question's evidence sits in the session about its topic: of the units that share a word
/// with the query, those in a session whose whole text matches it well rise, by
/// [`TOPICAL_SESSION`] of the best unit's score times their session's BM25 relative to the
/// best session's. A turn that shares one common word with the question ("what did she
/// paint?") and sits in the session about painting now outranks the same word in small talk.
/// Units that match nothing stay at zero: a session is not recalled whole.
pub(crate) fn favour_topical_sessions(scores: &mut [f64], session_of: &[usize], sessions: &[f64]) {
    let best_session = sessions.iter().copied().fold(0.0, f64::max);
    if best_session <= 0.0 {
        return;
    }
    let weights: Vec<f64> = sessions.iter().map(|s| s / best_session).collect();
    lift_sessions(scores, session_of, &weights, TOPICAL_SESSION);
}

/// Each unit that matches the query (a score above zero) rises by `share` of the best unit's
/// score times its session's weight (0 to 1). Units that match nothing stay at zero: a session
/// is not recalled whole.
fn lift_sessions(scores: &mut [f64], session_of: &[usize], weights: &[f64], share: f64) {
    let best = scores.iter().copied().fold(0.0, f64::max);
    for (score, &s) in scores.iter_mut().zip(session_of) {
        if *score > 0.0 {
            *score += share * best * weights[s];
        }
    }
}

/// The share of the best unit's fused score that the sessions nearest the query in meaning add
/// to their units. Measured on the dev data at 0.05, 0.1, 0.15 and 0.3 (docs/benchmarks-history.md,
/// issue 29).
const SESSION_MEANING: f64 = 0.1;

/// Hybrid recall's topical rise: a session whose turns are, on average, near the query in
/// meaning is about its topic even where no turn shares its words ("what hobbies does Evan
/// pursue?" and a session about his painting). Each session's weight is its turns' mean
/// similarity (`similar`, the units that are not a session's heading, `headings`), counted above
/// the average session's and scaled to the nearest one's, as [`fuse`] counts a unit's; the units
/// of the fused ranking that match at all (a score above zero) rise by [`SESSION_MEANING`] of the
/// best unit's score times their session's weight. Sessions without turns weigh nothing. The
/// caller leaves it out when the query names a time, whose sessions the dated rise
/// ([`favour_dated_sessions`]) lifts.
pub(crate) fn favour_sessions_by_meaning(
    scores: &mut [f64],
    session_of: &[usize],
    headings: &[bool],
    similar: &[f32],
) {
    let count = session_of.iter().max().map_or(0, |&s| s + 1);
    let mut sum = vec![0.0; count];
    let mut turns = vec![0usize; count];
    for ((&s, &heading), &similarity) in session_of.iter().zip(headings).zip(similar) {
        if !heading {
            sum[s] += f64::from(similarity);
            turns[s] += 1;
        }
    }
    let means: Vec<f64> = sum
        .iter()
        .zip(&turns)
        .filter(|&(_, &n)| n > 0)
        .map(|(&sum, &n)| sum / n as f64)
        .collect();
    if means.is_empty() {
        return;
    }
    let mut scaled = above_average(&means).into_iter();
    let weights: Vec<f64> = turns
        .iter()
        .map(|&n| {
            if n > 0 {
                scaled.next().unwrap_or(0.0)
            } else {
                0.0
            }
        })
        .collect();
    lift_sessions(scores, session_of, &weights, SESSION_MEANING);
}

/// The share of the best unit's score that a session whose heading matches the query adds to
/// each of its matching units. Measured on the dev data at 0.15, 0.3 and 0.5: 0.3 gained most.
const DATED_SESSION: f64 = 0.3;

/// A question that names a time ("what injury did Evan suffer in August 2023?") is answered in
/// the sessions of that time, whose headings carry the date ("[Session 9 - 10:18 am on 27
/// August, 2023]"), while the answer ("I twisted my knee") does not repeat it. `headings` holds
/// each session's heading score (zero for a session without one). A session whose heading
/// matches at least half as well as the best heading is dated to the query, and so is the
/// session right after the last of a run of them: what happened in the last week of October is
/// told in the first session of November ("last week I threw a party"). Of the units that match
/// the query, those in a dated session rise by [`DATED_SESSION`] of the best unit's score, in
/// proportion to the dated heading's match (for the session after, its predecessor's). Words
/// every heading shares ("2023") weigh little beside a month, so the cut at half leaves the
/// sessions of other months where they were.
pub(crate) fn favour_dated_sessions(scores: &mut [f64], session_of: &[usize], headings: &[f64]) {
    let best_heading = headings.iter().copied().fold(0.0, f64::max);
    if best_heading <= 0.0 {
        return;
    }
    let dated = |s: usize| headings[s] >= 0.5 * best_heading;
    let weights: Vec<f64> = (0..headings.len())
        .map(|s| {
            if dated(s) {
                headings[s] / best_heading
            } else if s > 0 && dated(s - 1) {
                headings[s - 1] / best_heading
            } else {
                0.0
            }
        })
        .collect();
    lift_sessions(scores, session_of, &weights, DATED_SESSION);
}

/// The query's words as written, lower-case: names and pronouns, which [`terms`] would stem or
/// drop as stop words.
fn query_words(query: &str) -> HashSet<String> {
    query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// The share by which a unit's score rises when the query names its speaker.
const NAMED_SPEAKER: f64 = 0.3;

/// A question that names a speaker ("what activities does Melanie do?") is most often answered
/// in that speaker's own turns, yet a name that speaks half the turns weighs little in BM25:
/// the units whose speaker (`name`) the query names as a word get [`NAMED_SPEAKER`] more. The
/// rise is a share, not a filter, so a question that names the wrong speaker still finds the
/// other one's turn when it matches better.
pub(crate) fn favour_named_speakers(scores: &mut [f64], speakers: &[Option<&str>], query: &str) {
    let words = query_words(query);
    for (score, speaker) in scores.iter_mut().zip(speakers) {
        if speaker.is_some_and(|s| words.contains(&s.to_lowercase())) {
            *score *= 1.0 + NAMED_SPEAKER;
        }
    }
}

/// What the turns of the speakers a question does not ask about keep of their score
/// ([`favour_the_tellers`]). Measured on LoCoMo's whole-history questions at 1 (none), 0.7,
/// 0.5, 0.3 and 0: the summaries of what one speaker said rose most at 0.5 (0.80 -> 0.835 at
/// 2,048, 0.90 -> 0.91 at 4,096); below it the turns that ask what the speaker then answers
/// fell out too (docs/benchmarks.md).
const OTHERS_TOLD: f64 = 0.5;

/// A question about what someone said ("summarise everything Caroline has told me about the
/// community") is answered by that speaker's own turns; the other side's turns around them
/// only ask and react, and in a long history they take the room of the speaker's further
/// turns on the topic. The units of a speaker other than those the question asks about
/// (`told_by`, lower-case as [`named_speakers`] gives them) keep [`OTHERS_TOLD`] of their
/// score; units without a speaker (a session's heading) keep theirs.
pub(crate) fn favour_the_tellers(
    scores: &mut [f64],
    speakers: &[Option<&str>],
    told_by: &[String],
) {
    if told_by.is_empty() {
        return;
    }
    for (score, speaker) in scores.iter_mut().zip(speakers) {
        if let Some(speaker) = speaker
            && !told_by.contains(&speaker.to_lowercase())
        {
            *score *= OTHERS_TOLD;
        }
    }
}

/// The order in which to recall units: by score per `cost_weight` power of their cost
/// ([`cost_weight`] says which).
pub(crate) fn value(score: f64, tokens: usize, cost_weight: f64) -> f64 {
    score / (tokens.max(1) as f64).powf(cost_weight)
}

/// Sides whose typical messages differ in length by less than this factor write alike.
const ALIKE: f64 = 2.0;

/// Whether the two sides write alike ([`alike`]) from each message's role and length: the
/// user's and the assistant's lengths are compared, other roles' left out.
pub(crate) fn sides_alike(messages: impl IntoIterator<Item = (Role, usize)>) -> bool {
    let (mut user, mut assistant) = (Vec::new(), Vec::new());
    for (role, length) in messages {
        match role {
            Role::User => user.push(length),
            Role::Assistant => assistant.push(length),
            _ => {}
        }
    }
    alike(&mut user, &mut assistant)
}

/// Whether a conversation's two sides write alike, from the lengths of the user's and the
/// assistant's messages: their medians within [`ALIKE`] of each other (a chat between two
/// people), not when one side writes much longer messages than the other (an assistant's
/// replies beside a user's questions, an agent's run) or one side is missing. On the dev data
/// the medians of chat logs between people differ by at most 1.45 times, of assistant
/// conversations and agent runs by 2.4 to 70 times (mostly 6 or more).
pub(crate) fn alike(user: &mut [usize], assistant: &mut [usize]) -> bool {
    let median = |lengths: &mut [usize]| {
        if lengths.is_empty() {
            return None;
        }
        let middle = lengths.len() / 2;
        let (_, median, _) = lengths.select_nth_unstable(middle);
        Some((*median).max(1) as f64)
    };
    match (median(user), median(assistant)) {
        (Some(u), Some(a)) => u.max(a) / u.min(a) < ALIKE,
        _ => false,
    }
}

/// How much a unit's cost counts against its score ([`value`]). When the sides do not write
/// [`alike`], a long reply shares more of any query's words without answering it better, and a
/// short message that answers is crowded out: the order is by score per square root of the
/// cost (the root keeps long evidence in reach). In a chat between people, length says nothing
/// about what answers, and the order is by score alone. On the dev data ordering chats by score
/// alone keeps more of every kind of question's evidence, and assistant conversations lose up
/// to half of their multi-session evidence without the root.
pub(crate) fn cost_weight(alike: bool) -> f64 {
    if alike { 0.0 } else { 0.5 }
}

/// The share by which the user's turns rise when a question in the first person asks what the
/// user said. Measured on the dev data at 0.5, 1, 1.5, 2 and 3 (docs/benchmarks-history.md, issue 29).
const FIRST_PERSON: f64 = 1.0;

/// A question put in the first person ("I mentioned cooking something for my friend, what was
/// it?", "how many plants did I buy?") asks what the user said or did, and in a conversation
/// with an assistant the answer is in the user's own turns, short beside replies that share the
/// question's words far more often without answering it. The units that hold a user's message
/// (`users`) get [`FIRST_PERSON`] more, as a named speaker's do in a chat
/// ([`favour_named_speakers`]). A question that also says "you" ("what did you suggest for my
/// trip?") asks about the assistant's words, and nothing moves. The query is read as the
/// user's own words, as when a caller passes the user's latest message; a focus an agent
/// writes about itself ("the error I was fixing") lifts the user's turns too, which hold its
/// task. The caller applies it only where the sides do not write [`alike`]: in a chat between
/// people, "I" is whoever asks.
pub(crate) fn favour_the_user(scores: &mut [f64], users: &[bool], query: &str) {
    let words = query_words(query);
    let says = |list: &[&str]| list.iter().any(|w| words.contains(*w));
    if !says(ASKER) || says(ASKED) {
        return;
    }
    for (score, &user) in scores.iter_mut().zip(users) {
        if user {
            *score *= 1.0 + FIRST_PERSON;
        }
    }
}

/// The depth of [`fuse_ranks`] as a share of the units the budget holds. Measured on the dev
/// data against a fixed depth of 20, 60, 150 and 300 and half the budget's units, a depth of
/// the budget's units lost the least against words alone; measured again on LoCoMo at 2, 1,
/// 0.5, 0.25 and 0.1 once sessions rose by meaning, a quarter kept more of every category than
/// the whole (0.1 kept the same), most of all open-domain questions at 2,048.
const FUSE_DEPTH: f64 = 0.25;

/// Hybrid recall's order: the fused ranking (words and meaning) and the ranking by words alone,
/// merged by reciprocal-rank fusion. A unit's value is the sum over the two rankings of
/// `1 / (depth + place)`, each unit once, best first; `depth` is [`FUSE_DEPTH`] of `holds`, how
/// many units the recall budget holds (its tokens over the ranked units' mean; for a search, the
/// hits it returns), at least 1. Fused alone, units merely near the query's topic pushed out
/// evidence that shares its words (a long history has many sessions about the same things).
/// Summing places lets a unit that both rankings hold near their heads beat one that only
/// meaning ranks there, and the small depth makes a place near the head count far more than
/// one further down, so each ranking's best come first. Ties go to the newer unit (the higher
/// index), as in each ranking.
pub(crate) fn fuse_ranks(
    fused: &[(usize, f64)],
    words: &[(usize, f64)],
    holds: f64,
) -> Vec<(usize, f64)> {
    let depth = (FUSE_DEPTH * holds).max(1.0);
    let mut value: HashMap<usize, f64> = HashMap::with_capacity(fused.len().max(words.len()));
    for ranking in [fused, words] {
        for (place, &(unit, _)) in ranking.iter().enumerate() {
            *value.entry(unit).or_default() += 1.0 / (depth + place as f64);
        }
    }
    let mut order: Vec<(usize, f64)> = value.into_iter().collect();
    order.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
    order
}

/// The share of what the recall budget holds that the things a question lists take first
/// ([`each_listed_first`]), split evenly among them. Measured on LoCoMo's whole-history
/// questions at 0.05, 0.1, 0.2, 0.3, 0.4 and 0.6: at 0.2 and 0.3 the order questions keep one
/// more evidence turn at 2,048 and at 4,096 tokens and lose none; at 0.05 (each thing's best
/// alone) nothing moves, at 0.1 only 4,096 gains, and from 0.4 a turn the question reaches as
/// a whole falls out at 2,048 (docs/benchmarks.md).
const LISTED: f64 = 0.2;

/// A question that lists several things ("in what order did these come up: the parade; the
/// talk at the school; the new job?", "the cost of the bowl, the collar, and the chews") is
/// answered only when each thing's own turn is recalled, yet the turns about the thing most of
/// the question's words describe fill the head of its ranking, and another thing's turn, which
/// shares only a few of them ("nature has a way of calming"), sinks below. Each listed thing's
/// ranking (`parts`, each thing searched alone) gives its best units first, in turns (each
/// thing's best, then each one's second, ...), as many as [`LISTED`] of what the budget holds
/// (`holds`) split among the things, at least one each; then the question's own order
/// (`whole`) follows with the rest, so a turn the question reaches only as a whole keeps its
/// place. Fewer than two things: `whole` as it is. Compaction's recall only: `search_history`
/// searches what the agent writes as one query.
pub(crate) fn each_listed_first(whole: &[(usize, f64)], parts: &[Ranking], holds: f64) -> Ranking {
    if parts.len() < 2 {
        return whole.to_vec();
    }
    let rounds = ((LISTED * holds / parts.len() as f64) as usize).max(1);
    let first = whole.first().map_or(0.0, |&(_, score)| score);
    let mut taken: HashSet<usize> = HashSet::new();
    let mut order: Ranking = Vec::with_capacity(whole.len());
    for round in 0..rounds {
        for part in parts {
            if let Some(&(unit, _)) = part.get(round)
                && taken.insert(unit)
            {
                // Above the question's best, in the order taken.
                order.push((unit, first + (rounds * parts.len() - order.len()) as f64));
            }
        }
    }
    order.extend(whole.iter().filter(|(unit, _)| !taken.contains(unit)));
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::Topics;

    #[test]
    fn each_listed_thing_gives_its_best_first_then_the_question_its_order() {
        let whole = [(5, 9.0), (4, 8.0), (3, 7.0), (2, 6.0), (1, 5.0), (0, 4.0)];
        let parts = [vec![(4, 3.0), (0, 2.0)], vec![(0, 5.0), (1, 1.0)]];
        let units = |ranking: Ranking| ranking.into_iter().map(|(u, _)| u).collect::<Vec<_>>();
        // Room for 20 units: two rounds of the two things' best (unit 0 once), then the rest.
        assert_eq!(
            units(each_listed_first(&whole, &parts, 20.0)),
            [4, 0, 1, 5, 3, 2]
        );
        // Room for 5: each thing's best only.
        assert_eq!(
            units(each_listed_first(&whole, &parts, 5.0)),
            [4, 0, 5, 3, 2, 1]
        );
        // The values fall in the order given.
        let order = each_listed_first(&whole, &parts, 20.0);
        assert!(order.windows(2).all(|w| w[0].1 >= w[1].1), "{order:?}");
        // One thing is no list.
        assert_eq!(each_listed_first(&whole, &parts[..1], 20.0), whole);
    }

    #[test]
    fn the_rankings_fuse_by_place_each_unit_once() {
        let order = |fused: &[usize], words: &[usize], holds| -> Vec<usize> {
            let ranking = |units: &[usize]| -> Vec<(usize, f64)> {
                units.iter().map(|&u| (u, 1.0)).collect()
            };
            fuse_ranks(&ranking(fused), &ranking(words), holds)
                .into_iter()
                .map(|(u, _)| u)
                .collect()
        };
        // 3 is second and first: it passes 7, first and third; 9 (second by words only) passes
        // 5 (third by the fused ranking only), as a later place counts a little less.
        assert_eq!(order(&[7, 3, 5, 1], &[3, 9, 7], 160.0), [3, 7, 9, 5, 1]);
        assert_eq!(order(&[], &[2, 4], 160.0), [2, 4]);
        // 6 is third in both. When the budget holds four units (a depth of one), a head counts
        // more than two thirds; when it holds 160 (a depth of 40), being in both counts more.
        assert_eq!(order(&[5, 8, 6], &[4, 9, 6], 4.0), [5, 4, 6, 9, 8]);
        assert_eq!(order(&[5, 8, 6], &[4, 9, 6], 160.0), [6, 5, 4, 9, 8]);
    }

    #[test]
    fn the_sessions_a_query_dates_and_the_one_after_rise() {
        // Five sessions: the first has no heading; the third's heading names the query's month,
        // the others share only the year.
        let headings = [0.0, 0.4, 2.0, 0.4, 0.4];
        let session_of = [0, 1, 1, 2, 2, 3, 4];
        let mut scores = vec![1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0];
        favour_dated_sessions(&mut scores, &session_of, &headings);
        // The dated session's matching unit and the next session's rise by the full share...
        assert_eq!(scores[3], 1.0 + DATED_SESSION);
        assert_eq!(scores[5], 1.0 + DATED_SESSION);
        // ...units that match nothing stay out, and the other sessions stay where they were.
        assert_eq!([scores[2], scores[4]], [0.0, 0.0]);
        assert_eq!([scores[0], scores[1], scores[6]], [1.0, 1.0, 1.0]);
        // No heading matches: nothing moves.
        let mut scores = vec![1.0, 2.0];
        favour_dated_sessions(&mut scores, &[0, 1], &[0.0, 0.0]);
        assert_eq!(scores, [1.0, 2.0]);
    }

    #[test]
    fn the_sessions_nearest_the_query_in_meaning_rise() {
        // Three sessions, each a heading and two turns. The second's turns are nearest the
        // query in meaning (its heading's similarity does not count); the third is farthest.
        let session_of = [0, 0, 0, 1, 1, 1, 2, 2, 2];
        let headings = [true, false, false, true, false, false, true, false, false];
        let similar = [0.9, 0.3, 0.3, 0.0, 0.8, 0.6, 0.9, 0.1, 0.1];
        let mut scores = vec![0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 2.0, 1.0];
        favour_sessions_by_meaning(&mut scores, &session_of, &headings, &similar);
        // The nearest session's matching unit rises by the full share of the best score...
        assert!(
            (scores[4] - (1.0 + 2.0 * SESSION_MEANING)).abs() < 1e-9,
            "{scores:?}"
        );
        // ...and now outranks the same match in a session no nearer than the average, which
        // stays put.
        assert_eq!(scores[1], 1.0);
        assert!(scores[4] > scores[1]);
        // Units that match nothing stay out; a session below the average does not move.
        assert_eq!([scores[3], scores[5]], [0.0, 0.0]);
        assert_eq!([scores[7], scores[8]], [2.0, 1.0]);
        // Only headings, no turns: nothing moves.
        let mut scores = vec![1.0, 2.0];
        favour_sessions_by_meaning(&mut scores, &[0, 1], &[true, true], &[0.9, 0.1]);
        assert_eq!(scores, [1.0, 2.0]);
    }

    #[test]
    fn neighbouring_words_join_into_the_compound_a_query_writes_as_one() {
        let text = "We went on a road trip with my Smart-Watch, 2 new maps and a day off";
        let (words, all) = terms_and_joined(text, |_| true);
        assert_eq!(words, terms(text));
        for compound in ["roadtrip", "smartwatch", "newmap"] {
            assert!(all.iter().any(|j| j == compound), "{compound}: {all:?}");
        }
        // Across a stop word ("went on", "a road"), or with digits, nothing is joined.
        for never in ["wenton", "aroad", "2new", "dayoff"] {
            assert!(!all.iter().any(|j| j == never), "{never}: {all:?}");
        }
        // Stemmed as a query's word is: "road trips" is the query's "roadtrip".
        assert_eq!(terms_and_joined("road trips", |_| true).1, ["roadtrip"]);
        // A hyphen joins what a space would not: "check-up" is the query's "checkup".
        let (_, hyphened) = terms_and_joined("a check-up and a to-do, or check up", |_| true);
        assert_eq!(hyphened, ["checkup", "todo"]);
        // Punctuation ends a compound: "list, check" is two things, not a "listcheck".
        let (_, apart) = terms_and_joined("a packing list, check. Trip plans", |_| true);
        assert_eq!(apart, ["packinglist", "tripplan"]);
        // Only the pairs whose first word is wanted are built.
        assert_eq!(
            terms_and_joined(text, |first| first == "smart").1,
            ["smartwatch"]
        );
        // The query's own terms never hold them: a query is matched word by word.
        assert!(!terms(text).iter().any(|t| t == "roadtrip"));
    }

    #[test]
    fn replies_inherit_from_the_turn_they_answer() {
        let scores = with_neighbours(&[0.0, 2.0, 0.0, 0.0], &[true; 4], false);
        assert!(scores[2] > scores[0] && scores[2] > scores[3]);
        assert!(scores[1] > scores[2]);
        let scores = with_neighbours(&[0.0, 2.0, 0.0], &[false; 3], false);
        assert_eq!(scores[2], 0.0, "a statement lends nothing to the next turn");
        // The turn before a match gets less of it in a chat between people.
        let chat = with_neighbours(&[0.0, 2.0, 0.0], &[false; 3], true);
        assert_eq!(scores[0], 2.0 * FROM_NEXT);
        assert_eq!(chat[0], 2.0 * FROM_NEXT_ALIKE);
        assert!(chat[0] > 0.0 && chat[0] < scores[0]);
        assert!(value(1.0, 100, 0.5) > value(1.5, 1000, 0.5));
    }

    #[test]
    fn a_topic_runs_on_into_the_turns_after_a_good_match_until_the_session_ends() {
        // Session 0: a good match, two turns after it, a passing mention, one turn after it;
        // session 1 starts with a heading.
        let matches = [0.0, 4.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0];
        let session_of = [0, 0, 0, 0, 0, 0, 1, 1];
        let headings = [false, false, false, false, false, false, true, false];
        let mut scores = matches.to_vec();
        follow_threads(
            &mut scores,
            &matches,
            &session_of,
            &headings,
            Threads::Forward,
        );
        let near = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert_eq!(scores[0], 0.0, "a thread runs forward only");
        assert!(near(scores[2], 4.0 * THREAD));
        assert!(
            near(scores[3], 4.0 * THREAD * THREAD),
            "fading turn by turn"
        );
        // A passing mention (below the start share of the best) starts nothing of its own;
        // the fading thread before it runs on past it.
        assert!(near(scores[4], 1.0 + 4.0 * THREAD.powi(3)));
        assert!(near(scores[5], 4.0 * THREAD.powi(4)));
        assert!(scores[5] < scores[3]);
        assert_eq!(&scores[6..], &[0.0, 0.0], "a new session ends the thread");
    }

    #[test]
    fn a_thread_runs_back_into_the_lead_in_when_asked_both_ways() {
        // Session 0 ends; session 1: its heading, two lead-in turns, a good match, a reply.
        let matches = [0.0, 0.0, 0.0, 0.0, 4.0, 0.0];
        let session_of = [0, 1, 1, 1, 1, 1];
        let headings = [false, true, false, false, false, false];
        let threaded = |ways| {
            let mut scores = matches.to_vec();
            follow_threads(&mut scores, &matches, &session_of, &headings, ways);
            scores
        };
        let forward = threaded(Threads::Forward);
        let both = threaded(Threads::BothWays);
        let near = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert_eq!(
            &forward[..4],
            &[0.0; 4],
            "forward: nothing before the match"
        );
        assert!(near(both[3], 4.0 * THREAD));
        assert!(near(both[2], 4.0 * THREAD * THREAD), "fading turn by turn");
        assert_eq!(both[1], 0.0, "a heading is no turn of the thread");
        assert_eq!(both[0], 0.0, "nor does it run into the session before");
        assert_eq!(both[5], forward[5], "the turns after it are as before");
        assert!(near(both[5], 4.0 * THREAD));
    }

    #[test]
    fn a_thread_ends_when_its_share_is_spent() {
        let mut matches = vec![0.0; 12];
        matches[0] = 4.0;
        let mut scores = matches.clone();
        follow_threads(
            &mut scores,
            &matches,
            &[0; 12],
            &[false; 12],
            Threads::Forward,
        );
        let reached = scores[1..].iter().filter(|&&s| s > 0.0).count();
        assert_eq!(reached, 7, "{scores:?}");
        assert!(scores[7] >= THREAD_END * 4.0);
    }

    #[test]
    fn a_question_about_what_one_said_leaves_out_the_name_in_the_others_turns() {
        let told_by = named_speakers(
            "What has Caroline told me about pride?",
            ["Melanie", "Caroline", "Caroline"],
        );
        assert_eq!(told_by, [("caroline".to_owned(), "carolin".to_owned())]);
        let words = |text: &str| terms(text);
        let mut hers = words("Caroline pride parade");
        leave_out_addressed(&mut hers, Some("Caroline"), &told_by);
        assert_eq!(
            hers,
            words("Caroline pride parade"),
            "her own turn keeps her name"
        );
        let mut addressed = words("Thanks Caroline pride");
        leave_out_addressed(&mut addressed, Some("Melanie"), &told_by);
        assert_eq!(addressed, words("Thanks pride"));
        let mut unnamed = words("Caroline pride");
        leave_out_addressed(&mut unnamed, None, &told_by);
        assert_eq!(
            unnamed,
            words("Caroline pride"),
            "a turn without a speaker keeps every word"
        );
    }

    #[test]
    fn a_named_speaker_weighs_more_without_silencing_the_other() {
        let mut scores = vec![1.0, 1.0, 2.0, 0.0];
        let speakers = [
            Some("Melanie"),
            Some("Caroline"),
            Some("Caroline"),
            Some("Melanie"),
        ];
        favour_named_speakers(&mut scores, &speakers, "What does melanie paint?");
        assert!(scores[0] > scores[1], "{scores:?}");
        assert!(
            scores[2] > scores[0],
            "a better match by the other speaker still wins"
        );
        assert_eq!(scores[3], 0.0, "no match stays no match");
        let mut scores = vec![1.0, 1.0];
        favour_named_speakers(
            &mut scores,
            &[None, Some("Mel")],
            "What does Melanie paint?",
        );
        assert_eq!(scores, [1.0, 1.0], "a name is matched as a whole word");
    }

    #[test]
    fn a_question_about_what_one_said_weighs_the_others_turns_less() {
        let speakers = [Some("Melanie"), Some("Caroline"), None, Some("caroline")];
        let told_by = vec!["caroline".to_owned()];
        let mut scores = vec![2.0, 1.5, 1.0, 1.0];
        favour_the_tellers(&mut scores, &speakers, &told_by);
        assert_eq!(scores, [2.0 * OTHERS_TOLD, 1.5, 1.0, 1.0]);
        assert!(
            scores[1] > scores[0],
            "her answer now outranks the other's reply"
        );
        // A name beyond ASCII is the asked-about speaker's too.
        let told_by = named_speakers("What has Émile told me?", ["Émile", "Zoë"]);
        let told_by: Vec<String> = told_by.into_iter().map(|(name, _)| name).collect();
        let mut scores = vec![1.0, 1.0];
        favour_the_tellers(&mut scores, &[Some("Émile"), Some("Zoë")], &told_by);
        assert_eq!(scores, [1.0, OTHERS_TOLD]);
        let mut scores = vec![2.0, 1.5];
        favour_the_tellers(&mut scores, &speakers[..2], &[]);
        assert_eq!(
            scores,
            [2.0, 1.5],
            "a question that asks for no one moves nothing"
        );
    }

    /// Each text as a unit of its own, cut into sentences as a memory entry is.
    fn meanings(texts: &[&str]) -> Vec<Meaning> {
        texts.iter().map(|t| Meaning::of_entry(t)).collect()
    }

    #[test]
    fn a_message_is_cut_into_sentences_led_by_its_speaker() {
        let mut message = crate::Message::user(
            "Had a long week at work. Wow! I'm off to do some taekwondo now!\n\
             Yes!!! Done at last",
        );
        message.set_name(Some("John".to_owned()));
        let mut meaning = Meaning::default();
        meaning.push(&message);
        assert!(
            meaning.text.starts_with("John Had a long week"),
            "{}",
            meaning.text
        );
        // A run of `.`, `!` or `?` cuts, and so does a line's end; "John Wow!" and "John Yes!!!"
        // are too short to stand alone.
        assert_eq!(
            meaning.sentences,
            [
                "John Had a long week at work.",
                "John I'm off to do some taekwondo now!",
                "John Done at last",
            ]
        );
        // A dot inside a path or a number ends no sentence; one before a closing quote does.
        let mut code = Meaning::default();
        code.push(&crate::Message::user(
            "Fixed main.py for v3.5 today. She said \"it works now.\" Then we shipped it",
        ));
        assert_eq!(
            code.sentences,
            [
                "Fixed main.py for v3.5 today.",
                "She said \"it works now.\"",
                "Then we shipped it",
            ]
        );
        // Space after a sentence's end is no sentence, however long the speaker's name: it
        // would be embedded as the name alone.
        let mut named = crate::Message::user("We shipped the fix today.   ");
        named.set_name(Some("Mary Ann Smith".to_owned()));
        let mut spaced = Meaning::default();
        spaced.push(&named);
        assert_eq!(
            spaced.sentences,
            ["Mary Ann Smith We shipped the fix today."]
        );
        assert_eq!(
            sentences("We shipped the fix today.   \n\n  Then we slept. ").collect::<Vec<_>>(),
            ["We shipped the fix today.", "Then we slept."]
        );
        // A tool's output of thousands of lines gives at most MAX_SENTENCES.
        let mut long = Meaning::default();
        long.push(&crate::Message::user("one more line here\n".repeat(1000)));
        assert_eq!(long.sentences.len(), MAX_SENTENCES);
    }

    #[test]
    fn a_unit_is_near_the_query_by_its_best_sentence() {
        /// A model that sees a topic only where it stands out: a text of at most six words
        /// that names a martial art is about martial arts, anything longer about the rest.
        #[derive(Debug)]
        struct Diluted;
        impl Embedder for Diluted {
            fn name(&self) -> &str {
                "diluted"
            }
            fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
                Ok(texts
                    .iter()
                    .map(|t| {
                        let short = t.split_whitespace().count() <= 6;
                        let art = ["martial", "taekwondo", "karate"]
                            .iter()
                            .any(|w| t.contains(w));
                        if short && art {
                            vec![0.9, 0.1]
                        } else {
                            vec![0.1, 0.9]
                        }
                    })
                    .collect())
            }
        }
        let units = meanings(&[
            "What a weekend, the kids were wild and the dog ran off. Off to taekwondo now!",
            "What a weekend, the kids were wild and the dog ran off again today",
            "karate",
        ]);
        let similar = similarities(
            &Diluted,
            None,
            "what martial arts",
            &Speakers::default(),
            &units,
        )
        .expect("embeds");
        let far = 0.9f32 * 0.1 + 0.1 * 0.9;
        // The first unit's whole text is far; its second sentence is near, and counts for
        // its share. The second has no such sentence, the third a single one (its whole text).
        let near = 0.9f32 * 0.9 + 0.1 * 0.1;
        let expected = (1.0 - BEST_SENTENCE) * far + BEST_SENTENCE * near;
        assert!((similar[0] - expected).abs() < 1e-6, "{similar:?}");
        assert!((similar[1] - far).abs() < 1e-6, "{similar:?}");
        assert!((similar[2] - near).abs() < 1e-6, "{similar:?}");
    }

    #[test]
    fn fusion_recalls_by_meaning_and_keeps_the_words_weight() {
        let docs: Vec<String> = [
            "My dog Rex chases frisbees",
            "the meeting moved to room 4",
            "which room is the meeting in",
        ]
        .map(String::from)
        .to_vec();
        let query = "What pet do I have?";
        let bm25 = Bm25::new(docs.iter().map(|d| terms(d)).collect());
        let lexical = bm25.scores(&terms(query));
        assert!(
            lexical.iter().all(|&s| s == 0.0),
            "no shared word: {lexical:?}"
        );
        let texts: Vec<&str> = docs.iter().map(String::as_str).collect();
        let similar = similarities(
            &Topics,
            None,
            query,
            &Speakers::default(),
            &meanings(&texts),
        )
        .expect("embeds");
        let fused = fuse(&lexical, &similar, MEANING);
        assert!(fused[0] > 0.0, "{fused:?}");
        assert_eq!(fused[1], 0.0, "below the average similarity adds nothing");

        // With words in common, the best lexical match still counts in full.
        let lexical = bm25.scores(&terms("meeting room"));
        let fused = fuse(
            &lexical,
            &similarities(
                &Topics,
                None,
                "meeting room",
                &Speakers::default(),
                &meanings(&texts),
            )
            .expect("embeds"),
            MEANING,
        );
        assert!(fused[1] > fused[0] && fused[2] > fused[0], "{fused:?}");
    }

    #[test]
    fn meaning_weighs_more_where_words_alone_keep_their_place() {
        // The best word match, a turn about pets that shares no word, and a turn whose words
        // score 0.7 of the best.
        let docs = [
            "the room is booked",
            "my puppy naps all day",
            "room four again",
        ];
        let similar = similarities(
            &Topics,
            None,
            "where does my dog sleep",
            &Speakers::default(),
            &meanings(&docs),
        )
        .expect("embeds");
        let lexical = [1.0, 0.0, 0.7];
        // Standing alone (memory search, search_history), the words' match stays ahead...
        let alone = fuse(&lexical, &similar, MEANING);
        assert!(alone[2] > alone[1], "{alone:?}");
        // ...while compaction, whose merge with words alone keeps the word match in its place,
        // lets the turn that means the query pass it.
        let merged = fuse(&lexical, &similar, MEANING_MERGED);
        assert!(merged[1] > merged[2], "{merged:?}");
        assert!(
            merged[0] > merged[2],
            "the best word match still leads: {merged:?}"
        );
    }

    #[test]
    fn the_query_means_its_topic_as_much_as_the_speaker_it_names() {
        let named = |mut message: crate::Message, name: &str| {
            message.set_name(Some(name.to_owned()));
            message
        };
        let mut speakers = Speakers::default();
        speakers.add(&named(crate::Message::user("hi"), "Melanie"));
        speakers.add(&named(crate::Message::assistant("hello"), "Caroline Smith"));
        // A tool result's name is its tool's, not a speaker's.
        let mut tool = named(crate::Message::user("ok"), "bash");
        tool.role = Role::Tool;
        speakers.add(&tool);
        let left = |q: &str| speakers.left_out_of(q);
        assert_eq!(
            left("What activities does Melanie partake in?").as_deref(),
            Some("What activities does partake in?")
        );
        assert_eq!(
            left("What did Caroline\u{2019}s and melanie's kids like?").as_deref(),
            Some("What did and kids like?")
        );
        assert_eq!(
            left("did Smith run bash?").as_deref(),
            Some("did run bash?")
        );
        assert_eq!(left("where is the meeting?"), None, "no name");
        assert_eq!(left("Melanie?"), None, "nothing but a name");
        assert_eq!(Speakers::default().left_out_of("Melanie?"), None);

        /// A model that reads a name and pottery as two directions.
        #[derive(Debug)]
        struct Named;
        impl Embedder for Named {
            fn name(&self) -> &str {
                "named"
            }
            fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
                Ok(texts
                    .iter()
                    .map(|t| match (t.contains("Melanie"), t.contains("pottery")) {
                        (true, _) => vec![1.0, 0.0],
                        (false, true) => vec![0.0, 1.0],
                        (false, false) => vec![0.6, 0.8],
                    })
                    .collect())
            }
        }
        // Asked as written, the query is all name; without it, all topic: a unit's similarity is
        // the mean of its similarities to the two.
        let q = query_vectors(&Named, "Melanie pottery?", &speakers).expect("embeds");
        assert_eq!(q, vec![vec![1.0, 0.0], vec![0.0, 1.0]]);
        let units = meanings(&[
            "Thanks, Melanie!",
            "I signed up for a pottery class",
            "Thanks so much, Melanie! I signed up for a pottery class.",
        ]);
        let similar =
            similarities(&Named, None, "Melanie pottery?", &speakers, &units).expect("embeds");
        assert_eq!(
            similar[..2],
            [0.5, 0.5],
            "the vocative no longer outranks the topic"
        );
        // Each reading finds the unit's best sentence for itself: as asked, the whole text
        // (1); without the name, the sentence about pottery (BEST_SENTENCE of 1).
        let both = 0.5 * (1.0 + BEST_SENTENCE);
        assert!((similar[2] - both).abs() < 1e-6, "{similar:?}");
        let asked = similarities(
            &Named,
            None,
            "Melanie pottery?",
            &Speakers::default(),
            &units,
        )
        .expect("embeds");
        assert_eq!(asked[..2], [1.0, 0.0], "without speakers, as asked");
    }

    #[test]
    fn an_embedder_that_miscounts_is_an_error() {
        #[derive(Debug)]
        struct Short;
        impl Embedder for Short {
            fn name(&self) -> &str {
                "short"
            }
            fn embed(&self, _: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
                Ok(vec![vec![1.0]])
            }
        }
        let err = similarities(
            &Short,
            None,
            "q",
            &Speakers::default(),
            &meanings(&["a", "b"]),
        )
        .expect_err("miscounted");
        assert!(err.to_string().contains("1 vectors for 2 texts"), "{err}");
    }

    #[test]
    fn a_match_in_the_session_about_the_topic_outranks_small_talk() {
        // Two sessions: small talk that mentions painting once, and one about painting.
        let docs = [
            "how was your weekend",
            "fine, I saw a painting at a friend's house",
            "the weather was great",
            "I painted a sunset with my kids",
            "we used watercolors and painted the lake too",
            "painting relaxes me after work",
        ];
        let session_of = [0, 0, 0, 1, 1, 1];
        let bm25 = Bm25::new(docs.iter().map(|d| terms(d)).collect());
        let query = terms("What did she paint?");
        let mut scores = bm25.scores(&query);
        let by_session = bm25.grouped(&session_of, 2).scores(&query);
        assert!(by_session[1] > by_session[0], "{by_session:?}");
        let before = scores.clone();
        favour_topical_sessions(&mut scores, &session_of, &by_session);
        assert!(scores[3] > scores[1], "{scores:?}");
        assert!(scores[3] - before[3] > scores[1] - before[1], "{scores:?}");
        assert_eq!(scores[0], 0.0, "no word in common stays at zero");
        assert_eq!(scores[2], 0.0);
    }

    #[test]
    fn grouping_sums_the_members_words() {
        let bm25 = Bm25::new(vec![
            terms("red apple"),
            terms("green apple"),
            terms("blue sky"),
        ]);
        let grouped = bm25.grouped(&[0, 0, 1], 2);
        assert_eq!(grouped.lengths, [4, 2]);
        assert_eq!(grouped.docs[0].get(&stem("apple")), Some(&2));
        assert_eq!(grouped.df.get(&stem("apple")), Some(&1));
        let s = grouped.scores(&terms("apple"));
        assert!(s[0] > 0.0 && s[1] == 0.0, "{s:?}");
    }

    #[test]
    fn stemming_joins_word_forms() {
        for (a, b) in [
            ("paint", "painted"),
            ("paint", "painting"),
            ("group", "groups"),
            ("bake", "baked"),
            ("stop", "stopped"),
            ("hobby", "hobbies"),
            ("family", "families"),
            ("traveling", "travelling"),
            ("travel", "travelled"),
            ("install", "installed"),
            ("try", "tried"),
            ("feel", "feelings"),
            ("kind", "kindness"),
            ("movie", "movies"),
        ] {
            assert_eq!(stem(a), stem(b), "{a} {b}");
        }
        assert_eq!(stem("class"), "class");
        // Short words and numbers are their own stems.
        for word in ["go", "2023", "ok"] {
            assert_eq!(stem(word), word);
        }
    }

    #[test]
    fn bm25_ranks_the_matching_document_first() {
        let docs = [
            "I went to a support group yesterday",
            "The weather is nice today",
            "We painted a sunrise together last week",
        ];
        let bm25 = Bm25::new(docs.iter().map(|d| terms(d)).collect());
        let scores = bm25.scores(&terms("When did they paint the sunrise?"));
        assert!(scores[2] > scores[0] && scores[2] > scores[1], "{scores:?}");
    }

    #[test]
    fn cost_counts_only_when_one_side_writes_much_longer_messages() {
        // A chat between two people: 150 and 140 characters a message.
        let chat = alike(&mut [150, 90, 210], &mut [140, 100, 400]);
        // An assistant whose replies run to ten times the user's questions.
        let assistant = alike(&mut [200, 150, 260], &mut [2_000, 1_500, 3_000]);
        assert!(chat);
        assert!(!assistant);
        let (chat, assistant) = (cost_weight(chat), cost_weight(assistant));
        assert_eq!(chat, 0.0);
        assert_eq!(assistant, 0.5);
        // A turn that matches twice as well but costs five times as much: first in the chat,
        // behind the short one beside long replies.
        assert!(value(2.0, 500, chat) > value(1.0, 100, chat));
        assert!(value(2.0, 500, assistant) < value(1.0, 100, assistant));
        // Just under twice as long is still alike; twice is not. With one side missing (a log
        // of one speaker's notes) the sides are not alike, and the cost counts.
        assert!(alike(&mut [199], &mut [100]));
        assert!(!alike(&mut [100], &mut [200]));
        assert!(!alike(&mut [100, 120], &mut []));
        assert!(!alike(&mut [], &mut []));
        // An empty message counts as one character, not a division by zero.
        assert!(alike(&mut [0], &mut [1]));
    }

    #[test]
    fn a_question_in_the_first_person_favours_the_user() {
        // A user's turn, an assistant's reply that matches better, a turn that matches nothing.
        let users = [true, false, true];
        let before = [1.0, 1.5, 0.0];
        let mut scores = before.to_vec();
        favour_the_user(
            &mut scores,
            &users,
            "I mentioned cooking something; what was it?",
        );
        assert!(scores[0] > scores[1], "{scores:?}");
        assert_eq!(scores[1], 1.5, "the assistant's reply stays where it was");
        assert_eq!(scores[2], 0.0, "no match stays no match");
        // "My" speaks of the asker too, whatever its case.
        let mut scores = before.to_vec();
        favour_the_user(&mut scores, &users, "How many plants are in MY garden?");
        assert!(scores[0] > scores[1], "{scores:?}");
        // A question that says "you" asks what the assistant said; one that speaks of nobody
        // ("Which city hosts the fair?") asks about neither side. Nothing moves.
        for query in [
            "What did you suggest for my trip?",
            "Which city hosts the fair?",
            "Is the mine open?",
        ] {
            let mut scores = before.to_vec();
            favour_the_user(&mut scores, &users, query);
            assert_eq!(scores, before, "{query}");
        }
    }
}
