//! Loading the configuration file, with the environment over it.

use engram::config::Config;
use engram::memory::now;
use engram::session::EngramStore;
use engram::sleep::{SleepSettings, sleep_if_due};

use crate::cli::GlobalArgs;
use crate::user_error;

/// `--config` / ENGRAM_CONFIG, else the config directory's config.toml when it exists, else
/// the defaults; then the environment variables ([`engram::discovery::Discovery::config`]).
pub(crate) fn load(global: &GlobalArgs) -> anyhow::Result<Config> {
    global.discovery().config().map_err(|e| user_error!("{e}"))
}

/// With auto-sleep on, a command that wrote to the store runs a sleep tick when one is due
/// (none ran in the last interval, by any process), and says so on standard error.
pub(crate) fn auto_sleep(store: &dyn EngramStore, config: &Config) -> anyhow::Result<()> {
    if !config.memory.auto_sleep {
        return Ok(());
    }
    if let Some(tick) = sleep_if_due(
        store,
        now(),
        config.auto_sleep_interval_ms(),
        &SleepSettings::from_config(config),
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
