//! `--recall hybrid`: the sentence embedder recall fuses with BM25, when this build and this
//! machine have one. Recall falls back to lexical, with a warning that says what is missing.

use std::sync::Arc;

use engram::embed::Embedder;

use crate::cli::{RecallArgs, RecallMode};

/// The embedder `args` ask for, or `None` (lexical recall).
pub(crate) fn from_args(args: &RecallArgs) -> Option<Arc<dyn Embedder>> {
    if args.recall == RecallMode::Lexical {
        return None;
    }
    load(args)
}

#[cfg(feature = "embeddings")]
fn load(args: &RecallArgs) -> Option<Arc<dyn Embedder>> {
    use engram_embed::{Cached, MiniLm, default_cache_path};
    let Some(dir) = &args.embedding_model else {
        eprintln!(
            "engram: warning: --recall hybrid needs the model's directory (--embedding-model DIR \
             or ENGRAM_EMBEDDING_MODEL); recall is lexical"
        );
        return None;
    };
    let model = match MiniLm::load(dir) {
        Ok(model) => model,
        Err(e) => {
            eprintln!("engram: warning: {e}; recall is lexical");
            return None;
        }
    };
    let path = default_cache_path();
    match Cached::open(model, &path) {
        Ok(cached) => Some(Arc::new(cached)),
        Err(e) => {
            eprintln!("engram: warning: {e}; embeddings are computed without a cache");
            MiniLm::load(dir)
                .ok()
                .map(|m| Arc::new(m) as Arc<dyn Embedder>)
        }
    }
}

#[cfg(not(feature = "embeddings"))]
fn load(_: &RecallArgs) -> Option<Arc<dyn Embedder>> {
    eprintln!(
        "engram: warning: this engram was built without embeddings (cargo build --release -p \
         engram-cli --features embeddings); recall is lexical"
    );
    None
}
