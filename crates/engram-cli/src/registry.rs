//! Loading the model registry: built in, with the user's file merged over it.

use anyhow::Context;
use engram::ModelRegistry;

use crate::cli::GlobalArgs;

/// The built-in registry, with `--models` / ENGRAM_MODELS, or else the config directory's
/// models.toml when it exists, merged over it ([`engram::discovery::Discovery::registry`]).
pub(crate) fn load(global: &GlobalArgs) -> anyhow::Result<ModelRegistry> {
    let discovery = global.discovery();
    discovery.registry().with_context(|| {
        format!(
            "loading the models file {}",
            discovery.models_path().unwrap_or_default().display()
        )
    })
}
