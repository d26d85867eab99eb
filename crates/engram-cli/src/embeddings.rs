//! `--recall`: the embedder recall fuses with BM25. By default engram's built-in static model;
//! with `--recall hybrid` all-MiniLM-L6-v2, when this build and this machine have it (else the
//! built-in model, with a warning that says what is missing); none with `--recall lexical`.

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
    match args.recall {
        RecallMode::Lexical => None,
        RecallMode::Meaning => Some(engram::embed::built_in()),
        RecallMode::Hybrid => load(args, keep).or_else(|| Some(engram::embed::built_in())),
    }
}

#[cfg(feature = "embeddings")]
fn load(args: &RecallArgs, keep: Keep) -> Option<Arc<dyn Embedder>> {
    use engram::embed::Stored;
    use engram_embed::{MiniLm, default_cache_path, progress_message};
    use engram_store::sqlite::VectorFile;
    let Some(dir) = &args.embedding_model else {
        eprintln!(
            "engram: warning: --recall hybrid needs the model's directory (--embedding-model DIR \
             or ENGRAM_EMBEDDING_MODEL); recall uses the built-in model"
        );
        return None;
    };
    let model = match MiniLm::load(dir) {
        Ok(model) => model.with_progress(|total| eprintln!("engram: {}", progress_message(total))),
        Err(e) => {
            eprintln!("engram: warning: {e}; recall uses the built-in model");
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
         engram-cli --features embeddings); recall uses the built-in model"
    );
    None
}
