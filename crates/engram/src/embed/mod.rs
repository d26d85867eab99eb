//! Sentence embeddings for hybrid recall: the interface the core ranks with.
//!
//! The core holds no model. A front end that has one (the `engram-embed` crate loads a local
//! all-MiniLM-L6-v2 with candle, behind the CLI's `embeddings` feature) passes an [`Embedder`]
//! in [`CompactOptions::embedder`](crate::CompactOptions::embedder); recall then fuses BM25 with
//! the cosine similarity of the query and each older unit. Without one, recall is lexical.
//!
//! A vector is computed once per text: [`Stored`] keeps an embedder's vectors in a
//! [`VectorStore`], keyed by the model's name and a hash of the text. The memory and session
//! stores are vector stores (memory search keeps its entries' vectors beside them, a session its
//! messages'), and the CLI keeps the vectors of conversations it compacts in a file of its own.

use std::fmt;

mod built_in;
mod wordpiece;

pub use built_in::{BUILT_IN_NAME, built_in};

use crate::Error;

/// Turns texts into unit-length vectors whose dot product is their cosine similarity.
pub trait Embedder: Send + Sync + fmt::Debug {
    /// A name for reports and cache keys: the model, and anything that changes its vectors.
    fn name(&self) -> &str;

    /// One vector per text, in order, each of unit length.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, Error>;

    /// Whether its vectors are worth keeping in a [`VectorStore`]: true for a model that takes
    /// longer to compute a vector than a store takes to read one (MiniLM), false for one that
    /// computes it in microseconds ([`built_in`]).
    fn keeps_vectors(&self) -> bool {
        true
    }

    /// Whether its similarity alone may bring back a memory entry that shares no word with
    /// the query: true for a model that ranks alone well (MiniLM), false for [`built_in`],
    /// whose every short note sits a little near every query, so that the nearest of a few
    /// unrelated notes would pad a search's results. Recall in a conversation fuses either.
    fn searches_memory(&self) -> bool {
        true
    }
}

/// `embedder`'s vectors for `texts`, an error unless it returned one per text.
pub(crate) fn embed_each<E: Embedder + ?Sized>(
    embedder: &E,
    texts: &[&str],
) -> Result<Vec<Vec<f32>>, Error> {
    let vectors = embedder.embed(texts)?;
    if vectors.len() != texts.len() {
        return Err(Error::embedder(
            embedder.name(),
            format!(
                "returned {} vectors for {} texts",
                vectors.len(),
                texts.len()
            ),
        ));
    }
    Ok(vectors)
}

/// The dot product of two vectors (the cosine similarity of unit vectors).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// What a [`VectorStore`] keys a text's vector by (with the model's name): a 128-bit hash of it.
pub type TextHash = [u8; 16];

/// The key of `text`'s vector.
pub fn text_hash(text: &str) -> TextHash {
    xxhash_rust::xxh3::xxh3_128(text.as_bytes()).to_le_bytes()
}

/// A vector as stored: its numbers as little-endian `f32`s, one after another.
pub fn vector_to_bytes(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The vector [`vector_to_bytes`] wrote (trailing bytes short of a number are ignored).
pub fn vector_from_bytes(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Where vectors are kept between runs, by model and [`TextHash`]. Every store of memory and
/// sessions is one; vectors are derived data, so a store may drop them (an export leaves them
/// out) and they are computed again.
pub trait VectorStore: Send + Sync {
    /// The vector kept for each hash under `model`, in order, `None` where there is none.
    fn vectors(&self, model: &str, hashes: &[TextHash]) -> Result<Vec<Option<Vec<f32>>>, Error>;

    /// Keeps these vectors under `model` (a hash already kept keeps its vector), in one
    /// transaction.
    fn put_vectors(&self, model: &str, vectors: &[(TextHash, &[f32])]) -> Result<(), Error>;
}

impl<T: VectorStore + ?Sized> VectorStore for &T {
    fn vectors(&self, model: &str, hashes: &[TextHash]) -> Result<Vec<Option<Vec<f32>>>, Error> {
        (**self).vectors(model, hashes)
    }

    fn put_vectors(&self, model: &str, vectors: &[(TextHash, &[f32])]) -> Result<(), Error> {
        (**self).put_vectors(model, vectors)
    }
}

impl<T: Embedder + ?Sized> Embedder for &T {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, Error> {
        (**self).embed(texts)
    }

    fn keeps_vectors(&self) -> bool {
        (**self).keeps_vectors()
    }

    fn searches_memory(&self) -> bool {
        (**self).searches_memory()
    }
}

impl<T: Embedder + ?Sized> Embedder for std::sync::Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, Error> {
        (**self).embed(texts)
    }

    fn keeps_vectors(&self) -> bool {
        (**self).keeps_vectors()
    }

    fn searches_memory(&self) -> bool {
        (**self).searches_memory()
    }
}

/// An embedder whose vectors are kept in a [`VectorStore`]: a text already kept is read, not
/// embedded; the rest are embedded and kept. The store is an optimisation: when it cannot be
/// read or written, the vectors are computed and the failure is logged, nothing more.
pub struct Stored<E, V> {
    inner: E,
    store: V,
}

impl<E: fmt::Debug, V> fmt::Debug for Stored<E, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stored")
            .field("inner", &self.inner)
            .finish()
    }
}

impl<E: Embedder, V: VectorStore> Stored<E, V> {
    /// `inner` with its vectors kept in `store`.
    pub fn new(inner: E, store: V) -> Self {
        Stored { inner, store }
    }

    /// The embedder inside.
    pub fn inner(&self) -> &E {
        &self.inner
    }
}

impl<E: Embedder, V: VectorStore> Embedder for Stored<E, V> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, Error> {
        let model = self.inner.name();
        let hashes: Vec<TextHash> = texts.iter().map(|t| text_hash(t)).collect();
        let mut out = match self.store.vectors(model, &hashes) {
            Ok(found) if found.len() == texts.len() => found,
            Ok(found) => {
                tracing::warn!(
                    model,
                    asked = texts.len(),
                    found = found.len(),
                    "the vector store miscounted; embedding again"
                );
                vec![None; texts.len()]
            }
            Err(e) => {
                tracing::warn!(model, error = %e, "stored vectors could not be read; embedding again");
                vec![None; texts.len()]
            }
        };
        let missing: Vec<usize> = (0..texts.len()).filter(|&i| out[i].is_none()).collect();
        if missing.is_empty() {
            return Ok(out.into_iter().map(Option::unwrap_or_default).collect());
        }
        let fresh = embed_each(
            &self.inner,
            &missing.iter().map(|&i| texts[i]).collect::<Vec<_>>(),
        )?;
        let keep: Vec<(TextHash, &[f32])> = missing
            .iter()
            .zip(&fresh)
            .map(|(&i, v)| (hashes[i], v.as_slice()))
            .collect();
        if let Err(e) = self.store.put_vectors(model, &keep) {
            tracing::warn!(model, error = %e, "vectors not stored; they will be computed again");
        }
        for (&i, v) in missing.iter().zip(fresh) {
            out[i] = Some(v);
        }
        Ok(out.into_iter().map(Option::unwrap_or_default).collect())
    }
}

/// A [`VectorStore`] in memory, for tests and short-lived fronts.
#[derive(Debug, Default)]
pub struct VectorsInMemory {
    vectors: std::sync::Mutex<std::collections::HashMap<(String, TextHash), Vec<f32>>>,
}

impl VectorsInMemory {
    /// Forgets the vectors of `hashes` under every model (their texts were deleted).
    pub(crate) fn forget(&self, hashes: &[TextHash]) {
        if hashes.is_empty() {
            return;
        }
        let doomed: std::collections::HashSet<&TextHash> = hashes.iter().collect();
        self.vectors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(_, h), _| !doomed.contains(h));
    }

    /// Forgets the vectors of these models and hashes (their session was deleted).
    pub(crate) fn forget_keys<'a>(&self, keys: impl IntoIterator<Item = &'a (String, TextHash)>) {
        let mut map = self.vectors.lock().unwrap_or_else(|p| p.into_inner());
        for key in keys {
            map.remove(key);
        }
    }
}

impl VectorStore for VectorsInMemory {
    fn vectors(&self, model: &str, hashes: &[TextHash]) -> Result<Vec<Option<Vec<f32>>>, Error> {
        let map = self
            .vectors
            .lock()
            .map_err(|_| Error::Backend("vector map poisoned".into()))?;
        Ok(hashes
            .iter()
            .map(|h| map.get(&(model.to_owned(), *h)).cloned())
            .collect())
    }

    fn put_vectors(&self, model: &str, vectors: &[(TextHash, &[f32])]) -> Result<(), Error> {
        let mut map = self
            .vectors
            .lock()
            .map_err(|_| Error::Backend("vector map poisoned".into()))?;
        for (h, v) in vectors {
            map.entry((model.to_owned(), *h))
                .or_insert_with(|| v.to_vec());
        }
        Ok(())
    }
}

/// A stand-in model for tests (the core's, and the fronts' with the `conformance` feature): two
/// topics, as a model would see them: pets, and anything else.
#[cfg(any(test, feature = "conformance"))]
#[derive(Debug)]
pub struct Topics;

#[cfg(any(test, feature = "conformance"))]
impl Embedder for Topics {
    fn name(&self) -> &str {
        "topics"
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, Error> {
        Ok(texts
            .iter()
            .map(|t| {
                let pet = ["pet", "dog", "puppy", "cat"].iter().any(|w| t.contains(w));
                if pet { vec![0.9, 0.1] } else { vec![0.1, 0.9] }
            })
            .collect())
    }
}

/// [`Topics`], counting the texts it embeds.
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct Counting(pub(crate) std::sync::atomic::AtomicUsize);

#[cfg(test)]
impl Counting {
    /// Texts embedded so far.
    pub(crate) fn embedded(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[cfg(test)]
impl Embedder for Counting {
    fn name(&self) -> &str {
        "counting"
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, Error> {
        self.0
            .fetch_add(texts.len(), std::sync::atomic::Ordering::SeqCst);
        Topics.embed(texts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store that can neither read nor write.
    struct Down;

    impl VectorStore for Down {
        fn vectors(&self, _: &str, _: &[TextHash]) -> Result<Vec<Option<Vec<f32>>>, Error> {
            Err(Error::Backend("disk gone".into()))
        }

        fn put_vectors(&self, _: &str, _: &[(TextHash, &[f32])]) -> Result<(), Error> {
            Err(Error::Backend("disk gone".into()))
        }
    }

    #[test]
    fn a_text_is_embedded_once_and_read_after() {
        let model = Counting::default();
        let vectors = VectorsInMemory::default();
        let stored = Stored::new(&model, &vectors);
        let first = stored.embed(&["my dog", "the meeting"]).expect("embeds");
        assert_eq!(model.embedded(), 2);
        let again = stored
            .embed(&["the meeting", "my cat", "my dog"])
            .expect("embeds");
        assert_eq!(model.embedded(), 3, "only the new text is embedded");
        assert_eq!(again[0], first[1]);
        assert_eq!(again[2], first[0]);
        assert_eq!(again[1], Topics.embed(&["my cat"]).expect("embeds")[0]);
        // Another model's vectors are its own.
        let other = vectors
            .vectors("topics", &[text_hash("my dog")])
            .expect("reads");
        assert_eq!(other, [None]);
    }

    #[test]
    fn a_store_that_fails_costs_a_recomputation_not_an_error() {
        let model = Counting::default();
        let stored = Stored::new(&model, Down);
        let got = stored.embed(&["my dog", "rain"]).expect("embeds");
        assert_eq!(got, Topics.embed(&["my dog", "rain"]).expect("embeds"));
        stored.embed(&["my dog"]).expect("embeds");
        assert_eq!(model.embedded(), 3);
    }

    #[test]
    fn vectors_round_trip_through_bytes() {
        let v = [0.5f32, -1.25, 3.0e-7];
        assert_eq!(vector_from_bytes(&vector_to_bytes(&v)), v);
        assert_ne!(text_hash("a"), text_hash("b"));
    }
}
