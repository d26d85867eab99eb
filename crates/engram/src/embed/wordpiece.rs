//! BERT's uncased WordPiece tokenization, as all-MiniLM-L6-v2 reads text: lower case, accents
//! stripped, words split at spaces and punctuation (each punctuation sign, and each Chinese,
//! Japanese or Korean ideograph, a word of its own), then each word cut greedily into the
//! longest pieces of the vocabulary, a piece inside a word written `##piece`. A word the
//! vocabulary cannot cut is left out (the model's `[UNK]` says nothing a static model can use).

use std::collections::HashMap;

use unicode_normalization::UnicodeNormalization;

/// Words longer than this many characters are not cut (BERT's limit).
const MAX_WORD_CHARS: usize = 100;

/// A WordPiece vocabulary: each piece's index.
#[derive(Debug, Default)]
pub(crate) struct WordPiece {
    ids: HashMap<String, u32>,
}

impl WordPiece {
    /// The vocabulary of `tokens`, each token's index its place in the list.
    pub(crate) fn new<'a>(tokens: impl IntoIterator<Item = &'a str>) -> Self {
        WordPiece {
            ids: tokens
                .into_iter()
                .enumerate()
                .map(|(i, t)| (t.to_owned(), i as u32))
                .collect(),
        }
    }

    /// The indices of the pieces of `text`, in order.
    pub(crate) fn pieces(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        for word in words(text) {
            self.cut(&word, &mut out);
        }
        out
    }

    /// Appends the pieces of one `word` (lower case, no space), or nothing when the vocabulary
    /// cannot cut it whole.
    fn cut(&self, word: &str, out: &mut Vec<u32>) {
        if word.chars().count() > MAX_WORD_CHARS {
            return;
        }
        let mut pieces = Vec::new();
        let mut start = 0;
        let mut candidate = String::with_capacity(word.len() + 2);
        while start < word.len() {
            let mut end = word.len();
            let mut found = None;
            while end > start {
                candidate.clear();
                if start > 0 {
                    candidate.push_str("##");
                }
                candidate.push_str(&word[start..end]);
                if let Some(&id) = self.ids.get(&candidate) {
                    found = Some(id);
                    break;
                }
                // One character shorter.
                end = word[..end]
                    .char_indices()
                    .next_back()
                    .map_or(start, |(i, _)| i);
            }
            match found {
                Some(id) => pieces.push(id),
                None => return,
            }
            start = end;
        }
        out.extend(pieces);
    }
}

/// The words of `text` as BERT's basic tokenizer splits them: lower case, accents stripped,
/// control characters dropped, split at white space and around each punctuation sign and CJK
/// ideograph.
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut Vec<String>| {
        if !word.is_empty() {
            out.push(std::mem::take(word));
        }
    };
    for c in text.nfd() {
        if is_mark(c) || c == '\0' || c == '\u{fffd}' || (c.is_control() && !c.is_whitespace()) {
            continue;
        }
        if c.is_whitespace() {
            flush(&mut word, &mut out);
        } else if is_punctuation(c) || is_cjk(c) {
            flush(&mut word, &mut out);
            out.push(c.to_string());
        } else {
            word.extend(c.to_lowercase());
        }
    }
    flush(&mut word, &mut out);
    out
}

/// A combining mark (what NFD splits off an accented letter).
fn is_mark(c: char) -> bool {
    matches!(c as u32, 0x0300..=0x036F | 0x1AB0..=0x1AFF | 0x1DC0..=0x1DFF | 0x20D0..=0x20FF | 0xFE20..=0xFE2F)
}

/// Punctuation as BERT reads it: every ASCII sign that is not a letter, digit or space, and
/// Unicode's punctuation.
fn is_punctuation(c: char) -> bool {
    c.is_ascii_punctuation()
        || (!c.is_ascii()
            && !c.is_alphanumeric()
            && !c.is_whitespace()
            && matches!(c as u32, 0x2000..=0x206F | 0x3000..=0x303F | 0xFF00..=0xFF0F | 0xFF1A..=0xFF20 | 0xA0..=0xBF | 0xD7 | 0xF7))
}

/// A Chinese, Japanese or Korean ideograph.
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F | 0x2B820..=0x2CEAF | 0xF900..=0xFAFF | 0x2F800..=0x2FA1F)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_cut_into_the_longest_pieces_of_the_vocabulary() {
        let vocab = WordPiece::new([
            "[UNK]", "the", "paint", "##ed", "##ing", "café", "cafe", "!", ",", "un", "##aff",
            "##able",
        ]);
        assert_eq!(vocab.pieces("The painted"), [1, 2, 3]);
        // Lower case, accents stripped, punctuation a word of its own.
        assert_eq!(vocab.pieces("CAFÉ, painting!"), [6, 8, 2, 4, 7]);
        assert_eq!(vocab.pieces("unaffable"), [9, 10, 11]);
        // A word the vocabulary cannot cut whole is left out.
        assert_eq!(vocab.pieces("the zebra painted"), [1, 2, 3]);
        assert!(vocab.pieces("").is_empty());
        assert_eq!(words("a\u{0}b\tc 中文"), ["ab", "c", "中", "文"]);
    }
}
