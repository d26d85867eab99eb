//! [`CalibrationStore`] for SQLite: each model's count calibration, one row of JSON
//! (schema version 10), read and updated in one write transaction.

use engram::calibrate::{Calibration, CalibrationStore, Observation};
use engram::stored::StoredJson;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use super::{SqliteStore, backend, write_tx};

/// The table (schema version 10).
pub(crate) const TABLE: &str = "
CREATE TABLE IF NOT EXISTS count_calibration (
    model TEXT PRIMARY KEY,
    state TEXT NOT NULL
) WITHOUT ROWID;
";

impl CalibrationStore for SqliteStore {
    fn calibration(&self, model: &str) -> Result<Option<Calibration>, engram::Error> {
        read(&self.conn(), model)
    }

    fn observe_count(&self, model: &str, seen: Observation) -> Result<Calibration, engram::Error> {
        let mut conn = self.conn();
        let tx = write_tx(&mut conn)?;
        let before = read(&tx, model)?.unwrap_or_default();
        let after = before.observed_one(seen);
        let state = after.to_stored()?;
        tx.execute(
            "INSERT INTO count_calibration (model, state) VALUES (?1, ?2)
             ON CONFLICT (model) DO UPDATE SET state = excluded.state",
            params![model, state],
        )
        .map_err(backend)?;
        tx.commit().map_err(backend)?;
        Ok(after)
    }
}

/// The calibration kept for `model` in the engram database at `path`, read without opening the
/// store (no migration, no search index): what `engram count` reads. `None` when the file, its
/// table or the model's row is missing.
pub fn read_calibration(
    path: &std::path::Path,
    model: &str,
) -> Result<Option<Calibration>, engram::Error> {
    if !path.exists() {
        return Ok(None);
    }
    let conn =
        Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(backend)?;
    let has_table: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'count_calibration')",
            [],
            |r| r.get(0),
        )
        .map_err(backend)?;
    if !has_table {
        return Ok(None);
    }
    read(&conn, model)
}

/// The calibration kept for `model`, if any.
fn read(conn: &Connection, model: &str) -> Result<Option<Calibration>, engram::Error> {
    let text: Option<String> = conn
        .query_row(
            "SELECT state FROM count_calibration WHERE model = ?1",
            params![model],
            |r| r.get(0),
        )
        .optional()
        .map_err(backend)?;
    text.as_deref().map(Calibration::from_stored).transpose()
}
