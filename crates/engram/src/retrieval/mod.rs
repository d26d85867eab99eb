//! Retrieval: how what left an agent's context is found again, the one layer every search of
//! engram stands on. Compaction's recall, the agent's `search_history` and `memory_search`, a
//! session's timeline and every memory backend use it; it imports nothing above it (only
//! messages and the embedding interface), and a layering test keeps it so.
//!
//! - [`words`]: the searchable terms of a text (stop words left out, Porter2 stems, compounds).
//! - [`bm25`]: one BM25 index, and the formula the SQL backends use inside theirs.
//! - `sentences`: the one way text is cut into sentences.
//! - `headings`: the system lines that start a log's sessions and name their time.
//! - `meaning`: the text a unit is embedded by, similarity of meaning, fusion with words.
//! - `log_sessions`: the sessions about a query's topic, time or meaning lift their units.
//! - `rank`: recall's order (neighbours, named speakers) and how a budget is spent on it.
//! - [`RecallProfile`]: every weight of the above, each with the situation it serves.
//!
//! No rule reads how a query is worded: every word of it but its stop words is searched, and
//! every rule acts on where the matches fall.

pub mod bm25;
pub(crate) mod headings;
mod log_sessions;
pub(crate) mod meaning;
mod profile;
pub(crate) mod rank;
pub(crate) mod sentences;
pub mod words;

pub(crate) use bm25::Bm25;
pub(crate) use headings::{is_heading, is_heading_message};
pub use meaning::message_lines_text;
pub(crate) use meaning::{
    Meaning, Speakers, fuse, fuse_ranks, meaning_similarities, push_meaning_text, query_vectors,
    similarities,
};
pub use profile::RecallProfile;
pub(crate) use rank::{Ordered, Ranking, Traits, order, typical_tokens, value, voice};
pub(crate) use sentences::{line_sentences, sentences};
pub(crate) use words::{query_terms, terms, terms_and_joined};
