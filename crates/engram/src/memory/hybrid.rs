//! Memory search by words and by meaning (`--recall hybrid`).
//!
//! BM25 (the store's own search) finds the entries that share the query's words; an
//! [`Embedder`] finds those that say the same in other words. Every entry the filters admit is
//! compared with the query, page by page, by its whole text and its best sentence, as a turn is
//! in compaction's recall; each entry's vectors are kept in the store beside it (a
//! [`VectorStore`], under [`vector_hashes`]), so it is embedded once, and forgotten with
//! the entry (the memory conformance suite checks every store). The
//! two scores are fused by compaction recall's rule, so that one question ranks the same way
//! in a session's history, in a compaction and in memory. That rule counts a similarity above
//! the average of the entries searched: among a handful of entries all about the same thing,
//! meaning alone finds nothing. When the embedder fails, the search is lexical and says so in
//! the log.

use std::collections::HashMap;

use super::{MemoryEntry, MemoryStore, SearchHit, SearchQuery};
use crate::Error;
use crate::embed::{Embedder, TextHash, VectorStore, text_hash};
use crate::retrieval::{self, RecallProfile};
use crate::timestamp::Timestamp;

/// The lexical hits fused with the similarities: the best this many by BM25 (an entry below
/// them counts as sharing no word with the query).
pub const LEXICAL_POOL: usize = 1_000;

/// Entries read (and embedded) at a time.
const PAGE: usize = 512;

/// The hashes under which a memory entry of `content` has its vectors kept: its whole text's
/// and, when it has more than one sentence, each sentence's. A store that forgets an entry
/// forgets the vectors under these.
pub fn vector_hashes(content: &str) -> Vec<TextHash> {
    retrieval::Meaning::of_entry(content)
        .texts()
        .map(text_hash)
        .collect()
}

/// The hits for `query` by BM25 and by similarity of meaning, best first; each hit's score is
/// the fused one (comparable within one query only).
pub fn search_hybrid(
    store: &dyn MemoryStore,
    query: &SearchQuery,
    embedder: &dyn Embedder,
) -> Result<Vec<SearchHit>, Error> {
    let limit = query.clamped_limit();
    let lexical_query = SearchQuery {
        limit: LEXICAL_POOL.max(limit),
        ..query.clone()
    };
    let lexical = store.search(&lexical_query)?;
    if limit == 0 {
        return Ok(Vec::new());
    }
    let vectors: &dyn VectorStore = store;
    // The lexical hits by id (their place in `lexical`): their scores join the fusion, and a
    // hit chosen is moved out rather than read again.
    let found: HashMap<String, usize> = lexical
        .iter()
        .enumerate()
        .map(|(i, h)| (h.entry.id.clone(), i))
        .collect();
    let mut lexical: Vec<Option<SearchHit>> = lexical.into_iter().map(Some).collect();

    // Every admitted entry's similarity to the query (embedded once, for every page).
    let q = match retrieval::query_vectors(embedder, &query.text, &retrieval::Speakers::default()) {
        Ok(q) => q,
        Err(e) => return Ok(lexical_only(lexical.into_iter().flatten(), limit, &e)),
    };
    let mut admitted: Vec<(String, Timestamp)> = Vec::new();
    let mut similar: Vec<f32> = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = store.entries(query.session_id.as_deref(), after.as_deref(), PAGE)?;
        let Some(last) = page.last() else { break };
        after = Some(last.id.clone());
        let read = page.len();
        let page: Vec<MemoryEntry> = page.into_iter().filter(|e| query.admits(e)).collect();
        if !page.is_empty() {
            let meanings: Vec<retrieval::Meaning> = page
                .iter()
                .map(|e| retrieval::Meaning::of_entry(&e.content))
                .collect();
            match retrieval::meaning_similarities(
                embedder,
                Some(vectors),
                &q,
                &meanings,
                RecallProfile::default().best_sentence,
            ) {
                Ok(s) => similar.extend(s),
                Err(e) => return Ok(lexical_only(lexical.into_iter().flatten(), limit, &e)),
            }
            admitted.extend(page.into_iter().map(|e| (e.id, e.created_at)));
        }
        if read < PAGE {
            break;
        }
    }
    let words: Vec<f64> = admitted
        .iter()
        .map(|(id, _)| {
            found
                .get(id)
                .and_then(|&i| lexical[i].as_ref())
                .map_or(0.0, |h| h.score)
        })
        .collect();
    let fused = retrieval::fuse(&words, &similar, RecallProfile::default().meaning);
    let mut ranked: Vec<(usize, f64)> = fused
        .into_iter()
        .enumerate()
        .filter(|(_, f)| *f > 0.0)
        .collect();
    // Best first; among equals, the newest (as the lexical search orders them).
    ranked.sort_by(|a, b| {
        b.1.total_cmp(&a.1)
            .then(admitted[b.0].1.cmp(&admitted[a.0].1))
    });
    let mut hits = Vec::with_capacity(limit.min(ranked.len()));
    for (i, score) in ranked {
        if hits.len() == limit {
            break;
        }
        let id = &admitted[i].0;
        let entry = match found.get(id).and_then(|&i| lexical[i].take()) {
            Some(hit) => hit.entry,
            // Read since the page: gone when forgotten meanwhile.
            None => match store.get(id)? {
                Some(entry) => entry,
                None => continue,
            },
        };
        hits.push(SearchHit { entry, score });
    }
    Ok(hits)
}

/// The lexical hits alone, when embedding fails (and the log says so).
fn lexical_only(
    hits: impl Iterator<Item = SearchHit>,
    limit: usize,
    error: &Error,
) -> Vec<SearchHit> {
    tracing::warn!(error = %error, "embeddings failed; memory search is lexical");
    hits.take(limit).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::Topics;
    use crate::in_memory::InMemoryStore;
    use crate::memory::{NewEntry, Tier};

    #[derive(Debug)]
    struct Broken;

    impl Embedder for Broken {
        fn name(&self) -> &str {
            "broken"
        }

        fn embed(&self, _: &[&str]) -> Result<Vec<Vec<f32>>, Error> {
            Err(Error::embedder("broken", "the model is gone"))
        }
    }

    fn store() -> InMemoryStore {
        let store = InMemoryStore::new();
        // More than a page of entries about other things, then two about a pet (one of
        // them in another session).
        let mut entries: Vec<NewEntry> = (0..PAGE + 40)
            .map(|i| {
                let mut e = NewEntry::working(format!("meeting {i} moved to room {i}"), "notes");
                e.id = Some(format!("e{i:04}"));
                e.session_id = Some("s1".into());
                e
            })
            .collect();
        for (id, session, text) in [
            ("p1", "s1", "Rex the puppy chases frisbees"),
            ("p2", "s2", "my cat sleeps all day"),
            ("o2", "s2", "the train leaves at noon"),
        ] {
            let mut e = NewEntry::working(text, "notes");
            e.id = Some(id.into());
            e.session_id = Some(session.into());
            entries.push(e);
        }
        store.insert(&entries).expect("inserts");
        store
    }

    #[test]
    fn an_entry_that_shares_no_word_is_found_by_meaning() {
        let store = store();
        let query = SearchQuery::new("which pet do I have", 3);
        assert!(store.search(&query).expect("searches").is_empty());
        let hits = search_hybrid(&store, &query, &Topics).expect("searches");
        let ids: Vec<&str> = hits.iter().map(|h| h.entry.id.as_str()).collect();
        assert_eq!(ids.len(), 2, "{ids:?}");
        assert!(ids.contains(&"p1") && ids.contains(&"p2"), "{ids:?}");

        // The filters hold: one session, one tier.
        let mut in_s2 = query.clone();
        in_s2.session_id = Some("s2".into());
        let hits = search_hybrid(&store, &in_s2, &Topics).expect("searches");
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].entry.id, "p2");
        let mut archive = query.clone();
        archive.tiers = vec![Tier::Archive];
        assert!(
            search_hybrid(&store, &archive, &Topics)
                .expect("searches")
                .is_empty()
        );
    }

    #[test]
    fn each_entry_is_embedded_once_and_kept_in_the_store() {
        use crate::embed::{Counting, VectorStore, text_hash};
        let store = store();
        let model = Counting::default();
        let query = SearchQuery::new("which pet do I have", 3);
        let first = search_hybrid(&store, &query, &model).expect("searches");
        let entries = PAGE + 43;
        // Every entry, and the query once (the entries are read in two pages).
        assert_eq!(model.embedded(), entries + 1);
        let again = search_hybrid(&store, &query, &model).expect("searches");
        assert_eq!(again, first);
        assert_eq!(model.embedded(), entries + 2, "then only the query");
        let kept = store
            .vectors(
                "counting",
                &[
                    text_hash("my cat sleeps all day"),
                    text_hash("which pet do I have"),
                ],
            )
            .expect("reads");
        assert!(kept[0].is_some());
        assert!(kept[1].is_none(), "the query's vector is not kept");
    }

    #[test]
    fn words_in_common_still_rank_first() {
        let store = store();
        let query = SearchQuery::new("meeting 7 room 7", 2);
        let hits = search_hybrid(&store, &query, &Topics).expect("searches");
        assert_eq!(hits[0].entry.id, "e0007", "{hits:?}");
        assert_eq!(hits.len(), 2);
    }

    #[test]
    fn a_failing_embedder_gives_the_lexical_hits() {
        let store = store();
        let query = SearchQuery::new("meeting 7 room 7", 2);
        let hits = search_hybrid(&store, &query, &Broken).expect("searches");
        assert_eq!(hits, store.search(&query).expect("searches"));

        // The query embeds, the entries do not: lexical too.
        #[derive(Debug)]
        struct QueryOnly;
        impl Embedder for QueryOnly {
            fn name(&self) -> &str {
                "query-only"
            }
            fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, Error> {
                match texts {
                    [_] => Topics.embed(texts),
                    _ => Err(Error::embedder("query-only", "out of memory")),
                }
            }
        }
        let hits = search_hybrid(&store, &query, &QueryOnly).expect("searches");
        assert_eq!(hits, store.search(&query).expect("searches"));
    }
}
