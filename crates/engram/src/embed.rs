//! Sentence embeddings for hybrid recall: the interface the core ranks with.
//!
//! The core holds no model. A front end that has one (the `engram-embed` crate loads a local
//! all-MiniLM-L6-v2 with candle, behind the CLI's `embeddings` feature) passes an [`Embedder`]
//! in [`CompactOptions::embedder`](crate::CompactOptions::embedder); recall then fuses BM25 with
//! the cosine similarity of the query and each older unit. Without one, recall is lexical.

use std::fmt;

/// Turns texts into unit-length vectors whose dot product is their cosine similarity.
pub trait Embedder: Send + Sync + fmt::Debug {
    /// A name for reports and cache keys: the model, and anything that changes its vectors.
    fn name(&self) -> &str;

    /// One vector per text, in order, each of unit length.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String>;
}

/// The dot product of two vectors (the cosine similarity of unit vectors).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// A stand-in model for tests: two topics, as a model would see them: pets, and anything else.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct Topics;

#[cfg(test)]
impl Embedder for Topics {
    fn name(&self) -> &str {
        "topics"
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        Ok(texts
            .iter()
            .map(|t| {
                let pet = ["pet", "dog", "puppy", "cat"].iter().any(|w| t.contains(w));
                if pet { vec![0.9, 0.1] } else { vec![0.1, 0.9] }
            })
            .collect())
    }
}
