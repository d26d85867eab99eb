//! Persistent [`MemoryStore`](engram::memory::MemoryStore)s for engram. SQLite is the embedded default: one file, no server,
//! no configuration, WAL for concurrent readers, and a tantivy index beside the file for search
//! (BM25 over stemmed words, kept in step with the database by a change queue). PostgreSQL
//! (feature `postgres`) is the store several servers share.
//!
//! ```
//! use engram::memory::{MemoryStore, NewEntry, SearchQuery};
//! use engram_store::SqliteStore;
//!
//! let store = SqliteStore::open_in_memory()?;
//! store.insert(&[NewEntry::working("deployed 47 files to /opt/app", "shell")])?;
//! let hits = store.search(&SearchQuery::new("deployed files", 5))?;
//! assert_eq!(hits.len(), 1);
//! # Ok::<(), engram::Error>(())
//! ```
//!
//! | module | what it holds |
//! |---|---|
//! | `location` | `StoreLocation`: where a store lives, read from its URL |
//! | `sqlite` | `SqliteStore`: memory (`mod.rs`), sessions (`sessions.rs`), the search index (`search.rs`), hybrid recall's vectors and `VectorFile` (`vectors.rs`), count calibrations (`calibration.rs`) |
//! | `postgres` (feature `postgres`) | `PostgresStore`: memory (`mod.rs`), sessions (`sessions.rs`), the proxy's views (`views.rs`), count calibrations (`calibration.rs`), the connection pool (`pool.rs`) |

mod location;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod sqlite;

pub use location::{StoreLocation, redact_url};
#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
pub use sqlite::{APPLICATION_ID, SCHEMA_VERSION, SqliteStore, read_calibration};
