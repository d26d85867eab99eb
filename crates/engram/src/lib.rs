//! engram: a context engine for LLM agents.
//!
//! Long-running agents overflow their model's context window. engram counts tokens exactly for
//! the model in use, assembles a context under a budget, compacts it without losing what the
//! agent needs next, and consolidates memory while the agent sleeps. This crate is the core:
//! the message model, token counting, the model registry, assembly, compaction and its policy,
//! sessions and the memory model, all as plain functions over plain data; the stores, the CLI,
//! the HTTP service and the Python package are built on it.
//!
//! ```
//! use engram::{ModelRegistry, TokenCounter, parse_conversation};
//!
//! let input = br#"{"messages": [
//!     {"role": "system", "content": "You are a coding agent."},
//!     {"role": "user", "content": "Fix the failing test in src/lib.rs"}
//! ]}"#;
//! let conversation = parse_conversation(input)?;
//!
//! let registry = ModelRegistry::builtin();
//! let model = registry.resolve("gpt-4o-2024-08-06"); // dated names resolve to their family
//! let counter = TokenCounter::new(model.spec.tokenizer()?);
//! let count = counter.count_conversation(&conversation);
//!
//! assert!(count.total() > count.content_tokens());
//! println!("{} of {} tokens", count.total(), model.spec.context_window);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Modules
//! - [`message`]: OpenAI-format messages that keep every unknown field verbatim.
//! - [`input`]: reading `{"messages": [...]}`, a bare array or JSONL, with errors that name the
//!   line, message index and field.
//! - [`tools`]: what the agent itself calls and sees: status updates and the
//!   `compact_history` tool.
//! - [`formats`]: the wire formats besides OpenAI's chat messages: Anthropic's Messages,
//!   OpenAI's Responses items, the AI SDK's prompts, and Codex's compaction route.
//! - [`offered`]: engram's history tools offered to a model through a provider's API (the
//!   proxy), its calls to them answered from the request's own conversation.
//! - [`tokenize`]: tiered tokenizers (exact BPE, HuggingFace files, chars/4).
//! - [`count`]: message-level accounting with a per-message cache, and [`calibrate`]: the
//!   factor and margin of estimated counts, learned from what the provider reports.
//! - [`compact`](mod@compact): the compaction pipeline (units, masking, digest, recall, summaries, live
//!   contexts), [`compact::policy`]: when and how much to compact, for every caller, and
//!   [`compact::stable`]: views that keep a provider's prompt cache warm.
//! - [`assembly`]: budgeted context assembly.
//! - [`redact`]: secrets out of text that leaves for an LLM or enters memory.
//! - [`registry`]: models' windows, output limits, tokenizers and prices, as data.
//! - [`usage`]: what a model call used (cached tokens too), from a reply whole or streamed.
//! - [`memory`]: memory tiers, the [`memory::MemoryStore`] trait and sleep consolidation.
//! - [`session`]: append-only session logs, views, compaction records, checkpoints.
//! - [`sleep`]: one sleep tick for memory and sessions, and the worker that runs them.
//! - [`timestamp`]: times and ids as stores keep them; [`in_memory`]: the in-memory backend of
//!   both store traits. The errors of the core's API are in [`error`].
//! - [`config`]: the configuration file with the environment over it, and [`discovery`]: where
//!   the configuration, the models file and the database are found, for every front.
//! - [`request`]: what the fronts receive, as serde types that check themselves (one error
//!   text per mistake, naming the field).
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod assembly;
pub mod breakpoints;
pub mod calibrate;
pub mod compact;
pub mod config;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod count;
pub mod discovery;
pub mod embed;
pub mod error;
pub mod formats;
pub mod in_memory;
pub mod input;
pub mod ledger;
pub mod memory;
pub mod message;
pub mod offered;
pub mod redact;
pub mod registry;
pub mod request;
pub mod retrieval;
pub mod session;
pub mod sleep;
pub(crate) mod sse;
pub mod stored;
pub mod timestamp;
pub mod tokenize;
pub mod tools;
pub mod usage;

pub use compact::{CompactOptions, CompactReport, Compacted, Strategy, compact};
pub use config::Config;
pub use count::{
    Accounting, ConversationCount, MessageCount, NewestFit, TokenCounter, TokenLedger,
};
pub use discovery::Discovery;
pub use error::{Error, InputError, Missing, Result};
pub use in_memory::InMemoryStore;
pub use input::{
    Conversation, InputFormat, MessageStream, parse_conversation, parse_conversation_with_format,
    stream_conversation,
};
pub use memory::{MemoryEntry, MemoryStore, NewEntry, SearchHit, SearchQuery, Tier};
pub use message::{Content, ContentPart, Message, Role, ToolCall};
pub use registry::{ModelMatch, ModelRegistry, ModelSpec, Pricing, ResolvedModel};
pub use session::{EngramStore, Session, SessionPolicy, SessionStore};
pub use timestamp::Timestamp;
pub use tokenize::{TextTokenizer, Tokenizer, TokenizerName};

/// `n` with the noun that agrees with it, for text people read: `1 message`, `3 messages`.
pub fn plural(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}
