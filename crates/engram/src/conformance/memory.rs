//! The conformance suite every [`MemoryStore`] backend runs: the in-memory store here, SQLite
//! in `engram-store` (and PostgreSQL later). `run` takes a factory of empty stores and panics
//! with the failing check's name.

use serde_json::json;

use crate::memory::consolidation::{SleepPolicy, sleep};
use crate::memory::{
    Forget, MemoryEntry, MemoryStore, NewEntry, SearchQuery, StoreError, Tier, Timestamp,
    parse_time,
};

const DAY: i64 = 24 * 3600 * 1000;

fn entry(id: &str, content: &str, source: &str, session: Option<&str>, at: Timestamp) -> NewEntry {
    NewEntry {
        id: Some(id.into()),
        tier: Tier::Working,
        content: content.into(),
        source: source.into(),
        session_id: session.map(str::to_owned),
        created_at: at,
        importance: 0.5,
        metadata: json!({"k": id}),
        summary_of: Vec::new(),
    }
}

/// Runs every check against fresh stores from `make`.
pub fn run(make: &dyn Fn() -> Box<dyn MemoryStore>) {
    insert_get_and_skip(make().as_ref());
    search_ranks_and_filters(make().as_ref());
    search_drops_the_stop_words_recall_drops(make().as_ref());
    search_ranks_by_bm25(make().as_ref());
    search_finds_every_tier_asked_for(make().as_ref());
    consolidation_is_atomic(make().as_ref());
    the_streamed_read_reads_what_the_read_reads(make().as_ref());
    a_partly_taken_group_is_skipped_whole(make().as_ref());
    an_entry_replaced_after_the_read_is_not_archived_in_its_place(make().as_ref());
    sleep_consolidates_by_source_and_session(make().as_ref());
    every_fact_is_found_after_sleep(make().as_ref());
    the_cap_consolidates_early_and_never_deletes(make().as_ref());
    forget_updates_lineage_and_search(make().as_ref());
    export_pages_and_reads_back(make().as_ref(), make().as_ref());
    retention_and_sleep_claims(make().as_ref());
    vectors_are_kept_by_model_and_text(make().as_ref());
    forgetting_entries_forgets_their_vectors(make().as_ref());
    random_memories_match_the_reference(make().as_ref());
}

/// The vectors of hybrid search, kept beside the entries: by model and text hash, the first
/// one kept stays, and a batch is written whole.
fn vectors_are_kept_by_model_and_text(store: &dyn MemoryStore) {
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
fn forgetting_entries_forgets_their_vectors(store: &dyn MemoryStore) {
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

fn retention_and_sleep_claims(store: &dyn MemoryStore) {
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

fn insert_get_and_skip(store: &dyn MemoryStore) {
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

fn search_ranks_and_filters(store: &dyn MemoryStore) {
    let t = parse_time("2026-01-01T00:00:00Z").expect("time");
    store
        .insert(&[
            entry(
                "k1",
                "User asked about deploying to Kubernetes with helm",
                "chat",
                Some("s1"),
                t,
            ),
            entry(
                "k2",
                "The weather in Lisbon was sunny",
                "chat",
                Some("s2"),
                t + DAY,
            ),
            entry(
                "k3",
                "kubernetes deployment failed: ImagePullBackOff",
                "shell",
                Some("s1"),
                t + 2 * DAY,
            ),
            entry("k4", "Lunch was pasta", "chat", Some("s1"), t + 3 * DAY),
        ])
        .expect("insert");
    let hits = store
        .search(&SearchQuery::new("kubernetes deployment", 10))
        .expect("search");
    let ids: Vec<&str> = hits.iter().map(|h| h.entry.id.as_str()).collect();
    assert_eq!(ids.len(), 2, "only matching entries: {ids:?}");
    assert!(ids.contains(&"k1") && ids.contains(&"k3"), "{ids:?}");
    assert!(hits[0].score >= hits[1].score, "best first");
    assert_eq!(
        store
            .search(&SearchQuery::new("kubernetes", 1))
            .expect("search")
            .len(),
        1,
        "limit"
    );
    let only_shell = SearchQuery {
        source: Some("shell".into()),
        ..SearchQuery::new("kubernetes", 10)
    };
    assert_eq!(
        store.search(&only_shell).expect("search").len(),
        1,
        "source filter"
    );
    let only_s2 = SearchQuery {
        session_id: Some("s2".into()),
        ..SearchQuery::new("weather kubernetes", 10)
    };
    let hits = store.search(&only_s2).expect("search");
    assert_eq!(
        hits.iter().map(|h| h.entry.id.as_str()).collect::<Vec<_>>(),
        ["k2"],
        "session filter"
    );
    let window = SearchQuery {
        since: Some(t + DAY),
        until: Some(t + 3 * DAY),
        ..SearchQuery::new("kubernetes", 10)
    };
    let hits = store.search(&window).expect("search");
    assert_eq!(
        hits.iter().map(|h| h.entry.id.as_str()).collect::<Vec<_>>(),
        ["k3"],
        "time filter"
    );
    let archive_only = SearchQuery {
        tiers: vec![Tier::Archive],
        ..SearchQuery::new("kubernetes", 10)
    };
    assert!(
        store.search(&archive_only).expect("search").is_empty(),
        "tier filter"
    );
    assert!(
        store
            .search(&SearchQuery::new("zebra", 10))
            .expect("search")
            .is_empty()
    );
    assert!(
        store
            .search(&SearchQuery::new("\"'*:()-", 10))
            .expect("odd characters are not syntax")
            .is_empty()
    );
}

/// The ids of the first 10 hits for `q`, best first.
fn search_ids(store: &dyn MemoryStore, q: &str) -> Vec<String> {
    store
        .search(&SearchQuery::new(q, 10))
        .expect("search")
        .into_iter()
        .map(|h| h.entry.id)
        .collect()
}

/// Memory search reads words as recall does ([`crate::retrieval::words`]): exactly its stop words are left
/// out (a word another list calls a stop word, such as "during" or "also", is found), and the
/// words are stemmed alike.
fn search_drops_the_stop_words_recall_drops(store: &dyn MemoryStore) {
    let t = parse_time("2026-01-01T00:00:00Z").expect("time");
    let every_stop_word = crate::retrieval::words::STOPWORDS.join(" ");
    store
        .insert(&[
            entry("w1", "We walked home during the storm", "chat", None, t),
            entry("w2", "She also painted the fence", "chat", None, t),
            entry("w3", &every_stop_word, "chat", None, t),
        ])
        .expect("insert");
    let ids = |q: &str| search_ids(store, q);
    assert_eq!(ids("during"), ["w1"], "\"during\" is not a stop word");
    assert_eq!(ids("also"), ["w2"], "\"also\" is not a stop word");
    assert_eq!(ids("paints"), ["w2"], "stemmed as recall stems");
    for word in crate::retrieval::words::STOPWORDS {
        assert!(ids(word).is_empty(), "{word:?} is a stop word");
    }
}

/// Every backend ranks by BM25 ([`crate::retrieval::bm25::bm25_idf`]): a word few entries hold weighs
/// more than one many hold, and an entry that says a word more often ranks higher.
fn search_ranks_by_bm25(store: &dyn MemoryStore) {
    let t = parse_time("2026-01-01T00:00:00Z").expect("time");
    let mut entries = vec![entry("r0", "A zebra crossed the road", "chat", None, t)];
    for i in 1..=5 {
        let content = format!("The deploy of service number {i} went fine");
        entries.push(entry(&format!("r{i}"), &content, "chat", None, t + i * DAY));
    }
    entries.push(entry(
        "r6",
        "Deploy, deploy again, then deploy",
        "chat",
        None,
        t,
    ));
    store.insert(&entries).expect("insert");
    let ids = |q: &str| search_ids(store, q);
    let rare_first = ids("deploy zebra");
    assert_eq!(rare_first.len(), 7, "every entry matches: {rare_first:?}");
    assert_eq!(
        rare_first[0], "r0",
        "the rare word weighs more, though its entry is the oldest: {rare_first:?}"
    );
    assert_eq!(
        ids("deploy")[0],
        "r6",
        "said three times, the oldest of six ranks first"
    );
}

/// Every combination of tiers finds exactly the matching entries of those tiers, the working
/// and archived ones told apart whether they were archived by consolidation or stored so.
fn search_finds_every_tier_asked_for(store: &dyn MemoryStore) {
    let t = parse_time("2026-01-05T00:00:00Z").expect("time");
    let mut entries = Vec::new();
    for (i, tier) in [
        Tier::Working,
        Tier::Archive,
        Tier::Working,
        Tier::Episodic,
        Tier::Learning,
        Tier::Working,
        Tier::Journal,
        Tier::Working,
        Tier::Archive,
    ]
    .into_iter()
    .enumerate()
    {
        entries.push(NewEntry {
            tier,
            ..entry(
                &format!("t{i}"),
                &format!("the harbour crane {} number {i}", tier.as_str()),
                "a",
                None,
                t + i as i64,
            )
        });
    }
    entries.push(entry("other", "nothing in common", "a", None, t));
    store.insert(&entries).expect("insert");
    // t2 and t5 leave working memory for a summary that matches too (t9).
    let mut g = group(&["t2", "t5"], "t9", t + 20);
    g.summary.content = "summary: the harbour crane was fixed".into();
    store.consolidate_many(&[g]).expect("consolidate");
    let tier_of = |id: &str| match id {
        "t0" | "t7" => Tier::Working,
        "t1" | "t2" | "t5" | "t8" => Tier::Archive,
        "t3" | "t9" => Tier::Episodic,
        "t4" => Tier::Learning,
        _ => Tier::Journal,
    };
    let all: Vec<String> = (0..10).map(|i| format!("t{i}")).collect();
    for mask in 0u32..32 {
        let tiers: Vec<Tier> = Tier::ALL
            .into_iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, t)| t)
            .collect();
        let asked = if tiers.is_empty() {
            vec![Tier::Working, Tier::Episodic]
        } else {
            tiers.clone()
        };
        let mut expected: Vec<&str> = all
            .iter()
            .map(String::as_str)
            .filter(|id| asked.contains(&tier_of(id)))
            .collect();
        expected.sort_unstable();
        let hits = store
            .search(&SearchQuery {
                tiers: tiers.clone(),
                ..SearchQuery::new("harbour crane", 50)
            })
            .expect("search");
        let mut found: Vec<&str> = hits.iter().map(|h| h.entry.id.as_str()).collect();
        found.sort_unstable();
        assert_eq!(found, expected, "tiers {tiers:?}");
        for h in &hits {
            assert_eq!(h.entry.tier, tier_of(&h.entry.id), "{}", h.entry.id);
        }
    }
}

fn consolidation_is_atomic(store: &dyn MemoryStore) {
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
        Err(StoreError::NotWorking(ids)) => assert_eq!(ids.len(), 2),
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

fn the_streamed_read_reads_what_the_read_reads(store: &dyn MemoryStore) {
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

/// One consolidation of `ids` into a summary `summary_id`, as sleep makes them.
fn group(ids: &[&str], summary_id: &str, t: Timestamp) -> crate::memory::Consolidation {
    crate::memory::Consolidation {
        ids: ids.iter().map(|&id| id.to_owned()).collect(),
        summary: NewEntry {
            tier: Tier::Episodic,
            ..entry(summary_id, &format!("summary of {ids:?}"), "a", None, t)
        },
        record: crate::memory::ConsolidationRecord {
            id: 0,
            session_id: None,
            source: "a".into(),
            items_consolidated: ids.len(),
            summary_preview: String::new(),
            created_at: t,
            strategy: "extractive".into(),
            model: None,
            duration_ms: 0.1,
            ids_in: ids.iter().map(|&id| id.to_owned()).collect(),
            ids_out: vec![],
        },
    }
}

/// Between a sleep's candidate read and its consolidation, an entry is forgotten and another
/// written (in SQLite, the newest row's rowid is given again): the group fails as one whose
/// entry is gone, and the new entry stays working.
fn an_entry_replaced_after_the_read_is_not_archived_in_its_place(store: &dyn MemoryStore) {
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
fn a_partly_taken_group_is_skipped_whole(store: &dyn MemoryStore) {
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

fn sleep_consolidates_by_source_and_session(store: &dyn MemoryStore) {
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
fn every_fact_is_found_after_sleep(store: &dyn MemoryStore) {
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

fn the_cap_consolidates_early_and_never_deletes(store: &dyn MemoryStore) {
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

fn forget_updates_lineage_and_search(store: &dyn MemoryStore) {
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
        matches!(
            store.forget(&Forget::default()),
            Err(StoreError::Conflict(_))
        ),
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

fn export_pages_and_reads_back(store: &dyn MemoryStore, other: &dyn MemoryStore) {
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

/// A small deterministic generator (SplitMix64): random sessions and memories are the same on
/// every backend and every run, so a failure names a seed and a step that reproduce it.
pub(crate) struct Dice(pub(crate) u64);

impl Dice {
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n.max(1)
    }
}

/// Panics when `got` differs from `expected`, showing where.
pub(crate) fn assert_same(got: &str, expected: &str, what: &str) {
    if got == expected {
        return;
    }
    let at = got
        .char_indices()
        .zip(expected.chars())
        .find(|((_, a), b)| a != b)
        .map_or(got.len().min(expected.len()), |((i, _), _)| i);
    let window = |s: &str| -> String {
        s.chars()
            .skip(s[..at.min(s.len())].chars().count().saturating_sub(200))
            .take(400)
            .collect()
    };
    panic!(
        "{what}: they differ at byte {at}\n got: ...{}...\nwant: ...{}...",
        window(got),
        window(expected)
    );
}

/// What a backend holds, as far as it must agree with the reference: the counts per tier and
/// every entry (a summary by what it says and stands for, as its id is the store's own).
fn held(store: &dyn MemoryStore) -> String {
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
fn random_memory_step(
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
fn random_memories_match_the_reference(store: &dyn MemoryStore) {
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
