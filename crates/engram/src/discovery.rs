//! Where engram's settings come from: one discovery for the CLI, the server and Python.
//!
//! Each file is looked for in the same order everywhere:
//!
//! | setting | named by | environment | else |
//! |---|---|---|---|
//! | configuration ([`Config`]) | `--config` / `config=` | `ENGRAM_CONFIG` | `config.toml` in engram's config directory, when it exists; the defaults |
//! | model registry ([`ModelRegistry`]) | `--models` / `models=` | `ENGRAM_MODELS` | `models.toml` there, merged over the built-in registry when it exists |
//! | database | `--db` / `path=` | `ENGRAM_DB` | `engram.db` in engram's data directory |
//!
//! The configuration's own environment variables (`ENGRAM_SESSION_THRESHOLD`, ...) then apply
//! over the file ([`Config::with_env`]).

use std::path::PathBuf;

use crate::Error;
use crate::config::Config;
use crate::registry::ModelRegistry;

/// Reads an environment variable.
type EnvVar = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Where to look: the paths a caller named, and the environment.
pub struct Discovery {
    /// The configuration file a caller named (`--config`).
    pub config: Option<PathBuf>,
    /// The models file a caller named (`--models`).
    pub models: Option<PathBuf>,
    /// The database a caller named (`--db`).
    pub db: Option<PathBuf>,
    env: EnvVar,
}

impl std::fmt::Debug for Discovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discovery")
            .field("config", &self.config)
            .field("models", &self.models)
            .field("db", &self.db)
            .finish_non_exhaustive()
    }
}

impl Default for Discovery {
    fn default() -> Self {
        Discovery::with_env(|k| std::env::var(k).ok())
    }
}

impl Discovery {
    /// Nothing named, the process's environment.
    pub fn new() -> Self {
        Discovery::default()
    }

    /// Nothing named, the environment `env` gives (tests).
    pub fn with_env(env: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> Self {
        Discovery {
            config: None,
            models: None,
            db: None,
            env: Box::new(env),
        }
    }

    fn named(&self, given: Option<&PathBuf>, var: &str) -> Option<PathBuf> {
        given
            .cloned()
            .or_else(|| (self.env)(var).filter(|v| !v.is_empty()).map(PathBuf::from))
    }

    /// The configuration file in use, when there is one.
    pub fn config_path(&self) -> Option<PathBuf> {
        self.named(self.config.as_ref(), "ENGRAM_CONFIG")
            .or_else(|| default_config_path().filter(|p| p.is_file()))
    }

    /// The models file merged over the built-in registry, when there is one.
    pub fn models_path(&self) -> Option<PathBuf> {
        self.named(self.models.as_ref(), "ENGRAM_MODELS")
            .or_else(|| default_models_path().filter(|p| p.is_file()))
    }

    /// The configuration: its file, else the defaults, with the environment over it.
    pub fn config(&self) -> Result<Config, Error> {
        let config = match self.config_path() {
            Some(path) => Config::from_file(&path)?,
            None => Config::default(),
        };
        config.with_env(&self.env)
    }

    /// The built-in registry with the models file merged over it.
    pub fn registry(&self) -> crate::Result<ModelRegistry> {
        let mut registry = ModelRegistry::builtin();
        if let Some(path) = self.models_path() {
            registry.merge_file(&path)?;
        }
        Ok(registry)
    }

    /// The database path; an error only on a system with no data directory.
    pub fn db_path(&self) -> Result<PathBuf, Error> {
        self.named(self.db.as_ref(), "ENGRAM_DB")
            .or_else(default_db_path)
            .ok_or_else(|| {
                Error::Config(
                    "no data directory on this system: set ENGRAM_DB or name the database"
                        .to_owned(),
                )
            })
    }
}

/// `config.toml` in engram's config directory (whether or not it exists).
pub fn default_config_path() -> Option<PathBuf> {
    config_dir().map(|d| d.join("config.toml"))
}

/// `models.toml` in engram's config directory (whether or not it exists).
pub fn default_models_path() -> Option<PathBuf> {
    config_dir().map(|d| d.join("models.toml"))
}

/// `engram.db` in engram's data directory.
pub fn default_db_path() -> Option<PathBuf> {
    dirs::data_dir().map(|d| d.join("engram").join("engram.db"))
}

fn config_dir() -> Option<PathBuf> {
    dirs::config_dir().map(|d| d.join("engram"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> Discovery {
        Discovery::with_env(move |k| {
            pairs
                .iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn a_named_path_wins_over_the_environment() {
        let mut d = env(&[("ENGRAM_DB", "/env/engram.db"), ("ENGRAM_CONFIG", "")]);
        assert_eq!(d.db_path().unwrap(), PathBuf::from("/env/engram.db"));
        d.db = Some(PathBuf::from("/named.db"));
        assert_eq!(d.db_path().unwrap(), PathBuf::from("/named.db"));
        assert_eq!(
            d.config_path(),
            default_config_path().filter(|p| p.is_file()),
            "an empty variable names nothing"
        );
    }

    #[test]
    fn the_configuration_file_then_its_environment() {
        let dir = std::env::temp_dir().join(format!("engram-settings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("config.toml");
        std::fs::write(
            &file,
            "[session]\nthreshold = 0.9\n[memory]\nttl_hours = 12\n",
        )
        .unwrap();
        let mut d = env(&[("ENGRAM_TTL_HOURS", "6")]);
        d.config = Some(file.clone());
        let config = d.config().unwrap();
        assert_eq!(config.session.threshold, 0.9);
        assert_eq!(
            config.memory.ttl_hours, 6.0,
            "the environment over the file"
        );
        d.config = Some(dir.join("missing.toml"));
        let e = d.config().unwrap_err().to_string();
        assert!(e.contains("missing.toml"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_models_file_merges_over_the_builtin_registry() {
        let dir = std::env::temp_dir().join(format!("engram-models-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("models.toml");
        std::fs::write(
            &file,
            "[[model]]\nid = \"house-model\"\ncontext_window = 12345\nmax_output_tokens = 1000\ntokenizer = \"cl100k\"\n",
        )
        .unwrap();
        let mut d = env(&[]);
        d.models = Some(file);
        let registry = d.registry().unwrap();
        assert_eq!(registry.resolve("house-model").spec.context_window, 12_345);
        assert_eq!(registry.resolve("gpt-4o").how, crate::ModelMatch::Exact);
        std::fs::remove_dir_all(&dir).ok();
    }
}
