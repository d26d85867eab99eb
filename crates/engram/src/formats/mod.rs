//! The wire formats engram reads and writes besides its own (OpenAI's chat messages): each
//! converts a provider's request to a [`Conversation`](crate::input::Conversation) and a
//! compacted view back, the caller's unchanged parts as the caller sent them.
//!
//! - [`anthropic`]: the Anthropic Messages API.
//! - [`responses`]: OpenAI's Responses items.
//! - [`ai_sdk`]: the Vercel AI SDK's prompts, as its middleware hands them over.
//! - [`remote_compaction`]: Codex's compaction route, answered with a compaction item when the
//!   upstream cannot.

pub mod ai_sdk;
pub mod anthropic;
pub mod remote_compaction;
pub mod responses;
