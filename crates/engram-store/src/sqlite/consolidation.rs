//! Consolidation inside a transaction: the groups' entries taken out of working memory (by rowid
//! runs when the read knew them, else by id), with the vectors of what leaves.

use super::*;

/// Forgets the vectors of the texts `select` reads (the memory entries about to be deleted, each
/// whole and by sentence: [`engram::memory::hybrid::vector_hashes`]), in the caller's
/// transaction. A store that keeps no vectors reads nothing.
pub(super) fn forget_vectors_of(tx: &Connection, select: &str) -> Result<(), engram::Error> {
    let models = vectors::models(tx).map_err(backend)?;
    if models.is_empty() {
        return Ok(());
    }
    let mut read = tx.prepare(select).map_err(backend)?;
    let mut hashes: Vec<TextHash> = Vec::new();
    for content in read
        .query_map([], |r| r.get::<_, String>(0))
        .map_err(backend)?
    {
        hashes.extend(engram::memory::hybrid::vector_hashes(
            &content.map_err(backend)?,
        ));
    }
    vectors::forget(tx, &models, &hashes).map_err(backend)?;
    Ok(())
}

/// Rowid runs at least this long are deleted as a range (a walk along the table); shorter
/// ones with the scattered rowids, in one statement looking each up.
pub(super) const RANGE_RUN: usize = 8;

/// Takes the entries of every group out of working memory in one go, when the candidate read
/// knows all their rowids (`Some(true)`; a sleep's groups always qualify) and no two groups
/// share an entry; `Some(false)`, having changed nothing, when not (the groups are then
/// archived by id, one by one, which gives a shared entry to the first). Sorted, the rowids
/// mostly form runs (entries come in roughly in time order), and a run is deleted as a
/// range: four times cheaper than looking up each rowid. Only candidates' rowids are in a
/// run, so a range deletes nothing else. `None` when the rows deleted are not the rowids'
/// number: the rowids did not hold, and the caller rolls back.
pub(super) fn archive_known(
    tx: &Connection,
    consolidations: &[Consolidation],
    known: &rustc_hash::FxHashMap<String, i64>,
) -> Result<Option<bool>, engram::Error> {
    let mut taken = Vec::new(); // (rowid, group)
    for (group, c) in consolidations.iter().enumerate() {
        for id in &c.ids {
            match known.get(id) {
                Some(&rowid) => taken.push((rowid, group)),
                None => return Ok(Some(false)),
            }
        }
    }
    taken.sort_unstable();
    // An id given twice in one group counts once, as it always has; one in two groups is
    // left to the groups one by one.
    taken.dedup();
    if taken.windows(2).any(|w| w[0].0 == w[1].0) {
        return Ok(Some(false));
    }
    let all: Vec<i64> = taken.into_iter().map(|(rowid, _)| rowid).collect();
    let mut deleted = 0;
    let mut scattered = Vec::new();
    let mut range = tx
        .prepare_cached("DELETE FROM memory_working WHERE entry BETWEEN ?1 AND ?2")
        .map_err(backend)?;
    for run in all.chunk_by(|a, b| *b == a + 1) {
        if run.len() >= RANGE_RUN {
            deleted += range
                .execute([run[0], run[run.len() - 1]])
                .map_err(backend)?;
        } else {
            scattered.extend_from_slice(run);
        }
    }
    if !scattered.is_empty() {
        let keys = serde_json::to_string(&scattered).map_err(backend)?;
        deleted += tx
            .prepare_cached(
                "DELETE FROM memory_working WHERE entry IN (SELECT value FROM json_each(?1))",
            )
            .and_then(|mut s| s.execute([&keys]))
            .map_err(backend)?;
    }
    // Every write that takes an entry out of working memory also writes a memory row (a
    // summary, or the entry's deletion), which moves the queue's position; while it has not
    // moved since the candidate read, every candidate is still working. No rows come back
    // (RETURNING doubles a delete's cost): the count is checked instead.
    Ok((deleted == all.len()).then_some(true))
}

/// Applies one consolidation inside the caller's transaction; `archived` when its entries
/// have left working memory already ([`archive_known`]). When one of its entries is not in
/// working memory any more, nothing of it stays applied and the error names those entries.
pub(super) fn consolidate_in(
    tx: &Connection,
    c: &Consolidation,
    archived: bool,
    inline: Option<&mut search::Inline<'_>>,
) -> Result<ConsolidationRecord, engram::Error> {
    if !archived {
        archive_by_id(tx, c)?;
    }
    let summary_id = c.summary.id.clone().unwrap_or_else(|| new_id("epi"));
    let Some(rowid) = insert_one(tx, &summary_id, &c.summary, Some(&c.ids)).map_err(backend)?
    else {
        return Err(backend(format!(
            "a memory entry with id {summary_id} exists already"
        )));
    };
    if let Some(inline) = inline {
        let s = &c.summary;
        inline.add(
            rowid,
            &s.content,
            s.session_id.as_deref(),
            &s.source,
            s.created_at,
            s.tier,
        )?;
    }
    let mut record = c.record.clone();
    record.ids_out = vec![summary_id];
    tx.prepare_cached(
        "INSERT INTO consolidation_log (session_id, source, items_consolidated, summary_preview, created_at, strategy, model, duration_ms, ids_in, ids_out)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )
    .and_then(|mut insert| {
        insert.execute(params![
            record.session_id,
            record.source,
            record.items_consolidated as i64,
            record.summary_preview,
            record.created_at,
            record.strategy,
            record.model,
            record.duration_ms,
            serde_json::to_string(&record.ids_in).unwrap_or_default(),
            serde_json::to_string(&record.ids_out).unwrap_or_default(),
        ])
    })
    .map_err(backend)?;
    record.id = tx.last_insert_rowid();
    Ok(record)
}

/// Takes a group's entries, looked up by id, out of working memory; when one of them was not
/// working, puts back those it took (the transaction holds the write lock: nothing else
/// changed them meanwhile) and says which were not.
fn archive_by_id(tx: &Connection, c: &Consolidation) -> Result<(), engram::Error> {
    let keys = serde_json::to_string(&c.ids).map_err(backend)?;
    let archived = tx
        .prepare_cached(
            "DELETE FROM memory_working WHERE entry IN
             (SELECT m.rowid FROM json_each(?1) j CROSS JOIN memory m ON m.id = j.value)
             RETURNING entry, created_at",
        )
        .and_then(|mut s| {
            s.query_map([&keys], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))?
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(backend)?;
    if archived.len() < c.ids.len()
        && archived.len() < c.ids.iter().collect::<std::collections::HashSet<_>>().len()
    {
        let mut restore = tx
            .prepare_cached("INSERT INTO memory_working (entry, created_at) VALUES (?1, ?2)")
            .map_err(backend)?;
        for (rowid, created_at) in archived {
            restore.execute([rowid, created_at]).map_err(backend)?;
        }
        let mut is_working = tx
            .prepare_cached(
                "SELECT 1 FROM memory m CROSS JOIN memory_working w ON w.entry = m.rowid
                 WHERE m.id = ?1",
            )
            .map_err(backend)?;
        let mut not_working = Vec::new();
        for id in &c.ids {
            if !is_working.exists([id]).map_err(backend)? {
                not_working.push(id.clone());
            }
        }
        return Err(engram::Error::NotWorking(not_working));
    }
    Ok(())
}
