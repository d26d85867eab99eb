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
//! WAND skips the postings that cannot reach the top k. Tiers change when memory is
//! consolidated, so the tier is not in the index: hits are fetched a few times over and
//! filtered in SQLite (the filters that never change - session, source, time - are applied
//! inside the index).

use std::collections::HashMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use engram::memory::{MemoryError, SearchHit, SearchQuery};
use rusqlite::{Connection, OptionalExtension, params};
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, ConstScoreQuery, Occur, Query, RangeQuery, TermQuery};
use tantivy::schema::{
    FAST, Field, INDEXED, IndexRecordOption, STRING, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::tokenizer::TextAnalyzer;
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term};

use crate::{COLUMNS, backend, row_to_entry, write_tx};

/// Memory the index writer may use before it writes a segment.
const WRITER_HEAP: usize = 96 << 20;
/// Queue rows read per batch while catching up.
const BATCH: i64 = 50_000;

#[derive(Clone, Copy)]
struct Fields {
    rowid: Field,
    content: Field,
    session: Field,
    source: Field,
    created_at: Field,
}

fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let text = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer("en_stem")
            .set_index_option(IndexRecordOption::WithFreqs),
    );
    let fields = Fields {
        rowid: b.add_u64_field("rowid", INDEXED | FAST),
        content: b.add_text_field("content", text),
        session: b.add_text_field("session", STRING),
        source: b.add_text_field("source", STRING),
        created_at: b.add_i64_field("created_at", INDEXED | FAST),
    };
    (b.build(), fields)
}

fn index_error(e: impl std::fmt::Display) -> MemoryError {
    MemoryError::Backend(format!("search index: {e}"))
}

/// The search index of one store.
pub(crate) struct TextIndex {
    index: Index,
    reader: IndexReader,
    fields: Fields,
    analyzer: Mutex<TextAnalyzer>,
    /// Serialises catching up within this process.
    sync: Mutex<()>,
    /// The database's id (`meta.store_id`), written into every commit.
    store_id: Mutex<String>,
}

impl std::fmt::Debug for TextIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextIndex").finish_non_exhaustive()
    }
}

impl TextIndex {
    /// Opens (or creates) the index in `dir`.
    pub(crate) fn open(dir: &Path) -> Result<Self, MemoryError> {
        std::fs::create_dir_all(dir).map_err(|e| {
            index_error(format!("cannot create {}: {e}", dir.display()))
        })?;
        let (schema, fields) = schema();
        let directory = tantivy::directory::MmapDirectory::open(dir).map_err(index_error)?;
        let index = Index::open_or_create(directory, schema).map_err(|e| {
            index_error(format!(
                "{} cannot be opened ({e}); delete that directory and engram rebuilds it from the database",
                dir.display()
            ))
        })?;
        Self::with_index(index, fields)
    }

    /// An index in memory (for an in-memory store).
    pub(crate) fn in_ram() -> Result<Self, MemoryError> {
        let (schema, fields) = schema();
        Self::with_index(Index::create_in_ram(schema), fields)
    }

    fn with_index(index: Index, fields: Fields) -> Result<Self, MemoryError> {
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(index_error)?;
        let analyzer = index
            .tokenizers()
            .get("en_stem")
            .ok_or_else(|| index_error("the en_stem tokenizer is missing"))?;
        Ok(TextIndex {
            index,
            reader,
            fields,
            analyzer: Mutex::new(analyzer),
            sync: Mutex::new(()),
            store_id: Mutex::new(String::new()),
        })
    }

    /// The store the index belongs to and the last queue position it has applied, from the
    /// last commit's payload (`store_id:seq`).
    fn commit_state(&self) -> Result<Option<(String, i64)>, MemoryError> {
        let payload = self.index.load_metas().map_err(index_error)?.payload;
        Ok(payload.and_then(|p| {
            let (id, seq) = p.split_once(':')?;
            Some((id.to_owned(), seq.parse().ok()?))
        }))
    }

    fn applied(&self) -> Result<i64, MemoryError> {
        Ok(self.commit_state()?.map_or(0, |(_, seq)| seq))
    }

    /// Makes sure the index belongs to this database: an index left by another database (the
    /// file was replaced, say) is emptied and rebuilt from the rows.
    pub(crate) fn reconcile(&self, conn: &mut Connection) -> Result<(), MemoryError> {
        let store_id: String = conn
            .query_row("SELECT value FROM meta WHERE key = 'store_id'", [], |r| r.get(0))
            .map_err(backend)?;
        let state = self.commit_state()?;
        if state.as_ref().is_some_and(|(id, _)| *id == store_id) {
            *self.store_id.lock().unwrap_or_else(|p| p.into_inner()) = store_id;
            return Ok(());
        }
        let mut writer = self.writer()?;
        writer.delete_all_documents().map_err(index_error)?;
        let tx = write_tx(conn)?;
        let newest: i64 = tx
            .query_row("SELECT coalesce(max(seq), 0) FROM index_queue", [], |r| r.get(0))
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

    fn writer(&self) -> Result<IndexWriter, MemoryError> {
        // Another process may be writing: wait for its lock as SQLite waits for its own.
        let started = Instant::now();
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
        loop {
            match self
                .index
                .writer_with_num_threads::<TantivyDocument>(threads, WRITER_HEAP)
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
    pub(crate) fn catch_up(&self, conn: &mut Connection) -> Result<usize, MemoryError> {
        let _guard = self.sync.lock().unwrap_or_else(|p| p.into_inner());
        let newest: i64 = conn
            .query_row("SELECT coalesce(max(seq), 0) FROM index_queue", [], |r| r.get(0))
            .map_err(backend)?;
        let mut applied = self.applied()?;
        if newest <= applied {
            return Ok(0);
        }
        let mut writer = self.writer()?;
        // Read again under the writer lock: another process may have caught up meanwhile.
        applied = self.applied()?;
        let f = self.fields;
        let mut done = 0;
        loop {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT q.seq, q.rowid, q.op, m.content, m.session_id, m.source, m.created_at
                     FROM index_queue q LEFT JOIN memory m ON m.rowid = q.rowid
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
                let Some(content) = row.get::<_, Option<String>>(3).map_err(backend)? else {
                    continue; // deleted since; its delete comes later in the queue
                };
                let mut doc = TantivyDocument::default();
                doc.add_u64(f.rowid, rowid as u64);
                doc.add_text(f.content, &content);
                if let Some(session) = row.get::<_, Option<String>>(4).map_err(backend)? {
                    doc.add_text(f.session, &session);
                }
                let source: String = row.get(5).map_err(backend)?;
                doc.add_text(f.source, &source);
                doc.add_i64(f.created_at, row.get(6).map_err(backend)?);
                writer.add_document(doc).map_err(index_error)?;
            }
            done += n;
            if n < BATCH as usize {
                break;
            }
        }
        let mut commit = writer.prepare_commit().map_err(index_error)?;
        let store_id = self.store_id.lock().unwrap_or_else(|p| p.into_inner()).clone();
        commit.set_payload(&format!("{store_id}:{applied}"));
        commit.commit().map_err(index_error)?;
        writer.wait_merging_threads().map_err(index_error)?;
        // What the index holds can leave the queue (a crash here only leaves it longer).
        let tx = write_tx(conn)?;
        tx.execute("DELETE FROM index_queue WHERE seq <= ?1", [applied])
            .map_err(backend)?;
        tx.commit().map_err(backend)?;
        self.reader.reload().map_err(index_error)?;
        Ok(done)
    }

    /// The query's words as the index spells them (lowercased, stemmed).
    fn terms(&self, text: &str) -> Vec<String> {
        let mut analyzer = self.analyzer.lock().unwrap_or_else(|p| p.into_inner());
        let mut stream = analyzer.token_stream(text);
        let mut out: Vec<String> = Vec::new();
        while stream.advance() {
            let t = &stream.token().text;
            if !out.contains(t) {
                out.push(t.clone());
            }
        }
        out
    }

    /// Searches; `conn` gives the rows (and their tiers) for the hits.
    pub(crate) fn search(
        &self,
        conn: &Connection,
        query: &SearchQuery,
    ) -> Result<Vec<SearchHit>, MemoryError> {
        let terms = self.terms(&query.text);
        if terms.is_empty() || query.limit == 0 {
            return Ok(Vec::new());
        }
        let f = self.fields;
        let words: Vec<(Occur, Box<dyn Query>)> = terms
            .iter()
            .map(|t| {
                let q: Box<dyn Query> = Box::new(TermQuery::new(
                    Term::from_field_text(f.content, t),
                    IndexRecordOption::WithFreqs,
                ));
                (Occur::Should, q)
            })
            .collect();
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
                query
                    .since
                    .map_or(Bound::Unbounded, |t| Bound::Included(Term::from_field_i64(f.created_at, t))),
                query
                    .until
                    .map_or(Bound::Unbounded, |t| Bound::Excluded(Term::from_field_i64(f.created_at, t))),
            )));
        }
        let query_tree: Box<dyn Query> = if filters.is_empty() {
            // A pure disjunction: the case block-max WAND makes fast.
            Box::new(BooleanQuery::new(words))
        } else {
            let mut clauses: Vec<(Occur, Box<dyn Query>)> =
                vec![(Occur::Must, Box::new(BooleanQuery::new(words)))];
            for filter in filters {
                clauses.push((Occur::Must, Box::new(ConstScoreQuery::new(filter, 0.0))));
            }
            Box::new(BooleanQuery::new(clauses))
        };

        let searcher = self.reader.searcher();
        let tiers = query.tiers();
        let mut fetch = (query.limit * 4).max(32);
        let mut get = conn
            .prepare_cached(&format!("SELECT {COLUMNS} FROM memory WHERE rowid = ?1"))
            .map_err(backend)?;
        loop {
            let top = searcher
                .search(&query_tree, &TopDocs::with_limit(fetch).order_by_score())
                .map_err(index_error)?;
            let mut rowids: HashMap<u32, tantivy::columnar::Column<u64>> = HashMap::new();
            let mut hits = Vec::with_capacity(query.limit);
            for (score, address) in &top {
                let column = match rowids.entry(address.segment_ord) {
                    std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::hash_map::Entry::Vacant(e) => e.insert(
                        searcher
                            .segment_reader(address.segment_ord)
                            .fast_fields()
                            .u64("rowid")
                            .map_err(index_error)?,
                    ),
                };
                let Some(rowid) = column.first(address.doc_id) else {
                    continue;
                };
                let Some(entry) = get
                    .query_row([rowid as i64], row_to_entry)
                    .optional()
                    .map_err(backend)?
                else {
                    continue; // deleted after the index last caught up
                };
                if tiers.contains(&entry.tier) && query.admits(&entry) {
                    hits.push(SearchHit {
                        entry,
                        score: f64::from(*score),
                    });
                }
            }
            if hits.len() >= query.limit || top.len() < fetch {
                hits.sort_by(|a, b| {
                    b.score
                        .total_cmp(&a.score)
                        .then(b.entry.created_at.cmp(&a.entry.created_at))
                });
                hits.truncate(query.limit);
                return Ok(hits);
            }
            fetch *= 4;
        }
    }
}
