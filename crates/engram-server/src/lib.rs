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

//!
//! The modules import downward only: `routes` on top; the handlers beside each other (`rest`,
//! `proxy`, `mcp`, `ui`); `auth` and `body` below them; `app` (the shared state) below those;
//! `config`, `keys`, `error`, `metrics`, `views`, `proxy_state` and `usage_tap` at the bottom
//! (`tests/layers.rs` holds the files to it).

mod app;
mod auth;
mod body;
mod config;
mod error;
mod guard;
mod keys;
mod listen;
pub mod mcp;
mod metrics;
mod proxy;
mod proxy_state;
mod rest;
mod routes;
mod ui;
mod usage_tap;
mod views;

pub use app::App;
pub use config::{
    DEFAULT_BODY_TIMEOUT, DEFAULT_HEADER_TIMEOUT, DEFAULT_LISTEN, DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_PROXY_BODY_BYTES, LOCAL_TENANT,
    ProxyConfig, RecallTools, ServeConfig, parse_model_window,
};
pub use engram_store::StoreLocation;
pub use error::Error;
pub use keys::ApiKeys;
pub use listen::serve;
pub use routes::router;
