//! The database's schema: each version's statements, the checks that a file is engram's, and
//! the migrations from any earlier version.
use rusqlite::Connection;

use super::{backend, calibration, timeline, vectors, write_tx};

/// `PRAGMA application_id` of engram's databases ("ENGR").
pub const APPLICATION_ID: i32 = 0x454e_4752;
/// The schema version this build writes.
pub const SCHEMA_VERSION: i32 = 11;

pub(super) const SCHEMA_V1: &str = "
CREATE TABLE memory (
    rowid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    tier TEXT NOT NULL,
    content TEXT NOT NULL,
    source TEXT NOT NULL,
    session_id TEXT,
    created_at INTEGER NOT NULL,
    importance REAL NOT NULL,
    metadata TEXT,
    summary_of TEXT
);
CREATE INDEX memory_tier_time ON memory(tier, created_at, id);
CREATE VIRTUAL TABLE memory_fts USING fts5(
    content, content='memory', content_rowid='rowid', tokenize='porter unicode61'
);
CREATE TRIGGER memory_ai AFTER INSERT ON memory BEGIN
    INSERT INTO memory_fts(rowid, content) VALUES (new.rowid, new.content);
END;
CREATE TRIGGER memory_ad AFTER DELETE ON memory BEGIN
    INSERT INTO memory_fts(memory_fts, rowid, content) VALUES ('delete', old.rowid, old.content);
END;
CREATE TRIGGER memory_au AFTER UPDATE OF content ON memory BEGIN
    INSERT INTO memory_fts(memory_fts, rowid, content) VALUES ('delete', old.rowid, old.content);
    INSERT INTO memory_fts(rowid, content) VALUES (new.rowid, new.content);
END;
CREATE TABLE consolidation_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT,
    source TEXT NOT NULL,
    items_consolidated INTEGER NOT NULL,
    summary_preview TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    strategy TEXT NOT NULL,
    model TEXT,
    duration_ms REAL NOT NULL,
    ids_in TEXT NOT NULL,
    ids_out TEXT NOT NULL
);
";

/// Version 2: sessions (append-only logs, compactions, summaries, checkpoints) and a small
/// key-value table for the store's own bookkeeping (the last sleep, say).
const SCHEMA_V2: &str = "
CREATE TABLE session (
    id TEXT PRIMARY KEY,
    name TEXT,
    model TEXT NOT NULL,
    tokenizer TEXT NOT NULL,
    token_factor REAL NOT NULL,
    window INTEGER NOT NULL,
    metadata TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    messages INTEGER NOT NULL DEFAULT 0,
    next_seq INTEGER NOT NULL DEFAULT 0,
    epoch INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE session_message (
    session_id TEXT NOT NULL REFERENCES session(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    message TEXT NOT NULL,
    abandoned INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE UNIQUE INDEX session_message_active_id ON session_message(session_id, id) WHERE abandoned = 0;
CREATE TABLE session_compaction (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES session(id) ON DELETE CASCADE,
    trigger TEXT NOT NULL,
    strategy TEXT NOT NULL,
    log_end INTEGER NOT NULL,
    tokens_before INTEGER NOT NULL,
    tokens_after INTEGER NOT NULL,
    view TEXT NOT NULL,
    report TEXT NOT NULL,
    summary_ids TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    abandoned INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX session_compaction_session ON session_compaction(session_id, id);
CREATE TABLE session_summary (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES session(id) ON DELETE CASCADE,
    compaction_id INTEGER NOT NULL REFERENCES session_compaction(id) ON DELETE CASCADE,
    depth INTEGER NOT NULL,
    covers TEXT NOT NULL,
    covers_summaries TEXT NOT NULL,
    from_at INTEGER NOT NULL,
    to_at INTEGER NOT NULL,
    text TEXT NOT NULL,
    tokens INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX session_summary_session ON session_summary(session_id, compaction_id);
CREATE TABLE session_checkpoint (
    rowid INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES session(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    log_end INTEGER NOT NULL,
    compaction_id INTEGER,
    messages INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    abandoned INTEGER NOT NULL DEFAULT 0,
    UNIQUE (session_id, name)
);
CREATE INDEX memory_session ON memory(session_id) WHERE session_id IS NOT NULL;
CREATE INDEX memory_source ON memory(source);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
";

/// Version 3: full-text search moves from FTS5 to a tantivy index beside the database, fed
/// by a queue of changes written in the same transactions as the rows.
const SCHEMA_V3: &str = "
DROP TRIGGER memory_ai;
DROP TRIGGER memory_ad;
DROP TRIGGER memory_au;
DROP TABLE memory_fts;
CREATE TABLE index_queue (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    rowid INTEGER NOT NULL,
    op INTEGER NOT NULL
);
CREATE TRIGGER memory_ai AFTER INSERT ON memory BEGIN
    INSERT INTO index_queue (rowid, op) VALUES (new.rowid, 1);
END;
CREATE TRIGGER memory_ad AFTER DELETE ON memory BEGIN
    INSERT INTO index_queue (rowid, op) VALUES (old.rowid, 0);
END;
CREATE TRIGGER memory_au AFTER UPDATE OF content, session_id, source, created_at ON memory BEGIN
    INSERT INTO index_queue (rowid, op) VALUES (new.rowid, 2);
END;
INSERT OR REPLACE INTO meta (key, value) VALUES ('store_id', lower(hex(randomblob(16))));
";

/// Version 4: the tier moves to a narrow table of its own. Consolidation changes the tier of
/// every entry it takes: in the wide `memory` row that rewrote the row and its page (content
/// and all), so a sleep over 10,000 entries wrote every page of the table to the WAL; here it
/// rewrites a few bytes. Candidates are read from an index of working entries only, oldest
/// first (archiving an entry removes it from that index).
const SCHEMA_V4: &str = "
CREATE TABLE memory_tier (
    rowid INTEGER PRIMARY KEY,
    tier TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
INSERT INTO memory_tier (rowid, tier, created_at) SELECT rowid, tier, created_at FROM memory;
DROP INDEX memory_tier_time;
ALTER TABLE memory DROP COLUMN tier;
CREATE INDEX memory_working ON memory_tier(created_at) WHERE tier = 'working';
CREATE INDEX memory_small_tiers ON memory_tier(tier) WHERE tier NOT IN ('working', 'archive');
CREATE TRIGGER memory_tier_ad AFTER DELETE ON memory BEGIN
    DELETE FROM memory_tier WHERE rowid = old.rowid;
END;
CREATE TRIGGER memory_tier_au AFTER UPDATE OF created_at ON memory BEGIN
    UPDATE memory_tier SET created_at = new.created_at WHERE rowid = new.rowid;
END;
";

/// Version 5: working memory is a table of its own, holding the working entries' rowids (and
/// times, to choose the oldest). An entry's tier in `memory_tier` is `entry` while it is
/// working or archived; which of the two is whether `memory_working` has it. Consolidation
/// archives an entry by deleting one small row: no rewrite of its tier row and no index entry
/// to remove (that index's upkeep was two thirds of the cost of archiving).
const SCHEMA_V5: &str = "
DROP INDEX memory_working;
DROP INDEX memory_small_tiers;
CREATE TABLE memory_working (
    entry INTEGER PRIMARY KEY,
    created_at INTEGER NOT NULL
);
INSERT INTO memory_working (entry, created_at)
    SELECT rowid, created_at FROM memory_tier WHERE tier = 'working';
UPDATE memory_tier SET tier = 'entry' WHERE tier IN ('working', 'archive');
CREATE INDEX memory_small_tiers ON memory_tier(tier) WHERE tier <> 'entry';
DROP TRIGGER memory_tier_ad;
DROP TRIGGER memory_tier_au;
CREATE TRIGGER memory_tier_ad AFTER DELETE ON memory BEGIN
    DELETE FROM memory_tier WHERE rowid = old.rowid;
    DELETE FROM memory_working WHERE entry = old.rowid;
END;
CREATE TRIGGER memory_tier_au AFTER UPDATE OF created_at ON memory BEGIN
    UPDATE memory_tier SET created_at = new.created_at WHERE rowid = new.rowid;
    UPDATE memory_working SET created_at = new.created_at WHERE entry = new.rowid;
END;
";

/// Version 6: hybrid recall's vectors, by model and text hash (little-endian `f32`s), for
/// memory entries and session messages alike: a text is embedded once ([`vectors::TABLE`]).
const SCHEMA_V6: &str = vectors::TABLE;

/// Version 7: which session's texts each vector was computed from, so that deleting a session
/// forgets the vectors no other session uses ([`vectors::SESSION_TABLE`]).
const SCHEMA_V7: &str = vectors::SESSION_TABLE;

/// Version 9: the keys of appends that may be retried, with what each stored and answered
/// (`Idempotency-Key`), kept a day and a thousand per session.
const SCHEMA_V9: &str = "
CREATE TABLE IF NOT EXISTS session_append_key (
    session_id TEXT NOT NULL REFERENCES session(id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    positions TEXT NOT NULL,
    answer TEXT,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (session_id, key)
);
";

/// Version 10: each model's count calibration, learned from what the provider reported
/// ([`calibration::TABLE`]).
const SCHEMA_V10: &str = calibration::TABLE;

/// Version 11: each session's timeline, built at sleep time ([`timeline::TABLE`]).
const SCHEMA_V11: &str = timeline::TABLE;

/// One step of the schema: statements, or code where the step needs Rust (a text's hash).
enum Migration {
    Sql(&'static str),
    Code(fn(&Connection) -> rusqlite::Result<()>),
}

/// The schema version of the database behind `conn`, after checking that it is engram's (or
/// empty) and not newer than this build. Reads only: nothing is written to a file that is not
/// ours.
pub(super) fn checked_version(conn: &Connection, name: &str) -> Result<i32, engram::Error> {
    // Read-only checks first: nothing is written to a file that is not ours. They read one
    // snapshot (another process may be creating the schema right now), and wait for a
    // writer rather than mistaking its lock for a damaged file.
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .map_err(backend)?;
    let snapshot = conn.unchecked_transaction().map_err(backend)?;
    let app: i32 = snapshot
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .map_err(|e| {
            engram::Error::Foreign(format!("{name} is not a readable SQLite database: {e}"))
        })?;
    let version: i32 = snapshot
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(backend)?;
    let tables: i64 = snapshot
        .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
        .map_err(|e| {
            engram::Error::Foreign(format!("{name} is not a readable SQLite database: {e}"))
        })?;
    snapshot.finish().map_err(backend)?;
    if app != APPLICATION_ID && (app != 0 || tables > 0) {
        return Err(engram::Error::Foreign(format!(
            "{name} is a SQLite database, but not engram's; engram leaves it alone (use another --db)"
        )));
    }
    if version > SCHEMA_VERSION {
        return Err(engram::Error::Foreign(format!(
            "{name} was written by a newer engram (schema {version}; this one knows {SCHEMA_VERSION})"
        )));
    }
    Ok(version)
}

/// Brings the database from `version` to [`SCHEMA_VERSION`], each step in its own transaction
/// (a crash leaves the previous version). The version is read again under the write lock, so
/// two processes opening a new database at once migrate it once.
pub(super) fn migrate(conn: &mut Connection) -> Result<(), engram::Error> {
    let tx = write_tx(conn)?;
    let current: i32 = tx
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(backend)?;
    for (to, step) in [
        (1, Migration::Sql(SCHEMA_V1)),
        (2, Migration::Sql(SCHEMA_V2)),
        (3, Migration::Sql(SCHEMA_V3)),
        (4, Migration::Sql(SCHEMA_V4)),
        (5, Migration::Sql(SCHEMA_V5)),
        (6, Migration::Sql(SCHEMA_V6)),
        (7, Migration::Sql(SCHEMA_V7)),
        // The vectors kept before version 7 that belong to nothing are forgotten.
        (8, Migration::Code(vectors::forget_unowned)),
        (9, Migration::Sql(SCHEMA_V9)),
        (10, Migration::Sql(SCHEMA_V10)),
        (11, Migration::Sql(SCHEMA_V11)),
    ] {
        if current < to {
            match step {
                Migration::Sql(schema) => tx.execute_batch(schema),
                Migration::Code(step) => step(&tx),
            }
            .map_err(backend)?;
            tx.execute_batch(&format!(
                "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {to};"
            ))
            .map_err(backend)?;
        }
    }
    tx.commit().map_err(backend)?;
    Ok(())
}
