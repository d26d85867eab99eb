//! Loading the model registry: built in, with the user's file merged over it.

use std::path::PathBuf;

use anyhow::Context;
use engram::ModelRegistry;

use crate::cli::GlobalArgs;

/// Where engram looks for a user models file when none is named.
pub(crate) fn default_models_path() -> Option<PathBuf> {
    dirs::config_dir().map(|d| d.join("engram").join("models.toml"))
}

/// The built-in registry, with `--models` / ENGRAM_MODELS, or else the config directory's
/// models.toml when it exists, merged over it.
pub(crate) fn load(global: &GlobalArgs) -> anyhow::Result<ModelRegistry> {
    let mut registry = ModelRegistry::builtin();
    let path = match &global.models {
        Some(path) => Some(path.clone()),
        None => default_models_path().filter(|p| p.is_file()),
    };
    if let Some(path) = path {
        registry
            .merge_file(&path)
            .with_context(|| format!("loading the models file {}", path.display()))?;
    }
    Ok(registry)
}
