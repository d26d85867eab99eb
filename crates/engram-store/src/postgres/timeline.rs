//! [`TimelineStore`] for PostgreSQL: each session's timeline, one row of JSON per tenant and
//! session (schema version 9), deleted with its session.
use engram::session::store::no_session;
use engram::session::timeline::{Timeline, TimelineStore};
use engram::stored::StoredJson;

use super::{PostgresStore, pg};

impl TimelineStore for PostgresStore {
    fn timeline(&self, session_id: &str) -> Result<Option<Timeline>, engram::Error> {
        let row = self.tx(|tx| {
            tx.query_opt(
                "SELECT t.timeline FROM engram_session s
                 LEFT JOIN engram_session_timeline t ON t.tenant = s.tenant AND t.session_id = s.id
                 WHERE s.tenant = $1 AND s.id = $2",
                &[&self.tenant, &session_id],
            )
            .map_err(pg)
        })?;
        match row {
            None => Err(no_session(session_id)),
            Some(r) => r
                .get::<_, Option<String>>(0)
                .as_deref()
                .map(Timeline::from_stored)
                .transpose(),
        }
    }

    fn put_timeline(&self, session_id: &str, timeline: &Timeline) -> Result<(), engram::Error> {
        let stored = timeline.to_stored()?;
        self.tx(|tx| {
            let exists = tx
                .query_opt(
                    "SELECT 1 FROM engram_session WHERE tenant = $1 AND id = $2 FOR UPDATE",
                    &[&self.tenant, &session_id],
                )
                .map_err(pg)?
                .is_some();
            if !exists {
                return Err(no_session(session_id));
            }
            tx.execute(
                "INSERT INTO engram_session_timeline (tenant, session_id, timeline) VALUES ($1, $2, $3)
                 ON CONFLICT (tenant, session_id) DO UPDATE SET timeline = EXCLUDED.timeline",
                &[&self.tenant, &session_id, &stored],
            )
            .map_err(pg)?;
            Ok(())
        })
    }
}
