//! The SQLite store, the embedded default: one file, no server, no configuration, WAL for
//! concurrent readers, and a tantivy index beside the file for search (BM25 over stemmed words,
//! kept in step with the database by a change queue; `search.rs`). `sessions.rs` is its
//! [`SessionStore`](engram::session::SessionStore).
//!
//! A file that is not engram's (another SQLite database, or not SQLite at all) is refused with
//! a clear error and left untouched: the checks run before anything is written.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use engram::embed::{TextHash, VectorStore};
use engram::memory::{
    Consolidation, ConsolidationRecord, Forget, Forgotten, Inserted, MemoryEntry, MemoryStore,
    SearchHit, SearchQuery, Stats, Tier, Timestamp, empty_forget, new_id,
};
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

/// Pages in the WAL after which a commit copies it into the database (SQLite's default is
/// 1,000: far more frequent checkpoints in a bulk write).
const WAL_AUTOCHECKPOINT: i64 = 16_384;

/// Imports of at least this many entries checkpoint the WAL themselves, after starting the
/// index's commit (see `insert_stream`).
const BULK_CHECKPOINT: usize = if cfg!(test) { 100 } else { 20_000 };

/// Candidates handed over at a time by `working_before_each`.
const READ_BATCH: usize = 512;

/// The most of the file the candidate read maps (`PRAGMA mmap_size`: the file's first
/// 32 MiB; pages past it are read into SQLite's cache as before). A mapped page counts in the
/// process's resident set as long as the mapping lasts, and a batch of candidates chosen by
/// time is scattered over the whole table: mapped whole, a sleep over a million entries
/// showed the whole 700 MiB file resident (190 MiB before).
const MAPPED_READ: i64 = 32 << 20;

/// How `memory_tier` spells a tier: working and archived entries are both `entry` (see
/// `SCHEMA_V5` in `schema.rs`).
fn stored_tier(tier: Tier) -> &'static str {
    match tier {
        Tier::Working | Tier::Archive => "entry",
        other => other.as_str(),
    }
}

pub use schema::{APPLICATION_ID, SCHEMA_VERSION};

/// A SQLite-backed store.
#[derive(Debug)]
pub struct SqliteStore {
    conn: Mutex<Connection>,
    index: search::TextIndex,
    candidates: Mutex<Candidates>,
}

/// The rowids of the entries the last candidate read returned, by id, and the index queue's
/// position when it read them. Every insert, update and delete of a memory row moves that
/// position (by trigger); while it has not moved, no rowid was freed and given to another
/// entry, so consolidation can archive these entries by rowid instead of looking each id up.
#[derive(Debug, Default)]
struct Candidates {
    seq: i64,
    rowids: rustc_hash::FxHashMap<String, i64>,
}

/// The index queue's last position (SQLite's `AUTOINCREMENT` counter: it never goes back).
fn queue_seq(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached(
        "SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'index_queue'), 0)",
    )?
    .query_row([], |r| r.get(0))
}

pub(crate) fn backend(e: impl std::fmt::Display) -> engram::Error {
    engram::Error::Backend(e.to_string())
}

/// Puts `conn`'s file in WAL mode. Switching a new file needs an exclusive lock, and SQLite
/// does not wait for it: another process opening the same new file at this moment makes it
/// fail at once. Retried for as long as a busy timeout of `wait` would have waited.
pub(crate) fn write_ahead_log(
    conn: &Connection,
    wait: std::time::Duration,
) -> rusqlite::Result<()> {
    let started = std::time::Instant::now();
    loop {
        match conn.execute_batch("PRAGMA journal_mode=WAL;") {
            Ok(()) => return Ok(()),
            Err(rusqlite::Error::SqliteFailure(e, _))
                if matches!(
                    e.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) && started.elapsed() < wait =>
            {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(e) => return Err(e),
        }
    }
}

/// A write transaction, begun IMMEDIATE: it waits (up to the busy timeout) for the write lock
/// up front, instead of starting as a reader and failing with "database is locked" when
/// another connection wrote first.
pub(crate) fn write_tx(conn: &mut Connection) -> Result<rusqlite::Transaction<'_>, engram::Error> {
    conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(backend)
}

impl SqliteStore {
    /// Opens (or creates) the database at `path`, refusing files that are not engram's.
    pub fn open(path: &Path) -> Result<Self, engram::Error> {
        if let Ok(meta) = std::fs::metadata(path) {
            if meta.is_dir() {
                return Err(engram::Error::Foreign(format!(
                    "{} is a directory; --db takes a database file",
                    path.display()
                )));
            }
            if meta.len() > 0 {
                let mut header = [0u8; 16];
                let read = std::fs::File::open(path)
                    .and_then(|mut f| std::io::Read::read(&mut f, &mut header))
                    .map_err(backend)?;
                if read < 16 || &header != b"SQLite format 3\0" {
                    return Err(engram::Error::Foreign(format!(
                        "{} is not an engram database (not a SQLite file); engram leaves it alone",
                        path.display()
                    )));
                }
            }
        } else if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| {
                backend(format!(
                    "cannot create the directory {}: {e}",
                    parent.display()
                ))
            })?;
        }
        let conn = Connection::open(path)
            .map_err(|e| backend(format!("cannot open {}: {e}", path.display())))?;
        let mut index_dir = path.as_os_str().to_owned();
        index_dir.push("-index");
        Self::setup(
            conn,
            &path.display().to_string(),
            Some(PathBuf::from(index_dir)),
        )
    }

    /// A private database in memory (for tests and one-off runs).
    pub fn open_in_memory() -> Result<Self, engram::Error> {
        Self::setup(
            Connection::open_in_memory().map_err(backend)?,
            ":memory:",
            None,
        )
    }

    fn setup(
        mut conn: Connection,
        name: &str,
        index_dir: Option<PathBuf>,
    ) -> Result<Self, engram::Error> {
        let version = schema::checked_version(&conn, name)?;
        write_ahead_log(&conn, std::time::Duration::from_secs(10)).map_err(backend)?;
        // A 16 MiB page cache: a long transaction's pages stay in it until they spill, so a
        // larger one held 64 MiB per store for each large append or import.
        conn.execute_batch(
            "PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON; PRAGMA cache_size=-16384; PRAGMA temp_store=MEMORY;",
        )
        .map_err(backend)?;
        conn.pragma_update(None, "wal_autocheckpoint", WAL_AUTOCHECKPOINT)
            .map_err(backend)?;
        if version < SCHEMA_VERSION {
            schema::migrate(&mut conn)?;
        }
        Self::with_index(conn, index_dir)
    }

    /// Opens the search index (in `dir`, or in memory) and brings it in step with the database.
    fn with_index(mut conn: Connection, dir: Option<PathBuf>) -> Result<Self, engram::Error> {
        let index = match &dir {
            Some(dir) => search::TextIndex::open(dir)?,
            None => search::TextIndex::in_ram()?,
        };
        index.reconcile(&mut conn)?;
        Ok(SqliteStore {
            candidates: Mutex::default(),
            conn: Mutex::new(conn),
            index,
        })
    }

    /// Brings the search index up to date now (a search does it anyway; bulk writers call this
    /// so that the next search is fast). Returns the changes applied. An index commit still
    /// running that covers every change is left to finish on its own.
    pub fn sync_index(&self) -> Result<usize, engram::Error> {
        let mut conn = self.conn();
        self.index.catch_up(&mut conn, false)
    }

    /// Reads the candidates ([`read_candidates`]) and keeps their rowids for consolidation
    /// ([`Candidates`]).
    fn read_working(
        &self,
        before: Timestamp,
        limit: usize,
        each: &mut dyn FnMut(i64, MemoryEntry),
    ) -> Result<(), engram::Error> {
        let mut conn = self.conn();
        let mut candidates = self.candidates.lock().unwrap_or_else(|p| p.into_inner());
        // Not to be trusted until the read is whole.
        candidates.seq = -1;
        candidates.rowids.clear();
        let rowids = &mut candidates.rowids;
        // The rows are read through a mapping of the file, not copied page by page into
        // SQLite's cache: a sleep reads every candidate once, and each page it copied was
        // fresh memory (a 10k sleep: 1,300 fewer page faults, 4 ms of 48). Only the file's
        // start ([`MAPPED_READ`]), and unmapped after the read, so that the file's pages do
        // not stay in the process's resident set (mapped for good, a search at a million
        // entries showed the whole file there).
        conn.pragma_update(None, "mmap_size", MAPPED_READ)
            .map_err(backend)?;
        let read = read_candidates(&mut conn, before, limit, &mut |rowid, e| {
            rowids.insert(e.id.clone(), rowid);
            each(rowid, e);
        });
        let unmapped = conn.pragma_update(None, "mmap_size", 0).map_err(backend);
        let seq = read?;
        unmapped?;
        candidates.seq = seq;
        Ok(())
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The columns [`row_to_entry`] reads after the tier.
macro_rules! columns_after_tier {
    () => {
        "m.content, m.source, m.session_id, m.created_at, m.importance, m.metadata, m.summary_of"
    };
}

/// The columns [`row_to_entry`] reads, from [`MEMORY`] (or any join naming the tables `m` and `t`).
pub(crate) const COLUMNS: &str = concat!(
    "m.id, CASE WHEN t.tier <> 'entry' THEN t.tier
     WHEN EXISTS (SELECT 1 FROM memory_working w WHERE w.entry = m.rowid) THEN 'working'
     ELSE 'archive' END, ",
    columns_after_tier!()
);

/// Memory rows with their tiers, for lookups by the row's own columns (the wide row first).
pub(crate) const MEMORY: &str = "memory m CROSS JOIN memory_tier t ON t.rowid = m.rowid";

pub(crate) fn row_to_entry(row: &rusqlite::Row<'_>) -> rusqlite::Result<MemoryEntry> {
    let tier = match row.get_ref(1)? {
        rusqlite::types::ValueRef::Text(t) => std::str::from_utf8(t).ok().and_then(Tier::parse),
        _ => None,
    };
    let metadata: Option<String> = row.get(7)?;
    let summary_of: Option<String> = row.get(8)?;
    Ok(MemoryEntry {
        id: row.get(0)?,
        tier: tier.unwrap_or(Tier::Working),
        content: row.get(2)?,
        source: row.get(3)?,
        session_id: row.get(4)?,
        created_at: row.get(5)?,
        importance: row.get(6)?,
        metadata: Value::Null,
        summary_of: Vec::new(),
    }
    .with_stored_json(metadata.as_deref(), summary_of.as_deref()))
}

/// Inserts an entry; its rowid, or `None` when an entry with this id exists already.
fn insert_one(
    tx: &Connection,
    id: &str,
    e: &engram::memory::NewEntry,
    summary_of: Option<&[String]>,
) -> rusqlite::Result<Option<i64>> {
    let summary_of = summary_of.or((!e.summary_of.is_empty()).then_some(e.summary_of.as_slice()));
    let inserted = tx
        .prepare_cached(
            "INSERT OR IGNORE INTO memory (id, content, source, session_id, created_at, importance, metadata, summary_of)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?
        .execute(params![
            id,
            e.content,
            e.source,
            e.session_id,
            e.created_at,
            e.importance,
            (!e.metadata.is_null()).then(|| e.metadata.to_string()),
            summary_of.map(|s| serde_json::to_string(s).unwrap_or_default()),
        ])?;
    if inserted == 0 {
        return Ok(None);
    }
    let rowid = tx.last_insert_rowid();
    tx.prepare_cached("INSERT INTO memory_tier (rowid, tier, created_at) VALUES (?1, ?2, ?3)")?
        .execute(params![rowid, stored_tier(e.tier), e.created_at])?;
    if e.tier == Tier::Working {
        tx.prepare_cached("INSERT INTO memory_working (entry, created_at) VALUES (?1, ?2)")?
            .execute(params![rowid, e.created_at])?;
    }
    Ok(Some(rowid))
}

/// The oldest `limit` working entries older than `before`, handed to `each` with their rowids
/// in rowid order, and the queue's position, read in one transaction (every statement sees
/// the same snapshot). The oldest are chosen from working memory's own small table, then
/// their rows are read in rowid order (neighbours on a page come together, instead of one seek
/// each in time order), driven by the sorted list (no temporary index for an IN list).
fn read_candidates(
    conn: &mut Connection,
    before: Timestamp,
    limit: usize,
    each: &mut dyn FnMut(i64, MemoryEntry),
) -> Result<i64, engram::Error> {
    let tx = conn.transaction().map_err(backend)?;
    let seq = queue_seq(&tx).map_err(backend)?;
    let mut chosen: Vec<(i64, i64)> = tx
        .prepare_cached("SELECT created_at, entry FROM memory_working WHERE created_at < ?1")
        .and_then(|mut stmt| {
            stmt.query_map([before], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect()
        })
        .map_err(backend)?;
    if chosen.len() > limit {
        chosen.select_nth_unstable(limit);
        chosen.truncate(limit);
    }
    let mut rowids: Vec<i64> = chosen.iter().map(|&(_, rowid)| rowid).collect();
    rowids.sort_unstable();
    let rowids = serde_json::to_string(&rowids).map_err(backend)?;
    tx.prepare_cached(concat!(
        // Their tier is known: no lookup per row for it.
        "SELECT m.id, 'working', ",
        columns_after_tier!(),
        ", m.rowid FROM json_each(?1) j CROSS JOIN memory m ON m.rowid = j.value"
    ))
    .and_then(|mut stmt| {
        let mut rows = stmt.query([&rowids])?;
        while let Some(r) = rows.next()? {
            each(r.get(9)?, row_to_entry(r)?);
        }
        Ok(())
    })
    .map_err(backend)?;
    Ok(seq)
}

impl VectorStore for SqliteStore {
    fn vectors(
        &self,
        model: &str,
        hashes: &[TextHash],
    ) -> Result<Vec<Option<Vec<f32>>>, engram::Error> {
        vectors::read(&self.conn(), model, hashes).map_err(backend)
    }

    fn put_vectors(
        &self,
        model: &str,
        vectors: &[(TextHash, &[f32])],
    ) -> Result<(), engram::Error> {
        if vectors.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn();
        let tx = write_tx(&mut conn)?;
        vectors::write(&tx, model, vectors).map_err(backend)?;
        tx.commit().map_err(backend)
    }
}

impl MemoryStore for SqliteStore {
    fn insert(&self, entries: &[engram::memory::NewEntry]) -> Result<Inserted, engram::Error> {
        let mut conn = self.conn();
        let tx = write_tx(&mut conn)?;
        let mut out = Inserted::default();
        for e in entries {
            let id = e.id.clone().unwrap_or_else(|| new_id("mem"));
            match insert_one(&tx, &id, e, None).map_err(backend)? {
                None => out.skipped += 1,
                Some(_) => out.inserted += 1,
            }
        }
        tx.commit().map_err(backend)?;
        Ok(out)
    }

    fn insert_stream(
        &self,
        entries: &mut dyn Iterator<Item = Result<engram::memory::NewEntry, engram::Error>>,
    ) -> Result<Inserted, engram::Error> {
        let mut conn = self.conn();
        let tx = write_tx(&mut conn)?;
        // An import is indexed as it is inserted: tantivy's threads work while SQLite does,
        // and nothing is read back from the queue afterwards.
        let mut inline = self.index.inline(&tx, true)?;
        let mut out = Inserted::default();
        for e in entries {
            // An error returns before the commit: the transaction rolls back (and the
            // indexer, dropped uncommitted, with it).
            let e = e?;
            let id = e.id.clone().unwrap_or_else(|| new_id("mem"));
            match insert_one(&tx, &id, &e, None).map_err(backend)? {
                None => out.skipped += 1,
                Some(rowid) => {
                    out.inserted += 1;
                    if let Some(inline) = inline.as_mut() {
                        inline.add(
                            rowid,
                            &e.content,
                            e.session_id.as_deref(),
                            &e.source,
                            e.created_at,
                            e.tier,
                        )?;
                    }
                }
            }
        }
        let newest = match inline {
            Some(_) => search::newest_queued(&tx)?,
            None => 0,
        };
        // A bulk import fills the WAL past the autocheckpoint limit, and the commit would
        // copy it all into the database before returning, while nothing else runs. The
        // checkpoint is put off until the index's commit has started, so that the two
        // overlap (a fifth of a million-entry import's time).
        let bulk = out.inserted >= BULK_CHECKPOINT;
        if bulk {
            tx.pragma_update(None, "wal_autocheckpoint", 0)
                .map_err(backend)?;
        }
        let committed = tx.commit().map_err(backend);
        if bulk {
            conn.pragma_update(None, "wal_autocheckpoint", WAL_AUTOCHECKPOINT)
                .map_err(backend)?;
        }
        committed?;
        if let Some(inline) = inline {
            inline.commit(newest);
        }
        if bulk {
            // Passive: it copies what no reader still needs and waits for no one; what is
            // left, the next commit's autocheckpoint copies. The entries are committed (safe
            // in the WAL): a checkpoint that fails is not the import's failure.
            let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
        }
        Ok(out)
    }

    fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, engram::Error> {
        let mut conn = self.conn();
        self.index.catch_up(&mut conn, true)?;
        self.index.search(&conn, query)
    }

    fn get(&self, id: &str) -> Result<Option<MemoryEntry>, engram::Error> {
        self.conn()
            .query_row(
                &format!("SELECT {COLUMNS} FROM {MEMORY} WHERE m.id = ?1"),
                [id],
                row_to_entry,
            )
            .optional()
            .map_err(backend)
    }

    fn stats(&self) -> Result<Stats, engram::Error> {
        // No scan of the archive, which grows without bound: working memory and the small
        // tiers are counted from their own table and index, the archive is what remains of
        // the total (a count of the table's cells, without reading its rows).
        let conn = self.conn();
        let (total, working): (i64, i64) = conn
            .prepare_cached(
                "SELECT (SELECT count(*) FROM memory_tier),
                        (SELECT count(*) FROM memory_working)",
            )
            .and_then(|mut s| s.query_row([], |r| Ok((r.get(0)?, r.get(1)?))))
            .map_err(backend)?;
        let mut stats = Stats {
            working: working as usize,
            ..Stats::default()
        };
        let mut others = 0;
        let mut stmt = conn
            .prepare_cached(
                "SELECT tier, count(*) FROM memory_tier WHERE tier <> 'entry' GROUP BY tier",
            )
            .map_err(backend)?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
            .map_err(backend)?;
        for row in rows {
            let (tier, n) = row.map_err(backend)?;
            others += n;
            let n = n as usize;
            match Tier::parse(&tier) {
                Some(Tier::Episodic) => stats.episodic = n,
                Some(Tier::Learning) => stats.learnings = n,
                Some(Tier::Journal) => stats.journal = n,
                _ => {}
            }
        }
        stats.archive = (total - working - others).max(0) as usize;
        Ok(stats)
    }

    fn working_count(&self) -> Result<usize, engram::Error> {
        self.conn()
            .prepare_cached("SELECT count(*) FROM memory_working")
            .and_then(|mut s| s.query_row([], |r| r.get::<_, i64>(0)))
            .map(|n| n as usize)
            .map_err(backend)
    }

    fn working_before(
        &self,
        before: Timestamp,
        limit: usize,
    ) -> Result<Vec<MemoryEntry>, engram::Error> {
        // Read in rowid order, put back in time order here.
        let mut rows = Vec::new();
        self.read_working(before, limit, &mut |rowid, e| rows.push((rowid, e)))?;
        rows.sort_unstable_by_key(|(rowid, e)| (e.created_at, *rowid));
        Ok(rows.into_iter().map(|(_, e)| e).collect())
    }

    fn working_before_each(
        &self,
        before: Timestamp,
        limit: usize,
        each: &mut dyn FnMut(Vec<MemoryEntry>),
    ) -> Result<(), engram::Error> {
        let mut batch = Vec::with_capacity(READ_BATCH);
        self.read_working(before, limit, &mut |_, e| {
            batch.push(e);
            if batch.len() == READ_BATCH {
                each(std::mem::replace(
                    &mut batch,
                    Vec::with_capacity(READ_BATCH),
                ));
            }
        })?;
        if !batch.is_empty() {
            each(batch);
        }
        Ok(())
    }

    fn oldest_working(&self, n: usize) -> Result<Vec<MemoryEntry>, engram::Error> {
        self.working_before(Timestamp::MAX, n)
    }

    fn consolidate(&self, c: &Consolidation) -> Result<ConsolidationRecord, engram::Error> {
        let mut conn = self.conn();
        let tx = write_tx(&mut conn)?;
        let record = consolidate_in(&tx, c, false, None)?;
        tx.commit().map_err(backend)?;
        Ok(record)
    }

    fn consolidate_many(
        &self,
        consolidations: &[Consolidation],
    ) -> Result<Vec<ConsolidationRecord>, engram::Error> {
        let mut conn = self.conn();
        let mut candidates = self.candidates.lock().unwrap_or_else(|p| p.into_inner());
        let (tx, inline, known, out) = loop {
            let tx = write_tx(&mut conn)?;
            // The summaries are indexed while the transaction runs (tantivy's thread works
            // while SQLite does), not read back from the queue after it.
            let mut inline = self.index.inline(&tx, false)?;
            // The last candidate read's rowids hold while no memory row was written since it.
            let known = candidates.seq == queue_seq(&tx).map_err(backend)?;
            let archived = match known {
                true => archive_known(&tx, consolidations, &candidates.rowids)?,
                false => Some(false),
            };
            // The rowids did not hold: the transaction (and the indexer with it) is rolled
            // back, and done again looking each entry up by id (no queue position is -1).
            let Some(archived) = archived else {
                drop(inline);
                drop(tx);
                candidates.seq = -1;
                continue;
            };
            let mut out = Vec::with_capacity(consolidations.len());
            for c in consolidations {
                // A group another process consolidated meanwhile is skipped whole:
                // consolidate_in puts back what it had archived of it (no savepoint per group:
                // SQLite copies every page a savepoint touches, a third of the cost of a sleep).
                match consolidate_in(&tx, c, archived, inline.as_mut()) {
                    Ok(record) => out.push(record),
                    Err(engram::Error::NotWorking(_)) => {}
                    Err(e) => return Err(e),
                }
            }
            break (tx, inline, known, out);
        };
        let newest = match inline {
            Some(_) => search::newest_queued(&tx)?,
            None => 0,
        };
        // This transaction only inserted rows (the summaries): the rowids still hold after it.
        let seq = queue_seq(&tx).map_err(backend)?;
        tx.commit().map_err(backend)?;
        if known {
            candidates.seq = seq;
        }
        drop(candidates);
        if let Some(inline) = inline {
            inline.commit(newest);
        }
        Ok(out)
    }

    fn log(&self, limit: usize) -> Result<Vec<ConsolidationRecord>, engram::Error> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(
                "SELECT id, session_id, source, items_consolidated, summary_preview, created_at, strategy, model, duration_ms, ids_in, ids_out
                 FROM consolidation_log ORDER BY id DESC LIMIT ?1",
            )
            .map_err(backend)?;
        let rows = stmt
            .query_map([limit.min(i64::MAX as usize) as i64], |r| {
                let ids_in: String = r.get(9)?;
                let ids_out: String = r.get(10)?;
                Ok(ConsolidationRecord {
                    id: r.get(0)?,
                    session_id: r.get(1)?,
                    source: r.get(2)?,
                    items_consolidated: r.get::<_, i64>(3)? as usize,
                    summary_preview: r.get(4)?,
                    created_at: r.get(5)?,
                    strategy: r.get(6)?,
                    model: r.get(7)?,
                    duration_ms: r.get(8)?,
                    ids_in: serde_json::from_str(&ids_in).unwrap_or_default(),
                    ids_out: serde_json::from_str(&ids_out).unwrap_or_default(),
                })
            })
            .map_err(backend)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(backend)
    }

    fn forget(&self, what: &Forget) -> Result<Forgotten, engram::Error> {
        if what.is_empty() {
            return Err(empty_forget());
        }
        let mut conn = self.conn();
        let tx = write_tx(&mut conn)?;
        let out = forget_where(
            &tx,
            "(?1 IS NULL OR id = ?1) AND (?2 IS NULL OR session_id = ?2) AND (?3 IS NULL OR source = ?3)",
            &[&what.id, &what.session_id, &what.source],
        )?;
        tx.commit().map_err(backend)?;
        Ok(out)
    }

    fn delete_archived_before(&self, before: Timestamp) -> Result<Forgotten, engram::Error> {
        let mut conn = self.conn();
        let tx = write_tx(&mut conn)?;
        let out = forget_where(
            &tx,
            "rowid IN (SELECT t.rowid FROM memory_tier t WHERE t.tier = 'entry' AND t.created_at < ?1
                       AND NOT EXISTS (SELECT 1 FROM memory_working w WHERE w.entry = t.rowid))",
            &[&before],
        )?;
        tx.commit().map_err(backend)?;
        Ok(out)
    }

    fn claim_sleep(&self, now: Timestamp, interval_ms: i64) -> Result<bool, engram::Error> {
        let mut conn = self.conn();
        let tx = write_tx(&mut conn)?;
        let last: Option<String> = tx
            .query_row(
                "SELECT value FROM meta WHERE key = 'last_sleep_at'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(backend)?;
        let last: Option<Timestamp> = last.and_then(|v| v.parse().ok());
        if last.is_some_and(|last| now - last < interval_ms) {
            return Ok(false);
        }
        tx.execute(
            "INSERT INTO meta (key, value) VALUES ('last_sleep_at', ?1)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [now.to_string()],
        )
        .map_err(backend)?;
        tx.commit().map_err(backend)?;
        Ok(true)
    }

    fn meta(&self, key: &str) -> Result<Option<String>, engram::Error> {
        self.conn()
            .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
            .optional()
            .map_err(backend)
    }

    fn set_meta(&self, key: &str, value: &str) -> Result<(), engram::Error> {
        let mut conn = self.conn();
        let tx = write_tx(&mut conn)?;
        tx.execute(
            "INSERT INTO meta (key, value) VALUES (?1, ?2)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [key, value],
        )
        .map_err(backend)?;
        tx.commit().map_err(backend)
    }

    fn forget_all(&self) -> Result<Forgotten, engram::Error> {
        let mut conn = self.conn();
        let tx = write_tx(&mut conn)?;
        forget_vectors_of(&tx, "SELECT content FROM memory")?;
        let entries = tx.execute("DELETE FROM memory", []).map_err(backend)?;
        tx.execute("DELETE FROM consolidation_log", [])
            .map_err(backend)?;
        tx.commit().map_err(backend)?;
        Ok(Forgotten::everything(entries))
    }

    fn entries(
        &self,
        session_id: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<MemoryEntry>, engram::Error> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM {MEMORY}
                 WHERE (?1 IS NULL OR m.session_id = ?1) AND (?2 IS NULL OR m.id > ?2)
                 ORDER BY m.id LIMIT ?3"
            ))
            .map_err(backend)?;
        let rows = stmt
            .query_map(
                params![session_id, after, limit.min(i64::MAX as usize) as i64],
                row_to_entry,
            )
            .map_err(backend)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(backend)
    }
}

/// Deletes the memory rows `condition` selects (with their FTS rows, by trigger) and removes
/// their ids from the remaining summaries' `summary_of`, inside the caller's transaction.
pub(crate) fn forget_where(
    tx: &Connection,
    condition: &str,
    args: &[&dyn rusqlite::ToSql],
) -> Result<Forgotten, engram::Error> {
    tx.execute_batch(
        "CREATE TEMP TABLE IF NOT EXISTS doomed (id TEXT PRIMARY KEY); DELETE FROM temp.doomed;",
    )
    .map_err(backend)?;
    let entries = tx
        .execute(
            &format!("INSERT INTO temp.doomed (id) SELECT id FROM memory WHERE {condition}"),
            args,
        )
        .map_err(backend)?;
    forget_vectors_of(
        tx,
        "SELECT content FROM memory WHERE id IN (SELECT id FROM temp.doomed)",
    )?;
    tx.execute(
        "DELETE FROM memory WHERE id IN (SELECT id FROM temp.doomed)",
        [],
    )
    .map_err(backend)?;
    let summaries_updated = tx
        .execute(
            "UPDATE memory SET summary_of = (
                 SELECT json_group_array(value) FROM json_each(memory.summary_of)
                 WHERE value NOT IN (SELECT id FROM temp.doomed))
             WHERE summary_of IS NOT NULL AND EXISTS (
                 SELECT 1 FROM json_each(memory.summary_of) WHERE value IN (SELECT id FROM temp.doomed))",
            [],
        )
        .map_err(backend)?;
    tx.execute("DELETE FROM temp.doomed", []).map_err(backend)?;
    Ok(Forgotten {
        entries,
        summaries_updated,
    })
}

mod calibration;
mod consolidation;
use consolidation::{archive_known, consolidate_in, forget_vectors_of};
mod schema;
pub use calibration::read_calibration;
mod search;
mod sessions;
mod timeline;
mod vectors;

pub use vectors::VectorFile;

#[cfg(test)]
mod tests;
