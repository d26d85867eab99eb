//! Full-text search over memory with tantivy (BM25, English stemming), kept in step with SQLite.
//!
//! SQLite is the source of truth. Triggers append every insert, delete and content update of
//! a memory row to `index_queue`, in the same transaction as the change. The index records in
//! each commit's payload the last queue position it has applied; before a search (and after a
//! bulk write) the queue is replayed from there. A crash at any moment therefore loses nothing:
//! the queue still holds what the index has not applied. Several processes share the index
//! directory; tantivy's writer lock makes them take turns.
//!
//! Why not SQLite's own FTS5: its OR queries score every matching row, so a question of ten
//! ordinary words over a million entries takes hundreds of milliseconds; tantivy's block-max
//! WAND skips the postings that cannot reach the top k.
//!
//! Tiers. The filters that never change (session, source, time) are applied inside the index,
//! and so is the part of an entry's tier that never changes. Working and archived entries are
//! one kind to the index (consolidation archives an entry by taking it out of `memory_working`,
//! without touching the index); episodic, learning and journal entries keep their tier for good,
//! and their text is in a field of its own. A search runs in each field it needs, both with
//! the same BM25 statistics (those of the two fields as one, so that a document scores the same
//! in either) and merges the hits by score. The default search, working and episodic memory,
//! thus never wades through the archive, which grows with every sleep: over a slept million
//! entries the archive is most of the index. Within a field, a filter is applied inside the
//! index only where it keeps at most half of the field's documents (a filter costs block-max
//! WAND its skipping); otherwise hits are checked one by one on fast fields. Telling working
//! from archived entries takes the working entries' rowids, read when they are few (the
//! working-memory cap keeps them few), or else a lookup in `memory_working` per hit.

use std::ops::Bound;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use engram::memory::{SearchHit, SearchQuery, Tier};
use rusqlite::{Connection, OptionalExtension, params};
use tantivy::collector::TopDocs;
use tantivy::query::{Query, RangeQuery, TermQuery};
use tantivy::schema::{
    FAST, Field, INDEXED, IndexRecordOption, STRING, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term};

use super::{COLUMNS, MEMORY, backend, row_to_entry, write_tx};

mod stemming;
mod tiers;

use stemming::{StemmingTokenizer, TOKENIZER};
use tiers::{
    Columns, Counts, Entries, Statistics, TierPlan, WORKING_SET, working_rowids, working_span,
};

/// Memory a bulk index writer may use before it writes segments (shared by its threads). With
/// twice as much, a 2-million-entry import of short entries peaked at 4.2 times its input (the
/// arena is held whole) against 2.3 times, and was 15% faster; an import's memory is what this
/// store promises to keep in proportion.
const WRITER_HEAP: usize = 96 << 20;
/// Queue rows read per batch while catching up.
const BATCH: i64 = 50_000;

#[derive(Clone, Copy)]
pub(super) struct Fields {
    rowid: Field,
    /// The text of working and archived entries.
    content: Field,
    /// The text of the entries of every other tier (see [`tier_code`]).
    kept: Field,
    session: Field,
    source: Field,
    created_at: Field,
    tier: Field,
}

fn schema() -> (Schema, Fields) {
    schema_with_tokenizer(TOKENIZER)
}

/// The index's schema with its text analysed by the tokenizer named `tokenizer` (tests write
/// the index an earlier engram wrote).
pub(super) fn schema_with_tokenizer(tokenizer: &str) -> (Schema, Fields) {
    let mut b = Schema::builder();
    let text = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(tokenizer)
            .set_index_option(IndexRecordOption::WithFreqs),
    );
    let fields = Fields {
        rowid: b.add_u64_field("rowid", INDEXED | FAST),
        content: b.add_text_field("content", text.clone()),
        kept: b.add_text_field("kept", text),
        session: b.add_text_field("session", STRING),
        source: b.add_text_field("source", STRING),
        // A fast field only: a range query over a fast field reads its column, and an indexed
        // time would add a term of its own to the index for nearly every entry.
        created_at: b.add_i64_field("created_at", FAST),
        // Indexed, to filter on; fast, to check a hit (see `tier_code`). Only the entries of
        // the tiers kept for good have one.
        tier: b.add_u64_field("tier", INDEXED | FAST),
    };
    (b.build(), fields)
}

/// How the index spells a tier: working and archived entries are both [`ENTRY`] (which of the
/// two they are changes, and is read from `memory_working`); the other tiers, which an entry
/// keeps for good, each have their own code.
fn tier_code(tier: Tier) -> u64 {
    match tier {
        Tier::Working | Tier::Archive => ENTRY,
        Tier::Episodic => 1,
        Tier::Learning => 2,
        Tier::Journal => 3,
    }
}

/// The index's code for working and archived entries.
const ENTRY: u64 = 0;

/// The tier code of a `memory_tier` row's tier (`entry` for working and archived entries).
fn stored_tier_code(stored: &str) -> u64 {
    Tier::parse(stored).map_or(ENTRY, tier_code)
}

fn index_error(e: impl std::fmt::Display) -> engram::Error {
    engram::Error::Backend(format!("search index: {e}"))
}

/// The last position in the index queue.
pub(crate) fn newest_queued(conn: &Connection) -> Result<i64, engram::Error> {
    conn.query_row("SELECT coalesce(max(seq), 0) FROM index_queue", [], |r| {
        r.get(0)
    })
    .map_err(backend)
}

/// Indexes rows as a write transaction inserts them ([`TextIndex::inline`]). Dropped without
/// [`Inline::commit`] (the transaction failed), nothing it was given reaches the index.
pub(crate) struct Inline<'a> {
    index: &'a TextIndex,
    writer: IndexWriter,
    _sync: std::sync::MutexGuard<'a, ()>,
}

impl Inline<'_> {
    /// Indexes a row the transaction inserted (its queue entry is applied by the commit).
    pub(crate) fn add(
        &mut self,
        rowid: i64,
        content: &str,
        session: Option<&str>,
        source: &str,
        created_at: i64,
        tier: Tier,
    ) -> Result<(), engram::Error> {
        self.writer
            .add_document(self.index.document(
                rowid,
                content,
                session,
                source,
                created_at,
                tier_code(tier),
            ))
            .map(drop)
            .map_err(index_error)
    }

    /// Commits the index after the transaction committed, up to `newest`, the queue's last
    /// position in that transaction. The commit (mostly waiting for its files to reach the
    /// disk) runs on a thread of its own while the caller goes on; whatever next uses the
    /// index waits for it first ([`TextIndex::settle`]), and so does dropping the index. A
    /// failure loses nothing (the queue keeps the rows and the next catch-up indexes them),
    /// so it is not the write's failure.
    pub(crate) fn commit(self, newest: i64) {
        let payload = format!("{}:{newest}", self.index.store_id());
        let mut writer = self.writer;
        let commit = move || -> tantivy::Result<()> {
            let mut commit = writer.prepare_commit()?;
            commit.set_payload(&payload);
            commit.commit()?;
            writer.wait_merging_threads()
        };
        let mut pending = self.index.pending();
        *pending = match std::thread::Builder::new()
            .name("engram-index-commit".into())
            .spawn(commit)
        {
            Ok(handle) => Some(Pending { handle, newest }),
            // No thread to be had: the writer went with the closure, so nothing is committed
            // and the queue keeps the rows for the next catch-up.
            Err(_) => None,
        };
    }
}

/// An index commit running on its own thread, up to queue position `newest`.
struct Pending {
    handle: std::thread::JoinHandle<tantivy::Result<()>>,
    newest: i64,
}

/// The search index of one store.
pub(crate) struct TextIndex {
    index: Index,
    reader: IndexReader,
    fields: Fields,
    analyzer: Mutex<StemmingTokenizer>,
    /// Serialises catching up within this process.
    sync: Mutex<()>,
    /// The database's id (`meta.store_id`), written into every commit.
    store_id: Mutex<String>,
    /// The commit [`Inline::commit`] left running, if any.
    pending: Mutex<Option<Pending>>,
}

impl Drop for TextIndex {
    fn drop(&mut self) {
        // The process may end right after: the commit finishes first. (Its queue entries
        // stay until the next commit drops them; catching up skips what the index holds.)
        if let Some(pending) = self.pending().take() {
            let _ = pending.handle.join();
        }
    }
}

impl std::fmt::Debug for TextIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextIndex").finish_non_exhaustive()
    }
}

/// True when the index in `dir` was written with another schema than `schema`.
fn schema_differs(dir: &Path, schema: &Schema) -> bool {
    let Ok(directory) = tantivy::directory::MmapDirectory::open(dir) else {
        return false;
    };
    Index::open(directory).is_ok_and(|index| index.schema() != *schema)
}

/// Indexing threads and memory for `pending` changes: one thread and a small arena for a few,
/// every core (up to 4) for a bulk import.
fn writer_size(pending: i64) -> (usize, usize) {
    if pending < 20_000 {
        (1, 20 << 20)
    } else {
        (
            std::thread::available_parallelism().map_or(1, |n| n.get().min(4)),
            WRITER_HEAP,
        )
    }
}

impl TextIndex {
    /// Opens (or creates) the index in `dir`.
    pub(crate) fn open(dir: &Path) -> Result<Self, engram::Error> {
        std::fs::create_dir_all(dir)
            .map_err(|e| index_error(format!("cannot create {}: {e}", dir.display())))?;
        let (schema, fields) = schema();
        let open = || {
            let directory = tantivy::directory::MmapDirectory::open(dir).map_err(index_error)?;
            Index::open_or_create(directory, schema.clone()).map_err(|e| {
                index_error(format!(
                    "{} cannot be opened ({e}); delete it and engram rebuilds it from the database",
                    dir.display()
                ))
            })
        };
        let index = match open() {
            Ok(index) => index,
            // An index written by another version of engram: it is derived data, so it is
            // rebuilt from the database rather than refused.
            Err(_) if dir.join("meta.json").is_file() && schema_differs(dir, &schema) => {
                std::fs::remove_dir_all(dir)
                    .and_then(|()| std::fs::create_dir_all(dir))
                    .map_err(|e| index_error(format!("cannot rebuild {}: {e}", dir.display())))?;
                open()?
            }
            Err(e) => return Err(e),
        };
        Self::with_index(index, fields)
    }

    /// An index in memory (for an in-memory store).
    pub(crate) fn in_ram() -> Result<Self, engram::Error> {
        let (schema, fields) = schema();
        Self::with_index(Index::create_in_ram(schema), fields)
    }

    fn with_index(index: Index, fields: Fields) -> Result<Self, engram::Error> {
        index
            .tokenizers()
            .register(TOKENIZER, StemmingTokenizer::default());
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(index_error)?;
        Ok(TextIndex {
            index,
            reader,
            fields,
            analyzer: Mutex::new(StemmingTokenizer::default()),
            sync: Mutex::new(()),
            store_id: Mutex::new(String::new()),
            pending: Mutex::new(None),
        })
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Option<Pending>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn store_id(&self) -> String {
        self.store_id
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Waits for the commit [`Inline::commit`] left running, then lets the queue drop what
    /// the index now holds and shows the commit to searches. Callers hold `sync`.
    fn settle(&self, conn: &mut Connection) -> Result<(), engram::Error> {
        let Some(pending) = self.pending().take() else {
            return Ok(());
        };
        match pending.handle.join() {
            Ok(Ok(())) => self.after_commit(conn, pending.newest),
            // The queue still holds the rows: the next catch-up indexes them.
            Ok(Err(_)) => Ok(()),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// The store the index belongs to and the last queue position it has applied, from the
    /// last commit's payload (`store_id:seq`).
    fn commit_state(&self) -> Result<Option<(String, i64)>, engram::Error> {
        let payload = self.index.load_metas().map_err(index_error)?.payload;
        Ok(payload.and_then(|p| {
            let (id, seq) = p.split_once(':')?;
            Some((id.to_owned(), seq.parse().ok()?))
        }))
    }

    fn applied(&self) -> Result<i64, engram::Error> {
        Ok(self.commit_state()?.map_or(0, |(_, seq)| seq))
    }

    /// Makes sure the index belongs to this database: an index left by another database (the
    /// file was replaced, say) is emptied and rebuilt from the rows.
    pub(crate) fn reconcile(&self, conn: &mut Connection) -> Result<(), engram::Error> {
        let store_id: String = conn
            .query_row("SELECT value FROM meta WHERE key = 'store_id'", [], |r| {
                r.get(0)
            })
            .map_err(backend)?;
        let state = self.commit_state()?;
        if state.as_ref().is_some_and(|(id, _)| *id == store_id) {
            *self.store_id.lock().unwrap_or_else(|p| p.into_inner()) = store_id;
            return Ok(());
        }
        let mut writer = self.writer(0)?;
        writer.delete_all_documents().map_err(index_error)?;
        let tx = write_tx(conn)?;
        let newest: i64 = tx
            .query_row("SELECT coalesce(max(seq), 0) FROM index_queue", [], |r| {
                r.get(0)
            })
            .map_err(backend)?;
        // Queue every row again, after the position the emptied index starts from.
        tx.execute(
            "INSERT INTO index_queue (rowid, op) SELECT rowid, 1 FROM memory ORDER BY rowid",
            [],
        )
        .map_err(backend)?;
        // The queue first: a crash before the index commits finds the index still foreign
        // next time, and starts over.
        tx.commit().map_err(backend)?;
        let mut commit = writer.prepare_commit().map_err(index_error)?;
        commit.set_payload(&format!("{store_id}:{newest}"));
        commit.commit().map_err(index_error)?;
        writer.wait_merging_threads().map_err(index_error)?;
        self.reader.reload().map_err(index_error)?;
        *self.store_id.lock().unwrap_or_else(|p| p.into_inner()) = store_id;
        Ok(())
    }

    /// A writer sized for `pending` changes: one thread and a small arena for a few, every core
    /// for a bulk import.
    fn writer(&self, pending: i64) -> Result<IndexWriter, engram::Error> {
        // Another process may be writing: wait for its lock as SQLite waits for its own.
        let started = Instant::now();
        let (threads, heap) = writer_size(pending);
        loop {
            match self
                .index
                .writer_with_num_threads::<TantivyDocument>(threads, heap)
            {
                Ok(w) => return Ok(w),
                Err(tantivy::TantivyError::LockFailure(..))
                    if started.elapsed() < Duration::from_secs(30) =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(index_error(e)),
            }
        }
    }

    /// Applies what the queue holds beyond the index's last commit. `conn` is locked by the
    /// caller for as long as this runs.
    /// With `wait` false, a commit still running that covers the queue leaves nothing to do
    /// (a search passes true: it must see that commit).
    pub(crate) fn catch_up(
        &self,
        conn: &mut Connection,
        wait: bool,
    ) -> Result<usize, engram::Error> {
        let _guard = self.sync.lock().unwrap_or_else(|p| p.into_inner());
        let newest = newest_queued(conn)?;
        if !wait && self.pending().as_ref().is_some_and(|p| p.newest >= newest) {
            return Ok(0);
        }
        self.settle(conn)?;
        let mut applied = self.applied()?;
        if newest <= applied {
            return Ok(0);
        }
        let writer = self.writer(newest - applied)?;
        // Read again under the writer lock: another process may have caught up meanwhile.
        applied = self.applied()?;
        let f = self.fields;
        let mut done = 0;
        loop {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT q.seq, q.rowid, q.op, m.content, m.session_id, m.source, m.created_at, t.tier
                     FROM index_queue q LEFT JOIN memory m ON m.rowid = q.rowid
                     LEFT JOIN memory_tier t ON t.rowid = q.rowid
                     WHERE q.seq > ?1 ORDER BY q.seq LIMIT ?2",
                )
                .map_err(backend)?;
            let mut rows = stmt.query(params![applied, BATCH]).map_err(backend)?;
            let mut n = 0;
            while let Some(row) = rows.next().map_err(backend)? {
                n += 1;
                let seq: i64 = row.get(0).map_err(backend)?;
                let rowid: i64 = row.get(1).map_err(backend)?;
                let op: i64 = row.get(2).map_err(backend)?;
                applied = seq;
                if op != 1 {
                    writer.delete_term(Term::from_field_u64(f.rowid, rowid as u64));
                }
                if op == 0 {
                    continue;
                }
                let Some(content) = row
                    .get_ref(3)
                    .map_err(backend)?
                    .as_str_or_null()
                    .map_err(backend)?
                else {
                    continue; // deleted since; its delete comes later in the queue
                };
                let doc = self.document(
                    rowid,
                    content,
                    row.get_ref(4)
                        .map_err(backend)?
                        .as_str_or_null()
                        .map_err(backend)?,
                    row.get_ref(5).map_err(backend)?.as_str().map_err(backend)?,
                    row.get(6).map_err(backend)?,
                    stored_tier_code(
                        row.get_ref(7)
                            .map_err(backend)?
                            .as_str_or_null()
                            .map_err(backend)?
                            .unwrap_or("entry"),
                    ),
                );
                writer.add_document(doc).map_err(index_error)?;
            }
            done += n;
            if n < BATCH as usize {
                break;
            }
        }
        self.publish(writer, conn, applied)?;
        Ok(done)
    }

    /// Commits what `writer` was given as the index's state up to queue position `applied`
    /// (the commit's payload, which catching up starts from), then lets the queue drop what
    /// the index now holds and shows the commit to searches.
    fn publish(
        &self,
        mut writer: IndexWriter,
        conn: &mut Connection,
        applied: i64,
    ) -> Result<(), engram::Error> {
        let mut commit = writer.prepare_commit().map_err(index_error)?;
        commit.set_payload(&format!("{}:{applied}", self.store_id()));
        commit.commit().map_err(index_error)?;
        writer.wait_merging_threads().map_err(index_error)?;
        self.after_commit(conn, applied)
    }

    /// After a commit up to queue position `applied`: what the index holds leaves the queue
    /// (a crash here only leaves it longer) and searches see the commit.
    fn after_commit(&self, conn: &mut Connection, applied: i64) -> Result<(), engram::Error> {
        let tx = write_tx(conn)?;
        tx.execute("DELETE FROM index_queue WHERE seq <= ?1", [applied])
            .map_err(backend)?;
        tx.commit().map_err(backend)?;
        self.reader.reload().map_err(index_error)
    }

    /// The index's document for a memory row.
    fn document(
        &self,
        rowid: i64,
        content: &str,
        session: Option<&str>,
        source: &str,
        created_at: i64,
        tier: u64,
    ) -> TantivyDocument {
        let f = self.fields;
        let mut doc = TantivyDocument::default();
        doc.add_u64(f.rowid, rowid as u64);
        doc.add_text(if tier == ENTRY { f.content } else { f.kept }, content);
        if let Some(session) = session {
            doc.add_text(f.session, session);
        }
        doc.add_text(f.source, source);
        doc.add_i64(f.created_at, created_at);
        // Working and archived entries, most of the index, have no tier value (a hit without
        // one is such an entry): no posting or column value for each of them.
        if tier != ENTRY {
            doc.add_u64(f.tier, tier);
        }
        doc
    }

    /// An indexer for the rows the write transaction `tx` inserts, working while the
    /// transaction does (on tantivy's thread) and committed after it: what consolidation uses
    /// for its summaries, so that indexing them does not wait for the writes to end. `None`
    /// when the index has not applied everything queued before this transaction, or another
    /// process holds the index's writer: the rows are then indexed from the queue later, as
    /// every other write's are.
    /// `bulk` asks for a writer sized for an import (every core, a large arena) rather than
    /// for a few rows.
    pub(crate) fn inline(
        &self,
        tx: &Connection,
        bulk: bool,
    ) -> Result<Option<Inline<'_>>, engram::Error> {
        let sync = self.sync.lock().unwrap_or_else(|p| p.into_inner());
        // A commit still running holds the writer: it is waited for, and what it applied
        // leaves the queue in this transaction.
        if let Some(pending) = self.pending().take() {
            match pending.handle.join() {
                Ok(Ok(())) => {
                    tx.execute("DELETE FROM index_queue WHERE seq <= ?1", [pending.newest])
                        .map_err(backend)?;
                    self.reader.reload().map_err(index_error)?;
                }
                Ok(Err(_)) => {}
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        let (threads, heap) = writer_size(if bulk { i64::MAX } else { 0 });
        let writer = match self
            .index
            .writer_with_num_threads::<TantivyDocument>(threads, heap)
        {
            Ok(w) => w,
            Err(tantivy::TantivyError::LockFailure(..)) => return Ok(None),
            Err(e) => return Err(index_error(e)),
        };
        // Under both locks (SQLite's write lock and the index's writer): neither the queue nor
        // the index's position can move until this transaction and its index commit end.
        if newest_queued(tx)? > self.applied()? {
            return Ok(None);
        }
        Ok(Some(Inline {
            index: self,
            writer,
            _sync: sync,
        }))
    }

    /// The query's words as the index spells them (lowercased, stemmed, without stopwords).
    fn terms(&self, text: &str) -> Vec<String> {
        let mut analyzer = self.analyzer.lock().unwrap_or_else(|p| p.into_inner());
        analyzer.analyze(text);
        let mut out: Vec<String> = Vec::new();
        for t in &analyzer.tokens[..analyzer.len] {
            if !out.contains(&t.text) {
                out.push(t.text.clone());
            }
        }
        out
    }

    /// Searches; `conn` gives the rows (and their tiers) for the hits.
    pub(crate) fn search(
        &self,
        conn: &Connection,
        query: &SearchQuery,
    ) -> Result<Vec<SearchHit>, engram::Error> {
        let terms = self.terms(&query.text);
        let limit = query.clamped_limit();
        if terms.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let f = self.fields;
        let mut filters: Vec<Box<dyn Query>> = Vec::new();
        if let Some(s) = &query.session_id {
            filters.push(Box::new(TermQuery::new(
                Term::from_field_text(f.session, s),
                IndexRecordOption::Basic,
            )));
        }
        if let Some(s) = &query.source {
            filters.push(Box::new(TermQuery::new(
                Term::from_field_text(f.source, s),
                IndexRecordOption::Basic,
            )));
        }
        if query.since.is_some() || query.until.is_some() {
            filters.push(Box::new(RangeQuery::new(
                query.since.map_or(Bound::Unbounded, |t| {
                    Bound::Included(Term::from_field_i64(f.created_at, t))
                }),
                query.until.map_or(Bound::Unbounded, |t| {
                    Bound::Excluded(Term::from_field_i64(f.created_at, t))
                }),
            )));
        }

        let searcher = self.reader.searcher();
        // Scores as if both text fields were one (see `Statistics`).
        let statistics = Statistics {
            searcher: &searcher,
            fields: f,
        };
        let counts = Counts::of(&searcher, f)?;
        let mut plan = TierPlan::new(&query.tiers());
        // Whether the working set was read, or found too large to read.
        let mut read = !plan.needs_working();
        if !read {
            let span = working_span(conn)?;
            if span == 0 {
                plan.working = Some(Vec::new());
                read = true;
            } else if plan.entries == Entries::Working
                && span <= WORKING_SET as u64
                && span * 2 <= counts.entries
            {
                // Few working entries among many archived: a filter on them is sure to pay.
                plan.working = working_rowids(conn)?;
                read = true;
            }
            // Otherwise hits are checked one by one (working memory is most entries, or too
            // large to read), and the working entries read only if too few hits pass.
        }
        let mut is_working = conn
            .prepare_cached("SELECT 1 FROM memory_working WHERE entry = ?1")
            .map_err(backend)?;
        let mut get = conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM {MEMORY} WHERE m.rowid = ?1"
            ))
            .map_err(backend)?;
        'plan: loop {
            let queries = plan.queries(&counts, f, &terms, &filters);
            let mut fetch = (limit * 2).max(16);
            loop {
                // One search per text field, merged by score (scores do not depend on filters).
                let mut top = Vec::new();
                // Whether a search may have more hits than it gave.
                let mut more = false;
                for q in &queries {
                    let part = searcher
                        .search_with_statistics_provider(
                            q.as_ref(),
                            &TopDocs::with_limit(fetch).order_by_score(),
                            &statistics,
                        )
                        .map_err(index_error)?;
                    more |= part.len() == fetch;
                    top.extend(part);
                }
                if queries.len() > 1 {
                    // Only the best `fetch` of the merged hits are surely the best of the store
                    // (a field's next hit may outscore the other field's last); what is cut
                    // here is hits the search has, so too few wanted ones fetch more.
                    top.sort_by(|a, b| b.0.total_cmp(&a.0));
                    more |= top.len() > fetch;
                    top.truncate(fetch);
                }
                let mut columns: Vec<Option<Columns>> = (0..searcher.segment_readers().len())
                    .map(|_| None)
                    .collect();
                // (score, time, rowid) of the hits in the tiers wanted.
                let mut wanted: Vec<(f32, i64, u64)> = Vec::with_capacity(top.len());
                for (score, address) in &top {
                    let c = match &mut columns[address.segment_ord as usize] {
                        Some(c) => c,
                        slot => {
                            slot.insert(Columns::of(searcher.segment_reader(address.segment_ord))?)
                        }
                    };
                    let Some(rowid) = c.rowid.first(address.doc_id) else {
                        continue;
                    };
                    let code = c.tier.first(address.doc_id).unwrap_or(ENTRY);
                    if !plan.wants(code, rowid, |r| {
                        is_working.exists([r as i64]).map_err(backend)
                    })? {
                        continue;
                    }
                    let time = c.created_at.first(address.doc_id).unwrap_or(0);
                    wanted.push((*score, time, rowid));
                }
                if wanted.len() < limit && more {
                    // Most hits were archived entries: with few working entries, a filter on
                    // them inside the index does better than fetching more.
                    if !read {
                        read = true;
                        if let Some(set) = working_rowids(conn)? {
                            plan.working = Some(set);
                            continue 'plan;
                        }
                    }
                    fetch *= 4;
                    continue;
                }
                wanted.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
                let mut hits = Vec::with_capacity(limit);
                for (score, _, rowid) in wanted {
                    if hits.len() == limit {
                        break;
                    }
                    let Some(entry) = get
                        .query_row([rowid as i64], row_to_entry)
                        .optional()
                        .map_err(backend)?
                    else {
                        continue; // deleted after the index last caught up
                    };
                    if query.admits(&entry) {
                        hits.push(SearchHit {
                            entry,
                            score: f64::from(score),
                        });
                    }
                }
                return Ok(hits);
            }
        }
    }
}

#[cfg(test)]
mod tier_tests {
    use engram::memory::{
        Consolidation, ConsolidationRecord, MemoryStore, NewEntry, SearchQuery, Tier,
    };
    use proptest::prelude::*;

    use super::super::SqliteStore;

    const WORDS: [&str; 6] = ["crane", "harbour", "engine", "lamp", "river", "stone"];

    fn new_entry(id: String, tier: Tier, words: &[usize]) -> NewEntry {
        let content: Vec<&str> = words.iter().map(|&w| WORDS[w]).collect();
        NewEntry {
            id: Some(id),
            tier,
            created_at: 1_000,
            ..NewEntry::working(content.join(" "), "test")
        }
    }

    fn store_all(store: &SqliteStore, entries: Vec<NewEntry>, stream: bool) {
        if stream {
            store
                .insert_stream(&mut entries.into_iter().map(Ok))
                .expect("insert_stream");
        } else {
            store.insert(&entries).expect("insert");
        }
    }

    fn consolidation(ids: Vec<String>, summary: NewEntry) -> Consolidation {
        Consolidation {
            record: ConsolidationRecord {
                id: 0,
                session_id: None,
                source: "test".into(),
                items_consolidated: ids.len(),
                summary_preview: String::new(),
                created_at: 2_000,
                strategy: "extractive".into(),
                model: None,
                duration_ms: 0.0,
                ids_in: ids.clone(),
                ids_out: vec![],
            },
            ids,
            summary,
        }
    }

    fn tier_strategy() -> impl Strategy<Value = Tier> {
        prop_oneof![
            3 => Just(Tier::Working),
            3 => Just(Tier::Archive),
            1 => Just(Tier::Episodic),
            1 => Just(Tier::Learning),
            1 => Just(Tier::Journal),
        ]
    }

    /// Two working entries far apart among many archived ones that score higher: the first
    /// search checks hits one by one, finds too few working ones, reads the working entries
    /// (few enough) and filters on them inside the index. And a few archived entries among
    /// working ones that score higher: found the same way, by a filter for the entries not
    /// working.
    #[test]
    fn few_working_or_few_archived_entries_are_found() {
        fn found(store: &SqliteStore, tiers: &[Tier], limit: usize) -> Vec<String> {
            store
                .search(&SearchQuery {
                    tiers: tiers.to_vec(),
                    ..SearchQuery::new("crane", limit)
                })
                .expect("search")
                .into_iter()
                .map(|h| h.entry.id)
                .collect()
        }
        let store = SqliteStore::open_in_memory().expect("store");
        let mut entries = vec![new_entry("w0".into(), Tier::Working, &[0, 1, 2])];
        for i in 0..60 {
            entries.push(new_entry(format!("a{i}"), Tier::Archive, &[0]));
        }
        entries.push(new_entry("w1".into(), Tier::Working, &[0, 3]));
        store_all(&store, entries, false);
        for (limit, expected) in [(1, vec!["w1"]), (5, vec!["w1", "w0"])] {
            assert_eq!(
                found(&store, &[Tier::Working], limit),
                expected,
                "limit {limit}"
            );
        }
        assert_eq!(found(&store, &[Tier::Archive], 100).len(), 60);

        // Few archived entries among working ones: a filter for what is not working.
        let store = SqliteStore::open_in_memory().expect("store");
        let mut entries = vec![new_entry("a0".into(), Tier::Archive, &[0, 1, 2])];
        for i in 0..20 {
            entries.push(new_entry(format!("w{i}"), Tier::Working, &[0]));
        }
        entries.push(new_entry("a1".into(), Tier::Archive, &[0, 1]));
        store_all(&store, entries, true);
        for (limit, expected) in [(1, vec!["a1"]), (5, vec!["a1", "a0"])] {
            assert_eq!(
                found(&store, &[Tier::Archive, Tier::Learning], limit),
                expected,
                "limit {limit}"
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(engram_testkit::proptest_cases(48)))]

        /// Whatever the mix of tiers (working sets small or large, in runs or scattered, which
        /// the unit tests' small limits make every path of the search), a search finds
        /// exactly the matching entries of the tiers asked for, and each with the score it
        /// has in a store holding the same texts all in working memory: scores do not depend
        /// on tiers, filters or which text field holds an entry.
        #[test]
        fn a_search_finds_the_tiers_asked_for_with_the_scores_of_one_field(
            batches in prop::collection::vec(
                (prop::collection::vec(
                    (tier_strategy(), prop::collection::vec(0..WORDS.len(), 1..4)),
                    1..16,
                ), any::<bool>()),
                1..4,
            ),
            archive in prop::collection::vec(any::<bool>(), 40),
            query in prop::collection::vec(0..WORDS.len(), 1..3),
            masks in prop::collection::vec(0u32..32, 4),
        ) {
            let tiered = SqliteStore::open_in_memory().expect("store");
            let flat = SqliteStore::open_in_memory().expect("store");
            let mut tiers = std::collections::HashMap::new();
            let mut texts = std::collections::HashMap::new();
            let mut n = 0;
            for (batch, stream) in batches {
                let mut a = Vec::new();
                let mut b = Vec::new();
                for (tier, words) in batch {
                    let id = format!("e{n}");
                    n += 1;
                    tiers.insert(id.clone(), tier);
                    texts.insert(id.clone(), words.clone());
                    a.push(new_entry(id.clone(), tier, &words));
                    b.push(new_entry(id, Tier::Working, &words));
                }
                store_all(&tiered, a, stream);
                store_all(&flat, b, stream);
            }
            // Some working entries leave working memory for a summary of their words.
            let mut leaving: Vec<String> = (0..n)
                .map(|i| format!("e{i}"))
                .filter(|id| tiers[id] == Tier::Working && archive[id[1..].parse::<usize>().unwrap() % 40])
                .collect();
            leaving.sort();
            if !leaving.is_empty() {
                let words = texts[&leaving[0]].clone();
                let summary = NewEntry {
                    summary_of: Vec::new(),
                    ..new_entry("sum".into(), Tier::Episodic, &words)
                };
                tiered
                    .consolidate_many(&[consolidation(leaving.clone(), summary)])
                    .expect("consolidate");
                store_all(&flat, vec![new_entry("sum".into(), Tier::Working, &words)], false);
                for id in &leaving {
                    tiers.insert(id.clone(), Tier::Archive);
                }
                tiers.insert("sum".into(), Tier::Episodic);
                texts.insert("sum".into(), words);
            }
            let text: Vec<&str> = query.iter().map(|&w| WORDS[w]).collect();
            let text = text.join(" ");
            let scores: std::collections::HashMap<String, f64> = flat
                .search(&SearchQuery { tiers: Tier::ALL.to_vec(), ..SearchQuery::new(&text, 1000) })
                .expect("search")
                .into_iter()
                .map(|h| (h.entry.id, h.score))
                .collect();
            for mask in masks {
                let asked: Vec<Tier> = Tier::ALL
                    .into_iter()
                    .enumerate()
                    .filter(|(i, _)| mask & (1 << i) != 0)
                    .map(|(_, t)| t)
                    .collect();
                let q = SearchQuery { tiers: asked.clone(), ..SearchQuery::new(&text, 1000) };
                let wanted = q.tiers();
                let mut expected: Vec<&String> = texts
                    .iter()
                    .filter(|(id, words)| {
                        wanted.contains(&tiers[*id]) && words.iter().any(|w| query.contains(w))
                    })
                    .map(|(id, _)| id)
                    .collect();
                expected.sort();
                let hits = tiered.search(&q).expect("search");
                let mut found: Vec<&String> = hits.iter().map(|h| &h.entry.id).collect();
                found.sort();
                prop_assert_eq!(found, expected, "tiers {:?}", asked);
                for h in &hits {
                    prop_assert_eq!(h.entry.tier, tiers[&h.entry.id]);
                    let flat_score = scores[&h.entry.id];
                    prop_assert!(
                        (h.score - flat_score).abs() <= 1e-6 * flat_score.abs().max(1.0),
                        "{}: {} against {}", h.entry.id, h.score, flat_score
                    );
                }
                // The best first, and a limit keeps the best.
                for limit in [1, 3] {
                    let best = tiered.search(&SearchQuery { limit, ..q.clone() }).expect("search");
                    prop_assert_eq!(
                        best.iter().map(|h| h.score).collect::<Vec<_>>(),
                        hits.iter().take(limit).map(|h| h.score).collect::<Vec<_>>()
                    );
                }
            }
        }
    }
}
