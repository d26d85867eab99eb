//! A recalled message cut to what carries the query: the sentences that share the query's words,
//! in the order they were said, after a marker that says how much was left out and how to read
//! the message whole. Recall uses it for a unit longer than its whole budget, and for one it
//! ranked inside its budget that no longer fits whole in what is left ([`super::planner`]): a
//! long tool output or a long turn about the topic then shows the lines about it instead of
//! nothing.

use std::collections::HashSet;

use crate::retrieval;

/// A sentence longer than this many characters is kept as a window of this size around its
/// first word of the query: a line of minified JSON or a log line of thousands of characters
/// would otherwise fill the excerpt alone.
const MAX_SENTENCE_CHARS: usize = 300;

/// A line at most this long is kept or left out whole; a longer one, sentence by sentence.
const WHOLE_LINE_CHARS: usize = 120;

/// What a message is cut to: the kept sentences joined in order, with how many were kept of how
/// many there were.
#[derive(Debug, PartialEq)]
pub(super) struct Cut {
    pub(super) text: String,
    pub(super) kept: usize,
    pub(super) of: usize,
}

/// The sentences of one message that share a word with the query, found once: the planner
/// asks for fewer and fewer of them ([`Matches::cut`]) until its unit fits.
pub(super) struct Matches<'t> {
    sentences: Vec<&'t str>,
    /// The matching sentences (each text once), those with more of the query's words first,
    /// then in the order they were said.
    best: Vec<usize>,
}

impl<'t> Matches<'t> {
    /// The sentences of `text` that share a word with `wanted` (the query's [`retrieval::terms`]);
    /// `None` when none does.
    pub(super) fn of(text: &'t str, wanted: &HashSet<String>) -> Option<Self> {
        let sentences = sentences(text);
        let mut seen = HashSet::new();
        let mut matching: Vec<(usize, usize)> = sentences
            .iter()
            .enumerate()
            // A line a log repeats is kept once.
            .filter(|&(_, s)| seen.insert(*s))
            .filter_map(|(at, s)| {
                let shared: HashSet<String> = retrieval::terms(s)
                    .into_iter()
                    .filter(|t| wanted.contains(t))
                    .collect();
                (!shared.is_empty()).then_some((at, shared.len()))
            })
            .collect();
        if matching.is_empty() {
            return None;
        }
        matching.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        Some(Matches {
            best: matching.into_iter().map(|(at, _)| at).collect(),
            sentences,
        })
    }

    /// At most `most` of the matching sentences, the best, listed in the order they were said
    /// and joined by " … " (each long one clipped around `wanted`). `None` when `most` is 0, or
    /// when every sentence would be kept (the cut would save nothing).
    pub(super) fn cut(&self, most: usize, wanted: &HashSet<String>) -> Option<Cut> {
        let mut kept: Vec<usize> = self.best.iter().copied().take(most).collect();
        if kept.is_empty() || kept.len() == self.sentences.len() {
            return None;
        }
        kept.sort_unstable();
        let text = kept
            .iter()
            .map(|&at| clip(self.sentences[at], wanted))
            .collect::<Vec<_>>()
            .join(" … ");
        Some(Cut {
            text,
            kept: kept.len(),
            of: self.sentences.len(),
        })
    }
}

/// The parts of `text` an excerpt keeps or leaves out: its lines, and the sentences of a line
/// longer than [`WHOLE_LINE_CHARS`] ([`retrieval::line_sentences`]); blank ones left out. A log's line
/// is one record ("test a::b ... ok" is not two sentences), a paragraph of prose is several.
fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.chars().count() <= WHOLE_LINE_CHARS {
            if !line.trim().is_empty() {
                out.push(line.trim());
            }
        } else {
            out.extend(retrieval::line_sentences(line));
        }
    }
    out
}

/// `sentence`, or when it is longer than [`MAX_SENTENCE_CHARS`], that many characters around its
/// first word of the query (from the sentence's start when none is found), marked with "…" where
/// it was cut.
fn clip(sentence: &str, wanted: &HashSet<String>) -> String {
    let chars = sentence.chars().count();
    if chars <= MAX_SENTENCE_CHARS {
        return sentence.to_owned();
    }
    let first = sentence
        .char_indices()
        .filter(|&(i, c)| {
            c.is_alphanumeric()
                && !sentence[..i]
                    .chars()
                    .next_back()
                    .is_some_and(char::is_alphanumeric)
        })
        .find(|&(i, _)| {
            let word: String = sentence[i..]
                .chars()
                .take_while(|c| c.is_alphanumeric())
                .collect();
            retrieval::terms(&word).iter().any(|t| wanted.contains(t))
        })
        .map_or(0, |(i, _)| sentence[..i].chars().count());
    let start = first
        .saturating_sub(MAX_SENTENCE_CHARS / 3)
        .min(chars - MAX_SENTENCE_CHARS);
    let window: String = sentence
        .chars()
        .skip(start)
        .take(MAX_SENTENCE_CHARS)
        .collect();
    let before = if start > 0 { "…" } else { "" };
    let after = if start + MAX_SENTENCE_CHARS < chars {
        "…"
    } else {
        ""
    };
    format!("{before}{window}{after}")
}

/// The marker an excerpt of message `id` opens with: what was kept, and `reads_back` (how the
/// whole message comes back, when the agent has a tool for it).
pub(super) fn marker(cut: &Cut, id: &str, reads_back: &str) -> String {
    format!(
        "[EXCERPT - engram kept {} of {} lines and sentences of message {id}, those with the query's words{reads_back}]",
        cut.kept, cut.of
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `text` cut to at most `most` of its sentences with the query's words.
    fn cut(text: &str, wanted: &HashSet<String>, most: usize) -> Option<Cut> {
        Matches::of(text, wanted)?.cut(most, wanted)
    }

    fn wanted(query: &str) -> HashSet<String> {
        retrieval::terms(query).into_iter().collect()
    }

    #[test]
    fn the_lines_with_the_query_words_are_kept_in_order() {
        let text = "cargo test\ntest lexer::strings ... FAILED\ntest lexer::numbers ... ok\n\
                    test parser::strings ... FAILED\ntest result: FAILED. 1 passed; 2 failed";
        let cut = cut(text, &wanted("which strings failed?"), 10).unwrap();
        assert_eq!(
            cut,
            Cut {
                text: "test lexer::strings ... FAILED … test parser::strings ... FAILED … \
                       test result: FAILED. 1 passed; 2 failed"
                    .into(),
                kept: 3,
                of: 5,
            }
        );
    }

    #[test]
    fn a_long_paragraph_is_cut_by_sentences_those_with_more_query_words_first() {
        let text = "We spent the whole of the spring looking at flats, and in the end we moved \
                    to Lisbon in May. The weather was fine all week. Lisbon is far from my \
                    sister, but she visited us in June and loved the tiles.";
        assert!(text.chars().count() > WHOLE_LINE_CHARS);
        let both = cut(text, &wanted("when did they move to Lisbon?"), 10).unwrap();
        assert_eq!(
            both.text,
            "We spent the whole of the spring looking at flats, and in the end we moved to \
             Lisbon in May. … Lisbon is far from my sister, but she visited us in June and loved \
             the tiles."
        );
        assert_eq!((both.kept, both.of), (2, 3));
        let one = cut(text, &wanted("when did they move to Lisbon?"), 1).unwrap();
        assert_eq!(
            one.text,
            "We spent the whole of the spring looking at flats, and in the end we moved to \
             Lisbon in May."
        );
    }

    #[test]
    fn no_cut_without_a_match_or_when_everything_matches() {
        let text = "The build failed.\nThe linker ran out of memory.";
        assert_eq!(cut(text, &wanted("pottery class"), 5), None);
        assert_eq!(cut("The build failed.", &wanted("build"), 5), None);
    }

    #[test]
    fn a_repeated_line_is_kept_once() {
        let text = "retry: connection refused\nwaiting\n".repeat(3);
        let cut = cut(&text, &wanted("connection refused"), 10).unwrap();
        assert_eq!(
            (cut.text.as_str(), cut.kept, cut.of),
            ("retry: connection refused", 1, 6)
        );
    }

    #[test]
    fn a_long_line_is_kept_around_its_match() {
        let long = format!("{} ERROR disk full {}", "x ".repeat(400), "y ".repeat(400));
        let text = format!("{long}\nok");
        let cut = cut(&text, &wanted("disk"), 5).unwrap();
        assert!(
            cut.text.starts_with('…') && cut.text.ends_with('…'),
            "{}",
            cut.text
        );
        assert!(cut.text.contains("ERROR disk full"), "{}", cut.text);
        assert!(cut.text.chars().count() <= MAX_SENTENCE_CHARS + 2);
    }

    #[test]
    fn the_marker_says_what_was_kept_and_how_to_read_it_whole() {
        let cut = Cut {
            text: String::new(),
            kept: 2,
            of: 9,
        };
        assert_eq!(
            marker(&cut, "m7", "; read_history ids=[m7] returns it whole"),
            "[EXCERPT - engram kept 2 of 9 lines and sentences of message m7, those with the query's words; read_history ids=[m7] returns it whole]"
        );
    }
}
