//! The conformance suite every [`Store`] backend runs for sessions: the in-memory store here,
//! SQLite in `engram-store`. `run` takes a factory of empty stores and panics with the failing
//! check's name.

mod compaction;
mod lifecycle;
mod random;
mod support;
mod tools;

use crate::session::EngramStore;

/// Runs every check against fresh stores from `make`.
pub fn run(make: &dyn Fn() -> Box<dyn EngramStore>) {
    lifecycle::create_get_list(make().as_ref());
    lifecycle::append_is_atomic_and_ids_are_unique(make().as_ref());
    lifecycle::keyed_appends_are_stored_once(make().as_ref());
    compaction::threshold_compaction_keeps_the_log_and_the_invariants(make().as_ref());
    compaction::checkpoints_restore_without_deleting(make().as_ref());
    compaction::a_compaction_from_before_a_restore_is_refused(make().as_ref());
    compaction::sleep_compaction_extracts_facts_first(make().as_ref());
    lifecycle::deleting_a_session_removes_what_it_owns(make().as_ref());
    lifecycle::timelines_are_kept_per_session(make().as_ref());
    lifecycle::deleting_a_session_forgets_its_vectors(make().as_ref());
    tools::the_agents_compact_history_tool(make().as_ref());
    tools::the_agents_history_tools(make().as_ref());
    compaction::summaries_are_incremental(make().as_ref());
    compaction::status_updates_come_on_schedule_with_the_cost(make().as_ref());
    lifecycle::export_and_import_round_trip(make().as_ref(), make().as_ref());
    random::random_sessions_match_the_reference(make().as_ref());
}
