//! SIGKILL at random moments during `memory import` and `memory sleep`, many times: after
//! each kill the store opens, every acknowledged entry is there in exactly one tier, and every
//! summary's lineage resolves (no half-done group).
#![cfg(unix)]

use std::collections::HashSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use engram::memory::{MemoryStore, SearchQuery, Tier};
use engram_store::SqliteStore;

const ENTRIES: usize = 6_000;

/// A small deterministic generator (xorshift), seeded from the clock; the seed is printed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

fn engram(db: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_engram"));
    c.arg("--db")
        .arg(db)
        .args(args)
        .env_remove("ENGRAM_AUTO_SLEEP")
        .env_remove("ENGRAM_CONFIG")
        .env(
            "XDG_CONFIG_HOME",
            std::env::temp_dir().join("engram-cli-tests-no-config"),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

/// Runs a command to completion and returns how long it took.
fn timed(mut c: Command) -> Duration {
    let started = Instant::now();
    let out = c.output().expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    started.elapsed()
}

/// Copies a store (the database, its WAL and its search index).
fn copy_store(from: &Path, to: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let (a, b) = (
            format!("{}{suffix}", from.display()),
            format!("{}{suffix}", to.display()),
        );
        if Path::new(&a).exists() {
            std::fs::copy(&a, &b).expect("copy");
        }
    }
    let (a, b) = (
        format!("{}-index", from.display()),
        format!("{}-index", to.display()),
    );
    std::fs::create_dir_all(&b).expect("index dir");
    for f in std::fs::read_dir(&a).expect("index").flatten() {
        if f.path().is_file() {
            std::fs::copy(f.path(), Path::new(&b).join(f.file_name())).expect("copy");
        }
    }
}

/// Starts a command and kills it with SIGKILL after `after`; true when it was killed (it had
/// not finished yet).
fn kill_after(mut c: Command, after: Duration) -> bool {
    let mut child = c.spawn().expect("spawns");
    std::thread::sleep(after);
    let killed = matches!(child.try_wait(), Ok(None));
    child.kill().ok(); // SIGKILL on Unix
    child.wait().ok();
    killed
}

/// The invariants after a crash: the store opens; each id is in exactly one tier (ids are
/// unique by construction, so: the originals are all present in working or archive, or none
/// of an unacknowledged import is); every summary's `summary_of` resolves to archived
/// originals, and every archived original is in exactly one summary.
fn check(db: &Path, imported: bool, round: &str) {
    let store = SqliteStore::open(db).unwrap_or_else(|e| panic!("{round}: reopen: {e}"));
    let stats = store.stats().expect("stats");
    let originals = stats.working + stats.archive;
    if imported {
        assert_eq!(
            originals, ENTRIES,
            "{round}: every acknowledged entry is there"
        );
    } else {
        assert!(
            originals == 0 || originals == ENTRIES,
            "{round}: an import is all or nothing, found {originals}"
        );
    }
    let all = store.entries(None, None, usize::MAX).expect("entries");
    let mut covered = HashSet::new();
    for e in all.iter().filter(|e| e.tier == Tier::Episodic) {
        assert!(
            !e.summary_of.is_empty(),
            "{round}: summary {} covers nothing",
            e.id
        );
        for id in &e.summary_of {
            let original = store
                .get(id)
                .expect("get")
                .unwrap_or_else(|| panic!("{round}: {} names {id}, which is missing", e.id));
            assert_eq!(original.tier, Tier::Archive, "{round}: {id}");
            assert!(
                covered.insert(id.clone()),
                "{round}: {id} is in two summaries"
            );
        }
    }
    assert_eq!(
        covered.len(),
        stats.archive,
        "{round}: every archived original is in a summary (no half-done group)"
    );
    let log = store.log(usize::MAX).expect("log");
    assert_eq!(
        log.len(),
        stats.episodic,
        "{round}: one log record per summary"
    );
    // The search index agrees with the rows: each original once, none missing.
    let hits = store
        .search(&SearchQuery {
            tiers: vec![Tier::Working, Tier::Archive],
            ..SearchQuery::new("E7", 100_000)
        })
        .expect("search");
    let ids: HashSet<&str> = hits.iter().map(|h| h.entry.id.as_str()).collect();
    assert_eq!(ids.len(), hits.len(), "{round}: a hit appears twice");
    let expected = if originals == 0 {
        0
    } else {
        (0..ENTRIES).filter(|i| i % 13 == 7).count()
    };
    assert_eq!(hits.len(), expected, "{round}: the index misses entries");
    // And every summary once (sleep indexes them inline with its transaction; a kill between
    // the database's commit and the index's leaves them to the queue).
    let summaries = store
        .search(&SearchQuery {
            tiers: vec![Tier::Episodic],
            ..SearchQuery::new("entries", 100_000)
        })
        .expect("search");
    let ids: HashSet<&str> = summaries.iter().map(|h| h.entry.id.as_str()).collect();
    assert_eq!(
        ids.len(),
        summaries.len(),
        "{round}: a summary appears twice"
    );
    assert_eq!(
        summaries.len(),
        stats.episodic,
        "{round}: the index misses summaries"
    );
}

/// A generator seeded from the clock (the seed is printed, to replay a failure) and a new
/// temporary folder `name-PID`.
fn seeded(name: &str) -> (Rng, std::path::PathBuf) {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    eprintln!("crash test seed {seed}");
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    (Rng(seed), dir)
}

#[test]
fn sigkill_during_import_and_sleep_loses_nothing() {
    let (mut rng, dir) = seeded("engram-crash");
    let file = dir.join("entries.jsonl");
    let mut lines = String::new();
    for i in 0..ENTRIES {
        lines.push_str(&format!(
            "{{\"id\": \"e{i}\", \"content\": \"step {i}: edited src/module_{}.rs and ran the tests, error E{} fixed\", \"source\": \"agent{}\", \"session_id\": \"s{}\", \"created_at\": \"2026-01-01T00:00:00Z\"}}\n",
            i % 97,
            i % 13,
            i % 5,
            i % 11
        ));
    }
    std::fs::write(&file, lines).expect("write");
    let file = file.to_str().expect("utf8");

    // How long each operation takes uninterrupted, to kill somewhere inside it. The first run
    // is often the slowest (a cold cache, other tests running beside it): the import's time is
    // the shortest uninterrupted import seen so far, and a kill lands in its first 60%.
    let probe = dir.join("probe.db");
    let mut import_time = timed(engram(&probe, &["memory", "import", file]));
    let sleep_args = [
        "memory",
        "sleep",
        "--now",
        "2026-02-01T00:00:00Z",
        "--max-working",
        "100000",
    ];
    let sleep_time = timed(engram(&probe, &sleep_args));

    // Imports: each round on a new database, killed somewhere inside the import.
    let mut kills = 0;
    let mut attempts = 0;
    for round in 0..6 {
        let db = dir.join(format!("import{round}.db"));
        let after = Duration::from_micros(rng.below(import_time.as_micros() as u64 * 6 / 10 + 1));
        attempts += 1;
        let killed = kill_after(engram(&db, &["memory", "import", file]), after);
        kills += usize::from(killed);
        check(&db, false, &format!("import round {round} ({after:?})"));
        // Restarted, the import is acknowledged; entries already there are skipped.
        let rerun = timed(engram(&db, &["memory", "import", file]));
        if killed {
            // A killed import stored nothing: the rerun did the whole import.
            import_time = import_time.min(rerun);
        }
        check(&db, true, &format!("import round {round}, restarted"));
    }
    // Sleeps: each round on a copy of an imported store, killed twice, then completed.
    let base = dir.join("import0.db");
    for round in 0..5 {
        let db = dir.join(format!("sleep{round}.db"));
        copy_store(&base, &db);
        for kill in 0..2 {
            let after =
                Duration::from_micros(rng.below(sleep_time.as_micros() as u64 * 6 / 10 + 1));
            attempts += 1;
            kills += usize::from(kill_after(engram(&db, &sleep_args), after));
            check(
                &db,
                true,
                &format!("sleep round {round}, kill {kill} ({after:?})"),
            );
        }
        timed(engram(&db, &sleep_args));
        check(&db, true, &format!("sleep round {round}, completed"));
        let store = SqliteStore::open(&db).expect("open");
        assert_eq!(store.stats().expect("stats").working, 0);
    }
    assert!(
        kills * 3 >= attempts,
        "most rounds should kill a running process ({kills} of {attempts})"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `engram import` (the whole store: sessions and memory) SIGKILLed at random moments: after
/// each kill the store opens, every session there has all of its messages, and running the
/// same import again completes it (what is stored already is skipped, never refused).
#[test]
fn sigkill_during_a_whole_store_import_then_a_rerun_completes_it() {
    use engram::session::SessionStore;

    let (mut rng, dir) = seeded("engram-crash-whole");
    // A store with memory entries and three sessions, exported whole.
    let entries = dir.join("entries.jsonl");
    let lines: String = (0..ENTRIES)
        .map(|i| {
            format!(
                "{{\"id\": \"e{i}\", \"content\": \"step {i}: edited src/module_{}.rs\", \"source\": \"agent{}\"}}\n",
                i % 97,
                i % 5
            )
        })
        .collect();
    std::fs::write(&entries, lines).expect("write");
    let source = dir.join("source.db");
    timed(engram(
        &source,
        &["memory", "import", entries.to_str().expect("utf8")],
    ));
    for s in 0..3 {
        let id = format!("s{s}");
        timed(engram(
            &source,
            &["session", "new", "--model", "gpt-4o", "--id", &id],
        ));
        for turn in 0..20 {
            let text = format!("turn {turn} of session {s}: fix src/lib_{turn}.rs");
            timed(engram(
                &source,
                &["session", "append", &id, "--user", &text],
            ));
        }
    }
    let export = dir.join("store.jsonl");
    let export = export.to_str().expect("utf8");
    timed(engram(&source, &["export", "-o", export]));

    let probe = dir.join("probe.db");
    let import_time = timed(engram(&probe, &["import", export]));
    let check = |db: &Path, complete: bool, round: &str| {
        let store = SqliteStore::open(db).unwrap_or_else(|e| panic!("{round}: reopen: {e}"));
        let sessions = store.sessions().expect("sessions");
        for s in &sessions {
            let log = store.session_log(&s.id, 0, true).expect("log");
            assert_eq!(log.len(), 20, "{round}: session {} is whole", s.id);
        }
        let stats = store.stats().expect("stats");
        if complete {
            assert_eq!(sessions.len(), 3, "{round}");
            assert_eq!(stats.working, ENTRIES, "{round}");
        }
    };
    let mut kills = 0;
    for round in 0..5 {
        let db = dir.join(format!("whole{round}.db"));
        let after = Duration::from_micros(rng.below(import_time.as_micros() as u64 * 9 / 10 + 1));
        kills += usize::from(kill_after(engram(&db, &["import", export]), after));
        check(
            &db,
            false,
            &format!("round {round}, killed after {after:?}"),
        );
        timed(engram(&db, &["import", export]));
        check(&db, true, &format!("round {round}, run again"));
        // A third run changes nothing and says so.
        timed(engram(&db, &["import", export]));
        check(&db, true, &format!("round {round}, third run"));
    }
    assert!(
        kills >= 2,
        "most rounds should kill a running import ({kills} of 5)"
    );
    std::fs::remove_dir_all(&dir).ok();
}
