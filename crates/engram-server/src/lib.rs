//! `engram serve`: engram as an HTTP service.
//!
//! JSON over HTTP (axum): sessions with their logs, contexts, compactions, status updates and
//! checkpoints; memory add, search, sleep and log; `/healthz`, Prometheus `/metrics` and the
//! OpenAPI description at `/openapi.json`. The tenant comes from the API key the request
//! carries (keys are kept only as SHA-256 hashes) and every store call is scoped to it: with
//! SQLite each tenant has its own database file (isolation by construction); with PostgreSQL
//! every row carries its tenant and every query is scoped to it. An id from another tenant is
//! simply not found (404). Without API keys the server has one local tenant and binds to
//! loopback only.
//!
//! The stores are synchronous; handlers run them on tokio's blocking pool. Each tenant's store
//! has the auto-sleep worker when configured (with PostgreSQL, servers sharing the database
//! take turns through the store's sleep claim); on SIGTERM (or Ctrl-C) the server stops
//! accepting, drains the requests in flight, runs the shutdown consolidation and exits.

mod api;
mod auth;
pub mod mcp;
mod metrics;
mod proxy;
mod ui;
mod usage_tap;
mod views;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use engram::ModelRegistry;
use engram::compact::summarize::Summarizer;
use engram::memory::StoreError;
use engram::session::EngramStore;
use engram::session::SessionPolicy;
use engram::sleep::{AutoSleep, SleepSettings, sleep_tick};
use engram_store::SqliteStore;

pub use auth::ApiKeys;
pub use proxy::{ProxyConfig, parse_model_window};

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

/// Where the server keeps its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// The local tenant's SQLite database; other tenants' databases sit beside it.
    Sqlite(PathBuf),
    /// A PostgreSQL database shared by every tenant (and by several servers).
    Postgres(String),
}

impl std::fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreLocation::Sqlite(path) => write!(f, "{}", path.display()),
            StoreLocation::Postgres(url) => write!(f, "{}", redact_url(url)),
        }
    }
}

/// The URL with its password hidden.
fn redact_url(url: &str) -> String {
    #[cfg(feature = "postgres")]
    {
        engram_store::postgres::redact_url(url)
    }
    #[cfg(not(feature = "postgres"))]
    {
        url.split_once('@').map_or_else(
            || url.to_owned(),
            |(_, host)| format!("postgres://***@{host}"),
        )
    }
}

/// What a `--store` URL names: `sqlite:///ABS/PATH`, `sqlite://REL/PATH` or a plain path for
/// SQLite; `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE` for PostgreSQL.
pub fn parse_store_url(url: &str) -> Result<StoreLocation, String> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        if cfg!(feature = "postgres") {
            return Ok(StoreLocation::Postgres(url.to_owned()));
        }
        return Err(
            "--store postgres://...: this engram was built without PostgreSQL (cargo feature `postgres`); rebuild with it or use sqlite:///PATH"
                .into(),
        );
    }
    let path = match url.strip_prefix("sqlite://") {
        Some(rest) => rest,
        None if url.contains("://") => {
            return Err(format!(
                "--store {url:?}: unknown scheme; expected sqlite:///PATH or postgres://USER@HOST/DATABASE"
            ));
        }
        None => url,
    };
    if path.is_empty() {
        return Err(format!("--store {url:?}: no path"));
    }
    Ok(StoreLocation::Sqlite(PathBuf::from(path)))
}

/// A tenant's store, and the same store again when it is SQLite.
type OpenedStore = (Arc<dyn EngramStore>, Option<Arc<SqliteStore>>);

/// One tenant's store and its auto-sleep worker.
pub(crate) struct TenantStore {
    pub(crate) store: Arc<dyn EngramStore>,
    /// The same store when it is SQLite (its search index is brought up to date after bulk
    /// writes).
    sqlite: Option<Arc<SqliteStore>>,
    worker: Mutex<Option<AutoSleep>>,
}

impl TenantStore {
    /// Brings a SQLite store's search index up to date (PostgreSQL's is always).
    pub(crate) fn sync_index(&self) -> Result<(), StoreError> {
        if let Some(s) = &self.sqlite {
            s.sync_index()?;
        }
        Ok(())
    }
}

/// A session of a tenant: `(tenant, session id)`.
type SessionKey = (String, String);

/// The shared state of the server.
pub struct App {
    pub(crate) config: ServeConfig,
    stores: Mutex<HashMap<String, Arc<TenantStore>>>,
    /// The shared PostgreSQL connections (every tenant's store uses them).
    #[cfg(feature = "postgres")]
    postgres: Option<engram_store::PostgresStore>,
    /// One lock per (tenant, session) that writes: appends, compactions and restores of one
    /// session run one at a time (the log's sequence numbers and ids are assigned in order).
    session_locks: Mutex<HashMap<SessionKey, Arc<Mutex<()>>>>,
    pub(crate) metrics: metrics::Metrics,
    pub(crate) proxy: proxy::Proxy,
    /// The turn for large appends: one large body at a time is parsed, stored and compacted;
    /// the others wait as the bytes they came in. Parsed at once, eight 8 MiB appends of short
    /// messages held eight parsed logs and their compactions (about 25 times their bytes each);
    /// the store takes one writer at a time anyway.
    pub(crate) large_appends: tokio::sync::Semaphore,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("store", &self.config.store)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl App {
    /// The server's state; the local tenant's database (or the PostgreSQL server) is opened
    /// now, so that a bad path, a foreign file or a wrong address is reported at start-up.
    pub fn new(config: ServeConfig) -> Result<Arc<App>, String> {
        #[cfg(feature = "postgres")]
        let postgres = match &config.store {
            StoreLocation::Postgres(url) => Some(
                engram_store::PostgresStore::connect(url, LOCAL_TENANT)
                    .map_err(|e| e.to_string())?,
            ),
            StoreLocation::Sqlite(_) => None,
        };
        let app = Arc::new(App {
            config,
            stores: Mutex::new(HashMap::new()),
            #[cfg(feature = "postgres")]
            postgres,
            session_locks: Mutex::new(HashMap::new()),
            metrics: metrics::Metrics::default(),
            proxy: proxy::Proxy::new(),
            large_appends: tokio::sync::Semaphore::new(1),
        });
        if app.config.api_keys.is_none() {
            app.tenant_store(LOCAL_TENANT)
                .map_err(|e| format!("{}: {e}", app.config.store))?;
        }
        Ok(app)
    }

    /// Where a SQLite tenant's database is: the configured path for the local tenant, and
    /// `NAME.tenant-TENANT.db` beside it for the others (`None` with PostgreSQL).
    pub fn tenant_path(&self, tenant: &str) -> Option<PathBuf> {
        match &self.config.store {
            StoreLocation::Sqlite(base) => Some(tenant_path(base, tenant)),
            StoreLocation::Postgres(_) => None,
        }
    }

    fn open_store(&self, tenant: &str) -> Result<OpenedStore, String> {
        match &self.config.store {
            StoreLocation::Sqlite(base) => {
                let path = tenant_path(base, tenant);
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                }
                let store = Arc::new(
                    SqliteStore::open(&path).map_err(|e| format!("{}: {e}", path.display()))?,
                );
                Ok((Arc::clone(&store) as Arc<dyn EngramStore>, Some(store)))
            }
            #[cfg(feature = "postgres")]
            StoreLocation::Postgres(_) => {
                let base = self
                    .postgres
                    .as_ref()
                    .ok_or("the PostgreSQL connection is missing")?;
                let store = base.for_tenant(tenant).map_err(|e| e.to_string())?;
                Ok((Arc::new(store) as Arc<dyn EngramStore>, None))
            }
            #[cfg(not(feature = "postgres"))]
            StoreLocation::Postgres(_) => {
                Err("this engram was built without PostgreSQL (cargo feature `postgres`)".into())
            }
        }
    }

    /// Where the proxy keeps the views it sent for `tenant`: the PostgreSQL database when the
    /// server stores there (every server on it builds on them), else this server's memory.
    pub(crate) fn view_store(
        &self,
        tenant: &str,
    ) -> Box<dyn engram::compact::stable::ViewStore + '_> {
        #[cfg(feature = "postgres")]
        if let Some(store) = self
            .postgres
            .as_ref()
            .and_then(|p| p.for_tenant(tenant).ok())
        {
            return Box::new(store);
        }
        let _ = tenant;
        Box::new(&self.proxy.views)
    }

    pub(crate) fn tenant_store(&self, tenant: &str) -> Result<Arc<TenantStore>, String> {
        let mut stores = lock(&self.stores);
        if let Some(s) = stores.get(tenant) {
            return Ok(Arc::clone(s));
        }
        let (store, sqlite) = self.open_store(tenant)?;
        let worker = self.config.auto_sleep.map(|interval| {
            AutoSleep::start(Arc::clone(&store), interval, self.config.sleep.clone())
        });
        let t = Arc::new(TenantStore {
            store,
            sqlite,
            worker: Mutex::new(worker),
        });
        stores.insert(tenant.to_owned(), Arc::clone(&t));
        Ok(t)
    }

    /// The write lock of one session.
    pub(crate) fn session_lock(&self, tenant: &str, session: &str) -> Arc<Mutex<()>> {
        let mut locks = lock(&self.session_locks);
        if locks.len() > 100_000 {
            // Forget idle locks (only this map holds them).
            locks.retain(|_, l| Arc::strong_count(l) > 1);
        }
        Arc::clone(
            locks
                .entry((tenant.to_owned(), session.to_owned()))
                .or_default(),
        )
    }

    /// The shutdown consolidation: stops the workers and runs one last sleep on every open
    /// store. Returns the entries consolidated.
    pub fn shutdown(&self) -> usize {
        let stores: Vec<(String, Arc<TenantStore>)> = lock(&self.stores)
            .iter()
            .map(|(k, v)| (k.clone(), Arc::clone(v)))
            .collect();
        let mut consolidated = 0;
        for (tenant, t) in stores {
            let worker = lock(&t.worker).take();
            let tick = match worker {
                Some(w) => w.shutdown(),
                None => sleep_tick(t.store.as_ref(), engram::memory::now(), &self.config.sleep),
            };
            match tick {
                Ok(tick) => consolidated += tick.memory.items_consolidated,
                Err(e) => {
                    tracing::error!(tenant, error = %e, "shutdown consolidation failed");
                    eprintln!("engram serve: tenant {tenant}: shutdown consolidation failed: {e}");
                }
            }
            if let Err(e) = t.sync_index() {
                eprintln!("engram serve: tenant {tenant}: search index: {e}");
            }
        }
        consolidated
    }
}

fn tenant_path(base: &Path, tenant: &str) -> PathBuf {
    if tenant == LOCAL_TENANT {
        return base.to_path_buf();
    }
    let stem = base
        .file_stem()
        .map_or_else(|| "engram".into(), |s| s.to_string_lossy().into_owned());
    base.with_file_name(format!("{stem}.tenant-{tenant}.db"))
}

/// The router (for tests and embedding).
pub fn router(app: Arc<App>) -> axum::Router {
    api::router(app)
}

/// Runs the server until SIGTERM or Ctrl-C, then drains, consolidates and returns.
pub async fn serve(config: ServeConfig) -> Result<(), String> {
    if config.api_keys.is_none() && !config.listen.ip().is_loopback() {
        return Err(format!(
            "refusing to serve {} without API keys: pass --api-keys FILE (one tenant:key per line), or listen on 127.0.0.1",
            config.listen
        ));
    }
    let listen = config.listen;
    // Opening a store blocks (files, or a PostgreSQL connection with its own runtime).
    let app = tokio::task::spawn_blocking(move || App::new(config))
        .await
        .map_err(|e| e.to_string())??;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    match &app.config.api_keys {
        None => eprintln!(
            "engram serve: listening on http://{local} (no --api-keys: one local tenant, loopback only); store {}",
            app.config.store
        ),
        Some(keys) => eprintln!(
            "engram serve: listening on http://{local}; {} tenants ({} keys); {}",
            keys.tenants().len(),
            keys.len(),
            match &app.config.store {
                StoreLocation::Sqlite(path) => format!("stores beside {}", path.display()),
                StoreLocation::Postgres(_) =>
                    format!("store {} (a tenant column)", app.config.store),
            }
        ),
    }
    match app.config.summarizer() {
        Some(s) => eprintln!(
            "engram serve: summaries are written by {} (the extractive digest when it fails)",
            s.name()
        ),
        None => eprintln!(
            "engram serve: summaries are written by the extractive digest (no --summarizer)"
        ),
    }
    for (format, url) in [
        ("OpenAI", &app.config.proxy.openai_upstream),
        ("Anthropic", &app.config.proxy.anthropic_upstream),
    ] {
        if let Some(url) = url {
            eprintln!("engram serve: proxy: {format}-format requests go to {url}");
        }
    }
    if app.config.proxy.openai_upstream.is_some() || app.config.proxy.anthropic_upstream.is_some() {
        for line in proxy::describe_windows(&app) {
            eprintln!("engram serve: proxy: model window {line}");
        }
        eprintln!(
            "engram serve: proxy: other models use the registry's windows (`engram models`); unknown ones the fallback's ({} tokens)",
            app.config.registry.fallback().context_window
        );
    }
    let router = router(Arc::clone(&app));
    accept(listener, router, &app.config, shutdown_signal()).await;
    eprintln!("engram serve: draining done; running the shutdown consolidation");
    let app2 = Arc::clone(&app);
    let consolidated = tokio::task::spawn_blocking(move || app2.shutdown())
        .await
        .map_err(|e| e.to_string())?;
    eprintln!("engram serve: consolidated {consolidated} working entries; bye");
    Ok(())
}

/// Serves connections from `listener` until `shutdown` completes, then drains them (at most
/// 60 s). Each connection gets HTTP/1.1 with keep-alive and the header-read timeout; at most
/// `max_connections` are served at once (the others wait in the listen backlog).
async fn accept(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    config: &ServeConfig,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(config.max_connections.max(1)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(config.header_timeout)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, say: wait a little rather than spin.
                    tracing::warn!(error = %e, "accept");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Replies (and streamed chunks) go out at once: without TCP_NODELAY a response written
        // in two pieces can wait 40 ms for a delayed ACK.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY");
        }
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        let connection =
            graceful.watch(builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection");
            }
            drop(slot);
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(Duration::from_secs(60)) => {
            eprintln!("engram serve: connections still open after 60 s of draining; closing them");
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        tokio::signal::ctrl_c().await.ok();
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_urls() {
        assert_eq!(
            parse_store_url("sqlite:///var/lib/engram.db"),
            Ok(StoreLocation::Sqlite(PathBuf::from("/var/lib/engram.db")))
        );
        assert_eq!(
            parse_store_url("data/e.db"),
            Ok(StoreLocation::Sqlite(PathBuf::from("data/e.db")))
        );
        let pg = parse_store_url("postgres://me:secret@localhost/engram");
        if cfg!(feature = "postgres") {
            let pg = pg.expect("postgres");
            assert!(matches!(pg, StoreLocation::Postgres(_)));
            assert!(!pg.to_string().contains("secret"), "{pg}");
        } else {
            assert!(pg.unwrap_err().contains("feature `postgres`"));
        }
        assert!(parse_store_url("mysql://x").is_err());
        assert_eq!(
            tenant_path(Path::new("/d/engram.db"), "acme"),
            PathBuf::from("/d/engram.tenant-acme.db")
        );
        assert_eq!(
            tenant_path(Path::new("/d/engram.db"), LOCAL_TENANT),
            PathBuf::from("/d/engram.db")
        );
    }
}
