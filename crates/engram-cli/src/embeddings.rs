//! `--recall hybrid`: the sentence embedder recall fuses with BM25, when this build and this
//! machine have one. Recall falls back to lexical, with a warning that says what is missing.

use std::sync::Arc;

use engram::embed::Embedder;

use crate::cli::{RecallArgs, RecallMode};

/// Where the vectors of the texts a command embeds are kept.
pub(crate) enum Keep {
    /// In the cache file by content hash (a conversation given to `compact` lives in no store).
    File,
    /// Where the core puts them: the memory or session store the command works on.
    Store,
}

/// The embedder `args` ask for, or `None` (lexical recall).
pub(crate) fn from_args(args: &RecallArgs, keep: Keep) -> Option<Arc<dyn Embedder>> {
    if args.recall == RecallMode::Lexical {
        return None;
    }
    load(args, keep)
}

#[cfg(feature = "embeddings")]
fn load(args: &RecallArgs, keep: Keep) -> Option<Arc<dyn Embedder>> {
    use engram::embed::Stored;
    use engram_embed::{MiniLm, default_cache_path, progress_message};
    use engram_store::sqlite::VectorFile;
    let Some(dir) = &args.embedding_model else {
        eprintln!(
            "engram: warning: --recall hybrid needs the model's directory (--embedding-model DIR \
             or ENGRAM_EMBEDDING_MODEL); recall is lexical"
        );
        return None;
    };
    let model = match MiniLm::load(dir) {
        Ok(model) => model.with_progress(|total| eprintln!("engram: {}", progress_message(total))),
        Err(e) => {
            eprintln!("engram: warning: {e}; recall is lexical");
            return None;
        }
    };
    match keep {
        Keep::Store => Some(Arc::new(model)),
        Keep::File => match VectorFile::open(&default_cache_path()) {
            Ok(file) => Some(Arc::new(Stored::new(model, file))),
            Err(e) => {
                eprintln!("engram: warning: {e}; embeddings are computed without a cache");
                Some(Arc::new(model))
            }
        },
    }
}

#[cfg(not(feature = "embeddings"))]
fn load(_: &RecallArgs, _: Keep) -> Option<Arc<dyn Embedder>> {
    eprintln!(
        "engram: warning: this engram was built without embeddings (cargo build --release -p \
         engram-cli --features embeddings); recall is lexical"
    );
    None
}
