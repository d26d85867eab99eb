//! The extractive digest: one `[Session context consolidated]` message standing for the
//! messages that left the view (seed 000), built without an LLM.
//!
//! Seed 000 keeps lines with fact keywords, tool results cut to 200 characters and prefixed with
//! the tool's name, and short user messages; it skips long assistant prose and removes
//! duplicates. engram keeps those rules as candidates and then chooses what to keep within a
//! budget by what the agent is likely to refer to again: a line earns the identifiers (paths,
//! function names, ids, error names, numbers) that it alone still carries, that is, those not
//! visible anywhere in the rest of the view and not carried by a more recent line. Identifiers
//! seen more often weigh more; the task statement (the first user message) is kept first. Lines
//! are kept whole (clipped around their identifiers when very long) so that the fact keeps its
//! context, and they are listed in the order they were said.

use std::collections::{HashMap, HashSet};

use super::Item;
use super::salient::{message_lines_text, salient_tokens};
use crate::count::TokenCounter;
use crate::message::{Content, Message, Role};

use crate::session::facts::FACT_KEYWORDS;

/// The digest's first line (seed 000).
pub(crate) const HEADER: &str = "[Session context consolidated]";

/// Lines longer than this are kept as snippets around their identifiers.
const MAX_LINE_CHARS: usize = 240;
/// Characters kept on each side of an identifier in a snippet.
const SNIPPET_CONTEXT: usize = 44;

pub(crate) struct Built {
    pub(crate) message: Message,
    pub(crate) tokens: usize,
    pub(crate) source_ids: Vec<String>,
}

struct Candidate {
    /// Position for chronological order: (source index, line index, piece index).
    at: (usize, usize, usize),
    /// The bullet's label (`[user]`, `[shell]`): written once per source message.
    label: String,
    text: String,
    score: f64,
    /// Tokens of the text, and of the label when it is the message's first piece.
    tokens: usize,
    label_tokens: usize,
}

/// Builds the digest of `sources` (chronological) for at most `budget` tokens, given what stays
/// `visible`. `None` when nothing worth keeping fits.
pub(crate) fn build(
    sources: &[&Item<'_>],
    visible: &[&Message],
    counter: &TokenCounter,
    budget: usize,
) -> Option<Built> {
    // The header names the tool and the range that brings the originals back (one id per
    // line would cost more of a small budget than the lines are worth).
    let ids: Vec<_> = sources
        .iter()
        .map(|i| i.source_id())
        .filter(|id| !id.is_empty())
        .collect();
    let header = match (ids.first(), ids.last()) {
        (Some(first), Some(last)) => format!(
            "{HEADER} (key lines of {} earlier messages; read_history from={first} to={last} returns them whole)\n",
            sources.len()
        ),
        _ => format!(
            "{HEADER} (key lines of {} earlier messages)\n",
            sources.len()
        ),
    };
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
    let texts: Vec<String> = sources
        .iter()
        .map(|i| message_lines_text(&i.message))
        .collect();
    let mut frequency: HashMap<&str, u32> = HashMap::new();
    for text in &texts {
        for token in salient_tokens(text) {
            *frequency.entry(token).or_default() += 1;
        }
    }
    // The task statement (the first user message) is what every later step serves: kept whole
    // and first when it costs at most 40% of the budget; otherwise its lines compete, boosted.
    let task = sources.iter().position(|i| i.message.role == Role::User);
    let mut must: Vec<Candidate> = Vec::new();
    if let Some(t) = task {
        let label = label(sources[t], sources);
        let text = texts[t].trim().to_owned();
        let label_tokens = counter.count_text(&label) + 2;
        let tokens = counter.count_text(&text) + 1;
        if ((tokens + label_tokens) as f64) <= 0.4 * budget.saturating_sub(fixed) as f64 {
            covered.extend(salient_tokens(&texts[t]).map(str::to_owned));
            must.push(Candidate {
                at: (t, 0, 0),
                label,
                text,
                score: f64::INFINITY,
                tokens,
                label_tokens,
            });
        }
    }
    let task = task.filter(|_| must.is_empty());

    let mut candidates: Vec<Candidate> = Vec::new();
    let mut claimed: HashSet<&str> = HashSet::new();
    let mut seen_lines: HashSet<String> = HashSet::new();
    let n = sources.len().max(1) as f64;
    for (si, item) in sources.iter().enumerate().rev() {
        let label = label(item, sources);
        let text = &texts[si];
        let recency = 0.6 + 0.4 * (si as f64 + 1.0) / n;
        let lines: Vec<&str> = text.lines().collect();
        let is_task = task == Some(si);
        let short_user = item.message.role == Role::User && text.chars().count() < 120;
        if !must.is_empty() && Some(si) == sources.iter().position(|i| i.message.role == Role::User)
        {
            continue;
        }
        // Seed 000: a tool result is kept as its first 200 characters, prefixed with the tool's
        // name. Here it is a candidate of low value: it gets a place when the lines that carry
        // identifiers leave room.
        if item.message.role == Role::Tool {
            let head: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
            let head: String = head.chars().take(200).collect();
            let meaningful = head.chars().filter(|c| c.is_alphanumeric()).count() >= 12;
            if meaningful && seen_lines.insert(head.clone()) {
                candidates.push(Candidate {
                    at: (si, 0, usize::MAX),
                    label_tokens: counter.count_text(&label) + 2,
                    label: label.clone(),
                    tokens: counter.count_text(&head) + 1,
                    text: head,
                    score: 0.25 * recency,
                });
            }
        }
        for (li, line) in lines.iter().enumerate().rev() {
            let trimmed = line.trim();
            if trimmed.is_empty() {
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
                format!("{} {}", lines[li - 1].trim(), trimmed)
            } else {
                trimmed.to_owned()
            };
            for (pi, (piece, tokens)) in pieces(&body, &fresh).into_iter().enumerate() {
                let mut score: f64 = tokens
                    .iter()
                    .map(|t| 1.0 + f64::from(*frequency.get(t).unwrap_or(&1)).ln())
                    .sum();
                if pi == 0 {
                    score += bonus;
                }
                if is_task {
                    score = score * 3.0 + 3.0;
                }
                if score <= 0.0 || !seen_lines.insert(piece.clone()) {
                    continue;
                }
                claimed.extend(tokens.iter().copied());
                let tokens = counter.count_text(&piece) + 1;
                candidates.push(Candidate {
                    at: (si, li, pi),
                    label_tokens: counter.count_text(&label) + 2,
                    label: label.clone(),
                    text: piece,
                    score: score * recency,
                    tokens,
                });
            }
        }
    }
    let must_count = must.len();
    must.append(&mut candidates);
    let candidates = must;
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
    let mut labelled: HashSet<usize> = HashSet::new();
    let mut used = fixed;
    // Two passes: the lines that carry something first; then tool results' heads (seed 000's
    // rule) for the outputs nothing else represents, while room remains.
    for heads in [false, true] {
        for &i in &order {
            let c = &candidates[i];
            let is_head = c.at.2 == usize::MAX;
            if is_head != heads || (is_head && labelled.contains(&c.at.0)) {
                continue;
            }
            let cost = c.tokens
                + if labelled.contains(&c.at.0) {
                    0
                } else {
                    c.label_tokens
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
        let mut previous: Option<usize> = None;
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
                content.push_str(&c.label);
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
fn pieces<'t>(line: &str, identifiers: &[&'t str]) -> Vec<(String, Vec<&'t str>)> {
    if line.chars().count() <= MAX_LINE_CHARS {
        return vec![(line.to_owned(), identifiers.to_vec())];
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
            (text, tokens)
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
