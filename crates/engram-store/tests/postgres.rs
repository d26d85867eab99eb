//! The PostgreSQL backend against a real server: the conformance suites every backend runs,
//! tenants that cannot see each other, and two "servers" (stores with their own connections)
//! sleeping over the same entries at once without consolidating any group twice.
//!
//! The server is `ENGRAM_TEST_POSTGRES` (default `postgres://postgres@127.0.0.1:5432/test`).
//! In CI (`CI` set) a missing server fails the tests; elsewhere they say SKIPPED.

#![cfg(feature = "postgres")]

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};

use engram::memory::consolidation::{SleepPolicy, sleep};
use engram::memory::{MemoryStore, NewEntry, SearchQuery, Tier, now};
use engram::session::{NewSession, SessionStore};
use engram_store::PostgresStore;
use engram_store::postgres::Pool;

fn url() -> String {
    std::env::var("ENGRAM_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A fresh tenant's store, or `None` (and SKIPPED) when no server answers outside CI.
fn store(label: &str) -> Option<PostgresStore> {
    static N: AtomicU64 = AtomicU64::new(0);
    let tenant = format!(
        "test-{label}-{}-{}-{}",
        std::process::id(),
        now(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    match PostgresStore::connect(&url(), &tenant) {
        Ok(store) => Some(store),
        Err(e) => {
            engram_testkit::skip_or_fail_in_ci(
                "postgres",
                &format!("no PostgreSQL at {} ({e})", url()),
            );
            None
        }
    }
}

/// Makes fresh tenants on one pool and deletes them all at the end.
struct Tenants {
    base: PostgresStore,
    made: Mutex<Vec<PostgresStore>>,
}

impl Tenants {
    fn new(label: &str) -> Option<Tenants> {
        Some(Tenants {
            base: store(label)?,
            made: Mutex::new(Vec::new()),
        })
    }

    fn fresh(&self) -> PostgresStore {
        static N: AtomicU64 = AtomicU64::new(0);
        let s = self
            .base
            .for_tenant(&format!(
                "{}-{}",
                self.base.tenant(),
                N.fetch_add(1, Ordering::Relaxed)
            ))
            .expect("tenant");
        self.made.lock().expect("lock").push(s.clone());
        s
    }
}

impl Drop for Tenants {
    fn drop(&mut self) {
        for s in self.made.lock().expect("lock").iter() {
            s.delete_tenant().ok();
        }
        self.base.delete_tenant().ok();
    }
}

#[test]
fn postgres_passes_the_memory_conformance_suite() {
    let Some(tenants) = Tenants::new("memory") else {
        return;
    };
    engram::conformance::memory::run(&|| Box::new(tenants.fresh()));
}

#[test]
fn postgres_passes_the_calibration_conformance_suite() {
    let Some(tenants) = Tenants::new("calibration") else {
        return;
    };
    engram::calibrate::conformance(&tenants.fresh());
}

#[test]
fn postgres_passes_the_session_conformance_suite() {
    let Some(tenants) = Tenants::new("session") else {
        return;
    };
    engram::conformance::session::run(&|| Box::new(tenants.fresh()));
}

#[test]
fn tenants_share_the_database_but_not_their_rows() {
    let Some(tenants) = Tenants::new("isolation") else {
        return;
    };
    let (a, b) = (tenants.fresh(), tenants.fresh());
    let mut entry = NewEntry::working("the deploy key rotates on fridays", "ops");
    entry.id = Some("same-id".into());
    assert_eq!(a.insert(&[entry.clone()]).expect("insert a").inserted, 1);
    assert_eq!(
        b.insert(&[entry]).expect("insert b").inserted,
        1,
        "ids are per tenant"
    );
    b.forget(&engram::memory::Forget {
        id: Some("same-id".into()),
        ..Default::default()
    })
    .expect("forget in b");
    assert!(
        a.get("same-id").expect("get").is_some(),
        "a keeps its entry"
    );
    assert!(b.get("same-id").expect("get").is_none());
    assert!(
        b.search(&SearchQuery::new("deploy key", 5))
            .expect("search")
            .is_empty(),
        "b cannot find a's entry"
    );

    let session = a
        .create_session(&NewSession {
            id: Some("ses-shared-name".into()),
            model: "gpt-4o".into(),
            tokenizer: "o200k_base".into(),
            token_factor: 1.0,
            window: 128_000,
            ..Default::default()
        })
        .expect("session in a");
    assert!(b.session(&session.id).expect("lookup").is_none());
    assert!(b.sessions().expect("list").is_empty());
    assert!(matches!(
        b.session_log(&session.id, 0, true),
        Err(engram::Error::NotFound { .. })
    ));
    assert!(b.delete_session(&session.id).is_err());
    assert!(a.session(&session.id).expect("lookup").is_some());
}

/// A search confined to a session weighs its words by how many of that session's entries hold
/// them, as the in-memory store does: "deploy", common in another session, is as rare as
/// "zebra" in this one, so the entry saying it twice ranks first there, and last over all.
#[test]
fn a_search_counts_its_words_among_the_entries_it_admits() {
    let Some(tenants) = Tenants::new("scoped-idf") else {
        return;
    };
    let entry = |id: &str, content: &str, session: &str| {
        let mut e = NewEntry::working(content, "ops");
        e.id = Some(id.into());
        e.session_id = Some(session.into());
        e
    };
    let mut entries = vec![
        entry("a-zebra", "zebra report", "a"),
        entry("a-deploy", "deploy deploy report", "a"),
    ];
    entries
        .extend((0..20).map(|i| entry(&format!("b{i}"), &format!("deploy of service {i}"), "b")));
    let in_memory = engram::InMemoryStore::new();
    let postgres = tenants.fresh();
    let stores: [(&str, &dyn MemoryStore); 2] =
        [("in-memory", &in_memory), ("postgres", &postgres)];
    for (name, store) in stores {
        store.insert(&entries).expect("insert");
        let first = |session: Option<&str>| {
            let query = SearchQuery {
                session_id: session.map(str::to_owned),
                ..SearchQuery::new("zebra deploy", 3)
            };
            let hits = store.search(&query).expect("search");
            hits[0].entry.id.clone()
        };
        assert_eq!(first(Some("a")), "a-deploy", "{name}: within session a");
        assert_eq!(first(None), "a-zebra", "{name}: over every session");
    }
}

#[test]
fn vectors_are_per_tenant_and_older_schemas_are_brought_up_to_date() {
    use engram::embed::{VectorStore, text_hash};
    let Some(tenants) = Tenants::new("vectors") else {
        return;
    };
    let (a, b) = (tenants.fresh(), tenants.fresh());
    let h = text_hash("the deploy key rotates on fridays");
    a.put_vectors("m", &[(h, &[0.25, 0.5])]).expect("keeps");
    assert_eq!(
        a.vectors("m", &[h]).expect("reads"),
        [Some(vec![0.25, 0.5])]
    );
    assert_eq!(
        b.vectors("m", &[h]).expect("reads"),
        [None],
        "b sees none of a's"
    );
    a.delete_tenant().expect("deletes");
    assert_eq!(
        a.vectors("m", &[h]).expect("reads"),
        [None],
        "gone with the tenant"
    );

    // A database of schema 1 (before vectors) gains the tables when a newer engram opens it.
    let mut client = postgres::Client::connect(&url(), postgres::NoTls).expect("connect");
    let schema = format!("engram_v1_{}", std::process::id());
    client
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema};"
        ))
        .expect("schema");
    let sep = if url().contains('?') { '&' } else { '?' };
    let at = format!("{}{sep}options=-c%20search_path%3D{schema}", url());
    drop(PostgresStore::connect(&at, "t").expect("creates"));
    client
        .batch_execute(&format!(
            "DROP TABLE {schema}.engram_vector, {schema}.engram_session_vector;
             UPDATE {schema}.engram_schema SET version = 1;"
        ))
        .expect("back to schema 1");
    let store = PostgresStore::connect(&at, "t").expect("migrates");
    store.put_vectors("m", &[(h, &[1.0])]).expect("keeps");
    assert_eq!(store.vectors("m", &[h]).expect("reads"), [Some(vec![1.0])]);
    let version: i32 = client
        .query_one(
            &format!("SELECT max(version) FROM {schema}.engram_schema"),
            &[],
        )
        .expect("version")
        .get(0);
    assert_eq!(version, engram_store::postgres::SCHEMA_VERSION);

    // A database of schema 3 kept session vectors that no session owned before; the next
    // engram forgets them, and keeps the vectors of sessions and of memory entries.
    let (entry, owned) = (
        text_hash("backups run every night"),
        text_hash("a message of a session"),
    );
    store
        .insert(&[NewEntry::working("backups run every night", "t")])
        .expect("insert");
    let session = store
        .create_session(&NewSession::default())
        .expect("session");
    store.put_vectors("m", &[(entry, &[2.0])]).expect("entry's");
    store
        .put_session_vectors(&session.id, "m", &[(owned, &[3.0])])
        .expect("session's");
    let other = PostgresStore::connect(&at, "u").expect("another tenant");
    other.put_vectors("m", &[(entry, &[4.0])]).expect("u's");
    client
        .batch_execute(&format!("UPDATE {schema}.engram_schema SET version = 3;"))
        .expect("back to schema 3");
    drop((store, other));
    let store = PostgresStore::connect(&at, "t").expect("migrates");
    assert_eq!(
        store.vectors("m", &[h, entry, owned]).expect("reads"),
        [None, Some(vec![2.0]), Some(vec![3.0])],
        "the vector of no session and no entry is gone"
    );
    let other = PostgresStore::connect(&at, "u").expect("another tenant");
    assert_eq!(
        other.vectors("m", &[entry]).expect("reads"),
        [None],
        "t's entry does not keep u's vector"
    );
    store.delete_session(&session.id).expect("deletes");
    assert_eq!(
        store.vectors("m", &[owned]).expect("reads"),
        [None],
        "the session's vector goes with it"
    );

    // A database of schema 4 indexed its text by PostgreSQL's English configuration, which
    // drops its own stop words ("during" among them, not "would"); the next engram indexes
    // every entry again, every word kept, and searches drop recall's stop words instead.
    store
        .insert(&[NewEntry::working(
            "we would walk home during the storm",
            "t",
        )])
        .expect("insert");
    client
        .batch_execute(&format!(
            "DROP INDEX {schema}.engram_memory_text;
             ALTER TABLE {schema}.engram_memory DROP COLUMN tsv;
             DROP TEXT SEARCH CONFIGURATION {schema}.engram_english;
             DROP TEXT SEARCH DICTIONARY {schema}.engram_english_stem;
             ALTER TABLE {schema}.engram_memory ADD COLUMN tsv TSVECTOR
                 GENERATED ALWAYS AS (to_tsvector('english'::regconfig, content)) STORED;
             CREATE INDEX engram_memory_text ON {schema}.engram_memory USING GIN (tsv);
             UPDATE {schema}.engram_schema SET version = 4;"
        ))
        .expect("back to schema 4");
    drop((store, other));
    let store = PostgresStore::connect(&at, "t").expect("migrates");
    let found = |q: &str| -> Vec<String> {
        store
            .search(&SearchQuery::new(q, 10))
            .expect("search")
            .into_iter()
            .map(|h| h.entry.content)
            .collect()
    };
    assert_eq!(
        found("walking home"),
        ["we would walk home during the storm"]
    );
    let indexed: String = client
        .query_one(
            &format!(
                "SELECT tsv::text FROM {schema}.engram_memory WHERE content LIKE '%during the storm'"
            ),
            &[],
        )
        .expect("reads the index")
        .get(0);
    assert!(
        indexed.contains("'dure'") && indexed.contains("'would'"),
        "indexed again with every word: {indexed}"
    );
    assert!(found("during").is_empty(), "a stop word to recall");
    assert_eq!(found("nightly backup"), ["backups run every night"]);
    assert!(found("would").is_empty(), "a stop word to recall");
    drop(store);
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .expect("drop");
}

/// Two stores with their own connection pools stand for two servers. Both sleep over the same
/// aged entries at the same moment, many rounds: every entry ends up consolidated exactly once
/// (one summary names it, one log record lists it), and the rest is still working.
#[test]
fn two_servers_sleeping_at_once_never_consolidate_a_group_twice() {
    let Some(tenants) = Tenants::new("sleep") else {
        return;
    };
    let first = tenants.fresh();
    let second = PostgresStore::with_pool(
        Pool::connect(&url(), 4).expect("second pool"),
        first.tenant(),
    )
    .expect("second server");
    let day = 24 * 3600 * 1000;
    let t0 = now() - 2 * day;
    let mut total = 0;
    let mut both_worked = false;
    for round in 0..6 {
        let entries: Vec<NewEntry> = (0..600)
            .map(|i| NewEntry {
                id: Some(format!("r{round}-e{i}")),
                created_at: t0 + i,
                session_id: Some(format!("s{}", i % 7)),
                ..NewEntry::working(
                    format!("round {round} fact {i}: service-{} restarted", i % 13),
                    format!("source-{}", i % 5),
                )
            })
            .collect();
        first.insert(&entries).expect("insert");
        total += entries.len();
        // Entries both servers skipped in an earlier round (each held part of the group) are
        // still working, and are this round's work too.
        let working = first.stats().expect("stats").working;
        let policy = SleepPolicy {
            batch: 150,
            entries_per_transaction: 40,
            group_chunk: 25,
            ..SleepPolicy::default()
        };
        let barrier = Arc::new(Barrier::new(2));
        let run = |store: PostgresStore| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                sleep(&store, now(), &policy).expect("sleep")
            })
        };
        let (x, y) = (run(first.clone()), run(second.clone()));
        let (x, y) = (x.join().expect("thread"), y.join().expect("thread"));
        both_worked |= x.items_consolidated > 0 && y.items_consolidated > 0;
        assert!(
            x.items_consolidated + y.items_consolidated <= working,
            "round {round}: {} + {} consolidated out of {working} working",
            x.items_consolidated,
            y.items_consolidated,
        );
    }
    assert!(
        both_worked,
        "in some round both servers consolidated groups side by side (else this proves nothing)"
    );
    // Whatever one sleep skipped while the other held it is consolidated by a last sleep.
    sleep(&first, now(), &SleepPolicy::default()).expect("final sleep");
    let stats = first.stats().expect("stats");
    assert_eq!(stats.working, 0);
    assert_eq!(stats.archive, total, "every entry archived once");
    let log = first.log(usize::MAX).expect("log");
    let mut seen = HashSet::new();
    for record in &log {
        for id in &record.ids_in {
            assert!(
                seen.insert(id.clone()),
                "{id} was consolidated twice (record {})",
                record.id
            );
        }
    }
    assert_eq!(seen.len(), total, "every entry consolidated");
    let mut covered = HashSet::new();
    let mut after = None;
    loop {
        let page = first.entries(None, after.as_deref(), 500).expect("entries");
        let Some(last) = page.last() else { break };
        after = Some(last.id.clone());
        for e in page.iter().filter(|e| e.tier == Tier::Episodic) {
            for id in &e.summary_of {
                assert!(covered.insert(id.clone()), "{id} is in two summaries");
                assert_eq!(
                    first.get(id).expect("get").expect("resolves").tier,
                    Tier::Archive
                );
            }
        }
    }
    assert_eq!(covered.len(), total);
}

#[test]
fn concurrent_appends_from_two_servers_keep_one_order() {
    let Some(tenants) = Tenants::new("append") else {
        return;
    };
    let first = tenants.fresh();
    let second = PostgresStore::with_pool(
        Pool::connect(&url(), 4).expect("second pool"),
        first.tenant(),
    )
    .expect("second server");
    let info = first
        .create_session(&NewSession {
            model: "gpt-4o".into(),
            tokenizer: "o200k_base".into(),
            token_factor: 1.0,
            window: 128_000,
            ..Default::default()
        })
        .expect("session");
    let handles: Vec<_> = (0..8)
        .map(|w| {
            let store = if w % 2 == 0 {
                first.clone()
            } else {
                second.clone()
            };
            let id = info.id.clone();
            std::thread::spawn(move || {
                for i in 0..25 {
                    let mut message = engram::message::Message::user(format!("w{w} m{i}"));
                    message.id = Some(format!("w{w}-m{i}"));
                    store
                        .append(
                            &id,
                            &[engram::session::NewLogMessage {
                                message,
                                tokens: 3,
                                created_at: now(),
                            }],
                        )
                        .expect("append");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("writer");
    }
    let log = first.session_log(&info.id, 0, false).expect("log");
    assert_eq!(log.len(), 200);
    assert!(
        log.iter().enumerate().all(|(i, m)| m.seq == i as u64),
        "sequence numbers are dense and in order"
    );
    for w in 0..8 {
        let mine: Vec<usize> = log
            .iter()
            .filter(|m| m.id.starts_with(&format!("w{w}-")))
            .map(|m| {
                m.id.rsplit('m')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("n")
            })
            .collect();
        assert_eq!(mine, (0..25).collect::<Vec<_>>(), "writer {w}'s order");
    }
    let info = second.session(&info.id).expect("get").expect("exists");
    assert_eq!((info.messages, info.next_seq), (200, 200));
}

#[test]
fn a_foreign_table_is_refused_and_left_alone() {
    let Some(probe) = store("foreign") else {
        return;
    };
    drop(probe);
    // A schema of its own, with an engram_memory table engram did not make.
    let mut client = postgres::Client::connect(&url(), postgres::NoTls).expect("connect");
    let schema = format!("engram_foreign_{}", std::process::id());
    client
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema};
             CREATE TABLE {schema}.engram_memory (x int); INSERT INTO {schema}.engram_memory VALUES (7);"
        ))
        .expect("foreign schema");
    let sep = if url().contains('?') { '&' } else { '?' };
    let foreign = format!("{}{sep}options=-c%20search_path%3D{schema}", url());
    let err = PostgresStore::connect(&foreign, "t").expect_err("refused");
    assert!(err.to_string().contains("not engram's"), "{err}");
    let tables: i64 = client
        .query_one(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1",
            &[&schema],
        )
        .expect("count")
        .get(0);
    assert_eq!(tables, 1, "nothing created beside it");
    let x: i32 = client
        .query_one(&format!("SELECT x FROM {schema}.engram_memory"), &[])
        .expect("row")
        .get(0);
    assert_eq!(x, 7);
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .expect("drop");
}

#[test]
fn a_wrong_address_says_what_to_check() {
    let err =
        PostgresStore::connect("postgres://nobody@127.0.0.1:1/none", "t").expect_err("no server");
    let text = err.to_string();
    assert!(text.contains("cannot connect to PostgreSQL"), "{text}");
    assert!(text.contains("pg_isready"), "{text}");
    let err =
        PostgresStore::connect("postgres://u:secret@127.0.0.1:1/x", "t").expect_err("no server");
    assert!(
        !err.to_string().contains("secret"),
        "the password is not repeated: {err}"
    );
    let err = PostgresStore::connect("postgres://h:port/x", "t").expect_err("bad url");
    assert!(
        err.to_string().contains("not a PostgreSQL address"),
        "{err}"
    );
}

/// Messages without ids get `m<seq>` from the store, under the session's lock: two servers
/// appending to one session at once never pick the same name (the first load run against two
/// servers found 409s when the id was chosen from a sequence number read before the lock).
#[test]
fn two_servers_name_unnamed_messages_without_conflicts() {
    let Some(tenants) = Tenants::new("names") else {
        return;
    };
    let first = tenants.fresh();
    let second = PostgresStore::with_pool(
        Pool::connect(&url(), 4).expect("second pool"),
        first.tenant(),
    )
    .expect("second server");
    let id = engram::session::Session::create(
        &first,
        &NewSession {
            model: "local".into(),
            tokenizer: "chars4".into(),
            token_factor: 1.0,
            window: 1_000_000,
            ..Default::default()
        },
    )
    .expect("session")
    .info()
    .id
    .clone();
    let handles: Vec<_> = (0..6)
        .map(|w| {
            let store = if w % 2 == 0 {
                first.clone()
            } else {
                second.clone()
            };
            let id = id.clone();
            std::thread::spawn(move || {
                let mut session = engram::session::Session::open(&store, &id).expect("open");
                for i in 0..20 {
                    session
                        .append(vec![engram::message::Message::user(format!("w{w} m{i}"))])
                        .expect("append");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("writer");
    }
    let log = first.session_log(&id, 0, false).expect("log");
    assert_eq!(log.len(), 120);
    for m in &log {
        assert_eq!(m.id, format!("m{}", m.seq));
        assert_eq!(m.message.id.as_deref(), Some(m.id.as_str()));
    }
}
