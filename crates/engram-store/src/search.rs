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

/// Memory a bulk index writer may use before it writes segments (shared by its threads). A
/// million entries make four segments of it: below the merge policy's eight, so an import
/// writes its postings once (with half of it, the import wrote twenty segments and merged
/// them, a tenth of its time, and its peak memory was no lower).
const WRITER_HEAP: usize = 192 << 20;
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

/// The name the tokenizer is registered under. It is part of the schema: an index written
/// with another tokenizer (engram's first, which indexed stopwords) is rebuilt on open.
const TOKENIZER: &str = "engram-2";
/// Words longer than this are not indexed (tantivy's default: base64, hashes).
const MAX_WORD: usize = 40;

/// Words, lowercased and stemmed (English Porter2), without [`STOPWORDS`], with a cache of
/// stems: stemming was a third of indexing time, and text repeats its words. Stopwords are a
/// third of the words of the memory the benchmarks import; a query leaves them out anyway, and
/// indexing them was a third of the postings to build.
#[derive(Clone)]
struct StemmingTokenizer {
    stemmer: std::sync::Arc<rust_stemmers::Stemmer>,
    /// Made on first use (tantivy clones the tokenizer for every segment it writes, and a
    /// clone of an unused tokenizer should cost nothing).
    cache: Option<Box<[StemSlot]>>,
    lower: String,
    tokens: Vec<tantivy::tokenizer::Token>,
    /// Tokens of the last text (the vector keeps more, for reuse).
    len: usize,
}

/// Slots in the stem cache. Direct-mapped: a word's hash picks its one slot, which holds the
/// word and its stem inline, so a hit reads one cache line (a hash map of strings chased two
/// pointers per word, and missed the processor's caches on most of them).
const STEM_SLOTS: usize = 1 << 15;
/// Longest word (in bytes, lowercased) the cache holds; longer ones are stemmed every time.
const CACHED_WORD: usize = 15;

/// One word and its stem (a word length of 0: an empty slot; a stem length of
/// [`StemSlot::STOPWORD`]: the word is a stopword).
#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct StemSlot {
    word_len: u8,
    stem_len: u8,
    word: [u8; CACHED_WORD],
    stem: [u8; CACHED_WORD],
}

impl StemSlot {
    const EMPTY: StemSlot = StemSlot {
        word_len: 0,
        stem_len: 0,
        word: [0; CACHED_WORD],
        stem: [0; CACHED_WORD],
    };
    const STOPWORD: u8 = u8::MAX;
}

/// True when `word` (lowercased) is one of [`STOPWORDS`].
fn is_stopword(word: &[u8]) -> bool {
    // The short ones, which are most of the stopwords in a text, by a bit per pair of bytes.
    static SHORT: std::sync::LazyLock<Box<[u64]>> = std::sync::LazyLock::new(|| {
        let mut bits = vec![0u64; (1 << 16) / 64];
        for w in STOPWORDS
            .iter()
            .map(|w| w.as_bytes())
            .filter(|w| w.len() <= 2)
        {
            let key = short_key(w);
            bits[key / 64] |= 1 << (key % 64);
        }
        bits.into_boxed_slice()
    });
    fn short_key(w: &[u8]) -> usize {
        usize::from(w[0]) << 8 | usize::from(w.get(1).copied().unwrap_or(0))
    }
    match word.len() {
        0 => false,
        1 | 2 => {
            let key = short_key(word);
            SHORT[key / 64] & (1 << (key % 64)) != 0
        }
        _ => STOPWORDS
            .binary_search_by(|w| w.as_bytes().cmp(word))
            .is_ok(),
    }
}

impl Default for StemmingTokenizer {
    fn default() -> Self {
        StemmingTokenizer {
            stemmer: std::sync::Arc::new(rust_stemmers::Stemmer::create(
                rust_stemmers::Algorithm::English,
            )),
            cache: None,
            lower: String::new(),
            tokens: Vec::new(),
            len: 0,
        }
    }
}

/// True when Porter2 leaves `word` (lowercased) as it is, without asking it: words of one or
/// two letters, and numbers (the algorithm only rewrites letters). The test
/// `stems_skipped_are_the_stemmers_own` holds this to the stemmer.
fn stem_is_word(word: &[u8]) -> bool {
    word.len() <= 2 || word.iter().all(u8::is_ascii_digit)
}

impl StemmingTokenizer {
    /// Splits `text` into stemmed words with their offsets (token strings are reused).
    fn analyze(&mut self, text: &str) {
        let mut n = 0;
        for (from, word) in words(text) {
            if word.len() > MAX_WORD {
                continue;
            }
            self.lower.clear();
            if word.is_ascii() {
                self.lower.push_str(word);
                self.lower.make_ascii_lowercase();
            } else {
                self.lower.extend(word.chars().flat_map(char::to_lowercase));
            }
            if n == self.tokens.len() {
                self.tokens.push(tantivy::tokenizer::Token::default());
            }
            let token = &mut self.tokens[n];
            token.text.clear();
            let lower = self.lower.as_bytes();
            if stem_is_word(lower) {
                if is_stopword(lower) {
                    continue;
                }
                token.text.push_str(&self.lower);
            } else if lower.len() > CACHED_WORD {
                // (No stopword is this long.)
                token.text.push_str(&self.stemmer.stem(&self.lower));
            } else {
                let cache = self
                    .cache
                    .get_or_insert_with(|| vec![StemSlot::EMPTY; STEM_SLOTS].into_boxed_slice());
                let slot = &mut cache[fx_hash(lower) as usize & (STEM_SLOTS - 1)];
                if usize::from(slot.word_len) != lower.len() || slot.word[..lower.len()] != *lower {
                    slot.word_len = lower.len() as u8;
                    slot.word[..lower.len()].copy_from_slice(lower);
                    if is_stopword(lower) {
                        slot.stem_len = StemSlot::STOPWORD;
                        continue;
                    }
                    // Porter2 never makes a word longer.
                    let stem = self.stemmer.stem(&self.lower);
                    let len = stem.len().min(CACHED_WORD);
                    slot.stem_len = len as u8;
                    slot.stem[..len].copy_from_slice(&stem.as_bytes()[..len]);
                    if len < stem.len() {
                        slot.word_len = 0;
                    }
                    token.text.push_str(&stem);
                } else if slot.stem_len == StemSlot::STOPWORD {
                    continue;
                } else {
                    let stem = &slot.stem[..usize::from(slot.stem_len)];
                    // The slot's bytes were copied from a `str` (the stemmer's output).
                    token
                        .text
                        .push_str(std::str::from_utf8(stem).unwrap_or_default());
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

fn fx_hash(bytes: &[u8]) -> u64 {
    use std::hash::Hasher;
    let mut h = rustc_hash::FxHasher::default();
    h.write(bytes);
    h.finish()
}

/// Runs of alphanumeric characters with their byte offsets (tantivy's simple tokenizer's rule),
/// read a byte at a time where the text is ASCII.
fn words(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let bytes = text.as_bytes();
    let mut i = 0;
    // Whether the character at `at` is alphanumeric, and its length in bytes.
    let alnum_at = move |at: usize| -> (bool, usize) {
        let b = bytes[at];
        if b < 0x80 {
            (b.is_ascii_alphanumeric(), 1)
        } else {
            let c = text[at..]
                .chars()
                .next()
                .unwrap_or(char::REPLACEMENT_CHARACTER);
            (c.is_alphanumeric(), c.len_utf8())
        }
    };
    std::iter::from_fn(move || {
        loop {
            if i >= bytes.len() {
                return None;
            }
            let (alnum, len) = alnum_at(i);
            if alnum {
                break;
            }
            i += len;
        }
        let start = i;
        while i < bytes.len() {
            let (alnum, len) = alnum_at(i);
            if !alnum {
                break;
            }
            i += len;
        }
        Some((start, &text[start..i]))
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

/// Words a question is mostly made of, which say little about what it asks for; neither
/// indexed nor searched (BM25 gives them little weight anyway, but they match most entries,
/// which is what made a query slow). Sorted, for a binary search.
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
        // A fast field only: a range query over a fast field reads its column, and an indexed
        // time would add a term of its own to the index for nearly every entry.
        created_at: b.add_i64_field("created_at", FAST),
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
    /// `bulk` asks for a writer sized for an import (every core, a large arena) rather than
    /// for a few rows.
    pub(crate) fn inline(
        &self,
        tx: &Connection,
        bulk: bool,
    ) -> Result<Option<Inline<'_>>, MemoryError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The analyzer without its shortcuts: every word split by `char::is_alphanumeric`,
    /// lowercased and stemmed.
    fn plain(text: &str) -> Vec<(String, usize, usize)> {
        let stemmer = rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English);
        let mut out = Vec::new();
        let mut word = String::new();
        let mut from = 0;
        for (i, c) in text.char_indices().chain([(text.len(), ' ')]) {
            if c.is_alphanumeric() && i < text.len() {
                if word.is_empty() {
                    from = i;
                }
                word.push(c);
            } else if !word.is_empty() {
                let lower: String = word.chars().flat_map(char::to_lowercase).collect();
                if word.len() <= MAX_WORD && !STOPWORDS.contains(&lower.as_str()) {
                    out.push((stemmer.stem(&lower).into_owned(), from, i));
                }
                word.clear();
            }
        }
        out
    }

    fn analyzed(analyzer: &mut StemmingTokenizer, text: &str) -> Vec<(String, usize, usize)> {
        analyzer.analyze(text);
        analyzer.tokens[..analyzer.len]
            .iter()
            .enumerate()
            .map(|(i, t)| {
                assert_eq!(t.position, i);
                (t.text.clone(), t.offset_from, t.offset_to)
            })
            .collect()
    }

    #[test]
    fn stopwords_are_sorted_and_found() {
        assert!(STOPWORDS.windows(2).all(|w| w[0] < w[1]));
        for w in STOPWORDS {
            assert!(is_stopword(w.as_bytes()), "{w}");
            assert!(w.len() <= CACHED_WORD);
        }
        for w in [
            "", "b", "ab", "zz", "x1", "th", "thee", "abouts", "whos", "ı",
        ] {
            assert!(!is_stopword(w.as_bytes()), "{w}");
        }
    }

    #[test]
    fn stems_skipped_are_the_stemmers_own() {
        let stemmer = rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English);
        let mut words: Vec<String> = Vec::new();
        let alnum: Vec<char> = ('a'..='z').chain('0'..='9').collect();
        for a in &alnum {
            words.push(a.to_string());
            for b in &alnum {
                words.push(format!("{a}{b}"));
                // Three letters: not skipped (these the stemmer does change: "abs", "its").
                for c in &alnum {
                    words.push(format!("{a}{b}{c}"));
                }
            }
        }
        // Every lowercase letter or digit of two bytes, alone.
        words.extend(
            ('\u{80}'..='\u{7ff}')
                .filter(|c| c.is_alphanumeric() && !c.is_uppercase())
                .map(String::from),
        );
        for n in 3..=MAX_WORD {
            words.push("1234567890".repeat(5)[..n].to_owned());
            words.push("9".repeat(n));
        }
        for word in &words {
            if stem_is_word(word.as_bytes()) {
                assert_eq!(stemmer.stem(word), word.as_str(), "{word}");
            }
        }
    }

    #[test]
    fn the_analyzer_reads_text_as_the_plain_rule_does() {
        let mut analyzer = StemmingTokenizer::default();
        for text in [
            "",
            "The agents were RUNNING tests; 2 failures in src/lib.rs:120 (retrying...)",
            "Über-naïve café façade: İstanbul ΣΊΣΥΦΟΣ straße ﬁnal 東京タワー ١٢٣",
            "happily happy happiness generously generalization generalizations",
            "x y z 12 345 67890 0x7fffabcd deadbeefdeadbeefdeadbeefdeadbeefdeadbeefdeadbeef",
            "The THE the; To be or not to be: that is the question. Who? WHOM, whose, whom",
            "the",
            "a an the of",
        ] {
            assert_eq!(analyzed(&mut analyzer, text), plain(text), "{text}");
        }
    }

    proptest! {
        /// Whatever the text, and whatever an earlier text left in the cache.
        #[test]
        fn the_analyzer_matches_the_plain_rule_on_any_text(
            texts in proptest::collection::vec(
                prop_oneof![
                    "[a-zA-Z0-9 éÉßİ_.,-]{0,120}",
                    "(run|runs|running|ran|RUN|the|The|a|an|whom|généralement|x1|22|happy) {0,3}{0,40}",
                    any::<String>(),
                ],
                1..8,
            )
        ) {
            let mut analyzer = StemmingTokenizer::default();
            for text in &texts {
                prop_assert_eq!(analyzed(&mut analyzer, text), plain(text));
            }
        }
    }
}
