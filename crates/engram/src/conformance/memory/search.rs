//! Memory search: ranked by BM25 over every word the caller typed, filtered by tier, source
//! and session.

use super::support::*;

pub(super) fn search_ranks_and_filters(store: &dyn MemoryStore) {
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
pub(super) fn search_ids(store: &dyn MemoryStore, q: &str) -> Vec<String> {
    store
        .search(&SearchQuery::new(q, 10))
        .expect("search")
        .into_iter()
        .map(|h| h.entry.id)
        .collect()
}

/// Memory search reads words as recall does ([`crate::retrieval::words`]): exactly its stop words are left
/// out (a word another list calls a stop word, such as "among" or "also", is found), and the
/// words are stemmed alike.
pub(super) fn search_drops_the_stop_words_recall_drops(store: &dyn MemoryStore) {
    let t = parse_time("2026-01-01T00:00:00Z").expect("time");
    let every_stop_word = crate::retrieval::words::STOPWORDS.join(" ");
    store
        .insert(&[
            entry("w1", "We walked home among the pines", "chat", None, t),
            entry("w2", "She also painted the fence", "chat", None, t),
            entry("w3", &every_stop_word, "chat", None, t),
        ])
        .expect("insert");
    let ids = |q: &str| search_ids(store, q);
    assert_eq!(ids("among"), ["w1"], "\"among\" is not a stop word");
    assert_eq!(ids("also"), ["w2"], "\"also\" is not a stop word");
    assert_eq!(ids("paints"), ["w2"], "stemmed as recall stems");
    for word in crate::retrieval::words::STOPWORDS {
        assert!(ids(word).is_empty(), "{word:?} is a stop word");
    }
}

/// Every backend ranks by BM25 ([`crate::retrieval::bm25::bm25_idf`]): a word few entries hold weighs
/// more than one many hold, and an entry that says a word more often ranks higher.
pub(super) fn search_ranks_by_bm25(store: &dyn MemoryStore) {
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
pub(super) fn search_finds_every_tier_asked_for(store: &dyn MemoryStore) {
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
