//! The extractive digest: one `[Session context consolidated]` message standing for the
//! messages that left the view, built without an LLM.
//!
//! The classic consolidator keeps lines with fact keywords, tool results cut to 200 characters and prefixed with
//! the tool's name, and short user messages; it skips long assistant prose and removes
//! duplicates. engram keeps those rules as candidates and then chooses what to keep within a
//! budget by what the agent is likely to refer to again: a line earns the identifiers (paths,
//! function names, ids, error names, numbers) that it alone still carries, that is, those not
//! visible anywhere in the rest of the view and not carried by a more recent line. Identifiers
//! seen more often weigh more, and the lines of the agent's own tool calls twice as much as
//! others; the task statement (the first user message) is kept first:
//! whole when it fits in 40% of the budget, else its head (its first lines of words, skipping
//! fences and tags) and then its other lines by their identifiers and their words. Lines are kept
//! whole (clipped around their identifiers when very long) so that the fact keeps its context,
//! and they are listed in the order they were said.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

use super::Item;
use super::salient::salient_tokens;
use crate::count::TokenCounter;
use crate::message::{Content, Message, Role};
use crate::retrieval::message_lines_text;

use super::salient::FACT_KEYWORDS;

/// The digest's first line.
pub const HEADER: &str = "[Session context consolidated]";

/// Lines longer than this are kept as snippets around their identifiers.
const MAX_LINE_CHARS: usize = 240;
/// The share of the digest's budget that the head of a task statement too long to keep whole
/// may take before the rest of its lines compete with the others.
const TASK_HEAD_SHARE: f64 = 0.15;
/// Characters kept on each side of an identifier in a snippet.
const SNIPPET_CONTEXT: usize = 44;
/// How much more the lines of an agent's own tool calls (the call, and what it said with it)
/// are worth than others: its next step most often reuses what it did itself, the paths it
/// opened, the names it edited, the commands it ran. On the dev trajectories, nine in ten of
/// the identifiers a deep compaction lost were last seen in the agent's calls
/// (docs/benchmarks-history.md, "What an agent pays through the proxy").
const CALL_WEIGHT: f64 = 2.0;

pub(crate) struct Built {
    pub(crate) message: Message,
    pub(crate) tokens: usize,
    pub(crate) source_ids: Vec<String>,
}

/// A line (or a piece of one) that may enter the digest. A long history gives one per line of
/// every message read, so it is kept small: the text borrows the message's where it can, and
/// the label is an index into the few distinct labels.
struct Candidate<'t> {
    /// Position for chronological order: (source index, line index, piece index).
    at: (u32, u32, u32),
    /// The bullet's label (`[user]`, `[shell]`), written once per source message: an index
    /// into [`Labels`].
    label: u32,
    text: Cow<'t, str>,
    score: f64,
    /// Tokens of the text.
    tokens: u32,
}

/// A tool output's head: sorts after the lines of its message.
const HEAD: u32 = u32::MAX;

/// The distinct labels, each with its tokens (with the bullet's punctuation).
#[derive(Default)]
struct Labels {
    texts: Vec<(String, usize)>,
    index: HashMap<String, u32>,
}

impl Labels {
    fn intern(&mut self, label: String, counter: &TokenCounter) -> u32 {
        if let Some(&i) = self.index.get(&label) {
            return i;
        }
        let i = self.texts.len() as u32;
        let tokens = counter.count_text(&label) + 2;
        self.texts.push((label.clone(), tokens));
        self.index.insert(label, i);
        i
    }

    fn text(&self, i: u32) -> &str {
        &self.texts[i as usize].0
    }

    fn tokens(&self, i: u32) -> usize {
        self.texts[i as usize].1
    }
}

/// Candidates with their texts deduplicated: a text already offered is not offered again.
/// The table holds candidate indices (hashed by their text), not copies of the texts.
struct Offered<'t> {
    candidates: Vec<Candidate<'t>>,
    /// Indices of the candidates that count for duplicates (not the task statement kept whole).
    seen: HashTable<u32>,
    hasher: FxBuildHasher,
}

impl<'t> Offered<'t> {
    /// The hash of `text` when no candidate has that text yet.
    fn is_new(&self, text: &str) -> Option<u64> {
        let hash = self.hasher.hash_one(text);
        let candidates = &self.candidates;
        self.seen
            .find(hash, |&i| candidates[i as usize].text == text)
            .is_none()
            .then_some(hash)
    }

    /// Adds a candidate whose text [`is_new`](Self::is_new) gave `hash`.
    fn push(&mut self, hash: u64, candidate: Candidate<'t>) {
        let i = self.candidates.len() as u32;
        self.candidates.push(candidate);
        let (candidates, hasher) = (&self.candidates, &self.hasher);
        self.seen
            .insert_unique(hash, i, |&j| hasher.hash_one(&*candidates[j as usize].text));
    }
}

/// Builds the digest of `sources` (chronological) for at most `budget` tokens, given what stays
/// `visible`. With `has_task`, the first user message among the sources is the task statement
/// (kept first); without, they are a later stretch of the history whose task is visible.
/// `None` when nothing worth keeping fits.
pub(crate) fn build(
    sources: &[&Item<'_>],
    visible: &[&Message],
    counter: &TokenCounter,
    budget: usize,
    has_task: bool,
    read_tool: Option<&str>,
) -> Option<Built> {
    // The header names the tool and the range that brings the originals back (one id per
    // line would cost more of a small budget than the lines are worth).
    let ids: Vec<_> = sources
        .iter()
        .map(|i| i.shown_id())
        .filter(|id| !id.is_empty())
        .collect();
    let header = match (ids.first(), ids.last(), read_tool) {
        (Some(first), Some(last), Some(tool)) => format!(
            "{HEADER} (key lines of {} earlier messages; {tool} from={first} to={last} returns them whole)\n",
            sources.len()
        ),
        _ => format!(
            "{HEADER} (key lines of {} earlier messages)\n",
            sources.len()
        ),
    };
    drop(ids);
    let fixed = counter
        .count_message(&Message::system(header.clone()))
        .total();
    if sources.is_empty() || budget <= fixed + 8 {
        return None;
    }
    let mut covered: HashSet<String> = HashSet::new();
    for message in visible {
        covered.extend(salient_tokens(&message_lines_text(message)).map(str::to_owned));
    }
    let texts: Vec<Cow<'_, str>> = sources
        .iter()
        .map(|i| message_lines_text(&i.message))
        .collect();
    let mut frequency: HashMap<&str, u32> = HashMap::new();
    for text in &texts {
        for token in salient_tokens(text) {
            *frequency.entry(token).or_default() += 1;
        }
    }
    let mut labels = Labels::default();
    // At most a candidate per line, and a head per tool output (longer lines give a few
    // snippets): reserved up front, as doubling a long history's list holds it twice.
    let lines: usize = texts.iter().map(|t| t.lines().count()).sum();
    let mut offered = Offered {
        candidates: Vec::with_capacity(lines + sources.len()),
        seen: HashTable::new(),
        hasher: FxBuildHasher,
    };
    // The task statement (the first user message) is what every later step serves: kept whole
    // and first when it costs at most 40% of the budget. Otherwise its head (where the ask
    // usually is) is kept, up to [`TASK_HEAD_SHARE`] of the budget, and the rest of its lines
    // compete, boosted.
    let task = sources
        .iter()
        .position(|i| i.message.role == Role::User)
        .filter(|_| has_task);
    let mut task_kept = None;
    let mut head_end = 0;
    if let Some(t) = task {
        let label = labels.intern(label(sources[t], sources), counter);
        let text = texts[t].trim();
        let tokens = counter.count_text(text) + 1;
        let room = budget.saturating_sub(fixed) as f64;
        if ((tokens + labels.tokens(label)) as f64) <= 0.4 * room {
            covered.extend(salient_tokens(&texts[t]).map(str::to_owned));
            offered.candidates.push(Candidate {
                at: (t as u32, 0, 0),
                label,
                text: Cow::Borrowed(text),
                score: f64::INFINITY,
                tokens: tokens as u32,
            });
            task_kept = Some(t);
        } else {
            let mut used = labels.tokens(label);
            for (li, line) in texts[t].lines().enumerate() {
                let line = line.trim();
                // A fence, a tag or a one-word heading says nothing of the ask.
                if words(line) >= 2 {
                    let tokens = counter.count_text(line) + 1;
                    if (used + tokens) as f64 > TASK_HEAD_SHARE * room {
                        break;
                    }
                    used += tokens;
                    if let Some(hash) = offered.is_new(line) {
                        covered.extend(salient_tokens(line).map(str::to_owned));
                        offered.push(
                            hash,
                            Candidate {
                                at: (t as u32, li as u32, 0),
                                label,
                                text: Cow::Borrowed(line),
                                score: f64::INFINITY,
                                tokens: tokens as u32,
                            },
                        );
                    }
                }
                head_end = li + 1;
            }
        }
    }
    let must_count = offered.candidates.len();
    // Kept whole above: its lines are not offered again. Otherwise they compete, boosted.
    let task = if task_kept.is_some() { None } else { task };

    let mut claimed: HashSet<&str> = HashSet::new();
    let n = sources.len().max(1) as f64;
    for (si, item) in sources.iter().enumerate().rev() {
        if task_kept == Some(si) {
            continue;
        }
        let label = labels.intern(label(item, sources), counter);
        let text: &str = &texts[si];
        let recency = 0.6 + 0.4 * (si as f64 + 1.0) / n;
        let recency = if item.message.role == Role::Assistant && !item.message.calls().is_empty() {
            recency * CALL_WEIGHT
        } else {
            recency
        };
        let lines: Vec<&str> = text.lines().collect();
        let is_task = task == Some(si);
        let short_user = item.message.role == Role::User && text.chars().count() < 120;
        // A tool result is kept as its first 200 characters, prefixed with the tool's
        // name. Here it is a candidate of low value: it gets a place when the lines that carry
        // identifiers leave room.
        if item.message.role == Role::Tool {
            let head: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
            let head: String = head.chars().take(200).collect();
            let meaningful = head.chars().filter(|c| c.is_alphanumeric()).count() >= 12;
            if meaningful && let Some(hash) = offered.is_new(&head) {
                let tokens = counter.count_text(&head) + 1;
                offered.push(
                    hash,
                    Candidate {
                        at: (si as u32, 0, HEAD),
                        label,
                        tokens: tokens as u32,
                        text: Cow::Owned(head),
                        score: 0.25 * recency,
                    },
                );
            }
        }
        for (li, line) in lines.iter().enumerate().rev() {
            let trimmed = line.trim();
            if trimmed.is_empty() || (is_task && li < head_end) {
                continue;
            }
            let mut fresh: Vec<&str> = Vec::new();
            for t in salient_tokens(line) {
                if !covered.contains(t) && !claimed.contains(t) && !fresh.contains(&t) {
                    fresh.push(t);
                }
            }
            let lower = trimmed.to_ascii_lowercase();
            let keyword = FACT_KEYWORDS.iter().any(|k| lower.contains(k));
            let bonus = if keyword { 1.5 } else { 0.0 } + if short_user { 2.0 } else { 0.0 };
            // A short line means little alone: take the line before it too.
            let body = if trimmed.chars().count() < 20 && li > 0 {
                Cow::Owned(format!("{} {}", lines[li - 1].trim(), trimmed))
            } else {
                Cow::Borrowed(trimmed)
            };
            for (pi, (piece, tokens)) in pieces(body, &fresh).into_iter().enumerate() {
                let mut score: f64 = tokens
                    .iter()
                    .map(|t| 1.0 + f64::from(*frequency.get(t).unwrap_or(&1)).ln())
                    .sum();
                if pi == 0 {
                    score += bonus;
                }
                if is_task {
                    score = score * 3.0 + task_line_value(&piece, li, lines.len());
                }
                let Some(hash) = offered.is_new(&piece).filter(|_| score > 0.0) else {
                    continue;
                };
                claimed.extend(tokens.iter().copied());
                let piece_tokens = counter.count_text(&piece) + 1;
                offered.push(
                    hash,
                    Candidate {
                        at: (si as u32, li as u32, pi as u32),
                        label,
                        text: piece,
                        score: score * recency,
                        tokens: piece_tokens as u32,
                    },
                );
            }
        }
    }
    let candidates = offered.candidates;
    if candidates.is_empty() {
        return None;
    }
    // Greedy by value per token (the task statement first).
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by(|&a, &b| {
        let da = candidates[a].score / candidates[a].tokens as f64;
        let db = candidates[b].score / candidates[b].tokens as f64;
        db.total_cmp(&da)
            .then(candidates[b].at.cmp(&candidates[a].at))
    });
    let mut chosen: Vec<usize> = Vec::new();
    let mut labelled: HashSet<u32> = HashSet::new();
    let mut used = fixed;
    // Two passes: the lines that carry something first; then tool results' heads (the classic consolidator's
    // rule) for the outputs nothing else represents, while room remains.
    for heads in [false, true] {
        for &i in &order {
            let c = &candidates[i];
            let is_head = c.at.2 == HEAD;
            if is_head != heads || (is_head && labelled.contains(&c.at.0)) {
                continue;
            }
            let cost = c.tokens as usize
                + if labelled.contains(&c.at.0) {
                    0
                } else {
                    labels.tokens(c.label)
                };
            if used + cost <= budget {
                used += cost;
                labelled.insert(c.at.0);
                chosen.push(i);
            }
        }
    }
    if chosen.is_empty() {
        return None;
    }
    chosen.sort_by_key(|&i| candidates[i].at);
    // The per-piece estimates are upper bounds in practice; the exact count decides.
    loop {
        // One bullet per source message: its label, then its pieces in order.
        let mut content = header.clone();
        let mut previous: Option<u32> = None;
        for &i in &chosen {
            let c = &candidates[i];
            if previous == Some(c.at.0) {
                content.push_str(if c.text.starts_with('…') {
                    " "
                } else {
                    "\n  "
                });
            } else {
                content.push_str("\n- ");
                content.push_str(labels.text(c.label));
                content.push(' ');
            }
            content.push_str(&c.text);
            previous = Some(c.at.0);
        }
        let message = Message::with_content(Role::System, Some(Content::Text(content)));
        let tokens = counter.count_message(&message).total();
        if tokens <= budget {
            let source_ids = sources
                .iter()
                .map(|i| i.source_id().into_owned())
                .filter(|s| !s.is_empty())
                .collect();
            return Some(Built {
                message,
                tokens,
                source_ids,
            });
        }
        // Drop the least valuable line and try again.
        let worst = chosen
            .iter()
            .enumerate()
            .filter(|(_, i)| **i >= must_count || chosen.len() == 1)
            .min_by(|(_, a), (_, b)| {
                (candidates[**a].score / candidates[**a].tokens as f64)
                    .total_cmp(&(candidates[**b].score / candidates[**b].tokens as f64))
            })
            .map(|(k, _)| k)?;
        chosen.remove(worst);
        if chosen.is_empty() {
            return None;
        }
    }
}

/// What a line of a task statement too long to keep whole is worth besides its identifiers: its
/// words (a line of prose says what to do; a fence or a one-word heading says nothing), up to a
/// line of ten, and up to twice that at the top of the statement, where the ask usually is.
fn task_line_value(line: &str, index: usize, lines: usize) -> f64 {
    let words = words(line);
    if words < 2 {
        return 0.0;
    }
    let top = 1.0 - index as f64 / lines.max(1) as f64;
    (0.3 * words as f64).min(3.0) * (1.0 + top)
}

/// The words of `line`: what is separated by spaces and has two letters or more.
fn words(line: &str) -> usize {
    line.split_whitespace()
        .filter(|w| w.chars().filter(|c| c.is_alphabetic()).count() >= 2)
        .count()
}

/// `[user]`, `[assistant]`, `[shell]` (a tool's output) or `[shell call]` (the assistant's call,
/// with its arguments).
fn label(item: &Item<'_>, sources: &[&Item<'_>]) -> String {
    let m = &item.message;
    let who = match m.role {
        Role::Tool => {
            let id = m.tool_call_id().unwrap_or("");
            let name = m.name().map(str::to_owned).or_else(|| {
                sources
                    .iter()
                    .flat_map(|i| i.message.calls())
                    .find(|c| c.id == id)
                    .map(|c| c.name.clone())
            });
            name.unwrap_or_else(|| "tool".into())
        }
        Role::Assistant if !m.calls().is_empty() => format!("{} call", m.calls()[0].name),
        role => role.to_string(),
    };
    format!("[{who}]")
}

/// The parts of a line worth keeping, each with the identifiers it carries. A line up to
/// [`MAX_LINE_CHARS`] is kept whole. A longer one (a JSON blob on one line, a minified file)
/// gives keyword-in-context snippets instead: the text around the last mention of each
/// identifier, [`SNIPPET_CONTEXT`] characters each side with white space collapsed, merged where
/// they overlap.
fn pieces<'t>(line: Cow<'t, str>, identifiers: &[&'t str]) -> Vec<(Cow<'t, str>, Vec<&'t str>)> {
    if line.chars().count() <= MAX_LINE_CHARS {
        return vec![(line, identifiers.to_vec())];
    }
    let collapsed = line.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut spans: Vec<(usize, usize, Vec<&'t str>)> = identifiers
        .iter()
        .filter_map(|t| {
            let at = collapsed.rfind(t)?;
            let start = floor_boundary(&collapsed, at.saturating_sub(SNIPPET_CONTEXT));
            let end = ceil_boundary(&collapsed, at + t.len() + SNIPPET_CONTEXT);
            Some((
                widen_left(&collapsed, start),
                widen_right(&collapsed, end),
                vec![*t],
            ))
        })
        .collect();
    spans.sort_by_key(|s| s.0);
    let mut merged: Vec<(usize, usize, Vec<&'t str>)> = Vec::new();
    for span in spans {
        match merged.last_mut() {
            Some(last) if span.0 <= last.1 => {
                last.1 = last.1.max(span.1);
                last.2.extend(span.2);
            }
            _ => merged.push(span),
        }
    }
    merged
        .into_iter()
        .map(|(start, end, tokens)| {
            let mut text = String::new();
            if start > 0 {
                text.push('…');
            }
            text.push_str(&collapsed[start..end]);
            if end < collapsed.len() {
                text.push('…');
            }
            (Cow::Owned(text), tokens)
        })
        .collect()
}

/// How far a snippet may widen to reach a word boundary.
const WIDEN: usize = 6;

/// Moves a snippet's start left to the start of a word (at most [`WIDEN`] characters).
fn widen_left(s: &str, start: usize) -> usize {
    let floor = floor_boundary(s, start.saturating_sub(WIDEN));
    s[floor..start]
        .rfind([' ', ',', '{', '['])
        .map_or(start, |i| floor + i + 1)
}

/// Moves a snippet's end right to the end of a word (at most [`WIDEN`] characters).
fn widen_right(s: &str, end: usize) -> usize {
    let ceil = ceil_boundary(s, (end + WIDEN).min(s.len()));
    s[end..ceil]
        .find([' ', ',', '}', ']'])
        .map_or(end, |i| end + i)
}

fn floor_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_boundary(s: &str, mut i: usize) -> usize {
    while i < s.len() && !s.is_char_boundary(i) {
        i += 1;
    }
    i.min(s.len())
}

#[cfg(test)]
mod tests {
    use crate::compact::{CompactOptions, Kind, Strategy, compact_messages};
    use crate::count::TokenCounter;
    use crate::message::Message;
    use crate::tokenize::Tokenizer;

    /// The digest `messages` compacted to `budget` tokens get (cl100k, the default strategy).
    fn digest_of(messages: &[Message], budget: usize) -> String {
        let counter = TokenCounter::new(Tokenizer::cl100k().expect("cl100k"));
        let mut options = CompactOptions::new(budget);
        options.strategy = Strategy::Auto;
        let compacted = compact_messages(messages, &[], &counter, &options).expect("compacts");
        compacted
            .messages
            .iter()
            .find(|v| v.kind == Kind::Summary)
            .expect("a digest")
            .message
            .text()
            .into_owned()
    }

    #[test]
    fn a_repeated_line_is_kept_once_and_the_task_first() {
        let mut messages = vec![
            Message::system("You are a coding agent."),
            Message::user("Fix the crash in src/parser.rs: ParseError on empty input."),
        ];
        for i in 0..40 {
            // The same line, again and again, in the part that leaves the view.
            messages.push(Message::assistant(if i < 20 {
                "Running the suite again: pytest tests/test_parser.py".to_owned()
            } else {
                format!("Editing src/lexer.rs around line {i}")
            }));
            messages.push(Message::user(format!(
                "run {i}: failed at src/parser.rs:{} with ParseError_{i}",
                100 + i
            )));
        }
        messages.push(Message::assistant("Done."));
        let digest = digest_of(&messages, 400);
        let lines: Vec<&str> = digest.lines().collect();
        assert!(lines[0].starts_with(super::HEADER), "{digest}");
        // After the header and a blank line, the task statement, whole.
        assert_eq!(
            lines[2], "- [user] Fix the crash in src/parser.rs: ParseError on empty input.",
            "{digest}"
        );
        // The line said twenty times appears once.
        assert_eq!(
            digest.matches("pytest tests/test_parser.py").count(),
            1,
            "{digest}"
        );
        // Each bullet has its label, in the order the messages were said.
        let runs: Vec<usize> = lines
            .iter()
            .filter_map(|l| l.strip_prefix("- [user] run "))
            .map(|l| l.split(':').next().unwrap().parse().unwrap())
            .collect();
        assert!(runs.len() >= 3, "{digest}");
        assert!(runs.windows(2).all(|w| w[0] < w[1]), "{runs:?}");
    }

    #[test]
    fn a_long_task_statement_keeps_its_ask_before_its_fences_and_headings() {
        // A task statement far larger than the digest's budget: its ask at the top, then
        // prose, and a template of fences and headings under it.
        let mut task = String::from(
            "<pr_description>\nConsider removing the automatic conversion of structured columns into mixins\n",
        );
        for i in 0..30 {
            task.push_str(&format!(
                "Paragraph {i} explains the background of the change in some detail and at length.\n"
            ));
        }
        for heading in ["## Overview", "## Rules", "## Submission", "## Example"] {
            task.push_str(&format!("```\n{heading}\n```\nanything\n"));
        }
        let mut messages = vec![
            Message::system("You are a coding agent."),
            Message::user(task),
        ];
        for i in 0..30 {
            messages.push(Message::assistant(format!(
                "Looking at step {i} of the work, as planned."
            )));
        }
        messages.push(Message::assistant("Done."));
        let digest = digest_of(&messages, 300);
        assert!(
            digest.contains("Consider removing the automatic conversion of structured columns"),
            "{digest}"
        );
        for junk in ["```", "## Overview", "anything"] {
            assert!(!digest.contains(junk), "{junk} in {digest}");
        }
    }
}
