//! Gemini's tokenizer: every Gemini model uses Gemma 3's SentencePiece vocabulary (262,144
//! pieces), which the `gemini-tokenizer` crate embeds, as the `google-genai` Python SDK's
//! `LocalTokenizer` counts with it. With the `gemini-tokenizer` feature counts are exact; without
//! it (the model's C++ library makes the build longer) Gemini is estimated as cl100k times 1.1.

use super::Tokenizer;
use crate::error::Result;

/// The factor cl100k's count is multiplied by to estimate Gemini's without its tokenizer.
#[cfg_attr(feature = "gemini-tokenizer", allow(dead_code))]
pub(super) const ESTIMATE_FACTOR: f64 = 1.1;

#[cfg(feature = "gemini-tokenizer")]
mod exact {
    use std::sync::Arc;

    use super::super::{TextTokenizer, Tokenizer};
    use crate::error::{Error, Result};

    struct Gemini(gemini_tokenizer::LocalTokenizer);

    impl std::fmt::Debug for Gemini {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Gemini")
        }
    }

    impl TextTokenizer for Gemini {
        fn name(&self) -> &str {
            "gemini"
        }

        fn count(&self, text: &str) -> usize {
            self.0.count_tokens(text, None).total_tokens
        }

        fn is_exact(&self) -> bool {
            true
        }
    }

    pub(in crate::tokenize) fn tokenizer() -> Result<Tokenizer> {
        // Any supported model name loads the same vocabulary.
        let inner = gemini_tokenizer::LocalTokenizer::new("gemini-2.5-pro")
            .map_err(|e| Error::Tokenizer(format!("the Gemini tokenizer: {e}")))?;
        Ok(Tokenizer::new(Arc::new(Gemini(inner))))
    }
}

/// Gemini's tokenizer: exact with the `gemini-tokenizer` feature, else cl100k times
/// [`ESTIMATE_FACTOR`] (an estimate, as [`Tokenizer::is_exact`] says).
pub(super) fn tokenizer() -> Result<Tokenizer> {
    #[cfg(feature = "gemini-tokenizer")]
    {
        exact::tokenizer()
    }
    #[cfg(not(feature = "gemini-tokenizer"))]
    {
        Ok(Tokenizer::cl100k()?.scaled(ESTIMATE_FACTOR))
    }
}
