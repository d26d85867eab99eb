//! The index's words: lowercased, stemmed (English Porter2), without stopwords.

use engram::retrieval::words::STOPWORDS;

/// The name the tokenizer is registered under. It is part of the schema: an index written
/// with another tokenizer is rebuilt on open (engram's first indexed stop words; its second
/// dropped a list of its own, not the one recall drops; its third took up the whole of
/// Snowball's English stop list).
pub(super) const TOKENIZER: &str = "engram-4";
/// Words longer than this are not indexed (tantivy's default: base64, hashes).
const MAX_WORD: usize = 40;

/// Words, lowercased and stemmed (English Porter2), without [`STOPWORDS`], with a cache of
/// stems: stemming was a third of indexing time, and text repeats its words. Stopwords are a
/// third of the words of the memory the benchmarks import; a query leaves them out anyway, and
/// indexing them was a third of the postings to build.
#[derive(Clone)]
pub(super) struct StemmingTokenizer {
    stemmer: std::sync::Arc<rust_stemmers::Stemmer>,
    /// Made on first use (tantivy clones the tokenizer for every segment it writes, and a
    /// clone of an unused tokenizer should cost nothing), small at first.
    cache: Option<Box<[StemSlot]>>,
    /// Words looked up in the cache while it is small.
    looked_up: usize,
    lower: String,
    pub(super) tokens: Vec<tantivy::tokenizer::Token>,
    /// Tokens of the last text (the vector keeps more, for reuse).
    pub(super) len: usize,
}

/// Slots in the stem cache. Direct-mapped: a word's hash picks its one slot, which holds the
/// word and its stem inline, so a hit reads one cache line (a hash map of strings chased two
/// pointers per word, and missed the processor's caches on most of them).
const STEM_SLOTS: usize = 1 << 15;
/// Slots the stem cache starts with (32 KiB), and the words looked up in it before it grows
/// to [`STEM_SLOTS`] (1 MiB): a query, or a sleep's few summaries, would otherwise pay for a
/// whole table of fresh memory, which costs more than their stemming.
const FIRST_STEM_SLOTS: usize = 1 << 10;
/// (Small in tests, so that they see the cache grow.)
const GROW_AFTER: usize = if cfg!(test) { 1 << 6 } else { 1 << 16 };
/// Longest word (in bytes, lowercased) the cache holds; longer ones are stemmed every time.
const CACHED_WORD: usize = 15;

/// One word and its stem (a word length of 0: an empty slot; a stem length of
/// [`StemSlot::STOPWORD`]: the word is a stopword).
#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct StemSlot {
    word_len: u8,
    stem_len: u8,
    word: [u8; CACHED_WORD],
    stem: [u8; CACHED_WORD],
}

impl StemSlot {
    const EMPTY: StemSlot = StemSlot {
        word_len: 0,
        stem_len: 0,
        word: [0; CACHED_WORD],
        stem: [0; CACHED_WORD],
    };
    const STOPWORD: u8 = u8::MAX;
}

/// True when `word` (lowercased) is one of [`STOPWORDS`], the words recall drops too: neither
/// indexed nor searched (they match most entries, which is what made a query slow).
fn is_stopword(word: &[u8]) -> bool {
    // The short ones, which are most of the stopwords in a text, by a bit per pair of bytes.
    static SHORT: std::sync::LazyLock<Box<[u64]>> = std::sync::LazyLock::new(|| {
        let mut bits = vec![0u64; (1 << 16) / 64];
        for w in STOPWORDS
            .iter()
            .map(|w| w.as_bytes())
            .filter(|w| w.len() <= 2)
        {
            let key = short_key(w);
            bits[key / 64] |= 1 << (key % 64);
        }
        bits.into_boxed_slice()
    });
    fn short_key(w: &[u8]) -> usize {
        usize::from(w[0]) << 8 | usize::from(w.get(1).copied().unwrap_or(0))
    }
    match word.len() {
        0 => false,
        1 | 2 => {
            let key = short_key(word);
            SHORT[key / 64] & (1 << (key % 64)) != 0
        }
        _ => STOPWORDS
            .binary_search_by(|w| w.as_bytes().cmp(word))
            .is_ok(),
    }
}

impl Default for StemmingTokenizer {
    fn default() -> Self {
        StemmingTokenizer {
            stemmer: std::sync::Arc::new(rust_stemmers::Stemmer::create(
                rust_stemmers::Algorithm::English,
            )),
            cache: None,
            looked_up: 0,
            lower: String::new(),
            tokens: Vec::new(),
            len: 0,
        }
    }
}

/// True when Porter2 leaves `word` (lowercased) as it is, without asking it: words of one or
/// two letters, and numbers (the algorithm only rewrites letters). The test
/// `stems_skipped_are_the_stemmers_own` holds this to the stemmer.
fn stem_is_word(word: &[u8]) -> bool {
    word.len() <= 2 || word.iter().all(u8::is_ascii_digit)
}

impl StemmingTokenizer {
    /// Splits `text` into stemmed words with their offsets (token strings are reused).
    pub(super) fn analyze(&mut self, text: &str) {
        self.analyze_batch(text, 0, 0, usize::MAX);
    }

    /// Like [`analyze`](Self::analyze), for at most `max` tokens of `text` from byte `start`,
    /// the first at `position`; returns where the next batch starts (`text.len()` at the end).
    /// Indexing reads a text in batches, so that a huge entry costs a batch of tokens, not a
    /// token per word (a 100 MB entry was 20 million tokens, 4 GB, held at once).
    fn analyze_batch(&mut self, text: &str, start: usize, position: usize, max: usize) -> usize {
        let mut n = 0;
        let mut resume = text.len();
        for (from, word) in words(&text[start..]) {
            let from = from + start;
            if n == max {
                resume = from;
                break;
            }
            if word.len() > MAX_WORD {
                continue;
            }
            self.lower.clear();
            if word.is_ascii() {
                self.lower.push_str(word);
                self.lower.make_ascii_lowercase();
            } else {
                self.lower.extend(word.chars().flat_map(char::to_lowercase));
            }
            if n == self.tokens.len() {
                self.tokens.push(tantivy::tokenizer::Token::default());
            }
            let token = &mut self.tokens[n];
            token.text.clear();
            let lower = self.lower.as_bytes();
            if stem_is_word(lower) {
                if is_stopword(lower) {
                    continue;
                }
                token.text.push_str(&self.lower);
            } else if lower.len() > CACHED_WORD {
                // (No stopword is this long.)
                token.text.push_str(&self.stemmer.stem(&self.lower));
            } else {
                if self.looked_up == GROW_AFTER {
                    self.cache = None;
                }
                self.looked_up = self.looked_up.saturating_add(1);
                let cache = self.cache.get_or_insert_with(|| {
                    let slots = match self.looked_up > GROW_AFTER {
                        true => STEM_SLOTS,
                        false => FIRST_STEM_SLOTS,
                    };
                    vec![StemSlot::EMPTY; slots].into_boxed_slice()
                });
                let slot = &mut cache[fx_hash(lower) as usize & (cache.len() - 1)];
                if usize::from(slot.word_len) != lower.len() || slot.word[..lower.len()] != *lower {
                    slot.word_len = lower.len() as u8;
                    slot.word[..lower.len()].copy_from_slice(lower);
                    if is_stopword(lower) {
                        slot.stem_len = StemSlot::STOPWORD;
                        continue;
                    }
                    // Porter2 never makes a word longer.
                    let stem = self.stemmer.stem(&self.lower);
                    let len = stem.len().min(CACHED_WORD);
                    slot.stem_len = len as u8;
                    slot.stem[..len].copy_from_slice(&stem.as_bytes()[..len]);
                    if len < stem.len() {
                        slot.word_len = 0;
                    }
                    token.text.push_str(&stem);
                } else if slot.stem_len == StemSlot::STOPWORD {
                    continue;
                } else {
                    let stem = &slot.stem[..usize::from(slot.stem_len)];
                    // The slot's bytes were copied from a `str` (the stemmer's output).
                    token
                        .text
                        .push_str(std::str::from_utf8(stem).unwrap_or_default());
                }
            }
            token.offset_from = from;
            token.offset_to = from + word.len();
            token.position = position + n;
            token.position_length = 1;
            n += 1;
        }
        self.len = n;
        resume
    }
}

fn fx_hash(bytes: &[u8]) -> u64 {
    use std::hash::Hasher;
    let mut h = rustc_hash::FxHasher::default();
    h.write(bytes);
    h.finish()
}

/// Runs of alphanumeric characters with their byte offsets (tantivy's simple tokenizer's rule),
/// read a byte at a time where the text is ASCII.
fn words(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let bytes = text.as_bytes();
    let mut i = 0;
    // Whether the character at `at` is alphanumeric, and its length in bytes.
    let alnum_at = move |at: usize| -> (bool, usize) {
        let b = bytes[at];
        if b < 0x80 {
            (b.is_ascii_alphanumeric(), 1)
        } else {
            let c = text[at..]
                .chars()
                .next()
                .unwrap_or(char::REPLACEMENT_CHARACTER);
            (c.is_alphanumeric(), c.len_utf8())
        }
    };
    std::iter::from_fn(move || {
        loop {
            if i >= bytes.len() {
                return None;
            }
            let (alnum, len) = alnum_at(i);
            if alnum {
                break;
            }
            i += len;
        }
        let start = i;
        while i < bytes.len() {
            let (alnum, len) = alnum_at(i);
            if !alnum {
                break;
            }
            i += len;
        }
        Some((start, &text[start..i]))
    })
}

/// Tokens an indexed text is read in at most at once.
const TOKEN_BATCH: usize = 4096;

/// A text's tokens, analysed a batch at a time.
pub(super) struct TokensOf<'a> {
    analyzer: &'a mut StemmingTokenizer,
    text: &'a str,
    /// Where the next batch starts.
    resume: usize,
    /// Tokens of the batches before this one.
    before: usize,
    /// 1 + the index of the current token in the batch (0: before the first).
    next: usize,
}

impl tantivy::tokenizer::TokenStream for TokensOf<'_> {
    fn advance(&mut self) -> bool {
        if self.next < self.analyzer.len {
            self.next += 1;
            return true;
        }
        while self.resume < self.text.len() {
            self.before += self.analyzer.len;
            self.resume =
                self.analyzer
                    .analyze_batch(self.text, self.resume, self.before, TOKEN_BATCH);
            if self.analyzer.len > 0 {
                self.next = 1;
                return true;
            }
        }
        self.next = self.analyzer.len + 1;
        false
    }
    fn token(&self) -> &tantivy::tokenizer::Token {
        &self.analyzer.tokens[self.next - 1]
    }
    fn token_mut(&mut self) -> &mut tantivy::tokenizer::Token {
        &mut self.analyzer.tokens[self.next - 1]
    }
}

impl tantivy::tokenizer::Tokenizer for StemmingTokenizer {
    type TokenStream<'a> = TokensOf<'a>;
    fn token_stream<'a>(&'a mut self, text: &'a str) -> TokensOf<'a> {
        let resume = self.analyze_batch(text, 0, 0, TOKEN_BATCH);
        TokensOf {
            analyzer: self,
            text,
            resume,
            before: 0,
            next: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The analyzer without its shortcuts: every word split by `char::is_alphanumeric`,
    /// lowercased and stemmed.
    fn plain(text: &str) -> Vec<(String, usize, usize)> {
        let stemmer = rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English);
        let mut out = Vec::new();
        let mut word = String::new();
        let mut from = 0;
        for (i, c) in text.char_indices().chain([(text.len(), ' ')]) {
            if c.is_alphanumeric() && i < text.len() {
                if word.is_empty() {
                    from = i;
                }
                word.push(c);
            } else if !word.is_empty() {
                let lower: String = word.chars().flat_map(char::to_lowercase).collect();
                if word.len() <= MAX_WORD && !STOPWORDS.contains(&lower.as_str()) {
                    out.push((stemmer.stem(&lower).into_owned(), from, i));
                }
                word.clear();
            }
        }
        out
    }

    /// A huge entry is tokenised in batches, with the same tokens (and
    /// positions running on across batches) as one pass over the whole text.
    #[test]
    fn the_token_stream_reads_a_long_text_in_batches() {
        use tantivy::tokenizer::{TokenStream, Tokenizer};
        let text: String = (0..3 * TOKEN_BATCH + 17)
            .map(|i| format!("running{} the jumped ", i % 97))
            .collect();
        let mut whole = StemmingTokenizer::default();
        whole.analyze(&text);
        let expected: Vec<(String, usize, usize, usize)> = whole.tokens[..whole.len]
            .iter()
            .map(|t| (t.text.clone(), t.offset_from, t.offset_to, t.position))
            .collect();
        assert!(expected.len() > 2 * TOKEN_BATCH);
        let mut batched = StemmingTokenizer::default();
        let mut stream = batched.token_stream(&text);
        let mut got = Vec::new();
        while stream.advance() {
            let t = stream.token();
            got.push((t.text.clone(), t.offset_from, t.offset_to, t.position));
        }
        assert_eq!(got, expected);
        assert!(
            batched.tokens.len() <= TOKEN_BATCH,
            "{}",
            batched.tokens.len()
        );
    }

    fn analyzed(analyzer: &mut StemmingTokenizer, text: &str) -> Vec<(String, usize, usize)> {
        analyzer.analyze(text);
        analyzer.tokens[..analyzer.len]
            .iter()
            .enumerate()
            .map(|(i, t)| {
                assert_eq!(t.position, i);
                (t.text.clone(), t.offset_from, t.offset_to)
            })
            .collect()
    }

    #[test]
    fn stopwords_are_sorted_and_found() {
        assert!(STOPWORDS.windows(2).all(|w| w[0] < w[1]));
        for w in STOPWORDS {
            assert!(is_stopword(w.as_bytes()), "{w}");
            assert!(w.len() <= CACHED_WORD);
        }
        for w in [
            "", "b", "ab", "zz", "x1", "th", "thee", "abouts", "whos", "ı", "also",
        ] {
            assert!(!is_stopword(w.as_bytes()), "{w}");
        }
    }

    #[test]
    fn stems_skipped_are_the_stemmers_own() {
        let stemmer = rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English);
        let mut words: Vec<String> = Vec::new();
        let alnum: Vec<char> = ('a'..='z').chain('0'..='9').collect();
        for a in &alnum {
            words.push(a.to_string());
            for b in &alnum {
                words.push(format!("{a}{b}"));
                // Three letters: not skipped (these the stemmer does change: "abs", "its").
                for c in &alnum {
                    words.push(format!("{a}{b}{c}"));
                }
            }
        }
        // Every lowercase letter or digit of two bytes, alone.
        words.extend(
            ('\u{80}'..='\u{7ff}')
                .filter(|c| c.is_alphanumeric() && !c.is_uppercase())
                .map(String::from),
        );
        for n in 3..=MAX_WORD {
            words.push("1234567890".repeat(5)[..n].to_owned());
            words.push("9".repeat(n));
        }
        for word in &words {
            if stem_is_word(word.as_bytes()) {
                assert_eq!(stemmer.stem(word), word.as_str(), "{word}");
            }
        }
    }

    #[test]
    fn the_analyzer_reads_text_as_the_plain_rule_does() {
        let mut analyzer = StemmingTokenizer::default();
        for text in [
            "",
            "The agents were RUNNING tests; 2 failures in src/lib.rs:120 (retrying...)",
            "Über-naïve café façade: İstanbul ΣΊΣΥΦΟΣ straße ﬁnal 東京タワー ١٢٣",
            "happily happy happiness generously generalization generalizations",
            "x y z 12 345 67890 0x7fffabcd deadbeefdeadbeefdeadbeefdeadbeefdeadbeefdeadbeef",
            "The THE the; To be or not to be: that is the question. Who? WHOM, whose, whom",
            "the",
            "a an the of",
        ] {
            assert_eq!(analyzed(&mut analyzer, text), plain(text), "{text}");
        }
    }

    proptest! {
        /// Whatever the text, and whatever an earlier text left in the cache.
        #[test]
        fn the_analyzer_matches_the_plain_rule_on_any_text(
            texts in proptest::collection::vec(
                prop_oneof![
                    "[a-zA-Z0-9 éÉßİ_.,-]{0,120}",
                    "(run|runs|running|ran|RUN|the|The|a|an|whom|généralement|x1|22|happy) {0,3}{0,40}",
                    any::<String>(),
                ],
                1..8,
            )
        ) {
            let mut analyzer = StemmingTokenizer::default();
            for text in &texts {
                prop_assert_eq!(analyzed(&mut analyzer, text), plain(text));
            }
        }
    }
}
