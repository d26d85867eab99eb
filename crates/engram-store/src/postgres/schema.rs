//! The database's schema: each version's statements, and its creation or migration under an
//! advisory lock, once however many servers start together.

use engram::embed::TextHash;

use super::{Pool, pg};

/// The schema version this build writes.
pub const SCHEMA_VERSION: i32 = 10;

/// The advisory lock that serialises schema changes ("ENGR").
const SCHEMA_LOCK: i64 = 0x454e_4752;

const SCHEMA_V1: &str = r#"
CREATE TABLE engram_meta (
    tenant TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (tenant, key)
);
CREATE TABLE engram_memory (
    tenant TEXT NOT NULL,
    id TEXT COLLATE "C" NOT NULL,
    tier TEXT NOT NULL,
    content TEXT NOT NULL,
    source TEXT NOT NULL,
    session_id TEXT COLLATE "C",
    created_at BIGINT NOT NULL,
    importance DOUBLE PRECISION NOT NULL,
    metadata TEXT,
    summary_of JSONB,
    tsv TSVECTOR GENERATED ALWAYS AS (to_tsvector('english'::regconfig, content)) STORED,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX engram_memory_tier_time ON engram_memory (tenant, tier, created_at, id);
CREATE INDEX engram_memory_session ON engram_memory (tenant, session_id) WHERE session_id IS NOT NULL;
CREATE INDEX engram_memory_source ON engram_memory (tenant, source);
CREATE INDEX engram_memory_text ON engram_memory USING GIN (tsv);
CREATE INDEX engram_memory_lineage ON engram_memory USING GIN (summary_of) WHERE summary_of IS NOT NULL;
CREATE TABLE engram_consolidation_log (
    id BIGSERIAL PRIMARY KEY,
    tenant TEXT NOT NULL,
    session_id TEXT,
    source TEXT NOT NULL,
    items_consolidated BIGINT NOT NULL,
    summary_preview TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    strategy TEXT NOT NULL,
    model TEXT,
    duration_ms DOUBLE PRECISION NOT NULL,
    ids_in TEXT NOT NULL,
    ids_out TEXT NOT NULL
);
CREATE INDEX engram_consolidation_log_tenant ON engram_consolidation_log (tenant, id);
CREATE TABLE engram_session (
    tenant TEXT NOT NULL,
    id TEXT COLLATE "C" NOT NULL,
    name TEXT,
    model TEXT NOT NULL,
    tokenizer TEXT NOT NULL,
    token_factor DOUBLE PRECISION NOT NULL,
    window_tokens BIGINT NOT NULL,
    metadata TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    messages BIGINT NOT NULL DEFAULT 0,
    next_seq BIGINT NOT NULL DEFAULT 0,
    epoch BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX engram_session_updated ON engram_session (tenant, updated_at);
CREATE TABLE engram_session_message (
    tenant TEXT NOT NULL,
    session_id TEXT COLLATE "C" NOT NULL,
    seq BIGINT NOT NULL,
    id TEXT COLLATE "C" NOT NULL,
    created_at BIGINT NOT NULL,
    tokens BIGINT NOT NULL,
    role TEXT NOT NULL,
    message TEXT NOT NULL,
    abandoned BOOLEAN NOT NULL DEFAULT FALSE,
    PRIMARY KEY (tenant, session_id, seq),
    FOREIGN KEY (tenant, session_id) REFERENCES engram_session (tenant, id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX engram_session_message_active_id
    ON engram_session_message (tenant, session_id, id) WHERE NOT abandoned;
CREATE TABLE engram_session_compaction (
    id BIGSERIAL PRIMARY KEY,
    tenant TEXT NOT NULL,
    session_id TEXT COLLATE "C" NOT NULL,
    trigger TEXT NOT NULL,
    strategy TEXT NOT NULL,
    log_end BIGINT NOT NULL,
    tokens_before BIGINT NOT NULL,
    tokens_after BIGINT NOT NULL,
    view TEXT NOT NULL,
    report TEXT NOT NULL,
    summary_ids TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    abandoned BOOLEAN NOT NULL DEFAULT FALSE,
    FOREIGN KEY (tenant, session_id) REFERENCES engram_session (tenant, id) ON DELETE CASCADE
);
CREATE INDEX engram_session_compaction_session ON engram_session_compaction (tenant, session_id, id);
CREATE TABLE engram_session_summary (
    ord BIGSERIAL PRIMARY KEY,
    tenant TEXT NOT NULL,
    id TEXT COLLATE "C" NOT NULL,
    session_id TEXT COLLATE "C" NOT NULL,
    compaction_id BIGINT NOT NULL REFERENCES engram_session_compaction (id) ON DELETE CASCADE,
    depth INTEGER NOT NULL,
    covers TEXT NOT NULL,
    covers_summaries TEXT NOT NULL,
    from_at BIGINT NOT NULL,
    to_at BIGINT NOT NULL,
    text TEXT NOT NULL,
    tokens BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    UNIQUE (tenant, id),
    FOREIGN KEY (tenant, session_id) REFERENCES engram_session (tenant, id) ON DELETE CASCADE
);
CREATE INDEX engram_session_summary_session ON engram_session_summary (tenant, session_id, compaction_id);
CREATE TABLE engram_session_checkpoint (
    ord BIGSERIAL PRIMARY KEY,
    tenant TEXT NOT NULL,
    session_id TEXT COLLATE "C" NOT NULL,
    name TEXT NOT NULL,
    log_end BIGINT NOT NULL,
    compaction_id BIGINT,
    messages BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    abandoned BOOLEAN NOT NULL DEFAULT FALSE,
    UNIQUE (tenant, session_id, name),
    FOREIGN KEY (tenant, session_id) REFERENCES engram_session (tenant, id) ON DELETE CASCADE
);
"#;

/// Version 2: hybrid recall's vectors, per tenant, by model and text hash (little-endian
/// `f32`s), for memory entries and session messages alike: a text is embedded once, whichever
/// server asks first.
const SCHEMA_V2: &str = r#"
CREATE TABLE engram_vector (
    tenant TEXT NOT NULL,
    model TEXT NOT NULL,
    hash BYTEA NOT NULL,
    vector BYTEA NOT NULL,
    PRIMARY KEY (tenant, model, hash)
);
"#;

/// Version 3: which session's texts each vector was computed from, so that deleting a session
/// forgets the vectors no other session uses.
const SCHEMA_V3: &str = r#"
CREATE TABLE engram_session_vector (
    tenant TEXT NOT NULL,
    session_id TEXT COLLATE "C" NOT NULL,
    model TEXT NOT NULL,
    hash BYTEA NOT NULL,
    PRIMARY KEY (tenant, session_id, model, hash),
    FOREIGN KEY (tenant, session_id) REFERENCES engram_session (tenant, id) ON DELETE CASCADE
);
CREATE INDEX engram_session_vector_key ON engram_session_vector (tenant, model, hash);
"#;

/// Version 5: memory search drops the stop words recall drops ([`engram::retrieval::words`]), not
/// PostgreSQL's own list. The text is indexed by a configuration whose dictionary is Snowball
/// English with no stop words (the stemmer recall uses), and the query leaves out recall's stop
/// words itself ([`query_words`]). The column is computed again, and its index built again, for
/// every entry. The configuration is made anew, so the step also runs over a database whose
/// version was set back by hand (as the tests do). One rare difference stays: a query word
/// whose stem is a stop word's ("wills", "beings") also matches that stop word in the text,
/// which the other backends do not index.
const SCHEMA_V5: &str = r#"
DROP INDEX engram_memory_text;
ALTER TABLE engram_memory DROP COLUMN tsv;
DROP TEXT SEARCH CONFIGURATION IF EXISTS engram_english;
DROP TEXT SEARCH DICTIONARY IF EXISTS engram_english_stem;
CREATE TEXT SEARCH DICTIONARY engram_english_stem (TEMPLATE = snowball, Language = english);
CREATE TEXT SEARCH CONFIGURATION engram_english (COPY = english);
ALTER TEXT SEARCH CONFIGURATION engram_english
    ALTER MAPPING FOR asciiword, asciihword, hword_asciipart, word, hword, hword_part
    WITH engram_english_stem;
ALTER TABLE engram_memory ADD COLUMN tsv TSVECTOR
    GENERATED ALWAYS AS (to_tsvector('engram_english'::regconfig, content)) STORED;
CREATE INDEX engram_memory_text ON engram_memory USING GIN (tsv);
"#;

/// Version 6: the keys of appends that may be retried, with what each stored and answered
/// (`Idempotency-Key`), kept a day and a thousand per session.
const SCHEMA_V6: &str = r#"
CREATE TABLE IF NOT EXISTS engram_session_append_key (
    tenant TEXT NOT NULL,
    session_id TEXT COLLATE "C" NOT NULL,
    key TEXT COLLATE "C" NOT NULL,
    fingerprint TEXT NOT NULL,
    positions TEXT NOT NULL,
    answer TEXT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (tenant, session_id, key),
    FOREIGN KEY (tenant, session_id) REFERENCES engram_session (tenant, id) ON DELETE CASCADE
);
"#;

/// Version 7: the views the proxy sent upstream, by the caller messages each stands for, so
/// that every server on the database builds on them (`views.rs`).
const SCHEMA_V7: &str = r#"
CREATE TABLE IF NOT EXISTS engram_proxy_view (
    tenant TEXT NOT NULL,
    key BYTEA NOT NULL,
    covers BIGINT NOT NULL,
    view TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (tenant, key)
);
CREATE INDEX IF NOT EXISTS engram_proxy_view_age ON engram_proxy_view (tenant, created_at);
"#;

/// Version 8: each model's count calibration, learned from what the provider reported
/// (`calibration.rs`).
const SCHEMA_V8: &str = r#"
CREATE TABLE IF NOT EXISTS engram_count_calibration (
    tenant TEXT NOT NULL,
    model TEXT NOT NULL,
    state TEXT NOT NULL,
    PRIMARY KEY (tenant, model)
);
"#;

/// Version 9: each session's timeline, built at sleep time (`timeline.rs`).
const SCHEMA_V9: &str = r#"
CREATE TABLE IF NOT EXISTS engram_session_timeline (
    tenant TEXT NOT NULL,
    session_id TEXT COLLATE "C" NOT NULL,
    timeline TEXT NOT NULL,
    PRIMARY KEY (tenant, session_id),
    FOREIGN KEY (tenant, session_id) REFERENCES engram_session (tenant, id) ON DELETE CASCADE
);
"#;

/// Version 10: the text is cut into words where the other backends cut it, at every character
/// that is not a letter or a digit, before PostgreSQL's parser reads it: its parser reads
/// `service-16` as `service` and the number `-16`, which a search for `16` (or `service-16`,
/// whose words are `service` and `16`) never matched. The column is computed again, and its
/// index built again, for every entry.
const SCHEMA_V10: &str = r#"
DROP INDEX engram_memory_text;
ALTER TABLE engram_memory DROP COLUMN tsv;
ALTER TABLE engram_memory ADD COLUMN tsv TSVECTOR
    GENERATED ALWAYS AS (to_tsvector('engram_english'::regconfig,
        regexp_replace(content, '[^[:alnum:]]+', ' ', 'g'))) STORED;
CREATE INDEX engram_memory_text ON engram_memory USING GIN (tsv);
"#;

/// One step of the schema: statements, or code where the step needs Rust (a text's hash).
enum Migration {
    Sql(&'static str),
    Code(fn(&mut postgres::Transaction<'_>) -> Result<(), engram::Error>),
}

/// Version 4: the vectors that belong to no session and to no memory entry are forgotten. They
/// were kept before version 3 tied each session's vectors to it, so deleting their session
/// could not forget them; each is computed again if a session needs it.
fn schema_v4(tx: &mut postgres::Transaction<'_>) -> Result<(), engram::Error> {
    use postgres::fallible_iterator::FallibleIterator;
    use std::collections::{HashMap, HashSet};
    let no_params: [&str; 0] = [];
    // The hashes of every entry's text, by tenant; then only the doomed keys are held (the
    // entries' own vectors may be millions).
    let mut entries: HashMap<String, HashSet<TextHash>> = HashMap::new();
    let mut rows = tx
        .query_raw("SELECT tenant, content FROM engram_memory", no_params)
        .map_err(pg)?;
    while let Some(row) = rows.next().map_err(pg)? {
        let hash = engram::embed::text_hash(row.get(1));
        let tenant: &str = row.get(0);
        if let Some(hashes) = entries.get_mut(tenant) {
            hashes.insert(hash);
        } else {
            entries.insert(tenant.to_owned(), HashSet::from([hash]));
        }
    }
    drop(rows);
    let mut doomed: HashMap<(String, String), Vec<Vec<u8>>> = HashMap::new();
    let mut rows = tx
        .query_raw(
            "SELECT tenant, model, hash FROM engram_vector AS v WHERE NOT EXISTS (
                 SELECT 1 FROM engram_session_vector AS s
                 WHERE s.tenant = v.tenant AND s.model = v.model AND s.hash = v.hash)",
            no_params,
        )
        .map_err(pg)?;
    while let Some(row) = rows.next().map_err(pg)? {
        let (tenant, hash): (&str, &[u8]) = (row.get(0), row.get(2));
        let an_entry = TextHash::try_from(hash)
            .is_ok_and(|h| entries.get(tenant).is_some_and(|set| set.contains(&h)));
        if !an_entry {
            doomed
                .entry((tenant.to_owned(), row.get(1)))
                .or_default()
                .push(hash.to_vec());
        }
    }
    drop(rows);
    for ((tenant, model), hashes) in doomed {
        tx.execute(
            "DELETE FROM engram_vector WHERE tenant = $1 AND model = $2 AND hash = ANY($3)",
            &[&tenant, &model, &hashes],
        )
        .map_err(pg)?;
    }
    Ok(())
}

/// Creates the schema, or checks it, under an advisory lock (several servers may start at once).
pub(super) fn migrate(pool: &Pool) -> Result<(), engram::Error> {
    let mut conn = pool.get()?;
    // Read-only checks first: nothing is written to a database that is not ours.
    let row = conn
        .query_one(
            "SELECT to_regclass('engram_schema') IS NOT NULL, to_regclass('engram_memory') IS NOT NULL",
            &[],
        )
        .map_err(pg)?;
    let (has_schema, has_memory): (bool, bool) = (row.get(0), row.get(1));
    if has_memory && !has_schema {
        return Err(engram::Error::Foreign(format!(
            "{} has an engram_memory table that is not engram's (no engram_schema table); engram leaves it alone (use another database or schema)",
            pool.display()
        )));
    }
    if has_schema {
        let version = schema_version(&mut conn)?;
        check_version(pool, version)?;
        if version == SCHEMA_VERSION {
            return Ok(());
        }
    }
    let mut tx = conn.transaction().map_err(pg)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
        .map_err(pg)?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS engram_schema (version INTEGER NOT NULL)")
        .map_err(pg)?;
    let current = tx
        .query_opt("SELECT max(version) FROM engram_schema", &[])
        .map_err(pg)?
        .and_then(|r| r.get::<_, Option<i32>>(0))
        .unwrap_or(0);
    check_version(pool, current)?;
    for (to, step) in [
        (1, Migration::Sql(SCHEMA_V1)),
        (2, Migration::Sql(SCHEMA_V2)),
        (3, Migration::Sql(SCHEMA_V3)),
        (4, Migration::Code(schema_v4)),
        (5, Migration::Sql(SCHEMA_V5)),
        (6, Migration::Sql(SCHEMA_V6)),
        (7, Migration::Sql(SCHEMA_V7)),
        (8, Migration::Sql(SCHEMA_V8)),
        (9, Migration::Sql(SCHEMA_V9)),
        (10, Migration::Sql(SCHEMA_V10)),
    ] {
        if current < to {
            match step {
                Migration::Sql(schema) => tx.batch_execute(schema).map_err(pg)?,
                Migration::Code(step) => step(&mut tx)?,
            }
            tx.execute("DELETE FROM engram_schema", &[]).map_err(pg)?;
            tx.execute("INSERT INTO engram_schema (version) VALUES ($1)", &[&to])
                .map_err(pg)?;
        }
    }
    tx.commit().map_err(pg)?;
    Ok(())
}

fn schema_version(conn: &mut postgres::Client) -> Result<i32, engram::Error> {
    Ok(conn
        .query_opt("SELECT max(version) FROM engram_schema", &[])
        .map_err(pg)?
        .and_then(|r| r.get::<_, Option<i32>>(0))
        .unwrap_or(0))
}

fn check_version(pool: &Pool, version: i32) -> Result<(), engram::Error> {
    if version > SCHEMA_VERSION {
        return Err(engram::Error::Foreign(format!(
            "{} was written by a newer engram (schema {version}; this one knows {SCHEMA_VERSION})",
            pool.display()
        )));
    }
    Ok(())
}
