//! Memory search as every surface runs it (the CLI, REST, MCP, the agent's `memory_search`,
//! Python and Node): by words, fused with meaning when an embedder is given, and following a
//! summary's lineage.
//!
//! Sleep replaces a group of working entries by one episodic summary and moves them to the
//! archive. A summary is shorter than what it stands for, so a fact can be in the archived
//! original and not in the summary (an LLM's summary drops what it judges minor; the
//! extractive one keeps what fits). A search of the default tiers therefore also looks in the
//! archive: an archived original that matches comes back unless its summary came back too and
//! already says it word for word. Nothing that was written is lost to the default search.
//!
//! Hits that share no word with the query and have no similarity of meaning above the rest
//! (a score of 0) are not results, nor are those whose score is below a hundredth of the best
//! hit's: BM25 scores a word nearly every entry holds near zero, so such a hit matched the
//! query only on words that tell the entries apart from none (`service` among a hundred
//! services). They are dropped rather than padding the list.

use std::collections::HashMap;

use super::{MemoryStore, SearchHit, SearchQuery, Tier};
use crate::Error;
use crate::embed::Embedder;

/// How many times below the best hit's score a hit's is negligible.
const NEGLIGIBLE: f64 = 100.0;

/// The hits for `query`, best first, at most its limit: BM25, fused with similarity of meaning
/// when `embedder` is given; in the default tiers, the archived originals a summary lost too.
pub fn find(
    store: &dyn MemoryStore,
    query: &SearchQuery,
    embedder: Option<&dyn Embedder>,
) -> Result<Vec<SearchHit>, Error> {
    let limit = query.clamped_limit();
    let default_tiers = query.tiers.is_empty();
    let mut wide = query.clone();
    if default_tiers {
        wide.tiers = vec![Tier::Working, Tier::Episodic, Tier::Archive];
        // Room for the originals a summary already holds, which are dropped below.
        wide.limit = limit.saturating_mul(2).max(limit + 10);
    }
    // Words alone with a model whose similarity cannot stand alone ([`Embedder::searches_memory`]).
    let embedder = embedder.filter(|e| e.searches_memory());
    let mut hits = match embedder {
        Some(e) => super::hybrid::search_hybrid(store, &wide, e)?,
        None => store.search(&wide)?,
    };
    let best = hits.iter().map(|h| h.score).fold(0.0, f64::max);
    hits.retain(|h| h.score > 0.0 && h.score >= best / NEGLIGIBLE);
    if default_tiers {
        hits = without_what_summaries_say(hits);
    }
    hits.truncate(limit);
    Ok(hits)
}

/// `hits` less each archived original whose summary is among them and holds its text.
fn without_what_summaries_say(hits: Vec<SearchHit>) -> Vec<SearchHit> {
    let summaries: HashMap<&str, &str> = hits
        .iter()
        .filter(|h| h.entry.tier == Tier::Episodic)
        .flat_map(|h| {
            h.entry
                .summary_of
                .iter()
                .map(move |id| (id.as_str(), h.entry.content.as_str()))
        })
        .collect();
    let said: Vec<bool> = hits
        .iter()
        .map(|h| {
            h.entry.tier == Tier::Archive
                && summaries
                    .get(h.entry.id.as_str())
                    .is_some_and(|summary| summary.contains(h.entry.content.trim()))
        })
        .collect();
    hits.into_iter()
        .zip(said)
        .filter(|(_, said)| !said)
        .map(|(h, _)| h)
        .collect()
}
