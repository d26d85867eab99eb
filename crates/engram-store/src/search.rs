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
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term};

use crate::{COLUMNS, MEMORY, backend, row_to_entry, write_tx};

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

/// The name the tokenizer is registered under.
const TOKENIZER: &str = "engram";
/// Words longer than this are not indexed (tantivy's default: base64, hashes).
const MAX_WORD: usize = 40;

/// Words, lowercased and stemmed (English Porter2), with a cache of stems: stemming was a
/// third of indexing time, and text repeats its words.
#[derive(Clone)]
struct StemmingTokenizer {
    stemmer: std::sync::Arc<rust_stemmers::Stemmer>,
    cache: rustc_hash::FxHashMap<String, String>,
    tokens: Vec<tantivy::tokenizer::Token>,
    /// Tokens of the last text (the vector keeps more, for reuse).
    len: usize,
}

impl Default for StemmingTokenizer {
    fn default() -> Self {
        StemmingTokenizer {
            stemmer: std::sync::Arc::new(rust_stemmers::Stemmer::create(
                rust_stemmers::Algorithm::English,
            )),
            cache: rustc_hash::FxHashMap::default(),
            tokens: Vec::new(),
            len: 0,
        }
    }
}

impl StemmingTokenizer {
    /// Splits `text` into stemmed words with their offsets (token strings are reused).
    fn analyze(&mut self, text: &str) {
        let mut n = 0;
        let mut lower = String::new();
        for (from, word) in words(text) {
            if word.len() > MAX_WORD {
                continue;
            }
            lower.clear();
            if word.is_ascii() {
                lower.push_str(word);
                lower.make_ascii_lowercase();
            } else {
                lower.extend(word.chars().flat_map(char::to_lowercase));
            }
            if self.cache.len() > 200_000 {
                self.cache.clear();
            }
            if n == self.tokens.len() {
                self.tokens.push(tantivy::tokenizer::Token::default());
            }
            let token = &mut self.tokens[n];
            token.text.clear();
            match self.cache.get(lower.as_str()) {
                Some(stem) => token.text.push_str(stem),
                None => {
                    let stem = self.stemmer.stem(&lower).into_owned();
                    token.text.push_str(&stem);
                    self.cache.insert(lower.clone(), stem);
                }
            }
            token.offset_from = from;
            token.offset_to = from + word.len();
            token.position = n;
            token.position_length = 1;
            n += 1;
        }
        self.len = n;
    }
}

/// Runs of alphanumeric characters with their byte offsets (tantivy's simple tokenizer's rule).
fn words(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut rest = text.char_indices().peekable();
    std::iter::from_fn(move || {
        while rest.next_if(|(_, c)| !c.is_alphanumeric()).is_some() {}
        let (start, _) = *rest.peek()?;
        let mut end = start;
        while let Some((i, c)) = rest.next_if(|(_, c)| c.is_alphanumeric()) {
            end = i + c.len_utf8();
        }
        Some((start, &text[start..end]))
    })
}

struct TokensOf<'a> {
    tokens: &'a mut [tantivy::tokenizer::Token],
    next: usize,
}

impl tantivy::tokenizer::TokenStream for TokensOf<'_> {
    fn advance(&mut self) -> bool {
        self.next += 1;
        self.next <= self.tokens.len()
    }
    fn token(&self) -> &tantivy::tokenizer::Token {
        &self.tokens[self.next - 1]
    }
    fn token_mut(&mut self) -> &mut tantivy::tokenizer::Token {
        &mut self.tokens[self.next - 1]
    }
}

impl tantivy::tokenizer::Tokenizer for StemmingTokenizer {
    type TokenStream<'a> = TokensOf<'a>;
    fn token_stream<'a>(&'a mut self, text: &'a str) -> TokensOf<'a> {
        self.analyze(text);
        TokensOf {
            tokens: &mut self.tokens[..self.len],
            next: 0,
        }
    }
}

/// Words a question is mostly made of, which say little about what it asks for; left out of
/// queries that have other words (BM25 gives them little weight anyway, but they match most
/// entries, which is what makes a query slow).
const STOPWORDS: &[&str] = &[
    "a", "about", "after", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be",
    "been", "before", "being", "but", "by", "can", "could", "did", "do", "does", "doing", "for",
    "from", "had", "has", "have", "having", "he", "her", "hers", "him", "his", "how", "i", "if",
    "in", "into", "is", "it", "its", "me", "my", "of", "on", "or", "our", "she", "so", "some",
    "than", "that", "the", "their", "them", "then", "there", "these", "they", "this", "those",
    "to", "was", "we", "were", "what", "when", "where", "which", "who", "whom", "why", "will",
    "with", "would", "you", "your",
];

fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let text = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(TOKENIZER)
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

/// The last position in the index queue.
pub(crate) fn newest_queued(conn: &Connection) -> Result<i64, MemoryError> {
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
    ) -> Result<(), MemoryError> {
        self.writer
            .add_document(
                self.index
                    .document(rowid, content, session, source, created_at),
            )
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

impl TextIndex {
    /// Opens (or creates) the index in `dir`.
    pub(crate) fn open(dir: &Path) -> Result<Self, MemoryError> {
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
    pub(crate) fn in_ram() -> Result<Self, MemoryError> {
        let (schema, fields) = schema();
        Self::with_index(Index::create_in_ram(schema), fields)
    }

    fn with_index(index: Index, fields: Fields) -> Result<Self, MemoryError> {
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
    fn settle(&self, conn: &mut Connection) -> Result<(), MemoryError> {
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
    fn writer(&self, pending: i64) -> Result<IndexWriter, MemoryError> {
        // Another process may be writing: wait for its lock as SQLite waits for its own.
        let started = Instant::now();
        let (threads, heap) = if pending < 20_000 {
            (1, 20 << 20)
        } else {
            (
                std::thread::available_parallelism().map_or(1, |n| n.get().min(4)),
                WRITER_HEAP,
            )
        };
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
    pub(crate) fn catch_up(&self, conn: &mut Connection, wait: bool) -> Result<usize, MemoryError> {
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
    ) -> Result<(), MemoryError> {
        let mut commit = writer.prepare_commit().map_err(index_error)?;
        commit.set_payload(&format!("{}:{applied}", self.store_id()));
        commit.commit().map_err(index_error)?;
        writer.wait_merging_threads().map_err(index_error)?;
        self.after_commit(conn, applied)
    }

    /// After a commit up to queue position `applied`: what the index holds leaves the queue
    /// (a crash here only leaves it longer) and searches see the commit.
    fn after_commit(&self, conn: &mut Connection, applied: i64) -> Result<(), MemoryError> {
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
    ) -> TantivyDocument {
        let f = self.fields;
        let mut doc = TantivyDocument::default();
        doc.add_u64(f.rowid, rowid as u64);
        doc.add_text(f.content, content);
        if let Some(session) = session {
            doc.add_text(f.session, session);
        }
        doc.add_text(f.source, source);
        doc.add_i64(f.created_at, created_at);
        doc
    }

    /// An indexer for the rows the write transaction `tx` inserts, working while the
    /// transaction does (on tantivy's thread) and committed after it: what consolidation uses
    /// for its summaries, so that indexing them does not wait for the writes to end. `None`
    /// when the index has not applied everything queued before this transaction, or another
    /// process holds the index's writer: the rows are then indexed from the queue later, as
    /// every other write's are.
    pub(crate) fn inline(&self, tx: &Connection) -> Result<Option<Inline<'_>>, MemoryError> {
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
        let writer = match self
            .index
            .writer_with_num_threads::<TantivyDocument>(1, 20 << 20)
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

    /// The query's words as the index spells them (lowercased, stemmed), without the
    /// stopwords unless nothing else is left.
    fn terms(&self, text: &str) -> Vec<String> {
        let kept: Vec<&str> = words(text)
            .map(|(_, w)| w)
            .filter(|w| !STOPWORDS.contains(&w.to_lowercase().as_str()))
            .collect();
        let text = if kept.is_empty() {
            text.to_owned()
        } else {
            kept.join(" ")
        };
        let mut analyzer = self.analyzer.lock().unwrap_or_else(|p| p.into_inner());
        analyzer.analyze(&text);
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
                query.since.map_or(Bound::Unbounded, |t| {
                    Bound::Included(Term::from_field_i64(f.created_at, t))
                }),
                query.until.map_or(Bound::Unbounded, |t| {
                    Bound::Excluded(Term::from_field_i64(f.created_at, t))
                }),
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
        let mut fetch = (query.limit * 2).max(16);
        let mut get = conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM {MEMORY} WHERE m.rowid = ?1"
            ))
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
