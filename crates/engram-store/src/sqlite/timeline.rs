//! [`TimelineStore`] for SQLite: each session's timeline, one row of JSON (schema version 11),
//! deleted with its session.
use engram::session::store::no_session;
use engram::session::timeline::{Timeline, TimelineStore};
use engram::stored::StoredJson;
use rusqlite::{OptionalExtension, params};

use super::{SqliteStore, backend};

/// The table (schema version 11).
pub(crate) const TABLE: &str = "
CREATE TABLE IF NOT EXISTS session_timeline (
    session_id TEXT PRIMARY KEY REFERENCES session(id) ON DELETE CASCADE,
    timeline TEXT NOT NULL
) WITHOUT ROWID;
";

impl TimelineStore for SqliteStore {
    fn timeline(&self, session_id: &str) -> Result<Option<Timeline>, engram::Error> {
        let conn = self.conn();
        let row: Option<Option<String>> = conn
            .query_row(
                "SELECT t.timeline FROM session s LEFT JOIN session_timeline t ON t.session_id = s.id
                 WHERE s.id = ?1",
                params![session_id],
                |r| r.get(0),
            )
            .optional()
            .map_err(backend)?;
        match row {
            None => Err(no_session(session_id)),
            Some(text) => text.as_deref().map(Timeline::from_stored).transpose(),
        }
    }

    fn put_timeline(&self, session_id: &str, timeline: &Timeline) -> Result<(), engram::Error> {
        // One statement: the row is written only while its session exists.
        let written = self
            .conn()
            .execute(
                "INSERT INTO session_timeline (session_id, timeline)
                 SELECT id, ?2 FROM session WHERE id = ?1
                 ON CONFLICT (session_id) DO UPDATE SET timeline = excluded.timeline",
                params![session_id, timeline.to_stored()?],
            )
            .map_err(backend)?;
        if written == 0 {
            return Err(no_session(session_id));
        }
        Ok(())
    }
}
