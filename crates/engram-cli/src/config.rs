//! Loading the configuration file, with the environment over it.

use std::path::PathBuf;

use engram::config::Config;
use engram::memory::now;
use engram::session::Store;
use engram::worker::{SleepSettings, sleep_if_due};

use crate::cli::GlobalArgs;
use crate::user_error;

/// Where engram looks for a configuration file when none is named.
pub(crate) fn default_config_path() -> Option<PathBuf> {
    dirs::config_dir().map(|d| d.join("engram").join("config.toml"))
}

/// `--config` / ENGRAM_CONFIG, else the config directory's config.toml when it exists, else
/// the defaults; then the environment variables.
pub(crate) fn load(global: &GlobalArgs) -> anyhow::Result<Config> {
    let path = match &global.config {
        Some(path) => Some(path.clone()),
        None => default_config_path().filter(|p| p.is_file()),
    };
    let config = match path {
        Some(path) => Config::from_file(&path).map_err(|e| user_error!("{e}"))?,
        None => Config::default(),
    };
    config
        .with_env(|k| std::env::var(k).ok())
        .map_err(|e| user_error!("{e}"))
}

/// The sleep settings the configuration gives.
pub(crate) fn sleep_settings(config: &Config) -> SleepSettings {
    SleepSettings {
        policy: config.sleep_policy(),
        sessions: config.session_policy(),
        archive_retention_ms: config.archive_retention_ms(),
        ..SleepSettings::default()
    }
}

/// With auto-sleep on, a command that wrote to the store runs a sleep tick when one is due
/// (none ran in the last interval, by any process), and says so on standard error.
pub(crate) fn auto_sleep(store: &dyn Store, config: &Config) -> anyhow::Result<()> {
    if !config.memory.auto_sleep {
        return Ok(());
    }
    if let Some(tick) = sleep_if_due(
        store,
        now(),
        config.auto_sleep_interval_ms(),
        &sleep_settings(config),
    )? {
        eprintln!(
            "engram: auto-sleep consolidated {}, compacted {} in {:.0} ms",
            engram::plural(
                tick.memory.items_consolidated,
                "working entry",
                "working entries"
            ),
            engram::plural(tick.sessions.compacted.len(), "session", "sessions"),
            tick.memory.duration_ms
        );
    }
    Ok(())
}
