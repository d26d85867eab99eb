//! What an agent refers to again: file paths, identifiers, ids, error names, numbers.
//!
//! A token is salient when it is at least 4 characters long and carries structure that prose
//! words do not: a digit, `_`, `.` or `/`, or an uppercase letter after its first character
//! (`parse_list`, `src/parser.rs`, `ParseError`, `call_3`, `2024-01-15`). Short all-digit
//! tokens (`42`) are too common to mean anything. These are the entities the next action of a
//! coding or support agent names: the file it edits, the function, the error, the order id.

/// The words that mark a line as a fact an agent states for later: a result, a decision, a
/// finding, an error, a change (`decided: deploy with blue-green`).
pub const FACT_KEYWORDS: [&str; 10] = [
    "result:",
    "decided:",
    "found:",
    "error:",
    "success:",
    "created:",
    "updated:",
    "deleted:",
    "confirmed:",
    "output:",
];

/// Characters that separate tokens (besides whitespace).
fn is_separator(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '(' | ')'
                | '['
                | ']'
                | '{'
                | '}'
                | '<'
                | '>'
                | '"'
                | '\''
                | '`'
                | ','
                | ';'
                | '='
                | '|'
        )
}

/// True when `token` (already trimmed) is salient.
pub fn is_salient(token: &str) -> bool {
    if token.is_ascii() {
        // The common case, byte by byte (sleep scores every line it summarises).
        let b = token.as_bytes();
        return b.len() >= 4
            && (b.iter().all(u8::is_ascii_digit)
                || b.iter()
                    .any(|&c| c.is_ascii_digit() || matches!(c, b'_' | b'.' | b'/'))
                || b[1..].iter().any(u8::is_ascii_uppercase));
    }
    if token.chars().count() < 4 {
        return false;
    }
    if token.chars().all(|c| c.is_ascii_digit()) {
        return token.len() >= 3;
    }
    token
        .chars()
        .any(|c| c.is_ascii_digit() || c == '_' || c == '.' || c == '/')
        || token.chars().skip(1).any(char::is_uppercase)
}

/// [`is_separator`] for one byte of ASCII text.
const fn is_separator_byte(b: u8) -> bool {
    matches!(
        b,
        b' ' | b'\t'
            | b'\n'
            | 0x0b
            | 0x0c
            | b'\r'
            | b'('
            | b')'
            | b'['
            | b']'
            | b'{'
            | b'}'
            | b'<'
            | b'>'
            | b'"'
            | b'\''
            | b'`'
            | b','
            | b';'
            | b'='
            | b'|'
    )
}

/// Byte classes for [`count_salient`]: a separator, a character trimmed from a token's ends,
/// one that gives a token structure (digit, `_`, `.`, `/`), an uppercase letter.
const SEP: u8 = 1;
const TRIM: u8 = 2;
const STRUCTURE: u8 = 4;
const UPPER: u8 = 8;

static CLASS: [u8; 128] = {
    let mut class = [0u8; 128];
    let mut b = 0;
    while b < 128 {
        let c = b as u8;
        let mut k = 0;
        if is_separator_byte(c) {
            k |= SEP;
        }
        if matches!(c, b'.' | b',' | b':' | b';' | b'!' | b'?') {
            k |= TRIM;
        }
        if c.is_ascii_digit() || matches!(c, b'_' | b'.' | b'/') {
            k |= STRUCTURE;
        }
        if c.is_ascii_uppercase() {
            k |= UPPER;
        }
        class[b] = k;
        b += 1;
    }
    class
};

/// How many salient tokens `text` has: `salient_tokens(text).count()`, in one pass over the
/// bytes of ASCII text with a table of byte classes (sleep scores every line it summarises).
pub fn count_salient(text: &str) -> usize {
    if !text.is_ascii() {
        return salient_tokens(text).count();
    }
    let b = text.as_bytes();
    let class = |i: usize| CLASS[usize::from(b[i] & 0x7f)];
    let mut n = 0;
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && class(i) & SEP != 0 {
            i += 1;
        }
        let mut start = i;
        while i < b.len() && class(i) & SEP == 0 {
            i += 1;
        }
        let mut end = i;
        while start < end && class(start) & TRIM != 0 {
            start += 1;
        }
        while end > start && class(end - 1) & TRIM != 0 {
            end -= 1;
        }
        // At least 4 long, and structure anywhere or an uppercase letter after the first
        // (an all-digit token has structure: its digits).
        if end - start >= 4 {
            let mut after_first = 0;
            for j in start + 1..end {
                after_first |= class(j);
            }
            if (class(start) | after_first) & STRUCTURE != 0 || after_first & UPPER != 0 {
                n += 1;
            }
        }
    }
    n
}

/// The salient tokens of `text`, in order (with repeats).
pub fn salient_tokens(text: &str) -> SalientTokens<'_> {
    SalientTokens {
        rest: text,
        ascii: text.is_ascii(),
    }
}

/// The iterator [`salient_tokens`] returns. ASCII text (most of it) is split byte by byte
/// instead of char by char: sleep scores every line it summarises.
#[derive(Debug, Clone)]
pub struct SalientTokens<'a> {
    rest: &'a str,
    ascii: bool,
}

impl<'a> Iterator for SalientTokens<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        while !self.rest.is_empty() {
            let rest = self.rest;
            let (end, next) = if self.ascii {
                match rest.bytes().position(is_separator_byte) {
                    Some(end) => (end, end + 1),
                    None => (rest.len(), rest.len()),
                }
            } else {
                match rest.char_indices().find(|&(_, c)| is_separator(c)) {
                    Some((end, c)) => (end, end + c.len_utf8()),
                    None => (rest.len(), rest.len()),
                }
            };
            self.rest = &rest[next..];
            let token =
                rest[..end].trim_matches(|c| matches!(c, '.' | ',' | ':' | ';' | '!' | '?'));
            if is_salient(token) {
                return Some(token);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retrieval::message_lines_text;

    #[test]
    fn salient_tokens_are_structured_words() {
        let text = "Fix parse_list in src/parser.rs:182 (ParseError) for order #W123456, not the test; 42 items, 2024.";
        let got: Vec<&str> = salient_tokens(text).collect();
        assert_eq!(
            got,
            [
                "parse_list",
                "src/parser.rs:182",
                "ParseError",
                "#W123456",
                "2024"
            ]
        );
        assert!(!is_salient("the"));
        assert!(!is_salient("word"));
        assert!(is_salient("camelCase"));
        assert!(!is_salient("12"));
    }

    proptest::proptest! {
        /// The ASCII fast path decides as the definition does.
        #[test]
        fn the_ascii_path_agrees_with_the_definition(token in "[ -~]{0,12}") {
            let reference = token.chars().count() >= 4
                && (token.chars().all(|c| c.is_ascii_digit())
                    || token.chars().any(|c| c.is_ascii_digit() || "_./".contains(c))
                    || token.chars().skip(1).any(char::is_uppercase));
            proptest::prop_assert_eq!(is_salient(&token), reference);
        }
    }

    proptest::proptest! {
        /// The byte-by-byte split of ASCII text finds what the definition (a split on
        /// separator chars) finds, and so does the char-by-char one for any other text.
        #[test]
        fn salient_tokens_are_the_defined_split(
            text in "([ -~]|[\\t\\n\\x0b\\x0c\\r]|\\u{a0}|\\u{85}|\\u{2003}|é|日){0,60}"
        ) {
            let reference: Vec<&str> = text
                .split(is_separator)
                .map(|t| t.trim_matches(|c| matches!(c, '.' | ',' | ':' | ';' | '!' | '?')))
                .filter(|t| is_salient(t))
                .collect();
            proptest::prop_assert_eq!(count_salient(&text), reference.len());
            proptest::prop_assert_eq!(salient_tokens(&text).collect::<Vec<_>>(), reference);
        }

        /// The table-driven count of ASCII text (the fast path) agrees with the definition,
        /// on text dense in the characters that decide: trimmed punctuation, structure,
        /// uppercase, separators.
        #[test]
        fn ascii_salient_counts_are_the_definition(
            text in "([a-cA-C0-2_./:!?,;=()'\"` \t\n\r\x0b\x0c]|[ -~]){0,80}"
        ) {
            let reference = text
                .split(is_separator)
                .map(|t| t.trim_matches(|c| matches!(c, '.' | ',' | ':' | ';' | '!' | '?')))
                .filter(|t| is_salient(t))
                .count();
            proptest::prop_assert_eq!(count_salient(&text), reference);
        }
    }

    #[test]
    fn salient_counts_of_examples() {
        assert_eq!(
            count_salient("edit src/parser.rs: fix ParseError in parse_list."),
            3
        );
        assert_eq!(count_salient("call 42 then 2024 and ...end... Yes!"), 1);
        assert_eq!(count_salient("(1.5) 'x.y.z' [a_b] ab/c ..x.."), 2);
        assert_eq!(count_salient(""), 0);
    }

    #[test]
    fn tool_arguments_are_decoded() {
        let m = crate::Message::assistant_tool_calls(vec![crate::ToolCall::function(
            "c",
            "shell",
            r#"{"command": "grep -n \"foo_bar\" src/a.py\nls"}"#,
        )]);
        let text = message_lines_text(&m);
        assert!(text.contains("grep -n \"foo_bar\" src/a.py\nls"), "{text}");
    }
}
