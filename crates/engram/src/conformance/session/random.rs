//! Random sessions run step for step on the store under test and on the in-memory reference.

use super::support::*;

/// One random step on a session, and what it answered (compaction ids left out).
pub(super) fn random_step(
    store: &dyn EngramStore,
    s: &mut Session<'_>,
    step: u64,
    dice: &mut Dice,
) -> String {
    let id = s.info().id.clone();
    match dice.below(8) {
        0..=2 => {
            let mut messages = turn(step as usize);
            // Outputs of different sizes; sometimes a turn without the request.
            messages[2] = Message::tool(
                format!("call_{step}"),
                "stack frame ".repeat(dice.below(300) as usize),
            );
            if dice.below(3) == 0 {
                messages.remove(0);
            }
            match s.append(messages) {
                Ok(a) => format!(
                    "appended {:?} {:?} -> {} tokens, compacted {}",
                    a.ids,
                    a.seqs,
                    a.view_tokens,
                    a.compaction.is_some()
                ),
                Err(e) => format!("append refused: {e}"),
            }
        }
        3 => {
            let keep = 1 + dice.below(10);
            let args =
                crate::tools::CompactHistoryArgs::parse(&json!({"preserveRecentMessages": keep}))
                    .expect("args");
            s.compact_history(&args).expect("compact_history")
        }
        4 => {
            let window = s.info().window;
            let target = 1 + dice.below(window as u64) as usize;
            let mut options = CompactOptions::new(target);
            options.strategy = [
                crate::compact::Strategy::Auto,
                crate::compact::Strategy::Truncate,
                crate::compact::Strategy::Mask,
                crate::compact::Strategy::Extractive,
            ][dice.below(4) as usize];
            let mut manual = Session::open(store, &id)
                .expect("open")
                .with_options(options);
            match manual.compact(Trigger::Manual, target, None) {
                Ok(crate::session::Compaction::Recorded(r)) => {
                    format!("compacted {} -> {}", r.tokens_before, r.tokens_after)
                }
                Ok(crate::session::Compaction::Unchanged { tokens, reason }) => {
                    format!("unchanged at {tokens}: {reason}")
                }
                Err(e) => format!("compaction failed: {e}"),
            }
        }
        7 => {
            // Sleep-time compaction: key facts into memory first, then down to the sleep
            // target when the view is above the sleep threshold.
            let mut sleeper = Session::open(store, &id)
                .expect("open")
                .with_policy(SessionPolicy::default())
                .with_options(CompactOptions::new(s.info().window));
            match sleeper.sleep_compact() {
                Ok(Some(done)) => format!(
                    "slept {} -> {}, {} summaries, {} facts",
                    done.tokens_before, done.tokens_after, done.summaries, done.facts_extracted
                ),
                Ok(None) => "slept: nothing to do".to_owned(),
                Err(e) => format!("sleep failed: {e}"),
            }
        }
        5 => match s.checkpoint(&format!("c{}", dice.below(3))) {
            Ok(c) => format!("checkpoint {} at {}", c.name, c.log_end),
            Err(e) => format!("checkpoint refused: {e}"),
        },
        _ => match s.restore(&format!("c{}", dice.below(3))) {
            Ok(r) => format!("restored {r:?}"),
            Err(e) => format!("restore refused: {e}"),
        },
    }
}

/// Runs the same random `steps` on two sessions, `expected`'s first, and checks after each
/// that both answered the same and show the same session.
pub(super) fn lockstep(
    label: &str,
    steps: std::ops::Range<u64>,
    expected: (&dyn EngramStore, &mut Session<'_>),
    got: (&dyn EngramStore, &mut Session<'_>),
    dice: &mut Dice,
) {
    let ((want_store, want), (got_store, have)) = (expected, got);
    for step in steps {
        let mut same_dice = Dice(dice.0);
        let wanted = without_times(&random_step(want_store, want, step, dice));
        let answered = without_times(&random_step(got_store, have, step, &mut same_dice));
        assert_same(
            &answered,
            &wanted,
            &format!("{label}, step {step}: the answers"),
        );
        assert_same(
            &observed(got_store, have),
            &observed(want_store, want),
            &format!("{label}, step {step} ({wanted}): the sessions"),
        );
    }
}

/// Random sessions (appends with threshold compactions, `compact_history`, manual compactions
/// of every strategy, sleep-time compactions with their key facts, checkpoints and restores)
/// run step for step on the store under test and on the in-memory reference: after each step
/// both answered the same and show the same view, active log, checkpoints and memory. Then each
/// session is exported and imported into another store, and the two go on step for step the
/// same way.
pub(super) fn random_sessions_match_the_reference(store: &dyn EngramStore) {
    for seed in 0..10u64 {
        let reference = crate::in_memory::InMemoryStore::new();
        let mut dice = Dice(seed);
        let id = format!("random-{seed}");
        let window = 1_500 + dice.below(4_000) as usize;
        let mut a = Session::create(&reference, &new_session(&id, window)).expect("create");
        let mut b = Session::create(store, &new_session(&id, window)).expect("create");
        for s in [&mut a, &mut b] {
            s.append(vec![
                Message::system("You are a coding agent."),
                Message::user("Fix the failing tests in src/"),
            ])
            .expect("append");
        }
        let label = format!("seed {seed}");
        lockstep(
            &label,
            0..30,
            (&reference, &mut a),
            (store, &mut b),
            &mut dice,
        );
        // Exported from the store under test and imported into another store, the session is
        // the same, and goes on the same way: restores reach the same checkpoints' views
        // through the compaction ids the import assigned anew.
        let dump = crate::session::export_session(store, &id).expect("export");
        let imported = crate::in_memory::InMemoryStore::new();
        imported.import_session(&dump).expect("import");
        // With the session's memory (its journal and key facts), as `engram export --session`
        // writes its lines and `engram import` reads them.
        let memory: Vec<NewEntry> = store
            .entries(Some(&id), None, 10_000)
            .expect("the session's memory")
            .iter()
            .map(|e| {
                crate::request::AddMemory::new(false)
                    .entry(&crate::session::export::memory_line(e))
                    .expect("reads back")
            })
            .collect();
        crate::memory::MemoryStore::insert(&imported, &memory).expect("import the memory");
        let mut c = Session::open(&imported, &id).expect("open the imported session");
        assert_same(
            &observed(&imported, &c),
            &observed(store, &b),
            &format!("seed {seed}: the imported session"),
        );
        let label = format!("seed {seed}, after the import");
        lockstep(
            &label,
            30..40,
            (store, &mut b),
            (&imported, &mut c),
            &mut dice,
        );
    }
}
