//! Several connections on one database file (as several processes would have): writers and a
//! running sleep never surface "database is locked", and nothing is lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use engram::memory::consolidation::{SleepPolicy, sleep};
use engram::memory::{MemoryStore, NewEntry, SearchQuery, Tier};
use engram_store::SqliteStore;

#[test]
fn concurrent_writers_and_sleep_never_see_a_locked_database() {
    let dir = std::env::temp_dir().join(format!("engram-concurrency-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = dir.join("shared.db");
    // Several processes may open a new file at once: the schema is created once.
    let opened: Vec<SqliteStore> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| SqliteStore::open(&path).expect("open")))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("join"))
            .collect()
    });
    drop(opened);

    const WRITERS: usize = 4;
    const PER_WRITER: usize = 400;
    let done = Arc::new(AtomicBool::new(false));
    let now = engram::memory::now();
    std::thread::scope(|s| {
        let mut writers = Vec::new();
        for w in 0..WRITERS {
            let path = path.clone();
            writers.push(s.spawn(move || {
                let store = SqliteStore::open(&path).expect("open");
                for i in 0..PER_WRITER {
                    // Old enough to be consolidated by the sleeper while others write.
                    let entry = NewEntry {
                        id: Some(format!("w{w}-{i}")),
                        created_at: now - 13 * 3600 * 1000 + i as i64,
                        session_id: Some(format!("s{}", i % 7)),
                        ..NewEntry::working(
                            format!("writer {w} wrote fact {i} about src/m{i}.rs"),
                            format!("agent{w}"),
                        )
                    };
                    store
                        .insert(&[entry])
                        .unwrap_or_else(|e| panic!("writer {w}, entry {i}: {e}"));
                }
            }));
        }
        let sleeper = {
            let path = path.clone();
            let done = Arc::clone(&done);
            s.spawn(move || {
                let store = SqliteStore::open(&path).expect("open");
                let policy = SleepPolicy {
                    entries_per_transaction: 50,
                    ..SleepPolicy::default()
                };
                let mut rounds = 0;
                while !done.load(Ordering::Relaxed) {
                    sleep(&store, engram::memory::now(), &policy)
                        .unwrap_or_else(|e| panic!("sleep round {rounds}: {e}"));
                    rounds += 1;
                }
                rounds
            })
        };
        let reader = {
            let path = path.clone();
            let done = Arc::clone(&done);
            s.spawn(move || {
                let store = SqliteStore::open(&path).expect("open");
                while !done.load(Ordering::Relaxed) {
                    store
                        .search(&SearchQuery::new("fact src", 10))
                        .unwrap_or_else(|e| panic!("search: {e}"));
                }
            })
        };
        for w in writers {
            w.join().expect("writer");
        }
        done.store(true, Ordering::Relaxed);
        assert!(sleeper.join().expect("sleeper") > 0);
        reader.join().expect("reader");
    });

    let store = SqliteStore::open(&path).expect("open");
    sleep(&store, engram::memory::now(), &SleepPolicy::default()).expect("final sleep");
    let stats = store.stats().expect("stats");
    assert_eq!(stats.working, 0);
    assert_eq!(
        stats.archive,
        WRITERS * PER_WRITER,
        "every write is kept, once"
    );
    let mut covered = 0;
    for summary in store.entries(None, None, usize::MAX).expect("entries") {
        if summary.tier == Tier::Episodic {
            for id in &summary.summary_of {
                let original = store.get(id).expect("get").expect("lineage resolves");
                assert_eq!(original.tier, Tier::Archive);
                covered += 1;
            }
        }
    }
    assert_eq!(
        covered,
        WRITERS * PER_WRITER,
        "each original in exactly one summary"
    );
    std::fs::remove_dir_all(&dir).ok();
}
