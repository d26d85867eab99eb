//! Random memory steps run on the store under test and on the in-memory reference.

use super::support::*;

/// What a backend holds, as far as it must agree with the reference: the counts per tier and
/// every entry (a summary by what it says and stands for, as its id is the store's own).
pub(super) fn held(store: &dyn MemoryStore) -> String {
    let mut entries = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = store.entries(None, after.as_deref(), 50).expect("page");
        let Some(last) = page.last() else { break };
        after = Some(last.id.clone());
        entries.extend(page);
    }
    let mut lines: Vec<String> = entries
        .into_iter()
        .map(|mut e| {
            let ours = e.id.len() == 5
                && e.id.starts_with('e')
                && e.id[1..].bytes().all(|b| b.is_ascii_digit());
            if !ours {
                e.id = "SUMMARY".into();
            }
            e.summary_of.sort();
            format!(
                "{} {:?} {:?} {} {:?} {} {} {:?}",
                e.id,
                e.tier,
                e.content,
                e.source,
                e.session_id,
                e.created_at,
                e.importance,
                e.summary_of
            )
        })
        .collect();
    lines.sort();
    // What a search finds (not its order, which each store's index scores its own way).
    let mut found: Vec<String> = ["parser deploy", "cache", "login backup", "invoice"]
        .iter()
        .flat_map(|text| {
            let query = SearchQuery {
                text: (*text).into(),
                limit: 1_000,
                tiers: vec![Tier::Working, Tier::Episodic, Tier::Archive],
                ..SearchQuery::default()
            };
            let hits = store.search(&query).expect("search");
            hits.into_iter()
                .map(move |h| format!("{text}: {:?} {:?}", h.entry.tier, h.entry.content))
        })
        .collect();
    found.sort();
    format!(
        "{:?}\n{}\n{}",
        store.stats().expect("stats"),
        lines.join("\n"),
        found.join("\n")
    )
}

/// One random step on a memory store at `clock`, and what it answered.
pub(super) fn random_memory_step(
    store: &dyn MemoryStore,
    next: &mut u64,
    clock: Timestamp,
    dice: &mut Dice,
) -> String {
    const WORDS: [&str; 6] = ["parser", "deploy", "cache", "invoice", "login", "backup"];
    match dice.below(6) {
        0..=2 => {
            let count = 1 + dice.below(8);
            let entries: Vec<NewEntry> = (0..count)
                .map(|_| {
                    // Now and then an id already stored: skipped.
                    let n = if *next > 0 && dice.below(6) == 0 {
                        dice.below(*next)
                    } else {
                        *next += 1;
                        *next - 1
                    };
                    let mut e = entry(
                        &format!("e{n:04}"),
                        &format!("fact {n} about the {}", WORDS[dice.below(6) as usize]),
                        ["shell", "notes", "chat"][dice.below(3) as usize],
                        [None, Some("s1"), Some("s2")][dice.below(3) as usize],
                        clock - dice.below(3 * DAY as u64) as i64,
                    );
                    e.importance = dice.below(11) as f64 / 10.0;
                    e
                })
                .collect();
            format!("{:?}", store.insert(&entries))
        }
        3 => {
            let policy = SleepPolicy {
                max_working: 5 + dice.below(30) as usize,
                group_chunk: 2 + dice.below(8) as usize,
                ..SleepPolicy::default()
            };
            match sleep(store, clock, &policy) {
                Ok(r) => format!(
                    "slept: {} consolidated, {} summaries, {} groups, {} over the cap, {} fallbacks",
                    r.items_consolidated, r.summaries_created, r.groups, r.over_cap, r.fallbacks
                ),
                Err(e) => format!("sleep failed: {e}"),
            }
        }
        4 => {
            let what = match dice.below(3) {
                0 => Forget {
                    id: Some(format!("e{:04}", dice.below((*next).max(1) + 2))),
                    ..Forget::default()
                },
                1 => Forget {
                    session_id: Some(["s1", "s2", "s3"][dice.below(3) as usize].into()),
                    ..Forget::default()
                },
                _ => Forget {
                    source: Some(["shell", "notes", "chat", "mail"][dice.below(4) as usize].into()),
                    ..Forget::default()
                },
            };
            format!(
                "forget {what:?}: {:?}",
                store.forget(&what).map_err(|e| e.to_string())
            )
        }
        _ => {
            let before = clock - dice.below(2 * DAY as u64) as i64;
            format!(
                "delete archived before {before}: {:?}",
                store
                    .delete_archived_before(before)
                    .map_err(|e| e.to_string())
            )
        }
    }
}

/// Random memories (inserts with ids seen before, sleeps with small caps and chunks, forgets by
/// id, session and source, the archive's retention) run step for step on the store under test
/// and on the in-memory reference: after each step both answered the same and hold the same
/// entries in the same tiers.
pub(super) fn random_memories_match_the_reference(store: &dyn MemoryStore) {
    for seed in 0..8u64 {
        // Each seed its own store's worth of entries: the ids and sessions of one seed's run
        // are apart from another's by their forgets, so the reference starts where the store
        // under test stands.
        store.forget_all().expect("forget all");
        let reference = crate::in_memory::InMemoryStore::new();
        let mut dice = Dice(seed);
        let (mut next_a, mut next_b) = (0u64, 0u64);
        let mut clock = parse_time("2026-01-10T00:00:00Z").expect("time");
        for step in 0..30 {
            clock += dice.below(DAY as u64) as i64;
            let mut dice_b = Dice(dice.0);
            let expected = random_memory_step(&reference, &mut next_a, clock, &mut dice);
            let got = random_memory_step(store, &mut next_b, clock, &mut dice_b);
            assert_eq!(
                got, expected,
                "seed {seed}, step {step}: the answers differ"
            );
            assert_same(
                &held(store),
                &held(&reference),
                &format!("seed {seed}, step {step} ({expected}): the stores"),
            );
        }
    }
}
