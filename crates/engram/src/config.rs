//! engram's configuration file, with environment variables over it.
//!
//! Every setting has a default that works, so no file is needed. A file (TOML) changes what it
//! names; an environment variable changes one setting over the file; a command-line flag wins
//! over both.
//!
//! ```toml
//! [memory]
//! ttl_hours = 24                # ENGRAM_TTL_HOURS: working memory's time to live
//! max_working = 10000           # ENGRAM_WM_MAX: the cap; overflow is consolidated early
//! auto_sleep = false            # ENGRAM_AUTO_SLEEP: consolidate in the background / on use
//! auto_sleep_interval_minutes = 30   # ENGRAM_AUTO_SLEEP_INTERVAL_MINUTES
//! archive_retention_days = 0    # 0 keeps archived originals forever (the default)
//! redact = true                 # secrets become placeholders before they are stored
//!
//! [summarizer]                  # optional: a model writes summaries (else the extractive digest)
//! api = "openai"                # openai (any OpenAI-compatible server), anthropic, ollama
//! model = "gpt-4o-mini"
//! base_url = "http://127.0.0.1:8080/v1"
//! api_key_env = "OPENAI_API_KEY"
//!
//! [session]
//! model = "gpt-4o"              # the model new sessions talk to
//! threshold = 0.8               # emergency compaction at this share of the window ...
//! target = 0.6                  # ... down to this share
//! sleep_threshold = 0.5         # sleep-time compaction above this share ...
//! sleep_target = 0.3            # ... down to this share
//! ```

use std::path::Path;

use serde::Deserialize;

use crate::Error;
use crate::compact::policy::TriggerPolicy;
use crate::memory::consolidation::SleepPolicy;
use crate::session::SessionPolicy;

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Memory and consolidation.
    pub memory: MemoryConfig,
    /// Sessions.
    pub session: SessionConfig,
    /// A model that writes summaries (command-line flags override it).
    pub summarizer: Option<SummarizerConfig>,
    /// `engram serve` (command-line flags and environment variables override it).
    pub server: ServerConfig,
}

/// `[server]`: `engram serve`'s settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Where to listen (`127.0.0.1:8420`).
    pub listen: Option<String>,
    /// The store, `sqlite:///PATH` (default: the default database, `--db`).
    pub store: Option<String>,
    /// A file of `tenant:key` lines.
    pub api_keys: Option<String>,
    /// The proxy's OpenAI-format upstream (a base URL with `/v1`).
    pub upstream: Option<String>,
    /// The proxy's Anthropic upstream (`https://api.anthropic.com`).
    pub anthropic_upstream: Option<String>,
    /// Windows of models the registry does not know: `{ "llama3" = 8192 }`.
    #[serde(default)]
    pub model_windows: std::collections::BTreeMap<String, usize>,
    /// The largest REST request body, in MiB (default 8).
    pub max_body_mb: Option<usize>,
    /// The largest request the proxy routes take, in MiB (default 64: the longest histories
    /// are the ones that most need compacting).
    pub max_proxy_body_mb: Option<usize>,
    /// Seconds the proxy's upstream has to start answering (default 600).
    pub upstream_timeout_secs: Option<u64>,
    /// Log one JSON line per proxied model request on standard error (default false).
    pub log_proxy_requests: Option<bool>,
    /// Whether the proxy marks Anthropic's cache breakpoints when a request marks none: `auto`
    /// (the default) or `off`.
    pub cache_breakpoints: Option<String>,
    /// Whether the proxy offers the model engram's history search and read once it sets
    /// history aside, and answers the model's calls to them: `auto` (the default) or `off`.
    pub recall_tools: Option<String>,
    /// Observe only: forward proxied requests as sent and record what engram would have saved
    /// (default false).
    pub observe: Option<bool>,
    /// Host names clients reach the server by besides localhost and the loopback addresses
    /// (`["engram.internal"]`; `"*"` takes any): another Host is refused.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
}

/// `[summarizer]`: the config-file equivalent of `--summarizer`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SummarizerConfig {
    /// `openai` (any OpenAI-compatible server), `anthropic` or `ollama`.
    pub api: String,
    /// The model the server knows.
    pub model: String,
    /// The base URL as the provider's SDK takes it.
    pub base_url: Option<String>,
    /// The environment variable holding the API key.
    pub api_key_env: Option<String>,
}

/// `[memory]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemoryConfig {
    /// Working memory's time to live, in hours (24).
    pub ttl_hours: f64,
    /// The most working entries (10,000); the oldest overflow is consolidated early.
    pub max_working: usize,
    /// Consolidate in the background (a server) or when due on use (the CLI).
    pub auto_sleep: bool,
    /// How often auto-sleep runs, in minutes (30).
    pub auto_sleep_interval_minutes: f64,
    /// Archived originals older than this many days are deleted by sleep; 0 keeps them (the
    /// default: nothing is lost unless you say so).
    pub archive_retention_days: f64,
    /// Replace secrets (API keys, tokens, passwords, private keys) with placeholders in what
    /// enters memory (on by default).
    pub redact: bool,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            ttl_hours: 24.0,
            max_working: 10_000,
            auto_sleep: false,
            auto_sleep_interval_minutes: 30.0,
            archive_retention_days: 0.0,
            redact: true,
        }
    }
}

/// `[session]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionConfig {
    /// The model new sessions talk to (None: the registry's default).
    pub model: Option<String>,
    /// Emergency compaction threshold, as a share of the window.
    pub threshold: f64,
    /// What emergency compaction lands on, as a share of the window; unset: the depth the
    /// bill asks for (the instructions, the task and a quarter of the room they leave, or the
    /// room of the last steps when that is less).
    pub target: Option<f64>,
    /// Sleep-time compaction threshold.
    pub sleep_threshold: f64,
    /// What sleep-time compaction lands on.
    pub sleep_target: f64,
}

impl Default for SessionConfig {
    fn default() -> Self {
        let p = SessionPolicy::default();
        SessionConfig {
            model: None,
            threshold: p.trigger.threshold,
            target: p.trigger.target,
            sleep_threshold: p.sleep_threshold,
            sleep_target: p.sleep_target,
        }
    }
}

impl Config {
    /// Parses a file's text; `origin` names it in errors.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Config, Error> {
        let config: Config =
            toml::from_str(text).map_err(|e| Error::Config(format!("{origin}: {e}")))?;
        config.validate(origin)?;
        Ok(config)
    }

    /// Reads a file.
    pub fn from_file(path: &Path) -> Result<Config, Error> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Config(format!("cannot read {}: {e}", path.display())))?;
        Config::from_toml_str(&text, &path.display().to_string())
    }

    /// Applies environment variables (`ENGRAM_TTL_HOURS`, `ENGRAM_WM_MAX`,
    /// `ENGRAM_AUTO_SLEEP`, `ENGRAM_AUTO_SLEEP_INTERVAL_MINUTES`) read through `var`.
    pub fn with_env(mut self, var: impl Fn(&str) -> Option<String>) -> Result<Config, Error> {
        let number = |name: &str| -> Result<Option<f64>, Error> {
            var(name)
                .filter(|v| !v.trim().is_empty())
                .map(|v| {
                    v.trim()
                        .parse::<f64>()
                        .map_err(|_| Error::Config(format!("{name}={v:?} is not a number")))
                })
                .transpose()
        };
        if let Some(v) = number("ENGRAM_TTL_HOURS")? {
            self.memory.ttl_hours = v;
        }
        if let Some(v) = number("ENGRAM_WM_MAX")? {
            if v < 1.0 || v.fract() != 0.0 {
                return Err(Error::Config(format!(
                    "ENGRAM_WM_MAX={v} must be a whole number of entries"
                )));
            }
            self.memory.max_working = v as usize;
        }
        if let Some(v) = number("ENGRAM_AUTO_SLEEP_INTERVAL_MINUTES")? {
            self.memory.auto_sleep_interval_minutes = v;
        }
        if let Some(v) = var("ENGRAM_AUTO_SLEEP").filter(|v| !v.trim().is_empty()) {
            self.memory.auto_sleep = match v.trim().to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => true,
                "0" | "false" | "no" | "off" => false,
                _ => {
                    return Err(Error::Config(format!(
                        "ENGRAM_AUTO_SLEEP={v:?}: expected 1/true/yes/on or 0/false/no/off"
                    )));
                }
            };
        }
        self.validate("the environment")?;
        Ok(self)
    }

    fn validate(&self, origin: &str) -> Result<(), Error> {
        let m = &self.memory;
        let positive = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(Error::Config(format!(
                    "{origin}: {name} must be positive, not {v}"
                )))
            }
        };
        positive("memory.ttl_hours", m.ttl_hours)?;
        positive(
            "memory.auto_sleep_interval_minutes",
            m.auto_sleep_interval_minutes,
        )?;
        if m.max_working == 0 {
            return Err(Error::Config(format!(
                "{origin}: memory.max_working must be at least 1"
            )));
        }
        if !(m.archive_retention_days.is_finite() && m.archive_retention_days >= 0.0) {
            return Err(Error::Config(format!(
                "{origin}: memory.archive_retention_days must be 0 (keep forever) or more"
            )));
        }
        let s = &self.session;
        for (name, v) in [
            ("session.threshold", Some(s.threshold)),
            ("session.target", s.target),
            ("session.sleep_threshold", Some(s.sleep_threshold)),
            ("session.sleep_target", Some(s.sleep_target)),
        ]
        .into_iter()
        .filter_map(|(name, v)| Some((name, v?)))
        {
            if !(v > 0.0 && v <= 1.0) {
                return Err(Error::Config(format!(
                    "{origin}: {name} must be a share of the window, in (0, 1], not {v}"
                )));
            }
        }
        if s.target.is_some_and(|t| t >= s.threshold) || s.sleep_target >= s.sleep_threshold {
            let target = s.target.map_or("unset".to_owned(), |t| t.to_string());
            return Err(Error::Config(format!(
                "{origin}: a compaction's target must be below its threshold (target {target} / threshold {}, sleep_target {} / sleep_threshold {})",
                s.threshold, s.sleep_target, s.sleep_threshold
            )));
        }
        if let Some(sum) = &self.summarizer
            && !["openai", "anthropic", "ollama"].contains(&sum.api.as_str())
        {
            return Err(Error::Config(format!(
                "{origin}: summarizer.api must be openai, anthropic or ollama, not {:?}",
                sum.api
            )));
        }
        if s.sleep_threshold >= s.threshold {
            return Err(Error::Config(format!(
                "{origin}: session.sleep_threshold ({}) must be below session.threshold ({}), or the two compactions chase each other",
                s.sleep_threshold, s.threshold
            )));
        }
        Ok(())
    }

    /// The sleep policy these settings give.
    pub fn sleep_policy(&self) -> SleepPolicy {
        SleepPolicy {
            ttl_ms: (self.memory.ttl_hours * 3600.0 * 1000.0) as i64,
            max_working: self.memory.max_working,
            ..SleepPolicy::default()
        }
    }

    /// The session policy these settings give.
    pub fn session_policy(&self) -> SessionPolicy {
        SessionPolicy {
            trigger: TriggerPolicy {
                threshold: self.session.threshold,
                target: self.session.target,
                ..TriggerPolicy::default()
            },
            sleep_threshold: self.session.sleep_threshold,
            sleep_target: self.session.sleep_target,
            redact_memory: self.memory.redact,
        }
    }

    /// Archive retention in milliseconds, when set.
    pub fn archive_retention_ms(&self) -> Option<i64> {
        (self.memory.archive_retention_days > 0.0)
            .then_some((self.memory.archive_retention_days * 24.0 * 3600.0 * 1000.0) as i64)
    }

    /// Auto-sleep's interval in milliseconds.
    pub fn auto_sleep_interval_ms(&self) -> i64 {
        (self.memory.auto_sleep_interval_minutes * 60.0 * 1000.0) as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_need_no_file() {
        let c = Config::default();
        assert_eq!(c.sleep_policy(), SleepPolicy::default());
        assert_eq!(c.session_policy(), SessionPolicy::default());
        assert_eq!(c.archive_retention_ms(), None);
        assert!(!c.memory.auto_sleep);
    }

    #[test]
    fn files_and_environment_layer() {
        let c = Config::from_toml_str(
            "[memory]\nttl_hours = 2\nauto_sleep = true\n[session]\nmodel = \"gpt-4o-mini\"\n",
            "test.toml",
        )
        .expect("valid");
        assert_eq!(c.sleep_policy().ttl_ms, 2 * 3600 * 1000);
        assert_eq!(c.session.model.as_deref(), Some("gpt-4o-mini"));
        let env = |k: &str| match k {
            "ENGRAM_TTL_HOURS" => Some("6".to_owned()),
            "ENGRAM_AUTO_SLEEP" => Some("off".to_owned()),
            "ENGRAM_WM_MAX" => Some("500".to_owned()),
            _ => None,
        };
        let c = c.with_env(env).expect("env");
        assert_eq!(c.memory.ttl_hours, 6.0);
        assert_eq!(c.memory.max_working, 500);
        assert!(!c.memory.auto_sleep);
    }

    #[test]
    fn mistakes_name_the_setting() {
        let e = Config::from_toml_str("[memory]\nttl_hour = 2\n", "c.toml").expect_err("typo");
        assert!(
            e.to_string().contains("c.toml") && e.to_string().contains("ttl_hour"),
            "{e}"
        );
        let e = Config::from_toml_str("[session]\nsleep_threshold = 0.9\n", "c.toml")
            .expect_err("chasing");
        assert!(e.to_string().contains("chase"), "{e}");
        let e = Config::default()
            .with_env(|k| (k == "ENGRAM_WM_MAX").then(|| "lots".to_owned()))
            .expect_err("not a number");
        assert!(e.to_string().contains("ENGRAM_WM_MAX"), "{e}");
    }
}
