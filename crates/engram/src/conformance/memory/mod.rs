//! The conformance suite every [`MemoryStore`] backend runs: the in-memory store here, SQLite
//! in `engram-store` (and PostgreSQL later). `run` takes a factory of empty stores and panics
//! with the failing check's name.

mod consolidation;
mod entries;
mod random;
mod search;
mod support;

use crate::memory::MemoryStore;

/// Runs every check against fresh stores from `make`.
pub fn run(make: &dyn Fn() -> Box<dyn MemoryStore>) {
    entries::insert_get_and_skip(make().as_ref());
    search::search_ranks_and_filters(make().as_ref());
    search::search_drops_the_stop_words_recall_drops(make().as_ref());
    search::search_ranks_by_bm25(make().as_ref());
    search::search_finds_every_tier_asked_for(make().as_ref());
    consolidation::consolidation_is_atomic(make().as_ref());
    consolidation::the_streamed_read_reads_what_the_read_reads(make().as_ref());
    consolidation::a_partly_taken_group_is_skipped_whole(make().as_ref());
    consolidation::an_entry_replaced_after_the_read_is_not_archived_in_its_place(make().as_ref());
    consolidation::sleep_consolidates_by_source_and_session(make().as_ref());
    consolidation::every_fact_is_found_after_sleep(make().as_ref());
    consolidation::the_cap_consolidates_early_and_never_deletes(make().as_ref());
    entries::forget_updates_lineage_and_search(make().as_ref());
    entries::export_pages_and_reads_back(make().as_ref(), make().as_ref());
    entries::retention_and_sleep_claims(make().as_ref());
    entries::vectors_are_kept_by_model_and_text(make().as_ref());
    entries::forgetting_entries_forgets_their_vectors(make().as_ref());
    random::random_memories_match_the_reference(make().as_ref());
}
