//! A small pool of synchronous PostgreSQL connections, shared by every tenant's store.
//!
//! Connections are opened on demand up to a maximum; a broken connection (the server restarted,
//! say) is dropped when it comes back, and the next caller opens a fresh one.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use postgres::{Client, NoTls};

use crate::location::redact_url;

/// The most connections a pool opens unless told otherwise.
pub const DEFAULT_POOL_SIZE: usize = 8;

/// Connections to one database.
pub struct Pool {
    config: postgres::Config,
    /// The address as given, without its password (for messages).
    display: String,
    max: usize,
    state: Mutex<PoolState>,
    returned: Condvar,
}

struct PoolState {
    idle: Vec<Client>,
    open: usize,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("database", &self.display)
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

impl Pool {
    /// A pool for `url` (`postgres://user[:password]@host[:port]/database[?options]`); one
    /// connection is opened now, so that a wrong address or password is reported at once.
    pub fn connect(url: &str, max: usize) -> Result<Arc<Pool>, engram::Error> {
        let display = redact_url(url);
        let mut config: postgres::Config = url.parse().map_err(|e| {
            engram::Error::Rejected(format!(
                "{display} is not a PostgreSQL address like postgres://user@127.0.0.1:5432/engram ({e})"
            ))
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        config.application_name("engram");
        let pool = Arc::new(Pool {
            config,
            display,
            max: max.max(1),
            state: Mutex::new(PoolState {
                idle: Vec::new(),
                open: 0,
            }),
            returned: Condvar::new(),
        });
        let first = pool.get()?;
        drop(first);
        Ok(pool)
    }

    /// The database's address, without its password.
    pub fn display(&self) -> &str {
        &self.display
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A connection: an idle one, a new one while under the maximum, or the next one returned.
    pub fn get(&self) -> Result<Conn<'_>, engram::Error> {
        let mut state = self.lock();
        loop {
            while let Some(client) = state.idle.pop() {
                if client.is_closed() {
                    state.open -= 1;
                    continue;
                }
                return Ok(Conn {
                    pool: self,
                    client: Some(client),
                });
            }
            if state.open < self.max {
                state.open += 1;
                drop(state);
                return match self.config.connect(NoTls) {
                    Ok(client) => Ok(Conn {
                        pool: self,
                        client: Some(client),
                    }),
                    Err(e) => {
                        self.lock().open -= 1;
                        self.returned.notify_one();
                        Err(engram::Error::Backend(format!(
                            "cannot connect to PostgreSQL at {}: {} (is the server running? `pg_isready -h HOST` says)",
                            self.display,
                            describe(&e)
                        )))
                    }
                };
            }
            state = self.returned.wait(state).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// A connection borrowed from the pool; it goes back when dropped (unless it broke).
pub struct Conn<'p> {
    pool: &'p Pool,
    client: Option<Client>,
}

impl std::ops::Deref for Conn<'_> {
    type Target = Client;
    fn deref(&self) -> &Client {
        self.client.as_ref().expect("present until dropped")
    }
}

impl std::ops::DerefMut for Conn<'_> {
    fn deref_mut(&mut self) -> &mut Client {
        self.client.as_mut().expect("present until dropped")
    }
}

impl Drop for Conn<'_> {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        let mut state = self.pool.lock();
        if client.is_closed() {
            state.open -= 1;
            close_off_runtime(vec![client]);
        } else {
            state.idle.push(client);
        }
        drop(state);
        self.pool.returned.notify_one();
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        close_off_runtime(std::mem::take(&mut state.idle));
    }
}

/// Closes clients on a thread of its own: closing blocks on the client's runtime, which tokio
/// forbids on a thread that drives asynchronous tasks (the last owner may be one, in a server).
fn close_off_runtime(clients: Vec<Client>) {
    if clients.is_empty() {
        return;
    }
    let closer = std::thread::Builder::new()
        .name("engram-pg-close".into())
        .spawn(move || drop(clients));
    if let Ok(handle) = closer {
        let _ = handle.join();
    }
}

/// A PostgreSQL error with the server's message when there is one.
pub(crate) fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("{}: {detail}", db.message()),
            None => db.message().to_owned(),
        },
        None => e.to_string(),
    }
}
