//! A hand-written pre-tokenizer for ASCII text, equal to OpenAI's cl100k and o200k regexes.
//!
//! tiktoken splits text into pieces with a regex before running BPE on each piece. The regex is
//! the slowest part of counting (about 80 MB/s here). On ASCII text its alternatives reduce to
//! a few byte classes, so a direct matcher does the same job several times faster. Non-ASCII
//! text goes through the original regex: [`chunks`] cuts the text only where every piece
//! boundary is certain (right after a `\n` followed by an ASCII letter or digit: no alternative
//! of either regex can run across it), and only pure-ASCII chunks take the fast path.
//!
//! The alternatives, in the order the regexes try them (leftmost-first), restricted to ASCII:
//!
//! cl100k: `'s|'t|'re|'ve|'m|'ll|'d` (any case) · `[^\r\n L N]? L+` · `N{1,3}` ·
//!         ` ?[^\s L N]+[\r\n]*` · `\s*[\r\n]+` · `\s+(?!\S)` · `\s+`
//!
//! o200k:  `[^\r\n L N]? [A-Z]* [a-z]+ ('s|'t|'re|'ve|'m|'ll|'d)?` ·
//!         `[^\r\n L N]? [A-Z]+ [a-z]* (contraction)?` · `N{1,3}` · ` ?[^\s L N]+[\r\n/]*` ·
//!         `\s*[\r\n]+` · `\s+(?!\S)` · `\s+`
//!
//! Tests compare every piece with the regex on random and real text.

/// Which regex to reproduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pattern {
    Cl100k,
    O200k,
}

#[inline]
fn is_letter(b: u8) -> bool {
    b.is_ascii_alphabetic()
}

#[inline]
fn is_digit(b: u8) -> bool {
    b.is_ascii_digit()
}

/// `\s` on ASCII: tab, line feed, vertical tab, form feed, carriage return, space.
#[inline]
fn is_space(b: u8) -> bool {
    matches!(b, b'\t' | b'\n' | 0x0B | 0x0C | b'\r' | b' ')
}

#[inline]
fn is_newline(b: u8) -> bool {
    b == b'\n' || b == b'\r'
}

/// `[^\s\p{L}\p{N}]` on ASCII.
#[inline]
fn is_punct(b: u8) -> bool {
    !is_space(b) && !is_letter(b) && !is_digit(b)
}

#[inline]
fn run_end(bytes: &[u8], mut i: usize, class: impl Fn(u8) -> bool) -> usize {
    while i < bytes.len() && class(bytes[i]) {
        i += 1;
    }
    i
}

/// The end of a contraction (`'s`, `'t`, `'re`, `'ve`, `'m`, `'ll`, `'d`, any case) at `i`.
#[inline]
fn contraction_end(bytes: &[u8], i: usize) -> Option<usize> {
    if bytes.get(i) != Some(&b'\'') {
        return None;
    }
    let a = bytes.get(i + 1)?.to_ascii_lowercase();
    if matches!(a, b's' | b't' | b'm' | b'd') {
        return Some(i + 2);
    }
    let b = bytes.get(i + 2)?.to_ascii_lowercase();
    matches!((a, b), (b'r', b'e') | (b'v', b'e') | (b'l', b'l')).then_some(i + 3)
}

/// The whitespace alternatives shared by both regexes, at `i` where `bytes[i]` is whitespace.
#[inline]
fn whitespace_end(bytes: &[u8], i: usize) -> usize {
    let end = run_end(bytes, i, is_space);
    // `\s*[\r\n]+`: up to and including the run's last newline.
    if let Some(last_newline) = bytes[i..end].iter().rposition(|&b| is_newline(b)) {
        return i + last_newline + 1;
    }
    // `\s+(?!\S)`: the run, less its last character when a non-space follows.
    if end == bytes.len() {
        return end;
    }
    if end - i >= 2 {
        return end - 1;
    }
    // `\s+`.
    end
}

/// The end of the cl100k piece starting at `i` (`i < bytes.len()`, ASCII input).
fn next_cl100k(bytes: &[u8], i: usize) -> usize {
    let c = bytes[i];
    if let Some(end) = contraction_end(bytes, i) {
        return end;
    }
    if is_letter(c) {
        return run_end(bytes, i + 1, is_letter);
    }
    if !is_newline(c) && !is_digit(c) && bytes.get(i + 1).is_some_and(|&b| is_letter(b)) {
        return run_end(bytes, i + 1, is_letter);
    }
    if is_digit(c) {
        return run_end(bytes, i, is_digit).min(i + 3);
    }
    let p = if c == b' ' { i + 1 } else { i };
    if bytes.get(p).is_some_and(|&b| is_punct(b)) {
        let end = run_end(bytes, p, is_punct);
        return run_end(bytes, end, is_newline);
    }
    whitespace_end(bytes, i)
}

/// The end of the o200k piece starting at `i` (`i < bytes.len()`, ASCII input).
fn next_o200k(bytes: &[u8], i: usize) -> usize {
    let c = bytes[i];
    let letters_at = if is_letter(c) {
        Some(i)
    } else if !is_newline(c) && !is_digit(c) && bytes.get(i + 1).is_some_and(|&b| is_letter(b)) {
        Some(i + 1)
    } else {
        None
    };
    if let Some(q) = letters_at {
        let upper_end = run_end(bytes, q, |b| b.is_ascii_uppercase());
        let end = if bytes.get(upper_end).is_some_and(u8::is_ascii_lowercase) {
            run_end(bytes, upper_end, |b| b.is_ascii_lowercase())
        } else {
            upper_end
        };
        return contraction_end(bytes, end).unwrap_or(end);
    }
    if is_digit(c) {
        return run_end(bytes, i, is_digit).min(i + 3);
    }
    let p = if c == b' ' { i + 1 } else { i };
    if bytes.get(p).is_some_and(|&b| is_punct(b)) {
        let end = run_end(bytes, p, is_punct);
        return run_end(bytes, end, |b| is_newline(b) || b == b'/');
    }
    whitespace_end(bytes, i)
}

/// Calls `f` with each piece of an ASCII text, in order, while it returns true. Returns false
/// when `f` stopped it.
#[inline]
pub(crate) fn for_each_ascii_piece<'a>(
    pattern: Pattern,
    text: &'a str,
    mut f: impl FnMut(&'a str) -> bool,
) -> bool {
    let bytes = text.as_bytes();
    debug_assert!(bytes.is_ascii());
    let next = match pattern {
        Pattern::Cl100k => next_cl100k,
        Pattern::O200k => next_o200k,
    };
    let mut i = 0;
    while i < bytes.len() {
        let end = next(bytes, i);
        // ASCII text: every index is a char boundary.
        if !f(&text[i..end]) {
            return false;
        }
        i = end;
    }
    true
}

/// Cuts `text` where a piece boundary is certain for both regexes: right after a `\n` that is
/// followed by an ASCII letter or digit. Chunks are at least `min_len` bytes (but the last).
pub(crate) fn chunks(text: &str, min_len: usize) -> impl Iterator<Item = &str> {
    let bytes = text.as_bytes();
    let mut start = 0;
    std::iter::from_fn(move || {
        if start >= bytes.len() {
            return None;
        }
        let mut cut = start + min_len.max(1);
        while cut < bytes.len() && !(bytes[cut - 1] == b'\n' && bytes[cut].is_ascii_alphanumeric())
        {
            cut += 1;
        }
        let cut = cut.min(bytes.len());
        // Both sides of a cut are ASCII bytes, so the cut is a char boundary.
        let chunk = &text[start..cut];
        start = cut;
        Some(chunk)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn regex_pieces(pattern: Pattern, text: &str) -> Vec<&str> {
        let tokenizer = match pattern {
            Pattern::Cl100k => bpe_openai::cl100k_base(),
            Pattern::O200k => bpe_openai::o200k_base(),
        };
        tokenizer.split(text).collect()
    }

    fn fast_pieces(pattern: Pattern, text: &str) -> Vec<&str> {
        let mut out = Vec::new();
        let _ = for_each_ascii_piece(pattern, text, |p| {
            out.push(p);
            true
        });
        out
    }

    const TRICKY: &[&str] = &[
        "",
        "a",
        " ",
        "\n",
        "hello world",
        "I'm here, you're there; they'll go. It's 'quoted'",
        "HTTPServer getURL fooBar ABC abc ABc aBC",
        "x = 12345678 + 9;",
        "  \n  x",
        "a  \n\n  b  ",
        "trailing   ",
        "\t\tindented\n    code();\n",
        "path/to/file.rs:42:7",
        "}\n//comment\n/x",
        "'S 'T 'RE 'Ve 'M 'LL 'D 'x ''s",
        "a\r\nb\r\n\r\n",
        "\x0b\x0c weird",
        "(!@#$%^&*)",
        "DON'T Won't",
        "e.g. 3.14159 1e-10",
        "  ",
        " \n",
        "x\n\n",
        "A'S",
        "\x00\x01a",
    ];

    #[test]
    fn tricky_strings_match_the_regexes() {
        for pattern in [Pattern::Cl100k, Pattern::O200k] {
            for text in TRICKY {
                assert_eq!(
                    fast_pieces(pattern, text),
                    regex_pieces(pattern, text),
                    "{pattern:?} {text:?}"
                );
            }
        }
    }

    fn ascii_text() -> impl Strategy<Value = String> {
        let atom = prop_oneof![
            Just(" ".to_owned()),
            Just("\n".to_owned()),
            Just("\r".to_owned()),
            Just("\t".to_owned()),
            Just("'".to_owned()),
            Just("/".to_owned()),
            Just("\x0b".to_owned()),
            "[a-z]{1,4}",
            "[A-Z]{1,3}",
            "[0-9]{1,5}",
            "[!-/:-@\\[-`{-~]{1,3}",
            Just("'s".to_owned()),
            Just("'LL".to_owned()),
            Just("  ".to_owned()),
        ];
        proptest::collection::vec(atom, 0..40).prop_map(|v| v.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(engram_testkit::proptest_cases(2000)))]
        #[test]
        fn random_ascii_matches_the_regexes(text in ascii_text()) {
            for pattern in [Pattern::Cl100k, Pattern::O200k] {
                prop_assert_eq!(fast_pieces(pattern, &text), regex_pieces(pattern, &text));
            }
        }

        #[test]
        fn chunk_cuts_are_piece_boundaries(text in "([a-z0-9 \n\t'/é😀.]{0,12}\n?){0,12}") {
            for pattern in [Pattern::Cl100k, Pattern::O200k] {
                let whole: Vec<&str> = regex_pieces(pattern, &text);
                let chunked: Vec<&str> = chunks(&text, 1).flat_map(|c| regex_pieces(pattern, c)).collect();
                prop_assert_eq!(whole, chunked);
            }
        }
    }
}
