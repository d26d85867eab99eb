//! The model registry: each model's context window, output limit, tokenizer and prices, as data.
//!
//! The built-in registry is `models.toml`, compiled in. A user file of the same format is merged
//! over it (same `id` replaces). Lookups accept the names people actually send: dated snapshots
//! (`gpt-4o-2024-08-06`), provider prefixes (`openai/gpt-4o`, `models/gemini-2.5-pro`), Vertex
//! `@` versions, and aliases. A model the registry does not know falls back to `[fallback]`
//! with a warning, rather than failing an agent mid-run.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::tokenize::{Tokenizer, TokenizerName};

/// The registry compiled into engram.
pub const BUILTIN_MODELS_TOML: &str = include_str!("../models.toml");

/// Prices in USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pricing {
    /// Input (prompt) tokens.
    pub input: f64,
    /// Output (completion) tokens.
    pub output: f64,
    /// Input tokens read from the provider's prompt cache, when it has one.
    #[serde(default)]
    pub cached_input: Option<f64>,
    /// Input tokens written to the provider's prompt cache, when it bills writes above the input
    /// price (Anthropic, OpenAI's GPT-5.6 family: 1.25x); without it a write costs the input
    /// price.
    #[serde(default)]
    pub cache_write: Option<f64>,
}

impl Pricing {
    /// The cost in USD of `input` uncached and `cached` cached input tokens and `output` tokens.
    pub fn cost(&self, input: usize, cached: usize, output: usize) -> f64 {
        self.cost_with_writes(input, cached, 0, output)
    }

    /// The cost in USD of `input` uncached input tokens of which `written` were written to the
    /// prompt cache, `cached` read from it, and `output` tokens.
    pub fn cost_with_writes(
        &self,
        input: usize,
        cached: usize,
        written: usize,
        output: usize,
    ) -> f64 {
        let per_m = 1_000_000.0;
        let written = written.min(input);
        ((input - written) as f64 * self.input
            + written as f64 * self.cache_write.unwrap_or(self.input)
            + cached as f64 * self.cached_input.unwrap_or(self.input)
            + output as f64 * self.output)
            / per_m
    }
}

/// One model's entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// The canonical id (`gpt-4o`, `claude-sonnet-4-5`); empty only in `[fallback]`.
    #[serde(default)]
    pub id: String,
    /// Who serves it (`openai`, `anthropic`, `google`, ...).
    #[serde(default)]
    pub provider: String,
    /// Other names that resolve to this entry.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// The context window in tokens (input and output together).
    pub context_window: usize,
    /// The most tokens one reply may have.
    pub max_output_tokens: usize,
    /// The tokenizer name ([`Tokenizer::from_name`]).
    pub tokenizer: String,
    /// A factor applied to the tokenizer's count (for models whose tokenizer is not available).
    #[serde(default = "one")]
    pub token_factor: f64,
    /// True only when `tokenizer` is the model's own, so counts are exact.
    #[serde(default)]
    pub exact_tokenizer: bool,
    /// Prices; absent means unknown (costs are then reported as zero).
    #[serde(default)]
    pub price: Pricing,
    /// The model takes OpenAI's explicit cache breakpoints (`prompt_cache_breakpoint` on a
    /// content part; GPT-5.6 and later), where the proxy marks the stable prefix of a request
    /// that marks none.
    #[serde(default)]
    pub prompt_cache_breakpoints: bool,
}

fn one() -> f64 {
    1.0
}

impl ModelSpec {
    /// The tokenizer for this model, with its correction factor applied.
    pub fn tokenizer(&self) -> Result<Tokenizer> {
        Ok(Tokenizer::from_name(&self.tokenizer)?.scaled(self.token_factor))
    }

    /// True when counts for this model are exact: its own tokenizer, available in this build
    /// (Gemini's needs the `gemini-tokenizer` feature), with no correction factor.
    pub fn counts_are_exact(&self) -> bool {
        self.exact_tokenizer
            && (self.token_factor - 1.0).abs() < f64::EPSILON
            && self.tokenizer().is_ok_and(|t| t.is_exact())
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RegistryFile {
    #[serde(default)]
    defaults: Option<Defaults>,
    /// What an unknown model gets: a model entry without an id.
    #[serde(default)]
    fallback: Option<ModelSpec>,
    #[serde(default)]
    model: Vec<ModelSpec>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Defaults {
    #[serde(default)]
    model: Option<String>,
}

/// How a requested name was resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelMatch {
    /// The name is an entry's id.
    Exact,
    /// The name is one of an entry's aliases.
    Alias,
    /// The name starts with an entry's id or alias (a dated snapshot, say).
    Prefix,
    /// Unknown: the fallback values apply.
    Fallback,
}

/// The result of a lookup: the spec to use and how it was found.
#[derive(Debug, Clone)]
pub struct ResolvedModel {
    /// The name as requested.
    pub requested: String,
    /// The entry (for a fallback, a spec built from `[fallback]` with `id` = the requested name).
    pub spec: Arc<ModelSpec>,
    /// How it was found.
    pub how: ModelMatch,
}

impl ResolvedModel {
    /// A warning to show the user when the model was not found.
    pub fn warning(&self) -> Option<String> {
        (self.how == ModelMatch::Fallback).then(|| {
            format!(
                "unknown model {:?}: using the fallback (window {}, tokenizer {}{}); add it to your models file to count it properly",
                self.requested,
                self.spec.context_window,
                self.spec.tokenizer,
                if (self.spec.token_factor - 1.0).abs() < f64::EPSILON {
                    String::new()
                } else {
                    format!(" x {}", self.spec.token_factor)
                }
            )
        })
    }
}

/// Models by id and alias, plus the fallback for unknown ones.
#[derive(Debug, Clone)]
pub struct ModelRegistry {
    models: Vec<Arc<ModelSpec>>,
    by_name: HashMap<String, (usize, bool)>,
    fallback: ModelSpec,
    default_model: String,
}

impl ModelRegistry {
    /// The registry compiled into engram.
    pub fn builtin() -> ModelRegistry {
        // The built-in file is tested; a failure here is a build defect, caught by the tests.
        Self::from_toml_str(BUILTIN_MODELS_TOML, "built-in models.toml").unwrap_or_else(|e| {
            panic!("the built-in model registry is invalid: {e}");
        })
    }

    /// Parses a registry file. `origin` names it in errors.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<ModelRegistry> {
        let file = parse_file(text, origin)?;
        let fallback = file.fallback.ok_or_else(|| {
            Error::Registry(format!(
                "{origin}: a complete registry needs a [fallback] table"
            ))
        })?;
        validate(&fallback, &format!("{origin}: [fallback]"))?;
        let mut registry = ModelRegistry {
            models: Vec::new(),
            by_name: HashMap::new(),
            fallback,
            default_model: file
                .defaults
                .and_then(|d| d.model)
                .unwrap_or_else(|| "gpt-4o".to_owned()),
        };
        for spec in file.model {
            registry.insert(spec, origin)?;
        }
        Ok(registry)
    }

    /// The built-in registry with a user file merged over it.
    pub fn builtin_with_overrides(path: &Path) -> Result<ModelRegistry> {
        let mut registry = Self::builtin();
        registry.merge_file(path)?;
        Ok(registry)
    }

    /// Merges a user file: entries with a known id replace it, new ones are added, `[fallback]`
    /// and `[defaults]` replace the current ones.
    pub fn merge_file(&mut self, path: &Path) -> Result<()> {
        let text =
            std::fs::read_to_string(path).map_err(|source| Error::io(path.display(), &source))?;
        self.merge_toml_str(&text, &path.display().to_string())
    }

    /// Like [`ModelRegistry::merge_file`], from text.
    pub fn merge_toml_str(&mut self, text: &str, origin: &str) -> Result<()> {
        let file = parse_file(text, origin)?;
        if let Some(fallback) = file.fallback {
            validate(&fallback, &format!("{origin}: [fallback]"))?;
            self.fallback = fallback;
        }
        if let Some(model) = file.defaults.and_then(|d| d.model) {
            self.default_model = model;
        }
        for spec in file.model {
            self.insert(spec, origin)?;
        }
        Ok(())
    }

    fn insert(&mut self, spec: ModelSpec, origin: &str) -> Result<()> {
        if spec.id.trim().is_empty() {
            return Err(Error::Registry(format!(
                "{origin}: a model has an empty id"
            )));
        }
        validate(&spec, &format!("{origin}: model {:?}", spec.id))?;
        let key = normalize(&spec.id);
        let slot = match self.by_name.get(&key) {
            Some(&(i, true)) => {
                // Replacing an entry: drop the old aliases first.
                let old = self.models[i].clone();
                for alias in &old.aliases {
                    self.by_name.remove(&normalize(alias));
                }
                self.models[i] = Arc::new(spec);
                i
            }
            _ => {
                self.models.push(Arc::new(spec));
                self.models.len() - 1
            }
        };
        let spec = self.models[slot].clone();
        self.by_name.insert(key, (slot, true));
        for alias in &spec.aliases {
            self.by_name.insert(normalize(alias), (slot, false));
        }
        Ok(())
    }

    /// Every entry, in file order.
    pub fn models(&self) -> impl Iterator<Item = &ModelSpec> {
        self.models.iter().map(|m| m.as_ref())
    }

    /// What an unknown model gets (its `id` is empty).
    pub fn fallback(&self) -> &ModelSpec {
        &self.fallback
    }

    /// The model assumed when none is named.
    pub fn default_model(&self) -> &str {
        &self.default_model
    }

    /// Finds a model by id, alias, or prefix (longest wins); unknown names get the fallback.
    pub fn resolve(&self, name: &str) -> ResolvedModel {
        let key = normalize(name);
        let found = self.by_name.get(&key).map(|&(i, is_id)| {
            (
                i,
                if is_id {
                    ModelMatch::Exact
                } else {
                    ModelMatch::Alias
                },
            )
        });
        let found = found.or_else(|| {
            self.by_name
                .iter()
                .filter(|(known, _)| {
                    key.strip_prefix(known.as_str())
                        .is_some_and(|rest| rest.starts_with(['-', ':', '.', '_']))
                })
                .max_by_key(|(known, _)| known.len())
                .map(|(_, &(i, _))| (i, ModelMatch::Prefix))
        });
        match found {
            Some((i, how)) => ResolvedModel {
                requested: name.to_owned(),
                spec: self.models[i].clone(),
                how,
            },
            None => ResolvedModel {
                requested: name.to_owned(),
                spec: Arc::new(ModelSpec {
                    id: name.to_owned(),
                    aliases: Vec::new(),
                    ..self.fallback.clone()
                }),
                how: ModelMatch::Fallback,
            },
        }
    }
}

/// Checks what a file can get wrong beyond its syntax; `context` names the entry in errors.
fn validate(spec: &ModelSpec, context: &str) -> Result<()> {
    if spec.context_window == 0 {
        return Err(Error::Registry(format!(
            "{context}: context_window must be positive"
        )));
    }
    if !(spec.token_factor.is_finite() && spec.token_factor > 0.0) {
        return Err(Error::Registry(format!(
            "{context}: token_factor must be positive"
        )));
    }
    TokenizerName::parse(&spec.tokenizer)
        .map_err(|e| Error::Registry(format!("{context}: {e}")))?;
    Ok(())
}

fn parse_file(text: &str, origin: &str) -> Result<RegistryFile> {
    toml::from_str(text).map_err(|e| Error::Registry(format!("{origin}: {e}")))
}

/// Lower case, without a provider prefix (`openai/`, `models/`) or a Vertex `@version`.
fn normalize(name: &str) -> String {
    let name = name.trim();
    let name = name.rsplit('/').next().unwrap_or(name);
    let name = name.split('@').next().unwrap_or(name);
    name.to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_registry_is_valid_and_covers_the_providers() {
        let registry = ModelRegistry::builtin();
        for provider in [
            "openai",
            "anthropic",
            "google",
            "meta",
            "qwen",
            "mistral",
            "deepseek",
        ] {
            assert!(
                registry.models().any(|m| m.provider == provider),
                "no {provider} model"
            );
        }
        for m in registry.models() {
            assert!(m.context_window >= m.max_output_tokens, "{}", m.id);
            assert!(m.price.input >= 0.0 && m.price.output >= 0.0);
        }
        assert_eq!(
            registry.resolve(registry.default_model()).how,
            ModelMatch::Exact
        );
    }

    #[test]
    fn lookups_accept_real_world_names() {
        let r = ModelRegistry::builtin();
        let cases = [
            ("gpt-4o", "gpt-4o", ModelMatch::Exact),
            ("GPT-4o-mini-2024-07-18", "gpt-4o-mini", ModelMatch::Prefix),
            ("openai/gpt-4.1", "gpt-4.1", ModelMatch::Exact),
            ("gpt-4-0613", "gpt-4", ModelMatch::Prefix),
            (
                "claude-sonnet-4-5-20250929",
                "claude-sonnet-4-5",
                ModelMatch::Prefix,
            ),
            (
                "claude-3-7-sonnet@20250219",
                "claude-3-7-sonnet",
                ModelMatch::Exact,
            ),
            ("models/gemini-2.5-pro", "gemini-2.5-pro", ModelMatch::Exact),
            ("llama3.1:8b", "llama-3.1-8b-instruct", ModelMatch::Alias),
            ("chatgpt-4o-latest", "gpt-4o", ModelMatch::Alias),
            ("claude-3-5-sonnet", "claude-3-5-sonnet", ModelMatch::Exact),
            (
                "claude-3-5-sonnet-20241022",
                "claude-3-5-sonnet",
                ModelMatch::Prefix,
            ),
            (
                "anthropic/claude-3.7-sonnet",
                "claude-3-7-sonnet",
                ModelMatch::Alias,
            ),
            ("claude-3-7-sonnet", "claude-3-7-sonnet", ModelMatch::Exact),
            ("o3", "o3", ModelMatch::Exact),
            ("o3-2025-04-16", "o3", ModelMatch::Prefix),
            ("o4-mini", "o4-mini", ModelMatch::Exact),
            ("gpt-5", "gpt-5", ModelMatch::Exact),
            ("gpt-5-2025-08-07", "gpt-5", ModelMatch::Prefix),
            ("gemini-2.5-pro", "gemini-2.5-pro", ModelMatch::Exact),
            ("gemini-2.5-flash", "gemini-2.5-flash", ModelMatch::Exact),
            (
                "gemini-2.5-flash-lite",
                "gemini-2.5-flash-lite",
                ModelMatch::Exact,
            ),
        ];
        for (name, id, how) in cases {
            let resolved = r.resolve(name);
            assert_eq!(
                (resolved.spec.id.as_str(), &resolved.how),
                (id, &how),
                "{name}"
            );
        }
        let unknown = r.resolve("my-local-model");
        assert_eq!(unknown.how, ModelMatch::Fallback);
        assert!(unknown.warning().expect("warns").contains("my-local-model"));
        assert_eq!(r.resolve("gpt-4o").warning(), None);
    }

    #[test]
    fn claude_counts_are_estimates_and_openai_exact() {
        let r = ModelRegistry::builtin();
        assert!(!r.resolve("claude-sonnet-4-5").spec.counts_are_exact());
        assert!(r.resolve("gpt-4o").spec.counts_are_exact());
        #[cfg(feature = "openai-bpe")]
        {
            let t = r
                .resolve("claude-sonnet-4-5")
                .spec
                .tokenizer()
                .expect("tokenizer");
            assert!(!t.is_exact());
            let cl = Tokenizer::cl100k().expect("cl100k");
            let text = "The quick brown fox jumps over the lazy dog. ".repeat(20);
            assert_eq!(
                t.count(&text),
                (cl.count(&text) as f64 * 1.25).ceil() as usize
            );
        }
    }

    #[test]
    fn user_files_override_and_extend() {
        let mut r = ModelRegistry::builtin();
        r.merge_toml_str(
            r#"
            [defaults]
            model = "my-model"
            [fallback]
            context_window = 32000
            max_output_tokens = 1000
            tokenizer = "chars/4"
            [[model]]
            id = "my-model"
            context_window = 8192
            max_output_tokens = 512
            tokenizer = "chars/4"
            price = { input = 0.0, output = 0.0 }
            [[model]]
            id = "gpt-4o"
            aliases = ["four-oh"]
            context_window = 64000
            max_output_tokens = 4096
            tokenizer = "o200k"
            exact_tokenizer = true
            "#,
            "test",
        )
        .expect("valid");
        assert_eq!(r.default_model(), "my-model");
        assert_eq!(r.resolve("my-model").spec.context_window, 8192);
        assert_eq!(r.resolve("gpt-4o").spec.context_window, 64000);
        assert_eq!(r.resolve("four-oh").spec.id, "gpt-4o");
        assert_eq!(
            r.resolve("chatgpt-4o-latest").how,
            ModelMatch::Fallback,
            "old alias dropped"
        );
        assert_eq!(r.resolve("nope").spec.context_window, 32000);
    }

    #[test]
    fn bad_files_name_the_problem() {
        let mut r = ModelRegistry::builtin();
        let e = r
            .merge_toml_str("[[model]]\nid = \"x\"\ncontext_window = 1\nmax_output_tokens = 1\ntokenizer = \"nope\"\n", "f.toml")
            .expect_err("bad tokenizer");
        assert!(e.to_string().contains("f.toml: model \"x\""), "{e}");
        let e = r
            .merge_toml_str("[[model]]\nid = \"x\"\n", "f.toml")
            .expect_err("missing");
        assert!(e.to_string().contains("f.toml"), "{e}");
        let e = r
            .merge_toml_str("[[model]]\nid = \"x\"\ncontext_window = 1\nmax_output_tokens = 1\ntokenizer = \"cl100k\"\ncolour = 1\n", "f.toml")
            .expect_err("unknown field");
        assert!(e.to_string().contains("colour"), "{e}");
    }

    #[test]
    fn pricing() {
        let p = Pricing {
            input: 2.5,
            output: 10.0,
            cached_input: Some(1.25),
            cache_write: Some(3.125),
        };
        assert!((p.cost(1_000_000, 0, 0) - 2.5).abs() < 1e-9);
        assert!((p.cost(0, 1_000_000, 100_000) - 2.25).abs() < 1e-9);
        // A write costs 1.25x the input price; more written than sent counts as sent.
        assert!(
            (p.cost_with_writes(1_000_000, 0, 400_000, 0) - (0.6 * 2.5 + 0.4 * 3.125)).abs() < 1e-9
        );
        assert!(
            (p.cost_with_writes(10, 0, 20, 0) - p.cost_with_writes(10, 0, 10, 0)).abs() < 1e-12
        );
        let claude = ModelRegistry::builtin().resolve("claude-opus-5-5");
        assert_eq!(claude.how, ModelMatch::Exact);
        assert_eq!(claude.spec.context_window, 1_000_000);
    }
}
