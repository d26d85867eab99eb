//! How the server runs: its addresses, limits, store, keys and the proxy's upstreams, with
//! their defaults. Nothing here does anything; `App` (app.rs) runs it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use engram::ModelRegistry;
use engram::compact::summarize::Summarizer;
use engram::session::SessionPolicy;
use engram::sleep::SleepSettings;

use engram_store::StoreLocation;

use crate::error::Error;
use crate::keys::ApiKeys;

/// Default listen address: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8420";
/// Default limit on a request body.
pub const DEFAULT_MAX_BODY_BYTES: usize = 8 << 20;
/// The default largest request the proxy routes take (64 MiB).
pub const DEFAULT_MAX_PROXY_BODY_BYTES: usize = 64 << 20;
/// The default time a connection has to send a request's headers (30 s).
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// The default time a request's body has to arrive (120 s).
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(120);
/// The default most connections served at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default limit on one message (its JSON).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 1 << 20;

/// The local tenant's name (no API keys).
pub const LOCAL_TENANT: &str = "local";

/// How the server runs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Where the data lives.
    pub store: StoreLocation,
    /// Tenants and their keys; `None`: one local tenant, loopback only.
    pub api_keys: Option<ApiKeys>,
    /// The auto-sleep worker's interval; `None`: no worker (sleep on request and at shutdown).
    pub auto_sleep: Option<Duration>,
    /// When sessions compact (live and in a sleep), who writes the summaries, and what a sleep
    /// does to memory (TTL, cap, retention): one set of settings for REST sessions, the proxy
    /// and the sleeps. [`ServeConfig::policy`] and [`ServeConfig::summarizer`] read it.
    pub sleep: SleepSettings,
    /// The model registry (windows and prices).
    pub registry: ModelRegistry,
    /// The largest REST request body accepted.
    pub max_body_bytes: usize,
    /// The largest request body the proxy routes accept.
    pub max_proxy_body_bytes: usize,
    /// The largest message accepted.
    pub max_message_bytes: usize,
    /// How long a connection may take to send a request's headers, counted from when it
    /// opened or from the previous response: idle and keep-alive connections included.
    pub header_timeout: Duration,
    /// How long a request's body may take to arrive.
    pub body_timeout: Duration,
    /// The most connections served at once; more wait to be accepted.
    pub max_connections: usize,
    /// Host names the server answers to besides the loopback names (a server listening on
    /// loopback) or instead of any name (a server listening elsewhere): a request whose `Host`
    /// names another server is a web page's DNS rebinding, refused. `*` takes any name.
    pub allowed_hosts: Vec<String>,
    /// The OpenAI/Anthropic proxy: upstreams and windows of unknown models.
    pub proxy: ProxyConfig,
}

impl ServeConfig {
    /// The defaults for a SQLite database.
    pub fn new(store: PathBuf) -> Self {
        ServeConfig::with_store(StoreLocation::Sqlite(store))
    }

    /// The defaults for a store.
    pub fn with_store(store: StoreLocation) -> Self {
        ServeConfig {
            listen: DEFAULT_LISTEN.parse().expect("a valid default address"),
            store,
            api_keys: None,
            auto_sleep: None,
            sleep: SleepSettings::default(),
            registry: ModelRegistry::builtin(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_proxy_body_bytes: DEFAULT_MAX_PROXY_BODY_BYTES,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            allowed_hosts: Vec::new(),
            proxy: ProxyConfig::default(),
        }
    }

    /// When sessions and the proxy compact.
    pub fn policy(&self) -> &SessionPolicy {
        &self.sleep.sessions
    }

    /// Writes the summaries of the proxy's, the sessions' and memory's compactions (an LLM);
    /// `None`: the extractive digest.
    pub fn summarizer(&self) -> Option<&Arc<dyn Summarizer>> {
        self.sleep.compact.summarizer.as_ref()
    }

    /// The sentence embedder of hybrid recall (`engram serve --recall hybrid`): session
    /// contexts with a query, `search_history` and memory search use it; `None`: lexical.
    pub fn embedder(&self) -> Option<&Arc<dyn engram::embed::Embedder>> {
        self.sleep.compact.embedder.as_ref()
    }
}

/// How the proxy decides and where it forwards.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// The OpenAI-format upstream, as the OpenAI SDK takes a base URL (`/v1` included).
    pub openai_upstream: Option<String>,
    /// The Anthropic upstream, as the Anthropic SDK takes a base URL (`https://api.anthropic.com`;
    /// a trailing `/v1` is accepted too).
    pub anthropic_upstream: Option<String>,
    /// Windows of models the registry does not know (a local server's model, say).
    pub model_windows: BTreeMap<String, usize>,
    /// Extra room kept when the count is an estimate (Claude): 0.1 is 10%.
    pub estimate_margin: f64,
    /// How long the upstream has to start its answer (its status and headers; a stream may
    /// then take as long as it needs). Past it the caller gets a 504 naming the upstream.
    pub upstream_timeout: std::time::Duration,
    /// Log one JSON line per proxied model request on standard error (route, model, status,
    /// tokens before and after, steps, summary cache, milliseconds).
    pub log_requests: bool,
    /// Keep what was sent upstream (secrets redacted) for this many of the latest proxied
    /// requests, for the inspector; 0 (the default) keeps none. The requests' figures are
    /// always kept, for the latest 200.
    pub keep_bodies: usize,
    /// On `/v1/messages`, mark where Anthropic's prompt cache keeps the prefix (the system
    /// prompt, the end of a view's head, the newest message) when the caller marks none: without
    /// a breakpoint Anthropic caches nothing. On by default (`--cache-breakpoints auto`).
    pub cache_breakpoints: bool,
    /// When to offer the model engram's history search and read (`engram_search_history`,
    /// `engram_read_history`) once a request's history is set aside, answering its calls from
    /// the history the request carried and asking the upstream again ([`engram::offered`]).
    pub recall_tools: RecallTools,
    /// Observe: every request is forwarded byte for byte, and engram records what it would
    /// have sent and what that would have cost (`--observe`, `[server] observe = true`).
    pub observe: bool,
}

/// When the proxy offers its history tools ([`ProxyConfig::recall_tools`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecallTools {
    /// From the compaction where they are worth the prompt prefix they make new
    /// ([`engram::offered::worth_offering`]); the default (`--recall-tools auto`).
    #[default]
    Auto,
    /// From the first compaction of a conversation, whatever it costs (`always`).
    Always,
    /// Never (`off`).
    Off,
}

impl RecallTools {
    /// The setting a name (`auto`, `always`, `off`) stands for.
    pub fn from_name(name: &str) -> Option<RecallTools> {
        match name {
            "auto" => Some(RecallTools::Auto),
            "always" => Some(RecallTools::Always),
            "off" => Some(RecallTools::Off),
            _ => None,
        }
    }
}

/// The default [`ProxyConfig::upstream_timeout`]: a long generation can take minutes.
pub(crate) const DEFAULT_UPSTREAM_TIMEOUT: std::time::Duration =
    std::time::Duration::from_secs(600);

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            openai_upstream: None,
            anthropic_upstream: None,
            model_windows: BTreeMap::new(),
            estimate_margin: 0.1,
            upstream_timeout: DEFAULT_UPSTREAM_TIMEOUT,
            log_requests: false,
            keep_bodies: 0,
            cache_breakpoints: true,
            recall_tools: RecallTools::Auto,
            observe: false,
        }
    }
}

/// Parses `NAME=TOKENS` (the `--model-window` flag).
pub fn parse_model_window(text: &str) -> Result<(String, usize), Error> {
    let invalid = |why: String| Error::Invalid {
        setting: format!("{text:?}"),
        why,
    };
    let (name, tokens) = text
        .split_once('=')
        .ok_or_else(|| invalid("expected NAME=TOKENS, like llama3=8192".into()))?;
    let tokens: usize = tokens
        .trim()
        .replace('_', "")
        .parse()
        .map_err(|_| invalid(format!("{tokens:?} is not a number of tokens")))?;
    if name.trim().is_empty() || tokens == 0 {
        return Err(invalid(
            "expected a model name and a positive window".into(),
        ));
    }
    Ok((name.trim().to_owned(), tokens))
}
