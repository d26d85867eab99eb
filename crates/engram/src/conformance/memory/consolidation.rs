//! Consolidation: atomic, over what was read, by source and session, early at the cap, and never
//! losing a fact.

use super::support::*;

use crate::Error;

pub(super) fn consolidation_is_atomic(store: &dyn MemoryStore) {
    let t = parse_time("2026-01-01T00:00:00Z").expect("time");
    store
        .insert(&[
            entry("c1", "fact one", "a", None, t),
            entry("c2", "fact two", "a", None, t + 1),
        ])
        .expect("insert");
    let old = store.working_before(t + 10, 10).expect("candidates");
    assert_eq!(
        old.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
        ["c1", "c2"],
        "oldest first"
    );
    let mut consolidation = group(&["c1", "c2"], "sum", t + 5);
    let record = store.consolidate(&consolidation).expect("consolidate");
    assert_eq!(record.ids_out, ["sum"]);
    let summary = store.get("sum").expect("get").expect("summary stored");
    assert_eq!(
        (summary.tier, summary.summary_of.clone()),
        (Tier::Episodic, vec!["c1".to_owned(), "c2".to_owned()])
    );
    assert_eq!(
        store.get("c1").expect("get").expect("kept").tier,
        Tier::Archive,
        "originals are archived"
    );
    let stats = store.stats().expect("stats");
    assert_eq!((stats.working, stats.episodic, stats.archive), (0, 1, 2));
    assert_eq!(store.working_count().expect("working count"), 0);
    // Again: nothing is working any more; nothing changes.
    consolidation.summary.id = Some("sum2".into());
    match store.consolidate(&consolidation) {
        Err(Error::NotWorking(ids)) => assert_eq!(ids.len(), 2),
        other => panic!("consolidating archived entries must fail: {other:?}"),
    }
    assert!(
        store.get("sum2").expect("get").is_none(),
        "a failed consolidation changes nothing"
    );
    assert_eq!(store.log(10).expect("log").len(), 1);
    let archived = SearchQuery {
        tiers: vec![Tier::Archive],
        ..SearchQuery::new("fact", 10)
    };
    assert_eq!(
        store.search(&archived).expect("search").len(),
        2,
        "the archive is searchable"
    );
}

pub(super) fn the_streamed_read_reads_what_the_read_reads(store: &dyn MemoryStore) {
    let t = parse_time("2026-01-01T00:00:00Z").expect("time");
    // More than a store's batch or two, times out of insertion order, some too new.
    let entries: Vec<NewEntry> = (0..1_300)
        .map(|i| {
            let at = t + (i * 7919 % 1_300) as Timestamp;
            entry(&format!("s{i}"), &format!("note {i}"), "a", None, at)
        })
        .collect();
    store.insert(&entries).expect("insert");
    for (before, limit) in [(t + 1_200, 2_000), (t + 1_200, 700), (t + 10_000, 1_300)] {
        let read = store.working_before(before, limit).expect("read");
        let mut streamed = Vec::new();
        store
            .working_before_each(before, limit, &mut |batch| streamed.extend(batch))
            .expect("streamed read");
        streamed.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        let ids = |v: &[MemoryEntry]| v.iter().map(|e| e.id.clone()).collect::<Vec<_>>();
        let mut expected = read.clone();
        expected.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        assert_eq!(
            ids(&streamed),
            ids(&expected),
            "before {before}, limit {limit}"
        );
        assert_eq!(streamed, expected);
        let due = entries.iter().filter(|e| e.created_at < before).count();
        assert_eq!(read.len(), limit.min(due));
    }
    // The streamed read is one a consolidation can follow.
    let mut batch = Vec::new();
    store
        .working_before_each(t + 10, 100, &mut |b| batch.extend(b))
        .expect("streamed read");
    let ids: Vec<&str> = batch.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids.len(), 10);
    store
        .consolidate_many(&[group(&ids, "streamed", t + 20)])
        .expect("consolidate");
    assert_eq!(store.working_count().expect("count"), 1_290);
}

/// Between a sleep's candidate read and its consolidation, an entry is forgotten and another
/// written (in SQLite, the newest row's rowid is given again): the group fails as one whose
/// entry is gone, and the new entry stays working.
pub(super) fn an_entry_replaced_after_the_read_is_not_archived_in_its_place(
    store: &dyn MemoryStore,
) {
    let t = parse_time("2026-01-03T00:00:00Z").expect("time");
    store
        .insert(&[
            entry("keep", "an entry that stays", "a", None, t),
            entry("gone", "an entry about to be forgotten", "a", None, t + 1),
        ])
        .expect("insert");
    let read: Vec<String> = store
        .working_before(t + 10, 10)
        .expect("candidates")
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(read, ["keep", "gone"]);
    store
        .forget(&crate::memory::Forget {
            id: Some("gone".into()),
            ..Default::default()
        })
        .expect("forget");
    store
        .insert(&[entry("new", "written after the read", "a", None, t + 2)])
        .expect("insert");
    let records = store
        .consolidate_many(&[group(&["keep", "gone"], "sum", t + 3)])
        .expect("consolidate_many");
    assert!(records.is_empty(), "{records:?}");
    let tier = |id: &str| store.get(id).expect("get").map(|e| e.tier);
    assert_eq!(tier("new"), Some(Tier::Working));
    assert_eq!(tier("keep"), Some(Tier::Working));
    assert_eq!(tier("sum"), None);
    let records = store
        .consolidate_many(&[group(&["keep"], "sum", t + 3)])
        .expect("consolidate_many");
    assert_eq!(records.len(), 1);
    assert_eq!(tier("keep"), Some(Tier::Archive));
    assert_eq!(tier("new"), Some(Tier::Working));
}

/// consolidate_many: a group one of whose entries another sleep took meanwhile changes
/// nothing (its other entries stay working, no summary, no log); the groups around it apply.
pub(super) fn a_partly_taken_group_is_skipped_whole(store: &dyn MemoryStore) {
    let t = parse_time("2026-01-02T00:00:00Z").expect("time");
    store
        .insert(&[
            entry("p1", "first of group one", "a", None, t),
            entry("p2", "second of group one", "a", None, t + 1),
            entry("q1", "first of group two", "a", None, t + 2),
            entry("q2", "second of group two", "a", None, t + 3),
            entry("r1", "only of group three", "a", None, t + 4),
        ])
        .expect("insert");
    // Another sleep took q2 first.
    store
        .consolidate(&group(&["q2"], "taken", t + 5))
        .expect("the other sleep");
    let records = store
        .consolidate_many(&[
            group(&["p1", "p2"], "sum-p", t + 6),
            group(&["q1", "q2"], "sum-q", t + 6),
            group(&["r1"], "sum-r", t + 6),
        ])
        .expect("consolidate_many");
    assert_eq!(
        records
            .iter()
            .map(|r| r.ids_out.clone())
            .collect::<Vec<_>>(),
        [vec!["sum-p".to_owned()], vec!["sum-r".to_owned()]]
    );
    let tier = |id: &str| store.get(id).expect("get").map(|e| e.tier);
    assert_eq!(
        tier("q1"),
        Some(Tier::Working),
        "the skipped group's entry stays"
    );
    assert_eq!(tier("q2"), Some(Tier::Archive));
    assert_eq!(tier("sum-q"), None, "no summary for the skipped group");
    for id in ["p1", "p2", "r1"] {
        assert_eq!(tier(id), Some(Tier::Archive), "{id}");
    }
    let stats = store.stats().expect("stats");
    assert_eq!(
        (stats.working, stats.episodic, stats.archive),
        (1, 3, 4),
        "{stats:?}"
    );
    assert_eq!(store.working_count().expect("working count"), 1);
    assert_eq!(store.log(10).expect("log").len(), 3);
    assert_eq!(
        store
            .working_before(t + 100, 10)
            .expect("candidates")
            .iter()
            .map(|e| e.id.as_str())
            .collect::<Vec<_>>(),
        ["q1"]
    );
}

pub(super) fn sleep_consolidates_by_source_and_session(store: &dyn MemoryStore) {
    let now = parse_time("2026-01-10T00:00:00Z").expect("time");
    let mut entries = Vec::new();
    for i in 0..30 {
        let (source, session) = match i % 3 {
            0 => ("shell", Some("s1")),
            1 => ("shell", Some("s2")),
            _ => ("chat", None),
        };
        // Half are older than TTL/2 (12 h), half are recent.
        let age = if i < 15 {
            13 * 3600 * 1000 + i64::from(i)
        } else {
            3600 * 1000
        };
        entries.push(entry(
            &format!("e{i:02}"),
            &format!("step {i}: edited src/mod_{i}.rs"),
            source,
            session,
            now - age,
        ));
    }
    store.insert(&entries).expect("insert");
    let report = sleep(store, now, &SleepPolicy::default()).expect("sleep");
    assert_eq!(report.items_consolidated, 15);
    assert_eq!(report.groups, 3, "grouped by source and session");
    assert_eq!(report.summaries_created, 3);
    let stats = store.stats().expect("stats");
    assert_eq!((stats.working, stats.episodic, stats.archive), (15, 3, 15));
    let log = store.log(10).expect("log");
    assert_eq!(log.len(), 3);
    for record in &log {
        let summary = store
            .get(&record.ids_out[0])
            .expect("get")
            .expect("summary");
        assert_eq!(summary.summary_of, record.ids_in, "lineage");
        for id in &summary.summary_of {
            let original = store.get(id).expect("get").expect("original kept");
            assert_eq!(original.tier, Tier::Archive);
            assert_eq!(original.source, summary.source);
            assert_eq!(original.session_id, summary.session_id);
        }
        assert!(summary.content.starts_with(&format!(
            "[{} from {}",
            crate::plural(record.items_consolidated, "entry", "entries"),
            record.source
        )));
    }
    let again = sleep(store, now, &SleepPolicy::default()).expect("sleep again");
    assert_eq!(again.items_consolidated, 0, "nothing is consolidated twice");
}

/// A session of 100 facts, slept: the default search (working and episodic memory, as the
/// agent's `memory_search` runs it) still finds each fact by its own words, through the
/// summary's lineage when the summary could not hold it; no hit with nothing in common pads
/// the list.
pub(super) fn every_fact_is_found_after_sleep(store: &dyn MemoryStore) {
    let now = parse_time("2026-01-10T00:00:00Z").expect("time");
    let teams = ["payments", "search", "billing", "identity", "storage"];
    let facts: Vec<String> = (0..100)
        .map(|i| {
            format!(
                "service-{i} is owned by team {} and pages oncall-{} on failure",
                teams[i % teams.len()],
                1000 + i * 7
            )
        })
        .collect();
    let entries: Vec<NewEntry> = facts
        .iter()
        .enumerate()
        .map(|(i, f)| {
            entry(
                &format!("f{i:03}"),
                f,
                "notes",
                Some("s100"),
                now - DAY - i as i64,
            )
        })
        .collect();
    store.insert(&entries).expect("insert");
    let report = sleep(store, now, &SleepPolicy::default()).expect("sleep");
    assert_eq!(report.items_consolidated, 100);
    assert_eq!(store.stats().expect("stats").working, 0, "all of it slept");
    for (i, fact) in facts.iter().enumerate() {
        let query = SearchQuery::new(format!("service-{i} owner"), 5);
        let hits = crate::memory::search::find(store, &query, None).expect("search");
        assert!(
            hits.first()
                .is_some_and(|h| h.entry.content.contains(fact.as_str())),
            "fact {i} ({fact}) is not the first hit of the default search: {:?}",
            hits.iter()
                .map(|h| (
                    &h.entry.tier,
                    &h.entry.content[..h.entry.content.len().min(60)]
                ))
                .collect::<Vec<_>>()
        );
        let pager = SearchQuery::new(format!("oncall-{}", 1000 + i * 7), 5);
        let hits = crate::memory::search::find(store, &pager, None).expect("search");
        assert!(
            hits.iter().any(|h| h.entry.content.contains(fact.as_str())),
            "fact {i} is not found by its pager"
        );
    }
    let hits = crate::memory::search::find(store, &SearchQuery::new("service-7 owner", 10), None)
        .expect("search");
    assert!(hits.iter().all(|h| h.score > 0.0), "no zero-score padding");
    let nothing = crate::memory::search::find(store, &SearchQuery::new("zeppelin", 10), None)
        .expect("search");
    assert!(nothing.is_empty(), "{nothing:?}");
}

pub(super) fn the_cap_consolidates_early_and_never_deletes(store: &dyn MemoryStore) {
    let now = parse_time("2026-01-10T00:00:00Z").expect("time");
    let entries: Vec<NewEntry> = (0..50)
        .map(|i| {
            entry(
                &format!("w{i:02}"),
                &format!("note {i}"),
                "notes",
                None,
                now - 1000 + i64::from(i),
            )
        })
        .collect();
    store.insert(&entries).expect("insert");
    let policy = SleepPolicy {
        max_working: 20,
        ..SleepPolicy::default()
    };
    let report = sleep(store, now, &policy).expect("sleep");
    assert_eq!(report.over_cap, 30);
    let stats = store.stats().expect("stats");
    assert_eq!(
        (stats.working, stats.archive),
        (20, 30),
        "the cap archives, it never deletes"
    );
    assert_eq!(
        store.get("w00").expect("get").expect("oldest kept").tier,
        Tier::Archive
    );
    assert_eq!(
        store.get("w49").expect("get").expect("newest kept").tier,
        Tier::Working
    );
}
