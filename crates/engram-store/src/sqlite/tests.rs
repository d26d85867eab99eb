use super::*;

/// A consolidation of `ids` (all from the source "shell") into the summary `summary`.
fn group(ids: &[String], summary: &str) -> Consolidation {
    Consolidation {
        ids: ids.to_vec(),
        summary: engram::memory::NewEntry {
            id: Some(summary.into()),
            tier: Tier::Episodic,
            ..engram::memory::NewEntry::working("a summary", "shell")
        },
        record: ConsolidationRecord {
            id: 0,
            session_id: None,
            source: "shell".into(),
            items_consolidated: ids.len(),
            summary_preview: String::new(),
            created_at: 20,
            strategy: "extractive".into(),
            model: None,
            duration_ms: 0.1,
            ids_in: ids.to_vec(),
            ids_out: vec![],
        },
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(
        engram_testkit::proptest_cases(96)
    ))]

    /// Groups archived together by rowid runs end as if each had been archived by id, in
    /// order: a group keeps an entry only when all of its entries were still working.
    /// Runs and scattered rowids, reads that know some groups' rowids and not others',
    /// groups sharing entries, and entries taken out behind the store's back.
    #[test]
    fn groups_archived_by_rowid_runs_end_as_groups_archived_by_id_one_by_one(
        n in 1usize..90,
        read in 1usize..100,
        blocks in proptest::collection::vec((0usize..90, 1usize..30), 1..6),
        picks in proptest::collection::vec(0usize..90, 0..12),
        gone in proptest::collection::vec(0usize..90, 0..3),
        shared in proptest::prelude::any::<bool>(),
    ) {
        let store = SqliteStore::open_in_memory().expect("store");
        let id = |i: usize| format!("e{i}");
        let entries: Vec<_> = (0..n)
            .map(|i| engram::memory::NewEntry {
                id: Some(id(i)),
                created_at: i as i64,
                ..engram::memory::NewEntry::working(format!("entry {i}"), "shell")
            })
            .collect();
        store.insert(&entries).expect("insert");
        let read = store.working_before(1_000, read).expect("candidates");
        let known: std::collections::HashSet<String> =
            read.into_iter().map(|e| e.id).collect();
        // Blocks make runs of rowids, picks scatter; unless shared, no entry is in two.
        let mut used = std::collections::HashSet::new();
        let mut groups: Vec<Vec<String>> = Vec::new();
        let ranges = blocks.iter().map(|&(start, len)| (start..start + len).collect::<Vec<_>>());
        for members in ranges.chain([picks.clone()]) {
            let ids: Vec<String> = members
                .into_iter()
                .filter(|&i| i < n && (shared || used.insert(i)))
                .map(id)
                .collect();
            if !ids.is_empty() {
                groups.push(ids);
            }
        }
        proptest::prop_assume!(!groups.is_empty());
        for &i in gone.iter().filter(|&&i| i < n) {
            store
                .conn()
                .execute(
                    "DELETE FROM memory_working WHERE entry = (SELECT rowid FROM memory WHERE id = ?1)",
                    [id(i)],
                )
                .expect("delete");
        }
        let consolidations: Vec<Consolidation> = groups
            .iter()
            .enumerate()
            .map(|(g, ids)| group(ids, &format!("s{g}")))
            .collect();
        let records = store.consolidate_many(&consolidations).expect("consolidate_many");

        // The model: groups one by one, by id.
        let mut working: std::collections::HashSet<String> = (0..n)
            .filter(|i| !gone.contains(i))
            .map(id)
            .collect();
        let mut applied = Vec::new();
        for (g, ids) in groups.iter().enumerate() {
            if ids.iter().all(|i| working.contains(i)) {
                for i in ids {
                    working.remove(i);
                }
                applied.push(format!("s{g}"));
            }
        }
        let got: Vec<String> = records.iter().map(|r| r.ids_out[0].clone()).collect();
        proptest::prop_assert_eq!(&got, &applied);
        for i in 0..n {
            let entry = store.get(&id(i)).expect("get").expect("kept");
            // Entries taken out behind the store's back read as archived.
            let expected = if working.contains(&id(i)) { Tier::Working } else { Tier::Archive };
            proptest::prop_assert_eq!(entry.tier, expected, "entry {}", i);
        }
        proptest::prop_assert_eq!(store.working_count().expect("count"), working.len());
        // Each applied summary stands for exactly its group's entries.
        for (g, ids) in groups.iter().enumerate() {
            let summary = store.get(&format!("s{g}")).expect("get");
            match applied.contains(&format!("s{g}")) {
                true => {
                    let mut want = ids.clone();
                    want.sort();
                    want.dedup();
                    let mut of = summary.expect("summary").summary_of;
                    of.sort();
                    of.dedup();
                    proptest::prop_assert_eq!(of, want);
                }
                false => proptest::prop_assert!(summary.is_none()),
            }
        }
        // The bulk path was taken where it applies, and fell back only where the rowids
        // did not hold (an entry of a group gone behind the store's back).
        let all_known = groups.iter().flatten().all(|i| known.contains(i));
        let mut seen = std::collections::HashMap::new();
        let overlap = groups.iter().enumerate().any(|(g, ids)| {
            ids.iter().any(|i| *seen.entry(i.clone()).or_insert(g) != g)
        });
        let hit = groups.iter().flatten().any(|i| gone.iter().any(|&x| id(x) == *i));
        let stale = store.candidates.lock().expect("candidates").seq == -1;
        proptest::prop_assert_eq!(stale, all_known && !overlap && hit);
    }
}

#[test]
fn sqlite_passes_the_conformance_suite() {
    engram::conformance::memory::run(&|| {
        Box::new(SqliteStore::open_in_memory().expect("in-memory database"))
    });
}

#[test]
fn sqlite_passes_the_session_conformance_suite() {
    engram::conformance::session::run(&|| {
        Box::new(SqliteStore::open_in_memory().expect("in-memory database"))
    });
}

#[test]
fn sqlite_passes_the_calibration_conformance_suite() {
    engram::calibrate::conformance(&SqliteStore::open_in_memory().expect("in-memory database"));
}

#[test]
fn a_file_store_survives_reopening() {
    let dir = std::env::temp_dir().join(format!("engram-store-{}", std::process::id()));
    let path = dir.join("nested/engram.db");
    let _ = std::fs::remove_dir_all(&dir);
    {
        let store = SqliteStore::open(&path).expect("create");
        store
            .insert(&[engram::memory::NewEntry::working(
                "kept across restarts",
                "test",
            )])
            .expect("insert");
    }
    let store = SqliteStore::open(&path).expect("reopen");
    assert_eq!(store.stats().expect("stats").working, 1);
    // The candidate read maps the file while it reads, and only then.
    let read = store.working_before(Timestamp::MAX, 10).expect("read");
    assert_eq!(read.len(), 1);
    let mapped: i64 = store
        .conn()
        .query_row("PRAGMA mmap_size", [], |r| r.get(0))
        .expect("mmap_size");
    assert_eq!(mapped, 0, "unmapped after the read");
    assert_eq!(
        store
            .search(&SearchQuery::new("restarts", 5))
            .expect("search")
            .len(),
        1
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_bulk_import_checkpoints_after_its_commit_and_restores_the_autocheckpoint() {
    let dir = std::env::temp_dir().join(format!("engram-store-bulk-{}", std::process::id()));
    let path = dir.join("engram.db");
    let _ = std::fs::remove_dir_all(&dir);
    let store = SqliteStore::open(&path).expect("create");
    let mut entries = (0..BULK_CHECKPOINT).map(|i| {
        Ok(engram::memory::NewEntry {
            id: Some(format!("bulk-{i}")),
            ..engram::memory::NewEntry::working(format!("bulk entry number {i}"), "test")
        })
    });
    let inserted = store.insert_stream(&mut entries).expect("import");
    assert_eq!(inserted.inserted, BULK_CHECKPOINT);
    let conn = store.conn();
    let limit: i64 = conn
        .query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0))
        .expect("autocheckpoint");
    assert_eq!(limit, WAL_AUTOCHECKPOINT, "the autocheckpoint is restored");
    // Checkpointed: every page is in the database file itself, not only in the WAL.
    let pages: i64 = conn
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .expect("page count");
    let page_size: i64 = conn
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .expect("page size");
    let len = std::fs::metadata(&path).expect("database file").len();
    assert_eq!(len, (pages * page_size) as u64);
    drop(conn);
    drop(store);
    std::fs::remove_dir_all(&dir).ok();
}

/// An empty directory for an older database, and the database's path in it.
fn old_database(label: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("engram-store-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("old.db");
    (dir, path)
}

#[test]
fn a_version_1_database_is_migrated_and_keeps_its_entries() {
    let (dir, path) = old_database("v1");
    {
        let conn = Connection::open(&path).expect("open");
        conn.execute_batch(schema::SCHEMA_V1).expect("v1 schema");
        conn.execute_batch(&format!(
            "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = 1;
                 INSERT INTO memory (id, tier, content, source, created_at, importance)
                 VALUES ('old1', 'working', 'written by version 1', 'test', 0, 0.5),
                        ('old2', 'archive', 'archived by version 1', 'test', 5, 0.5),
                        ('sum2', 'episodic', 'the summary of old2', 'test', 5, 0.5);"
        ))
        .expect("v1 rows");
    }
    let store = SqliteStore::open(&path).expect("migrates");
    let old1 = store.get("old1").expect("get").expect("kept");
    assert_eq!(old1.content, "written by version 1");
    assert_eq!(old1.tier, Tier::Working);
    // Every tier survives the move of tiers to their own table (schema 4) and of working
    // memory to its own (schema 5).
    assert_eq!(
        store.get("old2").expect("get").expect("kept").tier,
        Tier::Archive
    );
    let stats = store.stats().expect("stats");
    assert_eq!(
        (stats.working, stats.episodic, stats.archive),
        (1, 1, 1),
        "{stats:?}"
    );
    assert_eq!(
        store
            .working_before(10, 10)
            .expect("candidates")
            .iter()
            .map(|e| e.id.as_str())
            .collect::<Vec<_>>(),
        ["old1"]
    );
    assert_eq!(
        store
            .search(&SearchQuery {
                tiers: vec![Tier::Archive],
                ..SearchQuery::new("archived", 5)
            })
            .expect("search")
            .len(),
        1
    );
    use engram::session::SessionStore;
    let session = store
        .create_session(&engram::session::NewSession {
            model: "m".into(),
            tokenizer: "chars4".into(),
            token_factor: 1.0,
            window: 100,
            ..Default::default()
        })
        .expect("sessions work after the migration");
    assert_eq!(session.messages, 0);
    let version: i32 = store
        .conn()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("version");
    assert_eq!(version, SCHEMA_VERSION);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_version_7_database_forgets_the_vectors_that_belong_to_nothing() {
    use engram::embed::{VectorStore, text_hash};
    use engram::session::SessionStore;
    let (dir, path) = old_database("v7");
    let (entry, owned, unowned) = (
        text_hash("the deploy key rotates on fridays"),
        text_hash("a message of a session"),
        text_hash("a message kept before schema 7"),
    );
    let session = {
        let store = SqliteStore::open(&path).expect("create");
        store
            .insert(&[engram::memory::NewEntry::working(
                "the deploy key rotates on fridays",
                "t",
            )])
            .expect("insert");
        let session = store
            .create_session(&engram::session::NewSession::default())
            .expect("session");
        store.put_vectors("m", &[(entry, &[1.0])]).expect("entry's");
        store
            .put_session_vectors(&session.id, "m", &[(owned, &[2.0])])
            .expect("session's");
        // What a session's vector was before schema 7: in the table, tied to nothing.
        store
            .put_vectors("m", &[(unowned, &[3.0])])
            .expect("unowned");
        store
            .conn()
            .execute_batch("PRAGMA user_version = 7;")
            .expect("back to 7");
        session
    };
    let store = SqliteStore::open(&path).expect("migrates");
    assert_eq!(
        store.vectors("m", &[entry, owned, unowned]).expect("reads"),
        [Some(vec![1.0]), Some(vec![2.0]), None]
    );
    store.delete_session(&session.id).expect("deletes");
    assert_eq!(
        store.vectors("m", &[entry, owned]).expect("reads"),
        [Some(vec![1.0]), None],
        "the session's vector goes with it, the entry's stays"
    );
    let version: i32 = store
        .conn()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("version");
    assert_eq!(version, SCHEMA_VERSION);
    drop(store);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_search_index_is_rebuilt_when_deleted_or_left_by_another_database() {
    let dir = std::env::temp_dir().join(format!("engram-store-index-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = dir.join("engram.db");
    let index = dir.join("engram.db-index");
    let hits = |store: &SqliteStore, q: &str| {
        store
            .search(&SearchQuery::new(q, 10))
            .expect("search")
            .into_iter()
            .map(|h| h.entry.content)
            .collect::<Vec<_>>()
    };
    {
        let store = SqliteStore::open(&path).expect("create");
        store
            .insert(&[
                engram::memory::NewEntry::working("the zebra escaped", "zoo"),
                engram::memory::NewEntry::working("the lion also escaped", "zoo"),
            ])
            .expect("insert");
        assert_eq!(hits(&store, "zebra"), ["the zebra escaped"]);
    }
    // An index written by an earlier engram, claiming to have applied everything: rebuilt
    // from the rows on open. Its first tokenizer indexed stop words, with fewer fields; its
    // second dropped a list of its own, in today's fields (only the tokenizer's name
    // differs). Rebuilt, "also" (a stop word to the second) is found.
    for old_tokenizer in ["engram", "engram-2"] {
        let store_id: String = rusqlite::Connection::open(&path)
            .and_then(|c| {
                c.query_row("SELECT value FROM meta WHERE key = 'store_id'", [], |r| {
                    r.get(0)
                })
            })
            .expect("store id");
        std::fs::remove_dir_all(&index).expect("remove index");
        std::fs::create_dir_all(&index).expect("index dir");
        let schema = if old_tokenizer == "engram" {
            let mut schema = tantivy::schema::Schema::builder();
            let text = tantivy::schema::TextOptions::default().set_indexing_options(
                tantivy::schema::TextFieldIndexing::default()
                    .set_tokenizer(old_tokenizer)
                    .set_index_option(tantivy::schema::IndexRecordOption::WithFreqs),
            );
            schema.add_u64_field("rowid", tantivy::schema::INDEXED | tantivy::schema::FAST);
            schema.add_text_field("content", text);
            schema.add_text_field("session", tantivy::schema::STRING);
            schema.add_text_field("source", tantivy::schema::STRING);
            schema.add_i64_field(
                "created_at",
                tantivy::schema::INDEXED | tantivy::schema::FAST,
            );
            schema.build()
        } else {
            search::schema_with_tokenizer(old_tokenizer).0
        };
        let old = tantivy::Index::create_in_dir(&index, schema).expect("old index");
        let mut writer: tantivy::IndexWriter = old.writer(15 << 20).expect("writer");
        let mut commit = writer.prepare_commit().expect("prepare");
        commit.set_payload(&format!("{store_id}:1000000"));
        commit.commit().expect("commit");
        drop((writer, old));
        let store = SqliteStore::open(&path).expect("reopen over an old index");
        assert_eq!(
            hits(&store, "zebra"),
            ["the zebra escaped"],
            "{old_tokenizer}"
        );
        assert_eq!(
            hits(&store, "also"),
            ["the lion also escaped"],
            "{old_tokenizer}"
        );
    }
    // The index is deleted: the next open rebuilds it from the rows.
    std::fs::remove_dir_all(&index).expect("remove index");
    {
        let store = SqliteStore::open(&path).expect("reopen");
        assert_eq!(hits(&store, "zebra"), ["the zebra escaped"]);
    }
    // The database is replaced, the old index left behind: it is not trusted.
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    {
        let store = SqliteStore::open(&path).expect("new database");
        assert!(
            hits(&store, "zebra").is_empty(),
            "nothing of the old database"
        );
        store
            .insert(&[engram::memory::NewEntry::working("a new zebra", "zoo")])
            .expect("insert");
        assert_eq!(hits(&store, "zebra"), ["a new zebra"]);
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn sleep_indexes_its_summaries_inline_or_through_the_queue() {
    use engram::memory::consolidation::{SleepPolicy, sleep};
    let store = SqliteStore::open_in_memory().expect("store");
    let queued = |store: &SqliteStore| -> i64 {
        store
            .conn()
            .query_row("SELECT count(*) FROM index_queue", [], |r| r.get(0))
            .expect("queue")
    };
    let summaries = |store: &SqliteStore, word: &str| {
        store
            .search(&SearchQuery {
                tiers: vec![Tier::Episodic],
                ..SearchQuery::new(word, 10)
            })
            .expect("search")
            .len()
    };
    let day = 24 * 3600 * 1000;
    let old = |id: &str, text: &str| engram::memory::NewEntry {
        id: Some(id.into()),
        created_at: 0,
        ..engram::memory::NewEntry::working(text, "shell")
    };
    // The index has not applied the inserts: the summary goes through the queue.
    store
        .insert(&[
            old("a1", "built the zebra crate"),
            old("a2", "zebra tests pass"),
        ])
        .expect("insert");
    assert!(queued(&store) > 0);
    sleep(&store, 2 * day, &SleepPolicy::default()).expect("sleep");
    assert_eq!(summaries(&store, "zebra"), 1);
    assert_eq!(queued(&store), 0, "applied and removed by the search");
    // The index is up to date: the sleep indexes its summary itself (the commit finishing
    // on its own thread) and leaves nothing for a catch-up.
    store
        .insert(&[old("b1", "the giraffe module compiles")])
        .expect("insert");
    store.sync_index().expect("sync");
    sleep(&store, 2 * day, &SleepPolicy::default()).expect("sleep");
    assert_eq!(
        store.sync_index().expect("sync"),
        0,
        "a commit under way covers the queue"
    );
    let caught_up = store
        .index
        .catch_up(&mut store.conn(), true)
        .expect("catch up");
    assert_eq!(caught_up, 0, "the sleep's commit applied its summary");
    assert_eq!(queued(&store), 0, "which then left the queue");
    assert_eq!(summaries(&store, "giraffe"), 1);
    assert_eq!(summaries(&store, "zebra"), 1, "the earlier summary once");
}

/// consolidate_many archives by the candidate read's rowids, trusting that nothing took an
/// entry out of working memory without writing a memory row. Should that ever not hold,
/// the count of deleted rows catches it and the transaction is done again by id.
#[test]
fn rowids_that_do_not_hold_are_caught_and_the_groups_redone_by_id() {
    let store = SqliteStore::open_in_memory().expect("store");
    let old = |id: &str| engram::memory::NewEntry {
        id: Some(id.into()),
        created_at: 0,
        ..engram::memory::NewEntry::working(format!("entry {id}"), "shell")
    };
    store
        .insert(&[old("g1a"), old("g1b"), old("g2a"), old("g2b")])
        .expect("insert");
    let read = store.working_before(10, 10).expect("candidates");
    assert_eq!(read.len(), 4);
    // Out of working memory behind the store's back: no memory row written, so the
    // queue's position (what tells the rowids still hold) does not move.
    store
        .conn()
        .execute(
            "DELETE FROM memory_working WHERE entry = (SELECT rowid FROM memory WHERE id = 'g2b')",
            [],
        )
        .expect("delete");
    let records = store
        .consolidate_many(&[
            group(&["g1a", "g1b"].map(String::from), "s1"),
            group(&["g2a", "g2b"].map(String::from), "s2"),
        ])
        .expect("consolidate_many");
    assert_eq!(records.len(), 1, "{records:?}");
    let tier = |id: &str| store.get(id).expect("get").map(|e| e.tier);
    assert_eq!(tier("s1"), Some(Tier::Episodic));
    assert_eq!(tier("s2"), None, "the group with an entry gone is skipped");
    assert_eq!(tier("g1a"), Some(Tier::Archive));
    assert_eq!(
        tier("g2a"),
        Some(Tier::Working),
        "and its other entry stays working"
    );
    assert_eq!(store.working_count().expect("count"), 1);
}

#[test]
fn foreign_files_are_refused_and_left_untouched() {
    let dir = std::env::temp_dir().join(format!("engram-store-foreign-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let text = dir.join("notes.txt");
    std::fs::write(&text, "not a database at all, but long enough").expect("write");
    let err = SqliteStore::open(&text).expect_err("text file");
    assert!(err.to_string().contains("not an engram database"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&text).expect("read"),
        "not a database at all, but long enough"
    );

    let other = dir.join("other.db");
    Connection::open(&other)
        .and_then(|c| c.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);"))
        .expect("other db");
    let before = std::fs::read(&other).expect("read");
    let err = SqliteStore::open(&other).expect_err("foreign db");
    assert!(err.to_string().contains("not engram's"), "{err}");
    assert_eq!(std::fs::read(&other).expect("read"), before, "unchanged");
    let err = SqliteStore::open(&dir).expect_err("directory");
    assert!(err.to_string().contains("directory"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
