//! The embedding model built into engram: a static model distilled from all-MiniLM-L6-v2 as
//! model2vec distils one (one vector per token of MiniLM's vocabulary, read by MiniLM on its
//! own, reduced by PCA and weighted by the token's rarity; `engram-embed`'s
//! `examples/distill_static.rs` builds it). A text's vector is the mean of its tokens' vectors:
//! no network, no download, and a text is embedded in microseconds, so recall by meaning is on
//! by default. MiniLM itself (`--recall hybrid`, the `embeddings` feature) reads each text whole
//! and is the slower, stronger option.
//!
//! The model is all-MiniLM-L6-v2's (Apache-2.0; `crates/engram/assets/LICENSE-all-MiniLM-L6-v2`).

use std::sync::{Arc, OnceLock};

use super::Embedder;
use super::wordpiece::WordPiece;

use crate::Error;

/// The model's file: its vocabulary and each token's vector ([`BuiltIn::parse`]).
static FILE: &[u8] = include_bytes!("../../assets/minilm-static.bin");

/// The name the built-in model reports (and its vectors are keyed by).
pub const BUILT_IN_NAME: &str = "minilm-static";

/// The built-in static model.
pub(super) struct BuiltIn {
    vocabulary: WordPiece,
    dims: usize,
    /// Each token's scale, then its `dims` values (signed bytes): its vector is their product.
    scales: Vec<f32>,
    values: &'static [u8],
}

impl std::fmt::Debug for BuiltIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltIn")
            .field("tokens", &self.scales.len())
            .field("dims", &self.dims)
            .finish()
    }
}

/// The built-in model, read once per process.
pub fn built_in() -> Arc<dyn Embedder> {
    static MODEL: OnceLock<Arc<BuiltIn>> = OnceLock::new();
    MODEL
        .get_or_init(|| Arc::new(BuiltIn::parse(FILE).expect("the built-in model's file is whole")))
        .clone()
}

impl BuiltIn {
    /// Reads the model from `file`: `ENGSTAT1`, the number of tokens and of dimensions (u32
    /// little-endian), each token (u16 length and its UTF-8 bytes), then each token's scale (f32)
    /// and dimensions (i8). `None` when the file is cut short or is not one.
    fn parse(file: &'static [u8]) -> Option<BuiltIn> {
        let word = |at: usize, n: usize| file.get(at..at + n);
        if word(0, 8)? != b"ENGSTAT1" {
            return None;
        }
        let count = u32::from_le_bytes(word(8, 4)?.try_into().ok()?) as usize;
        let dims = u32::from_le_bytes(word(12, 4)?.try_into().ok()?) as usize;
        let mut at = 16;
        let mut tokens = Vec::with_capacity(count);
        for _ in 0..count {
            let len = u16::from_le_bytes(word(at, 2)?.try_into().ok()?) as usize;
            tokens.push(std::str::from_utf8(word(at + 2, len)?).ok()?);
            at += 2 + len;
        }
        let values = word(at, count * (4 + dims))?;
        let scales = values
            .chunks_exact(4 + dims)
            .map(|row| f32::from_le_bytes([row[0], row[1], row[2], row[3]]))
            .collect();
        Some(BuiltIn {
            vocabulary: WordPiece::new(tokens),
            dims,
            scales,
            values,
        })
    }

    /// `text`'s vector: the mean of its tokens' vectors, scaled to unit length; zero when no
    /// token of it is known.
    fn vector(&self, text: &str) -> Vec<f32> {
        let mut sum = vec![0.0f32; self.dims];
        for id in self.vocabulary.pieces(text) {
            let id = id as usize;
            let row = &self.values[id * (4 + self.dims) + 4..(id + 1) * (4 + self.dims)];
            let scale = self.scales[id];
            for (s, &v) in sum.iter_mut().zip(row) {
                *s += scale * f32::from(v as i8);
            }
        }
        let norm = sum.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm > 0.0 {
            for x in sum.iter_mut() {
                *x /= norm;
            }
        }
        sum
    }
}

impl Embedder for BuiltIn {
    fn name(&self) -> &str {
        BUILT_IN_NAME
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, Error> {
        Ok(texts.iter().map(|t| self.vector(t)).collect())
    }

    fn keeps_vectors(&self) -> bool {
        false
    }

    fn searches_memory(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::dot;

    #[test]
    fn the_built_in_model_means_what_minilm_means() {
        let model = built_in();
        let v = model
            .embed(&[
                "my dog loves chasing a ball",
                "the puppy plays fetch",
                "quarterly tax filing deadline",
                "",
            ])
            .expect("embeds");
        assert_eq!(v.len(), 4);
        for x in &v[..3] {
            let norm: f32 = x.iter().map(|a| a * a).sum();
            assert!((norm - 1.0).abs() < 1e-4, "{norm}");
        }
        assert!(
            v[3].iter().all(|&x| x == 0.0),
            "an empty text means nothing"
        );
        // Two texts about a dog are nearer each other than either is to taxes.
        assert!(
            dot(&v[0], &v[1]) > dot(&v[0], &v[2]) + 0.1,
            "{} {}",
            dot(&v[0], &v[1]),
            dot(&v[0], &v[2])
        );
        assert_eq!(model.name(), BUILT_IN_NAME);
        assert!(!model.keeps_vectors());
        assert!(!model.searches_memory());
    }
}
