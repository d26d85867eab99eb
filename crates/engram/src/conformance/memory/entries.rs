//! Entries in a memory store: inserted, read, kept with their vectors, retained, forgotten with
//! their lineage, and exported.

use super::support::*;

use crate::Error;

/// The vectors of hybrid search, kept beside the entries: by model and text hash, the first
/// one kept stays, and a batch is written whole.
pub(super) fn vectors_are_kept_by_model_and_text(store: &dyn MemoryStore) {
    use crate::embed::text_hash;
    let (a, b, c) = (
        text_hash("my dog"),
        text_hash("the meeting"),
        text_hash("rain"),
    );
    assert_eq!(
        store.vectors("m1", &[a, b]).expect("reads nothing"),
        [None, None]
    );
    store
        .put_vectors("m1", &[(a, &[0.5, -0.25]), (b, &[1.0, 0.0])])
        .expect("keeps");
    store
        .put_vectors("m1", &[(a, &[9.0, 9.0]), (c, &[0.0, 1.0])])
        .expect("keeps again");
    assert_eq!(
        store.vectors("m1", &[c, a, b, a]).expect("reads"),
        [
            Some(vec![0.0, 1.0]),
            Some(vec![0.5, -0.25]),
            Some(vec![1.0, 0.0]),
            Some(vec![0.5, -0.25])
        ],
        "vectors: the first kept stays, asked order kept, a hash asked twice read twice"
    );
    assert_eq!(
        store.vectors("m2", &[a]).expect("reads"),
        [None],
        "vectors: another model's are its own"
    );
    assert_eq!(
        store.vectors("m1", &[]).expect("reads"),
        Vec::<Option<Vec<f32>>>::new()
    );
    store.put_vectors("m1", &[]).expect("keeps nothing");
    // Vectors are not entries.
    assert_eq!(store.stats().expect("stats").working, 0);
}

/// A forgotten entry's vector is forgotten with it, under every model; other texts' stay.
pub(super) fn forgetting_entries_forgets_their_vectors(store: &dyn MemoryStore) {
    use crate::embed::text_hash;
    let now = parse_time("2026-03-01T00:00:00Z").expect("time");
    store
        .insert(&[
            entry("v1", "my dog", "a", None, now),
            entry("v2", "the meeting", "a", Some("s1"), now),
            entry("v3", "rain", "a", None, now),
        ])
        .expect("insert");
    let texts = ["my dog", "the meeting", "rain", "a message of no entry"];
    let hashes: Vec<_> = texts.iter().map(|t| text_hash(t)).collect();
    for model in ["m1", "m2"] {
        let kept: Vec<_> = hashes.iter().map(|h| (*h, &[1.0f32, 0.0][..])).collect();
        store.put_vectors(model, &kept).expect("keeps");
    }
    let kept = |model: &str| -> Vec<bool> {
        store
            .vectors(model, &hashes)
            .expect("reads")
            .iter()
            .map(Option::is_some)
            .collect()
    };
    store
        .forget(&Forget {
            id: Some("v1".into()),
            ..Forget::default()
        })
        .expect("forget one");
    assert_eq!(
        kept("m1"),
        [false, true, true, true],
        "vectors: forget by id"
    );
    assert_eq!(
        kept("m2"),
        [false, true, true, true],
        "vectors: every model"
    );
    store
        .forget(&Forget {
            session_id: Some("s1".into()),
            ..Forget::default()
        })
        .expect("forget a session's");
    assert_eq!(
        kept("m1"),
        [false, false, true, true],
        "vectors: by session"
    );
    store.forget_all().expect("forget all");
    assert_eq!(
        kept("m2"),
        [false, false, false, true],
        "vectors: forget_all leaves texts that are no entry's"
    );

    // An entry of several sentences has a vector for each, and they go with it.
    let long = "I adopted a dog named Rex. He loves the park by the river!";
    let by_sentence = crate::memory::hybrid::vector_hashes(long);
    assert_eq!(by_sentence.len(), 3, "the whole text and two sentences");
    store
        .insert(&[entry("v4", long, "a", None, now)])
        .expect("insert");
    let kept: Vec<_> = by_sentence
        .iter()
        .map(|h| (*h, &[1.0f32, 0.0][..]))
        .collect();
    store.put_vectors("m1", &kept).expect("keeps");
    store
        .forget(&Forget {
            id: Some("v4".into()),
            ..Forget::default()
        })
        .expect("forget it");
    assert_eq!(
        store.vectors("m1", &by_sentence).expect("reads"),
        [None, None, None],
        "vectors: each sentence's too"
    );
}

pub(super) fn retention_and_sleep_claims(store: &dyn MemoryStore) {
    let now = parse_time("2026-03-01T00:00:00Z").expect("time");
    store
        .insert(&[
            entry("r1", "very old fact", "a", None, now - 40 * DAY),
            entry("r2", "old fact", "a", None, now - 2 * DAY),
        ])
        .expect("insert");
    sleep(store, now, &SleepPolicy::default()).expect("sleep");
    assert_eq!(store.stats().expect("stats").archive, 2);
    let gone = store
        .delete_archived_before(now - 30 * DAY)
        .expect("retention");
    assert_eq!((gone.entries, gone.summaries_updated), (1, 1));
    assert!(store.get("r1").expect("get").is_none());
    assert_eq!(
        store.get("r2").expect("get").expect("kept").tier,
        Tier::Archive
    );
    assert_eq!(store.stats().expect("stats").episodic, 1, "summaries stay");

    assert!(
        store.claim_sleep(now, 60_000).expect("claim"),
        "the first claim wins"
    );
    assert!(
        !store.claim_sleep(now + 1_000, 60_000).expect("claim"),
        "too soon"
    );
    assert!(
        store.claim_sleep(now + 60_000, 60_000).expect("claim"),
        "due again"
    );

    assert_eq!(store.meta("tier_history").expect("meta"), None);
    crate::memory::record_tier_counts(store, now).expect("record");
    crate::memory::record_tier_counts(store, now + DAY).expect("record");
    let history = crate::memory::tier_history(store).expect("history");
    assert_eq!(history.len(), 2);
    assert_eq!((history[0].at, history[1].at), (now, now + DAY));
    assert_eq!((history[1].archive, history[1].episodic), (1, 1));
    store.set_meta("k", "v1").expect("set");
    store.set_meta("k", "v2").expect("set again");
    assert_eq!(store.meta("k").expect("meta").as_deref(), Some("v2"));
}

pub(super) fn insert_get_and_skip(store: &dyn MemoryStore) {
    let t = parse_time("2026-01-01T00:00:00Z").expect("time");
    let out = store
        .insert(&[
            entry("a", "deployed 47 files to /opt/app", "shell", Some("s1"), t),
            entry("b", "user prefers YAML", "chat", None, t + 1),
        ])
        .expect("insert");
    assert_eq!((out.inserted, out.skipped), (2, 0), "insert");
    let again = store
        .insert(&[entry("a", "changed", "shell", None, t)])
        .expect("insert again");
    assert_eq!(
        (again.inserted, again.skipped),
        (0, 1),
        "an id already stored is skipped"
    );
    let a = store.get("a").expect("get").expect("a is stored");
    assert_eq!(
        a.content, "deployed 47 files to /opt/app",
        "the first version stays"
    );
    assert_eq!(
        (a.tier, a.session_id.as_deref(), a.metadata.clone()),
        (Tier::Working, Some("s1"), json!({"k": "a"}))
    );
    assert_eq!(a.created_at, t);
    assert!(store.get("zzz").expect("get").is_none());
    let stats = store.stats().expect("stats");
    assert_eq!((stats.working, stats.episodic, stats.archive), (2, 0, 0));
    assert_eq!(store.working_count().expect("working count"), 2);
    let generated = store
        .insert(&[NewEntry::working("no id given", "x")])
        .expect("insert");
    assert_eq!(generated.inserted, 1, "an entry without id gets one");
}

pub(super) fn forget_updates_lineage_and_search(store: &dyn MemoryStore) {
    let now = parse_time("2026-01-10T00:00:00Z").expect("time");
    let old = now - 2 * DAY;
    store
        .insert(&[
            entry("f1", "deploy token rotated on prod", "ops", Some("s1"), old),
            entry("f2", "deploy finished on prod", "ops", Some("s1"), old + 1),
            entry("f3", "deploy of the docs site", "docs", Some("s2"), old + 2),
            entry("f4", "user likes short answers", "chat", None, now),
        ])
        .expect("insert");
    sleep(store, now, &SleepPolicy::default()).expect("sleep");
    let ops_summary = store
        .search(&SearchQuery {
            tiers: vec![Tier::Episodic],
            source: Some("ops".into()),
            ..SearchQuery::new("deploy", 5)
        })
        .expect("search")
        .remove(0)
        .entry;
    assert_eq!(ops_summary.summary_of, ["f1", "f2"]);

    assert!(
        matches!(store.forget(&Forget::default()), Err(Error::Conflict(_))),
        "an empty filter is refused"
    );
    let one = store
        .forget(&Forget {
            id: Some("f1".into()),
            ..Forget::default()
        })
        .expect("forget one");
    assert_eq!((one.entries, one.summaries_updated), (1, 1));
    assert!(store.get("f1").expect("get").is_none());
    let summary = store
        .get(&ops_summary.id)
        .expect("get")
        .expect("summary kept");
    assert_eq!(summary.summary_of, ["f2"], "lineage no longer names it");
    let hits = store
        .search(&SearchQuery {
            tiers: Tier::ALL.to_vec(),
            ..SearchQuery::new("rotated", 5)
        })
        .expect("search");
    assert!(
        hits.iter().all(|h| h.entry.id != "f1"),
        "its full-text row is gone: {hits:?}"
    );

    let source = store
        .forget(&Forget {
            source: Some("docs".into()),
            ..Forget::default()
        })
        .expect("forget a source");
    assert_eq!(source.entries, 2, "the original and its summary");
    let session = store
        .forget(&Forget {
            session_id: Some("s1".into()),
            ..Forget::default()
        })
        .expect("forget a session");
    assert_eq!(session.entries, 2);
    let stats = store.stats().expect("stats");
    assert_eq!((stats.working, stats.episodic, stats.archive), (1, 0, 0));
    let all = store.forget_all().expect("forget all");
    assert_eq!(all.entries, 1);
    assert!(store.log(10).expect("log").is_empty());
}

pub(super) fn export_pages_and_reads_back(store: &dyn MemoryStore, other: &dyn MemoryStore) {
    let now = parse_time("2026-01-10T00:00:00Z").expect("time");
    let entries: Vec<NewEntry> = (0..25)
        .map(|i| {
            entry(
                &format!("x{i:02}"),
                &format!("fact number {i}"),
                if i % 2 == 0 { "a" } else { "b" },
                (i % 5 == 0).then_some("s9"),
                now - 2 * DAY + i64::from(i),
            )
        })
        .collect();
    store.insert(&entries).expect("insert");
    sleep(store, now, &SleepPolicy::default()).expect("sleep");
    let mut exported = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = store.entries(None, after.as_deref(), 7).expect("page");
        if page.is_empty() {
            break;
        }
        after = page.last().map(|e| e.id.clone());
        exported.extend(page);
    }
    let stats = store.stats().expect("stats");
    assert_eq!(
        exported.len(),
        stats.working + stats.episodic + stats.archive + stats.learnings + stats.journal
    );
    let of_session = store.entries(Some("s9"), None, 100).expect("session");
    assert!(
        of_session
            .iter()
            .all(|e| e.session_id.as_deref() == Some("s9"))
    );
    assert!(!of_session.is_empty());
    // Through JSON, as `memory export` writes it and `memory import` reads it.
    let back: Vec<NewEntry> = exported
        .iter()
        .map(|e| {
            let value = serde_json::to_value(e).expect("json");
            let mut value = value;
            value["created_at"] = json!(crate::memory::format_time(e.created_at));
            crate::request::AddMemory::new(false)
                .entry(&value)
                .expect("reads back")
        })
        .collect();
    other.insert(&back).expect("import");
    let mut again = other.entries(None, None, 1000).expect("all");
    again.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(again, exported, "an export reads back as it was");
}
