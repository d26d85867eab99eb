//! Tiered token counting: exact BPE for OpenAI encodings, Gemma 3's SentencePiece
//! vocabulary for Gemini (`gemini.rs`), a HuggingFace `tokenizer.json` for open models, and
//! chars/4 (the classic estimate) as the last fallback.
//!
//! A [`Tokenizer`] is cheap to clone (an `Arc` inside) and safe to share between threads. It may
//! carry a correction factor: Claude models are counted with cl100k times a factor, and such a
//! tokenizer reports itself as an estimate ([`Tokenizer::is_exact`] is false), so that callers
//! can keep a safety margin.

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};

/// A text tokenizer backend. Implement it to plug in another vocabulary.
pub trait TextTokenizer: Send + Sync + fmt::Debug + 'static {
    /// The tokenizer's name as users write it (`cl100k`, `o200k`, `chars/4`, `hf:PATH`).
    fn name(&self) -> &str;

    /// The number of tokens `text` encodes to (special-token strings count as ordinary text).
    fn count(&self, text: &str) -> usize;

    /// The count if it is at most `limit`, `None` otherwise. Backends that can stop early
    /// (BPE can) make this cost O(limit) instead of O(text).
    fn count_till_limit(&self, text: &str, limit: usize) -> Option<usize> {
        let n = self.count(text);
        (n <= limit).then_some(n)
    }

    /// True when counts equal the real tokenizer's exactly.
    fn is_exact(&self) -> bool;

    /// True when splitting a text right after a `\n` that is followed by an ASCII letter or digit
    /// never changes the total count (true of tiktoken-style regex pre-tokenizers). Enables
    /// [`Tokenizer::count_parallel`].
    fn splits_at_lines(&self) -> bool {
        false
    }
}

/// A shareable tokenizer, optionally scaled by a correction factor.
#[derive(Clone)]
pub struct Tokenizer {
    inner: Arc<dyn TextTokenizer>,
    factor: f64,
    id: Arc<str>,
}

impl fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokenizer")
            .field("id", &self.id)
            .field("exact", &self.is_exact())
            .finish()
    }
}

/// The names [`Tokenizer::from_name`] accepts, for help texts.
pub const TOKENIZER_NAMES: &str =
    "o200k, cl100k, gemini, chars/4 (alias: heuristic), hf:PATH or a path to a tokenizer.json";

impl Tokenizer {
    /// Wraps a backend.
    pub fn new(inner: Arc<dyn TextTokenizer>) -> Self {
        let id = Arc::from(inner.name());
        Tokenizer {
            inner,
            factor: 1.0,
            id,
        }
    }

    /// Resolves a tokenizer by name: `o200k` (or `o200k_base`), `cl100k` (or `cl100k_base`),
    /// `chars/4` (or `chars4`, `heuristic`), and `hf:PATH` or any path ending in `.json` for a
    /// HuggingFace `tokenizer.json` (with the `hf-tokenizer` feature).
    pub fn from_name(name: &str) -> Result<Tokenizer> {
        match TokenizerName::parse(name)? {
            TokenizerName::O200k => Self::o200k(),
            TokenizerName::Cl100k => Self::cl100k(),
            TokenizerName::Gemini => Self::gemini(),
            TokenizerName::CharsPerToken(n) => Ok(Self::chars_per_token(n)),
            TokenizerName::HuggingFace(path) => Self::huggingface(&path),
        }
    }

    /// OpenAI's `o200k_base` (GPT-4o, GPT-4.1, GPT-5, o-series).
    pub fn o200k() -> Result<Tokenizer> {
        openai::tokenizer(openai::Encoding::O200k)
    }

    /// OpenAI's `cl100k_base` (GPT-4, GPT-3.5; the evaluation harness's count).
    pub fn cl100k() -> Result<Tokenizer> {
        openai::tokenizer(openai::Encoding::Cl100k)
    }

    /// Gemini's (Gemma 3's SentencePiece vocabulary): exact with the `gemini-tokenizer`
    /// feature, else estimated as cl100k times 1.1.
    pub fn gemini() -> Result<Tokenizer> {
        gemini::tokenizer()
    }

    /// The classic heuristic: one token per `chars` characters, rounded up per text.
    pub fn chars_per_token(chars: usize) -> Tokenizer {
        Tokenizer::new(Arc::new(CharsPerToken {
            chars: chars.max(1),
            name: format!("chars/{}", chars.max(1)),
        }))
    }

    /// A HuggingFace `tokenizer.json` read from `path`.
    pub fn huggingface(path: &str) -> Result<Tokenizer> {
        hf::tokenizer(path)
    }

    /// The same tokenizer with counts multiplied by `factor` (rounded up). Any factor other
    /// than 1 makes the tokenizer an estimate.
    #[must_use]
    pub fn scaled(mut self, factor: f64) -> Tokenizer {
        let factor = if factor.is_finite() && factor > 0.0 {
            factor
        } else {
            1.0
        };
        self.factor *= factor;
        self.id = if (self.factor - 1.0).abs() < f64::EPSILON {
            Arc::from(self.inner.name())
        } else {
            Arc::from(format!("{}*{}", self.inner.name(), self.factor))
        };
        self
    }

    /// A stable identifier: the backend's name plus the factor when there is one. Counts cached
    /// under one id are valid for every tokenizer with the same id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The backend's name, without the factor.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// The correction factor (1 for none).
    pub fn factor(&self) -> f64 {
        self.factor
    }

    /// True when counts are exact: an exact backend with no correction factor.
    pub fn is_exact(&self) -> bool {
        self.inner.is_exact() && (self.factor - 1.0).abs() < f64::EPSILON
    }

    fn scale(&self, n: usize) -> usize {
        if (self.factor - 1.0).abs() < f64::EPSILON {
            n
        } else {
            // Token counts are far below 2^52, so the round trip through f64 is exact.
            (n as f64 * self.factor).ceil() as usize
        }
    }

    /// Counts the tokens of `text`.
    pub fn count(&self, text: &str) -> usize {
        if text.is_empty() {
            return 0;
        }
        self.scale(self.inner.count(text))
    }

    /// The count if it is at most `limit`, without paying for the rest of a long text.
    pub fn count_till_limit(&self, text: &str, limit: usize) -> Option<usize> {
        if text.is_empty() {
            return Some(0);
        }
        let raw_limit = if (self.factor - 1.0).abs() < f64::EPSILON {
            limit
        } else {
            (limit as f64 / self.factor).floor() as usize
        };
        let n = self.scale(self.inner.count_till_limit(text, raw_limit)?);
        (n <= limit).then_some(n)
    }

    /// Counts a long text on up to `threads` threads. Equal to [`Tokenizer::count`] (the text is
    /// cut only where the backend guarantees the count is unchanged); backends that give no such
    /// guarantee count on one thread.
    pub fn count_parallel(&self, text: &str, threads: usize) -> usize {
        const MIN_CHUNK: usize = 64 * 1024;
        let threads = threads.max(1);
        if threads == 1 || text.len() < 2 * MIN_CHUNK || !self.inner.splits_at_lines() {
            return self.count(text);
        }
        // More chunks than threads evens out the work; each thread takes every n-th chunk.
        let chunks = split_at_lines(text, (threads * 4).min(text.len() / MIN_CHUNK).max(2));
        let total: usize = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let chunks = &chunks;
                    scope.spawn(move || {
                        chunks
                            .iter()
                            .skip(t)
                            .step_by(threads)
                            .map(|c| self.inner.count(c))
                            .sum::<usize>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .sum()
        });
        self.scale(total)
    }
}

/// Cuts `text` into about `parts` pieces, each cut right after a `\n` followed by an ASCII
/// letter or digit. Pieces may be fewer when the text has few such places.
pub(crate) fn split_at_lines(text: &str, parts: usize) -> Vec<&str> {
    let bytes = text.as_bytes();
    let target = text.len() / parts.max(1);
    let mut pieces = Vec::with_capacity(parts);
    let mut start = 0;
    while start < text.len() {
        let mut cut = (start + target.max(1)).min(text.len());
        loop {
            if cut >= text.len() {
                cut = text.len();
                break;
            }
            if bytes[cut - 1] == b'\n' && bytes[cut].is_ascii_alphanumeric() {
                break;
            }
            cut += 1;
        }
        pieces.push(&text[start..cut]);
        start = cut;
    }
    pieces
}

/// A parsed tokenizer name, checked without loading anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenizerName {
    /// `o200k`, `o200k_base`.
    O200k,
    /// `cl100k`, `cl100k_base`.
    Cl100k,
    /// `gemini`, `gemma3`.
    Gemini,
    /// `chars/N` (`chars4`, `heuristic` and `chars` mean 4).
    CharsPerToken(usize),
    /// `hf:PATH`, or a path ending in `.json`.
    HuggingFace(String),
}

impl TokenizerName {
    /// Parses a name; the error lists what is accepted.
    pub fn parse(name: &str) -> Result<TokenizerName> {
        let trimmed = name.trim();
        let lower = trimmed.to_ascii_lowercase();
        let parsed = match lower.as_str() {
            "o200k" | "o200k_base" => Some(TokenizerName::O200k),
            "cl100k" | "cl100k_base" => Some(TokenizerName::Cl100k),
            "gemini" | "gemma3" => Some(TokenizerName::Gemini),
            "chars4" | "heuristic" | "chars" => Some(TokenizerName::CharsPerToken(4)),
            _ => {
                if let Some(n) = lower.strip_prefix("chars/") {
                    n.parse()
                        .ok()
                        .filter(|&n| n > 0)
                        .map(TokenizerName::CharsPerToken)
                } else if let Some(path) = trimmed.strip_prefix("hf:") {
                    Some(TokenizerName::HuggingFace(path.to_owned()))
                } else if lower.ends_with(".json") {
                    Some(TokenizerName::HuggingFace(trimmed.to_owned()))
                } else {
                    None
                }
            }
        };
        parsed.ok_or_else(|| {
            Error::Tokenizer(format!(
                "unknown tokenizer {name:?}; expected one of {TOKENIZER_NAMES}"
            ))
        })
    }
}

/// chars/N: the classic heuristic. Deliberately conservative for prose; it underestimates code.
#[derive(Debug)]
struct CharsPerToken {
    chars: usize,
    name: String,
}

impl TextTokenizer for CharsPerToken {
    fn name(&self) -> &str {
        &self.name
    }

    fn count(&self, text: &str) -> usize {
        text.chars().count().div_ceil(self.chars)
    }

    fn is_exact(&self) -> bool {
        false
    }
}

mod gemini;
#[cfg(feature = "openai-bpe")]
mod openai;
#[cfg(feature = "openai-bpe")]
mod pretokenize;

#[cfg(not(feature = "openai-bpe"))]
mod openai {
    use super::Tokenizer;
    use crate::error::{Error, Result};

    #[derive(Debug, Clone, Copy)]
    pub(super) enum Encoding {
        O200k,
        Cl100k,
    }

    pub(super) fn tokenizer(encoding: Encoding) -> Result<Tokenizer> {
        Err(Error::Tokenizer(format!(
            "{encoding:?} needs engram built with the `openai-bpe` feature (on by default)"
        )))
    }
}

#[cfg(feature = "hf-tokenizer")]
mod hf {
    use std::sync::Arc;

    use super::{TextTokenizer, Tokenizer};
    use crate::error::{Error, Result};

    /// A HuggingFace `tokenizer.json`, loaded from a local path (never from a hub).
    struct HfTokenizer {
        name: String,
        inner: tokenizers::Tokenizer,
    }

    impl std::fmt::Debug for HfTokenizer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "HfTokenizer({})", self.name)
        }
    }

    impl TextTokenizer for HfTokenizer {
        fn name(&self) -> &str {
            &self.name
        }

        fn count(&self, text: &str) -> usize {
            match self.inner.encode(text, false) {
                Ok(encoding) => encoding.len(),
                // An input the tokenizer rejects still gets a conservative count.
                Err(_) => text.chars().count().div_ceil(3),
            }
        }

        fn is_exact(&self) -> bool {
            true
        }
    }

    pub(super) fn tokenizer(path: &str) -> Result<Tokenizer> {
        let inner = tokenizers::Tokenizer::from_file(path).map_err(|e| {
            Error::Tokenizer(format!(
                "cannot load the HuggingFace tokenizer {path:?}: {e}"
            ))
        })?;
        Ok(Tokenizer::new(Arc::new(HfTokenizer {
            name: format!("hf:{path}"),
            inner,
        })))
    }
}

#[cfg(not(feature = "hf-tokenizer"))]
mod hf {
    use super::Tokenizer;
    use crate::error::{Error, Result};

    pub(super) fn tokenizer(path: &str) -> Result<Tokenizer> {
        Err(Error::Tokenizer(format!(
            "{path:?}: HuggingFace tokenizer files need engram built with the `hf-tokenizer` feature \
             (cargo install --path crates/engram-cli --features hf-tokenizer)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve() {
        assert_eq!(
            Tokenizer::from_name("heuristic").expect("chars").id(),
            "chars/4"
        );
        assert!(Tokenizer::from_name("gpt2").is_err());
        #[cfg(feature = "openai-bpe")]
        {
            assert_eq!(
                Tokenizer::from_name("cl100k_base").expect("cl").id(),
                "cl100k"
            );
            assert_eq!(Tokenizer::from_name("O200K").expect("o2").id(), "o200k");
        }
    }

    #[test]
    fn chars_per_token_rounds_up() {
        let t = Tokenizer::chars_per_token(4);
        assert_eq!(t.count(""), 0);
        assert_eq!(t.count("a"), 1);
        assert_eq!(t.count("abcd"), 1);
        assert_eq!(t.count("abcde"), 2);
        assert_eq!(t.count("éééé"), 1, "characters, not bytes");
        assert!(!t.is_exact());
    }

    #[test]
    fn scaling_rounds_up_and_marks_estimates() {
        let t = Tokenizer::chars_per_token(1).scaled(1.25);
        assert_eq!(t.count("abcd"), 5);
        assert_eq!(t.count("abc"), 4);
        assert!(!t.is_exact());
        assert_eq!(t.count_till_limit("abcd", 5), Some(5));
        assert_eq!(t.count_till_limit("abcd", 4), None);
    }

    #[cfg(feature = "openai-bpe")]
    #[test]
    fn known_counts() {
        let cl = Tokenizer::cl100k().expect("cl100k");
        let o2 = Tokenizer::o200k().expect("o200k");
        // Values from Python tiktoken 0.14 (encode_ordinary).
        assert_eq!(cl.count("hello world"), 2);
        assert_eq!(cl.count("<|endoftext|>"), 7);
        assert_eq!(o2.count("hello world"), 2);
        assert!(cl.is_exact() && o2.is_exact());
        assert_eq!(cl.count_till_limit("hello world", 1), None);
        assert_eq!(cl.count_till_limit("hello world", 2), Some(2));
    }

    #[test]
    fn split_at_lines_covers_text() {
        let text = "alpha\nbeta\n\ngamma\n  delta\nepsilon".repeat(50);
        for parts in [1, 2, 3, 7, 100] {
            let pieces = split_at_lines(&text, parts);
            assert_eq!(pieces.concat(), text);
            for p in &pieces[1..] {
                assert!(p.as_bytes()[0].is_ascii_alphanumeric());
            }
        }
    }
}
