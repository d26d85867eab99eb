//! [`CalibrationStore`] for PostgreSQL: each model's count calibration, one row of JSON per
//! tenant and model (schema version 8), updated under a row lock so that servers sharing the
//! database add their requests one after the other.

use engram::calibrate::{Calibration, CalibrationStore, Observation};
use engram::stored::StoredJson;

use super::{PostgresStore, pg};

impl CalibrationStore for PostgresStore {
    fn calibration(&self, model: &str) -> Result<Option<Calibration>, engram::Error> {
        let row = self.tx(|tx| {
            tx.query_opt(
                "SELECT state FROM engram_count_calibration WHERE tenant = $1 AND model = $2",
                &[&self.tenant, &model],
            )
            .map_err(pg)
        })?;
        row.map(|r| Calibration::from_stored(&r.get::<_, String>(0)))
            .transpose()
    }

    fn observe_count(&self, model: &str, seen: Observation) -> Result<Calibration, engram::Error> {
        self.tx(|tx| {
            // The row exists before it is locked, so that two first requests do not race.
            tx.execute(
                "INSERT INTO engram_count_calibration (tenant, model, state) VALUES ($1, $2, $3)
                 ON CONFLICT (tenant, model) DO NOTHING",
                &[&self.tenant, &model, &Calibration::default().to_stored()?],
            )
            .map_err(pg)?;
            let row = tx
                .query_one(
                    "SELECT state FROM engram_count_calibration WHERE tenant = $1 AND model = $2 FOR UPDATE",
                    &[&self.tenant, &model],
                )
                .map_err(pg)?;
            let after = Calibration::from_stored(&row.get::<_, String>(0))?.observed_one(seen);
            let state =
                after.to_stored()?;
            tx.execute(
                "UPDATE engram_count_calibration SET state = $3 WHERE tenant = $1 AND model = $2",
                &[&self.tenant, &model, &state],
            )
            .map_err(pg)?;
            Ok(after)
        })
    }
}
