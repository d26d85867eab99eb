//! The server's shared state: the configuration, each tenant's store (opened on first use,
//! with its auto-sleep worker), the sessions' write locks, the metrics and the proxy's state.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use engram::session::{EngramStore, Session};
use engram::sleep::{AutoSleep, sleep_tick};
use engram_store::{SqliteStore, StoreLocation};

use crate::config::{LOCAL_TENANT, ServeConfig};
use crate::error::Error;
use crate::metrics;
use crate::proxy_state::Proxy;

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
    pub(crate) fn sync_index(&self) -> Result<(), engram::Error> {
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
    pub(crate) proxy: Proxy,
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
    pub fn new(config: ServeConfig) -> Result<Arc<App>, Error> {
        #[cfg(feature = "postgres")]
        let postgres = match &config.store {
            StoreLocation::Postgres(url) => Some(
                engram_store::PostgresStore::connect(url, LOCAL_TENANT).map_err(|source| {
                    Error::Store {
                        store: config.store.to_string(),
                        source,
                    }
                })?,
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
            proxy: Proxy::new(),
            large_appends: tokio::sync::Semaphore::new(1),
        });
        if app.config.api_keys.is_none() {
            app.tenant_store(LOCAL_TENANT)?;
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

    fn open_store(&self, tenant: &str) -> Result<OpenedStore, Error> {
        let failed = |store: &dyn std::fmt::Display, source| Error::Store {
            store: store.to_string(),
            source,
        };
        match &self.config.store {
            StoreLocation::Sqlite(base) => {
                let path = tenant_path(base, tenant);
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
                        doing: dir.display().to_string(),
                        source,
                    })?;
                }
                let store =
                    Arc::new(SqliteStore::open(&path).map_err(|e| failed(&path.display(), e))?);
                Ok((Arc::clone(&store) as Arc<dyn EngramStore>, Some(store)))
            }
            #[cfg(feature = "postgres")]
            StoreLocation::Postgres(_) => {
                let base = self.postgres.as_ref().ok_or_else(|| {
                    failed(
                        &self.config.store,
                        engram::Error::Backend("the PostgreSQL connection is missing".into()),
                    )
                })?;
                let store = base
                    .for_tenant(tenant)
                    .map_err(|e| failed(&self.config.store, e))?;
                Ok((Arc::new(store) as Arc<dyn EngramStore>, None))
            }
            #[cfg(not(feature = "postgres"))]
            StoreLocation::Postgres(_) => Err(failed(
                &self.config.store,
                engram::Error::Rejected(
                    "this engram was built without PostgreSQL (cargo feature `postgres`)".into(),
                ),
            )),
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

    pub(crate) fn tenant_store(&self, tenant: &str) -> Result<Arc<TenantStore>, Error> {
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

    /// Opens a session of `store` as every route of the server runs it (REST and MCP): the
    /// server's policy, the model's prices, the configured summarizer and embedder.
    pub(crate) fn open_session<'s>(
        &self,
        store: &'s TenantStore,
        id: &str,
    ) -> Result<Session<'s>, engram::Error> {
        Ok(Session::open_with(
            store.store.as_ref(),
            id,
            &self.config.registry,
            *self.config.policy(),
        )?
        .with_models(&self.config.sleep.compact))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_databases_sit_beside_the_local_one() {
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
