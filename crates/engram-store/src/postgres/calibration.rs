//! [`CalibrationStore`] for PostgreSQL: each model's count calibration, one row of JSON per
//! tenant and model (schema version 8), updated under a row lock so that servers sharing the
//! database add their requests one after the other.

use engram::calibrate::{Calibration, CalibrationStore};
use engram::memory::StoreError;
use engram::store::Timestamp;

use super::{PostgresStore, pg};

fn decode(text: &str) -> Result<Calibration, StoreError> {
    serde_json::from_str(text).map_err(|e| {
        StoreError::Backend(format!("a count calibration that does not read back: {e}"))
    })
}

impl CalibrationStore for PostgresStore {
    fn calibration(&self, model: &str) -> Result<Option<Calibration>, StoreError> {
        let row = self.tx(|tx| {
            tx.query_opt(
                "SELECT state FROM engram_count_calibration WHERE tenant = $1 AND model = $2",
                &[&self.tenant, &model],
            )
            .map_err(pg)
        })?;
        row.map(|r| decode(&r.get::<_, String>(0))).transpose()
    }

    fn observe_count(
        &self,
        model: &str,
        counted: usize,
        tools: bool,
        reported: usize,
        at: Timestamp,
    ) -> Result<Calibration, StoreError> {
        self.tx(|tx| {
            // The row exists before it is locked, so that two first requests do not race.
            tx.execute(
                "INSERT INTO engram_count_calibration (tenant, model, state) VALUES ($1, $2, $3)
                 ON CONFLICT (tenant, model) DO NOTHING",
                &[&self.tenant, &model, &serde_json::to_string(&Calibration::default()).unwrap_or_default()],
            )
            .map_err(pg)?;
            let row = tx
                .query_one(
                    "SELECT state FROM engram_count_calibration WHERE tenant = $1 AND model = $2 FOR UPDATE",
                    &[&self.tenant, &model],
                )
                .map_err(pg)?;
            let after = decode(&row.get::<_, String>(0))?.observed(counted, tools, reported, at);
            let state =
                serde_json::to_string(&after).map_err(|e| StoreError::Backend(e.to_string()))?;
            tx.execute(
                "UPDATE engram_count_calibration SET state = $3 WHERE tenant = $1 AND model = $2",
                &[&self.tenant, &model, &state],
            )
            .map_err(pg)?;
            Ok(after)
        })
    }
}
