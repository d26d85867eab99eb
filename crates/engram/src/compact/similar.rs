//! Recall by meaning's one step that is not a pure decision: the similarity to the query of each
//! unit the planner set aside, by the caller's embedder (reading and keeping vectors in the
//! caller's store). It runs between the planner's two steps (the window it keeps, then what
//! recall brings back and the digest), so that the planner's choices are a function of the
//! history, the budget and these numbers alone.

use std::borrow::Borrow;

use crate::embed::VectorStore;
use crate::message::Message;
use crate::retrieval;

use super::options::CompactOptions;
use super::units::Unit;

/// The units' similarities to the query, in the order of the units given, and the embedder
/// that made them.
pub(super) struct Similar {
    pub(super) scores: Vec<f32>,
    pub(super) embedder: String,
}

/// The similarity of each of `units` (spans of `items`) to the options' query, when the options
/// name an embedder and a query; `None` otherwise, or when embedding fails (recall is then by
/// words alone, and a warning says why).
pub(super) fn to_query<M: Borrow<Message>>(
    items: &[M],
    units: &[Unit],
    options: &CompactOptions,
    vectors: Option<&dyn VectorStore>,
) -> Option<Similar> {
    let embedder = options.embedder.as_ref()?;
    let query = options.query.as_deref()?;
    let mut speakers = retrieval::Speakers::default();
    let meanings: Vec<retrieval::Meaning> = units
        .iter()
        .map(|u| {
            let mut meaning = retrieval::Meaning::default();
            for item in &items[u.start..u.end] {
                meaning.push(item.borrow());
                speakers.add(item.borrow());
            }
            meaning
        })
        .collect();
    match retrieval::similarities(
        embedder.as_ref(),
        vectors,
        query,
        &speakers,
        &meanings,
        options.recall.best_sentence,
    ) {
        Ok(scores) => Some(Similar {
            scores,
            embedder: embedder.name().to_owned(),
        }),
        Err(e) => {
            tracing::warn!(error = %e, "embeddings failed; recall is lexical");
            None
        }
    }
}
