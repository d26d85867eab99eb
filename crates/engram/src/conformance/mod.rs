//! The conformance suites every store backend runs, each taking a factory of empty stores and
//! panicking with the failing check's name: [`memory::run`] for a
//! [`MemoryStore`](crate::memory::MemoryStore), [`session::run`] for a
//! [`SessionStore`](crate::session::SessionStore). The in-memory store runs them here; SQLite
//! and PostgreSQL in `engram-store`.

pub mod memory;
pub mod session;
