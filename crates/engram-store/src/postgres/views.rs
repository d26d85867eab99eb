//! [`ViewStore`] for PostgreSQL: the views the proxy sent upstream, shared by every server on
//! the database, so that an agent's request that lands on another server builds on the same
//! view (and the same summaries) as the one before it. A view replaces the one it extends;
//! views a day old are forgotten.

use std::collections::HashMap;

use engram::compact::stable::{SentView, ViewStore};

use super::{PostgresStore, pg};

/// How long a view is kept, in milliseconds.
const VIEW_TTL_MS: i64 = 24 * 3600 * 1000;

fn key_bytes(key: u128) -> Vec<u8> {
    key.to_be_bytes().to_vec()
}

fn decode(e: impl std::fmt::Display) -> engram::Error {
    engram::Error::Backend(format!("a proxy view that does not read back: {e}"))
}

impl ViewStore for PostgresStore {
    fn longest_view(&self, prefixes: &[u128]) -> Result<Option<SentView>, engram::Error> {
        let at: HashMap<Vec<u8>, usize> = prefixes
            .iter()
            .enumerate()
            .skip(1)
            .map(|(k, key)| (key_bytes(*key), k))
            .collect();
        let keys: Vec<&Vec<u8>> = at.keys().collect();
        let rows = self.tx(|tx| {
            tx.query(
                "SELECT key, covers, view FROM engram_proxy_view WHERE tenant = $1 AND key = ANY($2)",
                &[&self.tenant, &keys],
            )
            .map_err(pg)
        })?;
        let best = rows
            .iter()
            .filter_map(|row| {
                let k = *at.get(&row.get::<_, Vec<u8>>(0))?;
                (row.get::<_, i64>(1) as usize == k).then(|| (k, row.get::<_, String>(2)))
            })
            .max_by_key(|(k, _)| *k);
        best.map(|(_, view)| serde_json::from_str(&view).map_err(decode))
            .transpose()
    }

    fn keep_view(
        &self,
        key: u128,
        view: SentView,
        replaces: Option<u128>,
    ) -> Result<(), engram::Error> {
        let text = serde_json::to_string(&view).map_err(decode)?;
        let now = engram::timestamp::now();
        self.tx(|tx| {
            if let Some(old) = replaces.filter(|r| *r != key) {
                tx.execute(
                    "DELETE FROM engram_proxy_view WHERE tenant = $1 AND key = $2",
                    &[&self.tenant, &key_bytes(old)],
                )
                .map_err(pg)?;
            }
            tx.execute(
                "INSERT INTO engram_proxy_view (tenant, key, covers, view, created_at)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (tenant, key) DO UPDATE
                 SET covers = EXCLUDED.covers, view = EXCLUDED.view, created_at = EXCLUDED.created_at",
                &[
                    &self.tenant,
                    &key_bytes(key),
                    &(view.covers as i64),
                    &text,
                    &now,
                ],
            )
            .map_err(pg)?;
            tx.execute(
                "DELETE FROM engram_proxy_view WHERE tenant = $1 AND created_at < $2",
                &[&self.tenant, &(now - VIEW_TTL_MS)],
            )
            .map_err(pg)?;
            Ok(())
        })
    }
}
