//! `engram models`: what the registry knows.

use std::io::Write;

use serde_json::json;

use crate::cli::{GlobalArgs, ModelsArgs};
use crate::count::thousands;
use crate::registry;

pub(crate) fn run(global: &GlobalArgs, args: &ModelsArgs) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if args.toml {
        out.write_all(engram::registry::BUILTIN_MODELS_TOML.as_bytes())?;
        out.flush()?;
        return Ok(());
    }
    let registry = registry::load(global)?;
    let filter = args.filter.as_deref().map(str::to_ascii_lowercase);
    let models: Vec<_> = registry
        .models()
        .filter(|m| {
            filter.as_deref().is_none_or(|f| {
                m.id.to_ascii_lowercase().contains(f)
                    || m.provider.to_ascii_lowercase().contains(f)
                    || m.aliases.iter().any(|a| a.to_ascii_lowercase().contains(f))
            })
        })
        .collect();
    if args.json {
        let rows: Vec<_> = models
            .iter()
            .map(|m| {
                json!({
                    "id": m.id, "provider": m.provider, "aliases": m.aliases,
                    "context_window": m.context_window, "max_output_tokens": m.max_output_tokens,
                    "tokenizer": m.tokenizer, "token_factor": m.token_factor,
                    "exact": m.counts_are_exact(),
                    "price": {"input": m.price.input, "output": m.price.output, "cached_input": m.price.cached_input, "cache_write": m.price.cache_write},
                })
            })
            .collect();
        serde_json::to_writer_pretty(
            &mut out,
            &json!({"models": rows, "default_model": registry.default_model()}),
        )?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "{:<32} {:<10} {:>10} {:>8}  {:<13} {:>8} {:>8} {:>8}",
            "model", "provider", "window", "output", "tokenizer", "$in/M", "$out/M", "$cache/M"
        )?;
        for m in &models {
            let tokenizer = if m.counts_are_exact() {
                m.tokenizer.clone()
            } else {
                format!("~{}x{}", m.tokenizer, m.token_factor)
            };
            writeln!(
                out,
                "{:<32} {:<10} {:>10} {:>8}  {:<13} {:>8} {:>8} {:>8}",
                m.id,
                m.provider,
                thousands(m.context_window),
                thousands(m.max_output_tokens),
                tokenizer,
                m.price.input,
                m.price.output,
                m.price
                    .cached_input
                    .map_or("-".to_owned(), |p| p.to_string()),
            )?;
        }
        writeln!(
            out,
            "\n~ marks estimates. Default model: {}. Unknown models get a {}-token window, tokenizer {} (with a warning).",
            registry.default_model(),
            thousands(registry.fallback().context_window),
            registry.fallback().tokenizer
        )?;
        if let Some(path) = engram::discovery::default_models_path() {
            writeln!(
                out,
                "Override or extend with --models FILE, ENGRAM_MODELS, or {} (start from `engram models --toml`).",
                path.display()
            )?;
        }
    }
    out.flush()?;
    Ok(())
}
