//! The PostgreSQL backend (feature `postgres`): the same [`MemoryStore`] and [`SessionStore`]
//! as SQLite, for several `engram serve` processes sharing one database.
//!
//! Every table has a `tenant` column and every query is scoped to the store's tenant, so one
//! database holds many tenants that cannot see each other. The tables are named `engram_*` and
//! live in the connection's current schema (`?options=-c%20search_path%3DNAME` picks another).
//!
//! Safety with several servers:
//! - sleep claims each group's entries with `SELECT ... FOR UPDATE SKIP LOCKED`: a group whose
//!   entries another server holds or has consolidated already is skipped, so no group is
//!   consolidated twice and no server waits on another;
//! - the automatic sleep is claimed with one atomic upsert (`claim_sleep`);
//! - appends, compactions, checkpoints and restores lock the session's row (`FOR UPDATE`), so
//!   sequence numbers and epochs stay in order whichever server writes;
//! - the schema is created and migrated under an advisory lock, once, however many servers
//!   start together.
//!
//! Search uses PostgreSQL's full-text search (the `engram_english` configuration, a GIN index)
//! to find the entries with any of the query's words, and ranks them by BM25 as the other
//! backends do: the words' document frequencies counted over the entries the search admits (its
//! tiers, session, source and times, as the in-memory store counts them), each word's count in
//! an entry read from the entry's positions.
//!
//! [`SessionStore`]: engram::session::SessionStore

mod calibration;
mod pool;
mod schema;
mod sessions;
mod timeline;
mod views;

use std::sync::Arc;

use engram::embed::{TextHash, VectorStore, vector_from_bytes, vector_to_bytes};
use engram::memory::{
    Consolidation, ConsolidationRecord, Forget, Forgotten, Inserted, MemoryEntry, MemoryStore,
    NewEntry, SearchHit, SearchQuery, Stats, Tier, Timestamp, empty_forget, new_id,
};
use engram::retrieval::bm25::{BM25_B, BM25_K1, bm25_idf, bm25_weight};
use postgres::Transaction;
use postgres::error::SqlState;
use postgres::types::ToSql;
use serde_json::Value;

pub use pool::{DEFAULT_POOL_SIZE, Pool};
pub use schema::SCHEMA_VERSION;

/// One tenant's view of a PostgreSQL database.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: Arc<Pool>,
    tenant: String,
}

pub(crate) fn pg(e: postgres::Error) -> engram::Error {
    engram::Error::Backend(format!("PostgreSQL: {}", pool::describe(&e)))
}

pub(crate) fn is_unique_violation(e: &postgres::Error) -> bool {
    e.code() == Some(&SqlState::UNIQUE_VIOLATION)
}

impl PostgresStore {
    /// Connects to `url` (at most `DEFAULT_POOL_SIZE` connections), creates or migrates
    /// the schema, and returns `tenant`'s store. A database whose `engram_*` tables are not
    /// engram's, or were written by a newer engram, is refused and left untouched.
    pub fn connect(url: &str, tenant: &str) -> Result<Self, engram::Error> {
        let pool = Pool::connect(url, DEFAULT_POOL_SIZE)?;
        Self::with_pool(pool, tenant)
    }

    /// `tenant`'s store on an existing pool (the schema is checked, and created when missing).
    pub fn with_pool(pool: Arc<Pool>, tenant: &str) -> Result<Self, engram::Error> {
        if tenant.is_empty() {
            return Err(engram::Error::Rejected(
                "a tenant's name cannot be empty".into(),
            ));
        }
        schema::migrate(&pool)?;
        Ok(PostgresStore {
            pool,
            tenant: tenant.to_owned(),
        })
    }

    /// Another tenant's store on the same connections.
    pub fn for_tenant(&self, tenant: &str) -> Result<Self, engram::Error> {
        if tenant.is_empty() {
            return Err(engram::Error::Rejected(
                "a tenant's name cannot be empty".into(),
            ));
        }
        Ok(PostgresStore {
            pool: Arc::clone(&self.pool),
            tenant: tenant.to_owned(),
        })
    }

    /// The tenant this store reads and writes.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The connections (shared by every tenant's store made from this one).
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// Deletes everything of this tenant: memory, the consolidation log, sessions. Returns the
    /// rows deleted.
    pub fn delete_tenant(&self) -> Result<u64, engram::Error> {
        let mut conn = self.pool.get()?;
        let mut tx = conn.transaction().map_err(pg)?;
        let mut rows = 0;
        for table in [
            "engram_memory",
            "engram_consolidation_log",
            "engram_session",
            "engram_meta",
            "engram_vector",
            "engram_proxy_view",
            "engram_count_calibration",
        ] {
            rows += tx
                .execute(
                    &format!("DELETE FROM {table} WHERE tenant = $1"),
                    &[&self.tenant],
                )
                .map_err(pg)?;
        }
        tx.commit().map_err(pg)?;
        Ok(rows)
    }

    fn tx<T>(
        &self,
        f: impl FnOnce(&mut Transaction<'_>) -> Result<T, engram::Error>,
    ) -> Result<T, engram::Error> {
        let mut conn = self.pool.get()?;
        let mut tx = conn.transaction().map_err(pg)?;
        // An error returns before the commit: dropping the transaction rolls it back.
        let out = f(&mut tx)?;
        tx.commit().map_err(pg)?;
        Ok(out)
    }
}

const COLUMNS: &str =
    "id, tier, content, source, session_id, created_at, importance, metadata, summary_of::text";

fn row_to_entry(row: &postgres::Row) -> MemoryEntry {
    let tier: String = row.get(1);
    let metadata: Option<String> = row.get(7);
    let summary_of: Option<String> = row.get(8);
    MemoryEntry {
        id: row.get(0),
        tier: Tier::parse(&tier).unwrap_or(Tier::Working),
        content: row.get(2),
        source: row.get(3),
        session_id: row.get(4),
        created_at: row.get(5),
        importance: row.get(6),
        metadata: Value::Null,
        summary_of: Vec::new(),
    }
    .with_stored_json(metadata.as_deref(), summary_of.as_deref())
}

/// Entries per round trip when inserting.
const INSERT_BATCH: usize = 1_000;

/// Inserts entries (ids already stored are skipped) in the caller's transaction; returns how
/// many were new. `summary_of` overrides the entries' own lineage (for a consolidation).
fn insert_entries(
    tx: &mut Transaction<'_>,
    tenant: &str,
    entries: &[&NewEntry],
    ids: &[String],
    summary_of: Option<&[String]>,
) -> Result<u64, engram::Error> {
    let mut inserted = 0;
    let statement = tx
        .prepare(
            "INSERT INTO engram_memory (tenant, id, tier, content, source, session_id, created_at, importance, metadata, summary_of)
             SELECT $1, u.id, u.tier, u.content, u.source, u.session_id, u.created_at, u.importance, u.metadata, u.summary_of::jsonb
             FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::int8[], $8::float8[], $9::text[], $10::text[])
                 AS u(id, tier, content, source, session_id, created_at, importance, metadata, summary_of)
             ON CONFLICT (tenant, id) DO NOTHING",
        )
        .map_err(pg)?;
    for (chunk, chunk_ids) in entries.chunks(INSERT_BATCH).zip(ids.chunks(INSERT_BATCH)) {
        let mut tier = Vec::with_capacity(chunk.len());
        let mut content = Vec::with_capacity(chunk.len());
        let mut source = Vec::with_capacity(chunk.len());
        let mut session = Vec::with_capacity(chunk.len());
        let mut created = Vec::with_capacity(chunk.len());
        let mut importance = Vec::with_capacity(chunk.len());
        let mut metadata = Vec::with_capacity(chunk.len());
        let mut lineage = Vec::with_capacity(chunk.len());
        for e in chunk {
            tier.push(e.tier.as_str());
            content.push(e.content.as_str());
            source.push(e.source.as_str());
            session.push(e.session_id.as_deref());
            created.push(e.created_at);
            importance.push(e.importance);
            metadata.push((!e.metadata.is_null()).then(|| e.metadata.to_string()));
            let of = summary_of.unwrap_or(&e.summary_of);
            lineage.push((!of.is_empty()).then(|| serde_json::to_string(of).unwrap_or_default()));
        }
        inserted += tx
            .execute(
                &statement,
                &[
                    &tenant,
                    &chunk_ids,
                    &tier,
                    &content,
                    &source,
                    &session,
                    &created,
                    &importance,
                    &metadata,
                    &lineage,
                ],
            )
            .map_err(pg)?;
    }
    Ok(inserted)
}

/// PostgreSQL's text cannot hold NUL characters: such an entry is refused by its index.
fn check_storable(index: usize, e: &NewEntry) -> Result<(), engram::Error> {
    for (field, text) in [("content", &e.content), ("source", &e.source)] {
        if text.contains('\0') {
            return Err(engram::Error::Rejected(format!(
                "entry {index}, field `{field}`: contains a NUL character, which PostgreSQL cannot store; nothing was inserted"
            )));
        }
    }
    Ok(())
}

impl PostgresStore {
    fn insert_all(
        &self,
        entries: &mut dyn Iterator<Item = Result<NewEntry, engram::Error>>,
    ) -> Result<Inserted, engram::Error> {
        self.tx(|tx| {
            let mut out = Inserted::default();
            let mut batch: Vec<NewEntry> = Vec::with_capacity(INSERT_BATCH);
            let mut flush = |tx: &mut Transaction<'_>,
                             batch: &mut Vec<NewEntry>|
             -> Result<(), engram::Error> {
                if batch.is_empty() {
                    return Ok(());
                }
                let ids: Vec<String> = batch
                    .iter()
                    .map(|e| e.id.clone().unwrap_or_else(|| new_id("mem")))
                    .collect();
                let refs: Vec<&NewEntry> = batch.iter().collect();
                let n = insert_entries(tx, &self.tenant, &refs, &ids, None)? as usize;
                out.inserted += n;
                out.skipped += batch.len() - n;
                batch.clear();
                Ok(())
            };
            for (index, e) in entries.enumerate() {
                let e = e?;
                check_storable(index, &e)?;
                batch.push(e);
                if batch.len() == INSERT_BATCH {
                    flush(tx, &mut batch)?;
                }
            }
            flush(tx, &mut batch)?;
            Ok(out)
        })
    }
}

/// What a memory search admits besides its words: the tenant (`$1`), the tiers (`$3`), and the
/// session, source and times (`$4` to `$7`) when given.
const SEARCH_FILTERS: &str = "tenant = $1 AND tier = ANY($3)
    AND ($4::text IS NULL OR session_id = $4)
    AND ($5::text IS NULL OR source = $5)
    AND ($6::int8 IS NULL OR created_at >= $6)
    AND ($7::int8 IS NULL OR created_at < $7)";

/// The query's words: letters and digits only, so nothing in the text is query syntax, and no
/// stop word ([`engram::retrieval::words::is_stopword`]): the index keeps every word, so the query decides
/// which count, by recall's list. At most 64, each once.
fn query_words(text: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let word = word.to_lowercase();
        if !engram::retrieval::words::is_stopword(&word) && !words.contains(&word) {
            words.push(word);
        }
        if words.len() == 64 {
            break;
        }
    }
    words
}

impl VectorStore for PostgresStore {
    fn vectors(
        &self,
        model: &str,
        hashes: &[TextHash],
    ) -> Result<Vec<Option<Vec<f32>>>, engram::Error> {
        if hashes.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<&[u8]> = hashes.iter().map(|h| &h[..]).collect();
        let rows = self
            .pool
            .get()?
            .query(
                "SELECT hash, vector FROM engram_vector
                 WHERE tenant = $1 AND model = $2 AND hash = ANY($3)",
                &[&self.tenant, &model, &keys],
            )
            .map_err(pg)?;
        let found: std::collections::HashMap<Vec<u8>, Vec<u8>> =
            rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        Ok(hashes
            .iter()
            .map(|h| found.get(&h[..]).map(|bytes| vector_from_bytes(bytes)))
            .collect())
    }

    fn put_vectors(
        &self,
        model: &str,
        vectors: &[(TextHash, &[f32])],
    ) -> Result<(), engram::Error> {
        if vectors.is_empty() {
            return Ok(());
        }
        // One statement: all of them or none.
        put_vectors_in(&mut *self.pool.get()?, &self.tenant, model, vectors)
    }
}

/// Keeps the tenant's `vectors` under `model` in one statement (a hash kept keeps its vector).
pub(crate) fn put_vectors_in(
    client: &mut impl postgres::GenericClient,
    tenant: &str,
    model: &str,
    vectors: &[(TextHash, &[f32])],
) -> Result<(), engram::Error> {
    let keys: Vec<&[u8]> = vectors.iter().map(|(h, _)| &h[..]).collect();
    let values: Vec<Vec<u8>> = vectors.iter().map(|(_, v)| vector_to_bytes(v)).collect();
    client
        .execute(
            "INSERT INTO engram_vector (tenant, model, hash, vector)
             SELECT $1, $2, h, v FROM unnest($3::bytea[], $4::bytea[]) AS t(h, v)
             ON CONFLICT DO NOTHING",
            &[&tenant, &model, &keys, &values],
        )
        .map_err(pg)?;
    Ok(())
}

impl MemoryStore for PostgresStore {
    fn insert(&self, entries: &[NewEntry]) -> Result<Inserted, engram::Error> {
        self.insert_all(&mut entries.iter().cloned().map(Ok))
    }

    fn insert_stream(
        &self,
        entries: &mut dyn Iterator<Item = Result<NewEntry, engram::Error>>,
    ) -> Result<Inserted, engram::Error> {
        self.insert_all(entries)
    }

    fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, engram::Error> {
        let words = query_words(&query.text);
        if words.is_empty() || query.limit == 0 {
            return Ok(Vec::new());
        }
        let mut client = self.pool.get()?;
        let tiers: Vec<&str> = query.tiers().iter().map(|t| t.as_str()).collect();
        // BM25's inverse document frequencies: each query word's stem as the index holds it,
        // how many of the entries the filters admit hold it, and how many they admit (counted
        // only when a word is held), as the in-memory store counts them. A search confined to
        // a session counts within it. (SQLite's index counts over all its entries: its counts
        // are stored, where these would read every entry of the tenant.)
        let stats = client
            .query(
                &format!(
                    "WITH counted AS (
                         SELECT l, (SELECT count(*) FROM engram_memory
                                    WHERE {SEARCH_FILTERS}
                                      AND tsv @@ quote_literal(l)::tsquery) AS df
                         FROM unnest(tsvector_to_array(
                             to_tsvector('engram_english'::regconfig, $2))) AS l)
                     SELECT l, df,
                            CASE WHEN (SELECT max(df) FROM counted) > 0 THEN
                                (SELECT count(*) FROM engram_memory WHERE {SEARCH_FILTERS})
                            END
                     FROM counted"
                ),
                &[
                    &self.tenant,
                    &words.join(" "),
                    &tiers,
                    &query.session_id,
                    &query.source,
                    &query.since,
                    &query.until,
                ],
            )
            .map_err(pg)?;
        let (mut stems, mut dfs, mut idfs) = (Vec::new(), Vec::new(), Vec::new());
        let mut n = 0.0;
        for row in &stats {
            let df = row.get::<_, i64>(1) as f64;
            if df > 0.0 {
                n = row.get::<_, Option<i64>>(2).unwrap_or_default() as f64;
                stems.push(row.get::<_, String>(0));
                dfs.push(df);
                idfs.push(bm25_idf(n, df));
            }
        }
        if stems.is_empty() {
            return Ok(Vec::new());
        }
        let limit = query.clamped_limit();
        // The matching entries are first ranked as if each held each of its words once (cheap:
        // no entry's words are listed), and the best of them are scored by BM25
        // ([`bm25_weight`]) from each word's count, read from the entry's positions. An entry's
        // length is weighed against the average of the entries that match. The first ranking
        // is one sum of a term per word, whose stem and weight PostgreSQL folds into constants
        // when it plans, so ranking a match costs one test of its words per query word and
        // nothing is held aside but the best rows. The average is computed once (materialized: inlined, a planner
        // short of statistics may compute it again for every match).
        let firsts = (limit as i64 * 10).max(100);
        let held_weights = (1..=stems.len())
            .map(|i| {
                format!(
                    "CASE WHEN tsv @@ quote_literal(($8::text[])[{i}])::tsquery \
                     THEN ($9::float8[])[{i}] ELSE 0 END"
                )
            })
            .collect::<Vec<_>>()
            .join(" + ");
        let rows = client
            .query(
                &format!(
                    "WITH averaged AS MATERIALIZED (
                         SELECT avg(length(tsv))::float8 AS avg_len FROM engram_memory
                         WHERE {SEARCH_FILTERS}
                           AND tsv @@ to_tsquery('engram_english'::regconfig, $2))
                     SELECT {COLUMNS}, length(tsv)::float8, avg_len,
                            ARRAY(SELECT u.lexeme FROM unnest(tsv) AS u
                                  WHERE u.lexeme = ANY($8) ORDER BY u.lexeme),
                            ARRAY(SELECT greatest(cardinality(u.positions), 1)::float8
                                  FROM unnest(tsv) AS u
                                  WHERE u.lexeme = ANY($8) ORDER BY u.lexeme)
                     FROM engram_memory, averaged
                     WHERE {SEARCH_FILTERS}
                       AND tsv @@ to_tsquery('engram_english'::regconfig, $2)
                     ORDER BY ({held_weights})
                              / (1 + {K1} * (1 - {B} + {B} * length(tsv)::float8 / avg_len)) DESC,
                              created_at DESC, id
                     LIMIT $10",
                    K1 = BM25_K1,
                    B = BM25_B,
                ),
                &[
                    &self.tenant,
                    &words.join(" | "),
                    &tiers,
                    &query.session_id,
                    &query.source,
                    &query.since,
                    &query.until,
                    &stems,
                    &idfs,
                    &firsts,
                ],
            )
            .map_err(pg)?;
        let mut hits: Vec<SearchHit> = rows
            .iter()
            .map(|r| {
                let (len, avg_len): (f64, f64) = (r.get(9), r.get(10));
                let held: Vec<String> = r.get(11);
                let counts: Vec<f64> = r.get(12);
                let score = held
                    .iter()
                    .zip(counts)
                    .filter_map(|(stem, f)| {
                        let i = stems.iter().position(|s| s == stem)?;
                        Some(bm25_weight(n, dfs[i], f, len, avg_len))
                    })
                    .sum();
                SearchHit {
                    entry: row_to_entry(r),
                    score,
                }
            })
            .collect();
        SearchHit::best_first(&mut hits, limit);
        Ok(hits)
    }

    fn get(&self, id: &str) -> Result<Option<MemoryEntry>, engram::Error> {
        Ok(self
            .pool
            .get()?
            .query_opt(
                &format!("SELECT {COLUMNS} FROM engram_memory WHERE tenant = $1 AND id = $2"),
                &[&self.tenant, &id],
            )
            .map_err(pg)?
            .map(|r| row_to_entry(&r)))
    }

    fn stats(&self) -> Result<Stats, engram::Error> {
        let rows = self
            .pool
            .get()?
            .query(
                "SELECT tier, count(*) FROM engram_memory WHERE tenant = $1 GROUP BY tier",
                &[&self.tenant],
            )
            .map_err(pg)?;
        let mut stats = Stats::default();
        for r in rows {
            let tier: String = r.get(0);
            let n = r.get::<_, i64>(1) as usize;
            match Tier::parse(&tier) {
                Some(Tier::Working) => stats.working = n,
                Some(Tier::Episodic) => stats.episodic = n,
                Some(Tier::Archive) => stats.archive = n,
                Some(Tier::Learning) => stats.learnings = n,
                Some(Tier::Journal) => stats.journal = n,
                None => {}
            }
        }
        Ok(stats)
    }

    fn working_count(&self) -> Result<usize, engram::Error> {
        let row = self
            .pool
            .get()?
            .query_one(
                "SELECT count(*) FROM engram_memory WHERE tenant = $1 AND tier = 'working'",
                &[&self.tenant],
            )
            .map_err(pg)?;
        Ok(row.get::<_, i64>(0) as usize)
    }

    fn working_before(
        &self,
        before: Timestamp,
        limit: usize,
    ) -> Result<Vec<MemoryEntry>, engram::Error> {
        let limit = limit.min(i64::MAX as usize) as i64;
        let rows = self
            .pool
            .get()?
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM engram_memory
                     WHERE tenant = $1 AND tier = 'working' AND created_at < $2
                     ORDER BY created_at, id LIMIT $3"
                ),
                &[&self.tenant, &before, &limit],
            )
            .map_err(pg)?;
        Ok(rows.iter().map(row_to_entry).collect())
    }

    fn oldest_working(&self, n: usize) -> Result<Vec<MemoryEntry>, engram::Error> {
        self.working_before(Timestamp::MAX, n)
    }

    fn consolidate(&self, c: &Consolidation) -> Result<ConsolidationRecord, engram::Error> {
        self.tx(|tx| consolidate_in(tx, &self.tenant, c))
    }

    fn consolidate_many(
        &self,
        consolidations: &[Consolidation],
    ) -> Result<Vec<ConsolidationRecord>, engram::Error> {
        self.tx(|tx| {
            let mut out = Vec::with_capacity(consolidations.len());
            for c in consolidations {
                // A group another server holds or has consolidated is skipped whole: the claim
                // comes before any change, so nothing of it needs undoing.
                match consolidate_in(tx, &self.tenant, c) {
                    Ok(record) => out.push(record),
                    Err(engram::Error::NotWorking(_)) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(out)
        })
    }

    fn log(&self, limit: usize) -> Result<Vec<ConsolidationRecord>, engram::Error> {
        let limit = limit.min(i64::MAX as usize) as i64;
        let rows = self
            .pool
            .get()?
            .query(
                "SELECT id, session_id, source, items_consolidated, summary_preview, created_at, strategy, model, duration_ms, ids_in, ids_out
                 FROM engram_consolidation_log WHERE tenant = $1 ORDER BY id DESC LIMIT $2",
                &[&self.tenant, &limit],
            )
            .map_err(pg)?;
        Ok(rows
            .iter()
            .map(|r| ConsolidationRecord {
                id: r.get(0),
                session_id: r.get(1),
                source: r.get(2),
                items_consolidated: r.get::<_, i64>(3) as usize,
                summary_preview: r.get(4),
                created_at: r.get(5),
                strategy: r.get(6),
                model: r.get(7),
                duration_ms: r.get(8),
                ids_in: serde_json::from_str(r.get(9)).unwrap_or_default(),
                ids_out: serde_json::from_str(r.get(10)).unwrap_or_default(),
            })
            .collect())
    }

    fn forget(&self, what: &Forget) -> Result<Forgotten, engram::Error> {
        if what.is_empty() {
            return Err(empty_forget());
        }
        self.tx(|tx| {
            forget_where(
                tx,
                &self.tenant,
                "($2::text IS NULL OR id = $2) AND ($3::text IS NULL OR session_id = $3) AND ($4::text IS NULL OR source = $4)",
                &[&what.id, &what.session_id, &what.source],
            )
        })
    }

    fn forget_all(&self) -> Result<Forgotten, engram::Error> {
        self.tx(|tx| {
            let entries = if has_vectors(tx, &self.tenant)? {
                let contents: Vec<String> = tx
                    .query(
                        "DELETE FROM engram_memory WHERE tenant = $1 RETURNING content",
                        &[&self.tenant],
                    )
                    .map_err(pg)?
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                forget_vectors(tx, &self.tenant, contents.iter().map(String::as_str))?;
                contents.len()
            } else {
                tx.execute(
                    "DELETE FROM engram_memory WHERE tenant = $1",
                    &[&self.tenant],
                )
                .map_err(pg)? as usize
            };
            tx.execute(
                "DELETE FROM engram_consolidation_log WHERE tenant = $1",
                &[&self.tenant],
            )
            .map_err(pg)?;
            Ok(Forgotten::everything(entries))
        })
    }

    fn delete_archived_before(&self, before: Timestamp) -> Result<Forgotten, engram::Error> {
        self.tx(|tx| {
            forget_where(
                tx,
                &self.tenant,
                "tier = 'archive' AND created_at < $2",
                &[&before],
            )
        })
    }

    fn meta(&self, key: &str) -> Result<Option<String>, engram::Error> {
        Ok(self
            .pool
            .get()?
            .query_opt(
                "SELECT value FROM engram_meta WHERE tenant = $1 AND key = $2",
                &[&self.tenant, &key],
            )
            .map_err(pg)?
            .map(|r| r.get(0)))
    }

    fn set_meta(&self, key: &str, value: &str) -> Result<(), engram::Error> {
        self.pool
            .get()?
            .execute(
                "INSERT INTO engram_meta (tenant, key, value) VALUES ($1, $2, $3)
                 ON CONFLICT (tenant, key) DO UPDATE SET value = excluded.value",
                &[&self.tenant, &key, &value],
            )
            .map_err(pg)?;
        Ok(())
    }

    fn claim_sleep(&self, now: Timestamp, interval_ms: i64) -> Result<bool, engram::Error> {
        // One statement: the row lock makes concurrent claims wait, then see the new time.
        let due_before = now.saturating_sub(interval_ms);
        let claimed = self
            .pool
            .get()?
            .query_opt(
                "INSERT INTO engram_meta (tenant, key, value) VALUES ($1, 'last_sleep_at', $2)
                 ON CONFLICT (tenant, key) DO UPDATE SET value = excluded.value
                 WHERE engram_meta.value::int8 <= $3
                 RETURNING 1",
                &[&self.tenant, &now.to_string(), &due_before],
            )
            .map_err(pg)?;
        Ok(claimed.is_some())
    }

    fn entries(
        &self,
        session_id: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<MemoryEntry>, engram::Error> {
        let limit = limit.min(i64::MAX as usize) as i64;
        let rows = self
            .pool
            .get()?
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM engram_memory
                     WHERE tenant = $1 AND ($2::text IS NULL OR session_id = $2) AND ($3::text IS NULL OR id > $3)
                     ORDER BY id LIMIT $4"
                ),
                &[&self.tenant, &session_id, &after, &limit],
            )
            .map_err(pg)?;
        Ok(rows.iter().map(row_to_entry).collect())
    }
}

/// Deletes the tenant's memory rows `condition` selects (its parameters from `$2`) and removes
/// their ids from the remaining summaries' `summary_of`, in the caller's transaction.
pub(crate) fn forget_where(
    tx: &mut Transaction<'_>,
    tenant: &str,
    condition: &str,
    args: &[&(dyn ToSql + Sync)],
) -> Result<Forgotten, engram::Error> {
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&tenant];
    params.extend_from_slice(args);
    // The texts come back only when their vectors may need forgetting.
    let with_texts = has_vectors(tx, tenant)?;
    let returning = if with_texts { "id, content" } else { "id" };
    let rows = tx
        .query(
            &format!(
                "DELETE FROM engram_memory WHERE tenant = $1 AND {condition} RETURNING {returning}"
            ),
            &params,
        )
        .map_err(pg)?;
    if rows.is_empty() {
        return Ok(Forgotten::default());
    }
    let doomed: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    if with_texts {
        forget_vectors(tx, tenant, rows.iter().map(|r| r.get::<_, &str>(1)))?;
    }
    let summaries_updated = tx
        .execute(
            "UPDATE engram_memory SET summary_of = summary_of - $2::text[]
             WHERE tenant = $1 AND summary_of IS NOT NULL AND summary_of ?| $2::text[]",
            &[&tenant, &doomed],
        )
        .map_err(pg)? as usize;
    Ok(Forgotten {
        entries: doomed.len(),
        summaries_updated,
    })
}

/// Whether the tenant keeps any vectors (hybrid search was used).
fn has_vectors(tx: &mut Transaction<'_>, tenant: &str) -> Result<bool, engram::Error> {
    Ok(tx
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM engram_vector WHERE tenant = $1)",
            &[&tenant],
        )
        .map_err(pg)?
        .get(0))
}

/// Forgets the tenant's vectors of these texts (memory entries being deleted, each whole and
/// by sentence: [`engram::memory::hybrid::vector_hashes`]), under every model, in the caller's
/// transaction. Another text with the same hash has its vector
/// computed again when next needed.
fn forget_vectors<'a>(
    tx: &mut Transaction<'_>,
    tenant: &str,
    texts: impl Iterator<Item = &'a str>,
) -> Result<(), engram::Error> {
    let hashes: Vec<TextHash> = texts
        .flat_map(engram::memory::hybrid::vector_hashes)
        .collect();
    if hashes.is_empty() {
        return Ok(());
    }
    let keys: Vec<&[u8]> = hashes.iter().map(|h| &h[..]).collect();
    tx.execute(
        "DELETE FROM engram_vector WHERE tenant = $1 AND hash = ANY($2)",
        &[&tenant, &keys],
    )
    .map_err(pg)?;
    Ok(())
}

/// One group's consolidation in the caller's transaction. The group's working entries are
/// claimed first (`FOR UPDATE SKIP LOCKED`): when any is missing (consolidated already) or held
/// by another transaction (another server consolidating it now), nothing is changed and
/// `NotWorking` names them.
fn consolidate_in(
    tx: &mut Transaction<'_>,
    tenant: &str,
    c: &Consolidation,
) -> Result<ConsolidationRecord, engram::Error> {
    let claimed: std::collections::HashSet<String> = tx
        .query(
            "SELECT id FROM engram_memory
             WHERE tenant = $1 AND id = ANY($2) AND tier = 'working'
             FOR UPDATE SKIP LOCKED",
            &[&tenant, &c.ids],
        )
        .map_err(pg)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let missing: Vec<String> = c
        .ids
        .iter()
        .filter(|id| !claimed.contains(*id))
        .cloned()
        .collect();
    if !missing.is_empty() {
        return Err(engram::Error::NotWorking(missing));
    }
    tx.execute(
        "UPDATE engram_memory SET tier = 'archive' WHERE tenant = $1 AND id = ANY($2)",
        &[&tenant, &c.ids],
    )
    .map_err(pg)?;
    let summary_id = c.summary.id.clone().unwrap_or_else(|| new_id("epi"));
    check_storable(0, &c.summary)?;
    if insert_entries(
        tx,
        tenant,
        &[&c.summary],
        std::slice::from_ref(&summary_id),
        Some(&c.ids),
    )? == 0
    {
        return Err(engram::Error::Backend(format!(
            "a memory entry with id {summary_id} exists already"
        )));
    }
    let mut record = c.record.clone();
    record.ids_out = vec![summary_id];
    let row = tx
        .query_one(
            "INSERT INTO engram_consolidation_log (tenant, session_id, source, items_consolidated, summary_preview, created_at, strategy, model, duration_ms, ids_in, ids_out)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id",
            &[
                &tenant,
                &record.session_id,
                &record.source,
                &(record.items_consolidated as i64),
                &record.summary_preview,
                &record.created_at,
                &record.strategy,
                &record.model,
                &record.duration_ms,
                &serde_json::to_string(&record.ids_in).unwrap_or_default(),
                &serde_json::to_string(&record.ids_out).unwrap_or_default(),
            ],
        )
        .map_err(pg)?;
    record.id = row.get(0);
    Ok(record)
}
