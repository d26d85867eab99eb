//! `engram serve`: the HTTP service (crate engram-server) with the CLI's configuration.

use std::time::Duration;

use engram::sleep::SleepSettings;
use engram_server::{ApiKeys, DEFAULT_LISTEN, ServeConfig, StoreLocation, parse_model_window};

use crate::cli::{GlobalArgs, McpArgs, ServeArgs};
use crate::user_error;

pub(crate) fn run(global: &GlobalArgs, args: &ServeArgs) -> anyhow::Result<()> {
    let config = crate::config::load(global)?;
    let registry = crate::registry::load(global)?;
    let listen = args
        .listen
        .clone()
        .or_else(|| config.server.listen.clone())
        .unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
    let listen = listen.parse().map_err(|e| {
        user_error!("--listen {listen:?}: {e} (expected HOST:PORT, e.g. 127.0.0.1:8420)")
    })?;
    let store = match args.store.clone().or_else(|| config.server.store.clone()) {
        Some(url) => StoreLocation::parse(&url).map_err(|e| user_error!("--store {e}"))?,
        None => StoreLocation::Sqlite(crate::memory::db_path(global)?),
    };
    let keys_file = args
        .api_keys
        .clone()
        .or_else(|| config.server.api_keys.clone().map(Into::into));
    let api_keys = match (
        keys_file,
        std::env::var("ENGRAM_API_KEYS")
            .ok()
            .filter(|v| !v.trim().is_empty()),
    ) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| user_error!("--api-keys {}: {e}", path.display()))?;
            Some(
                ApiKeys::parse(&text, &path.display().to_string())
                    .map_err(|e| user_error!("{e}"))?,
            )
        }
        (None, Some(inline)) => Some(
            ApiKeys::parse(&inline.replace(',', "\n"), "ENGRAM_API_KEYS")
                .map_err(|e| user_error!("{e}"))?,
        ),
        (None, None) => None,
    };
    let mut serve = ServeConfig::with_store(store);
    serve.proxy.openai_upstream = args
        .upstream
        .clone()
        .or_else(|| config.server.upstream.clone());
    serve.proxy.anthropic_upstream = args
        .anthropic_upstream
        .clone()
        .or_else(|| config.server.anthropic_upstream.clone());
    for url in [
        &serve.proxy.openai_upstream,
        &serve.proxy.anthropic_upstream,
    ]
    .into_iter()
    .flatten()
    {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(user_error!(
                "upstream {url:?}: expected an http:// or https:// base URL"
            ));
        }
    }
    serve.proxy.model_windows = config.server.model_windows.clone();
    serve.header_timeout = std::time::Duration::from_secs(args.header_timeout_secs);
    serve.body_timeout = std::time::Duration::from_secs(args.body_timeout_secs);
    let upstream_timeout = match (
        args.upstream_timeout_secs,
        config.server.upstream_timeout_secs,
    ) {
        (Some(secs), _) => secs,
        (None, Some(secs)) if !(1..=86_400).contains(&secs) => {
            return Err(user_error!(
                "[server] upstream_timeout_secs = {secs}: expected seconds from 1 to 86400"
            ));
        }
        (None, Some(secs)) => secs,
        (None, None) => engram_server::ProxyConfig::default()
            .upstream_timeout
            .as_secs(),
    };
    serve.proxy.upstream_timeout = std::time::Duration::from_secs(upstream_timeout);
    serve.proxy.log_requests =
        args.log_proxy_requests || config.server.log_proxy_requests.unwrap_or(false);
    serve.proxy.keep_bodies = args.inspect_proxy_bodies as usize;
    serve.proxy.cache_breakpoints = match args
        .cache_breakpoints
        .as_deref()
        .or(config.server.cache_breakpoints.as_deref())
    {
        None | Some("auto") => true,
        Some("off") => false,
        Some(other) => {
            return Err(user_error!(
                "[server] cache_breakpoints = {other:?}: expected \"auto\" or \"off\""
            ));
        }
    };
    let recall_tools = args
        .recall_tools
        .as_deref()
        .or(config.server.recall_tools.as_deref())
        .unwrap_or("auto");
    serve.proxy.recall_tools =
        engram_server::RecallTools::from_name(recall_tools).ok_or_else(|| {
            user_error!(
                "[server] recall_tools = {recall_tools:?}: expected \"auto\", \"always\" or \"off\""
            )
        })?;
    serve.max_connections = args.max_connections as usize;
    serve.proxy.observe = args.observe || config.server.observe.unwrap_or(false);
    serve.allowed_hosts = config
        .server
        .allowed_hosts
        .iter()
        .chain(&args.allow_hosts)
        .map(|h| h.trim().to_ascii_lowercase())
        .filter(|h| !h.is_empty())
        .collect();
    let mib =
        |flag: Option<u32>, key: Option<usize>, name: &str| -> anyhow::Result<Option<usize>> {
            match flag.map(|m| m as usize).or(key) {
                Some(mb) if !(1..=4096).contains(&mb) => Err(user_error!(
                    "[server] {name} = {mb}: expected a size in MiB from 1 to 4096"
                )),
                other => Ok(other),
            }
        };
    if let Some(mb) = mib(args.max_body_mb, config.server.max_body_mb, "max_body_mb")? {
        serve.max_body_bytes = mb << 20;
    }
    if let Some(mb) = mib(
        args.max_proxy_body_mb,
        config.server.max_proxy_body_mb,
        "max_proxy_body_mb",
    )? {
        serve.max_proxy_body_bytes = mb << 20;
    }
    for text in &args.model_windows {
        let (name, tokens) =
            parse_model_window(text).map_err(|e| user_error!("--model-window {e}"))?;
        serve.proxy.model_windows.insert(name, tokens);
    }
    serve.listen = listen;
    serve.api_keys = api_keys;
    serve.registry = registry;
    serve.sleep = SleepSettings::from_config(&config);
    if args.summarizer.summary_prompt.is_some() {
        return Err(user_error!(
            "--summary-prompt applies to `engram compact` and `engram summarize`; engram serve summarises with the structured handoff prompt"
        ));
    }
    if let Some(model) = crate::summarizer::from_args_with_windows(
        &serve.registry,
        &args.summarizer,
        &config,
        &serve.proxy.model_windows,
    )? {
        serve.sleep.compact.summarizer = Some(model);
    }
    serve.sleep.compact.embedder =
        crate::embeddings::from_args(&args.recall, crate::embeddings::Keep::Store);
    if config.memory.auto_sleep {
        let ms = config.auto_sleep_interval_ms().max(1_000);
        serve.auto_sleep = Some(Duration::from_millis(ms as u64));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime
        .block_on(engram_server::serve(serve))
        .map_err(|e| user_error!("{e}"))?;
    Ok(())
}

/// `engram mcp`: the agent's tools over MCP on standard input and output. Standard output is
/// the protocol's: everything else goes to standard error.
pub(crate) fn run_mcp(global: &GlobalArgs, args: &McpArgs) -> anyhow::Result<()> {
    let config = crate::config::load(global)?;
    let registry = crate::registry::load(global)?;
    let path = crate::memory::db_path(global)?;
    let store = engram_store::SqliteStore::open(&path)?;
    if let Some(id) = &args.session
        && engram::session::SessionStore::session(&store, id)?.is_none()
    {
        return Err(user_error!(
            "--session {id}: no such session in {} (`engram session list` shows them)",
            path.display()
        ));
    }
    let mut models = engram::CompactOptions::new(1);
    models.summarizer =
        crate::summarizer::from_args(&registry, &crate::cli::SummarizerArgs::default(), &config)?
            .map(|s| s as std::sync::Arc<dyn engram::compact::summarize::Summarizer>);
    models.embedder = crate::embeddings::from_args(&args.recall, crate::embeddings::Keep::Store);
    let server = engram_server::mcp::EngramMcp::new(
        std::sync::Arc::new(store),
        registry,
        config.session_policy(),
        &models,
        args.session.clone(),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime
        .block_on(server.serve_stdio())
        .map_err(|e| user_error!("{e}"))?;
    Ok(())
}
