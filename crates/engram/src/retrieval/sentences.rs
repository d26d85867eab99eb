//! Sentences: the one way recall, its excerpts, the text a unit is embedded by and a session's
//! timeline cut text into sentences.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentence_ends_at_a_stop_a_space_follows_or_at_a_line_end() {
        assert_eq!(
            sentences(
                "Fixed main.py for v3.5 today. She said \"it works now.\" Then we shipped it"
            )
            .collect::<Vec<_>>(),
            [
                "Fixed main.py for v3.5 today.",
                "She said \"it works now.\"",
                "Then we shipped it",
            ]
        );
        assert_eq!(
            sentences("We shipped the fix today.   \n\n  Then we slept. ").collect::<Vec<_>>(),
            ["We shipped the fix today.", "Then we slept."]
        );
        assert_eq!(
            sentences("Wow!!! Really? (yes.) e.g., this").collect::<Vec<_>>(),
            ["Wow!!!", "Really?", "(yes.)", "e.g., this"]
        );
    }
}
