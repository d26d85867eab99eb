//! Hybrid recall's vectors in SQLite, by model and text hash: the `vector` table of every
//! engram database ([`SqliteStore`](super::SqliteStore) keeps its entries' and messages'
//! vectors there), and [`VectorFile`], a file holding only that table, where the CLI keeps the
//! vectors of conversations that live in no store.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use engram::embed::{TextHash, VectorStore, vector_from_bytes, vector_to_bytes};
use rusqlite::{Connection, OptionalExtension, params};

/// The table, as both a database's schema (version 6) and a vector file create it.
pub(crate) const TABLE: &str = "
CREATE TABLE IF NOT EXISTS vector (
    model TEXT NOT NULL,
    hash BLOB NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (model, hash)
) WITHOUT ROWID;
";

/// Which session's texts each vector was computed from (schema version 7). A vector two
/// sessions use has two rows; deleting a session deletes its rows with it.
pub(crate) const SESSION_TABLE: &str = "
CREATE TABLE session_vector (
    session_id TEXT NOT NULL REFERENCES session(id) ON DELETE CASCADE,
    model TEXT NOT NULL,
    hash BLOB NOT NULL,
    PRIMARY KEY (session_id, model, hash)
) WITHOUT ROWID;
CREATE INDEX session_vector_key ON session_vector(model, hash);
";

/// The vectors kept for `hashes` under `model`, in order.
pub(crate) fn read(
    conn: &Connection,
    model: &str,
    hashes: &[TextHash],
) -> rusqlite::Result<Vec<Option<Vec<f32>>>> {
    let mut get =
        conn.prepare_cached("SELECT vector FROM vector WHERE model = ?1 AND hash = ?2")?;
    hashes
        .iter()
        .map(|h| {
            get.query_row(params![model, &h[..]], |r| r.get::<_, Vec<u8>>(0))
                .optional()
                .map(|v| v.map(|bytes| vector_from_bytes(&bytes)))
        })
        .collect()
}

/// Keeps `vectors` under `model` in the caller's transaction (a hash kept keeps its vector).
pub(crate) fn write(
    tx: &rusqlite::Transaction<'_>,
    model: &str,
    vectors: &[(TextHash, &[f32])],
) -> rusqlite::Result<()> {
    let mut put = tx
        .prepare_cached("INSERT OR IGNORE INTO vector (model, hash, vector) VALUES (?1, ?2, ?3)")?;
    for (h, v) in vectors {
        put.execute(params![model, &h[..], vector_to_bytes(v)])?;
    }
    Ok(())
}

/// Keeps `vectors` under `model` as `session`'s, in the caller's transaction.
pub(crate) fn write_for_session(
    tx: &rusqlite::Transaction<'_>,
    session_id: &str,
    model: &str,
    vectors: &[(TextHash, &[f32])],
) -> rusqlite::Result<()> {
    write(tx, model, vectors)?;
    let mut own = tx.prepare_cached(
        "INSERT OR IGNORE INTO session_vector (session_id, model, hash) VALUES (?1, ?2, ?3)",
    )?;
    for (h, _) in vectors {
        own.execute(params![session_id, model, &h[..]])?;
    }
    Ok(())
}

/// Forgets the vectors `session` uses and no other session does, in the caller's transaction
/// (before the session's rows go). Returns how many.
pub(crate) fn forget_session(conn: &Connection, session_id: &str) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "DELETE FROM vector WHERE (model, hash) IN (
             SELECT model, hash FROM session_vector AS mine
             WHERE mine.session_id = ?1 AND NOT EXISTS (
                 SELECT 1 FROM session_vector AS other
                 WHERE other.model = mine.model AND other.hash = mine.hash
                   AND other.session_id <> ?1))",
    )?
    .execute([session_id])
}

/// Schema 8: forgets the vectors that belong to no session and to no memory entry. They were
/// kept before schema 7 tied each session's vectors to it, so deleting their session could not
/// forget them; each is computed again if a session needs it.
pub(crate) fn forget_unowned(conn: &Connection) -> rusqlite::Result<()> {
    let mut entries = std::collections::HashSet::new();
    let mut contents = conn.prepare("SELECT content FROM memory")?;
    let mut rows = contents.query([])?;
    while let Some(row) = rows.next()? {
        entries.insert(engram::embed::text_hash(row.get_ref(0)?.as_str()?));
    }
    let mut unowned = conn.prepare(
        "SELECT model, hash FROM vector AS v WHERE NOT EXISTS (
             SELECT 1 FROM session_vector AS s WHERE s.model = v.model AND s.hash = v.hash)",
    )?;
    // Only the doomed keys are held: the entries' own vectors may be millions.
    let mut doomed: Vec<(String, Vec<u8>)> = Vec::new();
    let mut rows = unowned.query([])?;
    while let Some(row) = rows.next()? {
        let hash: Vec<u8> = row.get(1)?;
        if !TextHash::try_from(hash.as_slice()).is_ok_and(|h| entries.contains(&h)) {
            doomed.push((row.get(0)?, hash));
        }
    }
    drop(rows);
    let mut delete = conn.prepare("DELETE FROM vector WHERE model = ?1 AND hash = ?2")?;
    for (model, hash) in &doomed {
        delete.execute(params![model, hash])?;
    }
    Ok(())
}

/// The models that have vectors here, found by seeking along the key (a handful of models,
/// however many vectors).
pub(crate) fn models(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut next =
        conn.prepare_cached("SELECT model FROM vector WHERE model > ?1 ORDER BY model LIMIT 1")?;
    let mut models: Vec<String> = Vec::new();
    while let Some(model) = next
        .query_row([models.last().map_or("", String::as_str)], |r| r.get(0))
        .optional()?
    {
        models.push(model);
    }
    Ok(models)
}

/// Forgets the vectors of `hashes` under each of `models`, in the caller's transaction: the
/// texts they were computed from are deleted. Another text with the same hash has its vector
/// computed again when next needed.
pub(crate) fn forget(
    conn: &Connection,
    models: &[String],
    hashes: &[TextHash],
) -> rusqlite::Result<usize> {
    let mut delete = conn.prepare_cached("DELETE FROM vector WHERE model = ?1 AND hash = ?2")?;
    let mut deleted = 0;
    for model in models {
        for h in hashes {
            deleted += delete.execute(params![model, &h[..]])?;
        }
    }
    Ok(deleted)
}

/// A SQLite file holding only vectors: where the CLI keeps those of the conversations it
/// compacts. Wrap an embedder in [`Stored`](engram::embed::Stored) with it.
#[derive(Debug)]
pub struct VectorFile {
    conn: Mutex<Connection>,
    path: PathBuf,
}

impl VectorFile {
    /// The vector file at `path`, created (with its directory) when missing.
    pub fn open(path: &Path) -> Result<Self, engram::Error> {
        let fail = |e: rusqlite::Error| {
            engram::Error::Backend(format!("embedding cache at {}: {e}", path.display()))
        };
        if let Some(parent) = path.parent() {
            // A missing directory is reported by SQLite's open below, with the path.
            let _ = std::fs::create_dir_all(parent);
        }
        let conn = Connection::open(path).map_err(fail)?;
        // Several processes may open a new cache at once (two compactions started together):
        // each waits for the others rather than giving up its cache.
        let wait = std::time::Duration::from_secs(30);
        conn.busy_timeout(wait).map_err(fail)?;
        super::write_ahead_log(&conn, wait).map_err(fail)?;
        conn.execute_batch(TABLE).map_err(fail)?;
        Ok(VectorFile {
            conn: Mutex::new(conn),
            path: path.to_path_buf(),
        })
    }

    /// Where the vectors are kept.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn fail(&self, e: rusqlite::Error) -> engram::Error {
        engram::Error::Backend(format!("embedding cache at {}: {e}", self.path.display()))
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl VectorStore for VectorFile {
    fn vectors(
        &self,
        model: &str,
        hashes: &[TextHash],
    ) -> Result<Vec<Option<Vec<f32>>>, engram::Error> {
        read(&self.conn(), model, hashes).map_err(|e| self.fail(e))
    }

    fn put_vectors(
        &self,
        model: &str,
        vectors: &[(TextHash, &[f32])],
    ) -> Result<(), engram::Error> {
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(|e| self.fail(e))?;
        write(&tx, model, vectors).map_err(|e| self.fail(e))?;
        tx.commit().map_err(|e| self.fail(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engram::embed::text_hash;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("engram-vectors-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        dir
    }

    #[test]
    fn a_vector_file_keeps_vectors_across_opens() {
        let dir = scratch("file");
        let path = dir.join("cache").join("vectors.sqlite");
        let (a, b) = (text_hash("a cat"), text_hash("a dog"));
        VectorFile::open(&path)
            .expect("creates")
            .put_vectors("m", &[(a, &[0.5, 0.25]), (b, &[1.0])])
            .expect("keeps");
        let file = VectorFile::open(&path).expect("reopens");
        assert_eq!(file.path(), path);
        assert_eq!(
            file.vectors("m", &[b, a, text_hash("a fox")])
                .expect("reads"),
            [Some(vec![1.0]), Some(vec![0.5, 0.25]), None]
        );
        drop(file);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn processes_opening_a_new_file_at_once_all_keep_their_vectors() {
        for round in 0..20 {
            let dir = scratch(&format!("race{round}"));
            let path = dir.join("vectors.sqlite");
            let barrier = std::sync::Barrier::new(4);
            std::thread::scope(|s| {
                for t in 0..4_u8 {
                    let (path, barrier) = (&path, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        let file = VectorFile::open(path)
                            .unwrap_or_else(|e| panic!("round {round}, opener {t}: {e}"));
                        file.put_vectors("m", &[(text_hash(&t.to_string()), &[f32::from(t)])])
                            .expect("keeps");
                    });
                }
            });
            let file = VectorFile::open(&path).expect("reopens");
            let hashes: Vec<_> = (0..4_u8).map(|t| text_hash(&t.to_string())).collect();
            assert!(
                file.vectors("m", &hashes)
                    .expect("reads")
                    .iter()
                    .all(Option::is_some)
            );
            drop(file);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    #[test]
    fn a_file_that_cannot_be_made_says_where() {
        let dir = scratch("blocked");
        let blocker = dir.join("file");
        std::fs::write(&blocker, "x").expect("writes");
        let err = VectorFile::open(&blocker.join("vectors.sqlite")).expect_err("fails");
        assert!(err.to_string().contains("embedding cache at"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
