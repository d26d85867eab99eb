//! `engram export` and `engram import`: the whole store, or one session, as JSON Lines.

use std::io::Write;
use std::path::Path;

use engram::memory::MemoryStore;
use engram::request::AddMemory;
use engram::session::export::{SessionReader, memory_line, session_lines};
use engram::session::{SessionStore, export_session};
use engram_store::SqliteStore;
use serde_json::Value;

use crate::cli::GlobalArgs;
use crate::{conversation_file, memory, user_error};

pub(crate) fn export(
    global: &GlobalArgs,
    session: Option<&str>,
    output: Option<&Path>,
) -> anyhow::Result<()> {
    let store = SqliteStore::open(&memory::db_path(global)?)?;
    let sink: Box<dyn Write> = match output {
        Some(path) => Box::new(
            std::fs::File::create(path)
                .map_err(|e| user_error!("cannot write {}: {e}", path.display()))?,
        ),
        None => Box::new(std::io::stdout().lock()),
    };
    let mut out = std::io::BufWriter::new(sink);
    let ids: Vec<String> = match session {
        Some(id) => {
            if store.session(id)?.is_none() {
                return Err(engram::session::store::no_session(id).into());
            }
            vec![id.to_owned()]
        }
        None => store.sessions()?.into_iter().map(|s| s.id).collect(),
    };
    let (mut sessions, mut entries) = (0, 0);
    for id in &ids {
        for line in session_lines(&export_session(&store, id)?) {
            serde_json::to_writer(&mut out, &line)?;
            writeln!(out)?;
        }
        sessions += 1;
    }
    let mut after: Option<String> = None;
    loop {
        let page = store.entries(session, after.as_deref(), 10_000)?;
        let Some(last) = page.last() else { break };
        after = Some(last.id.clone());
        for e in &page {
            serde_json::to_writer(&mut out, &memory_line(e))?;
            writeln!(out)?;
            entries += 1;
        }
    }
    out.flush()?;
    if let Some(path) = output {
        eprintln!(
            "engram: exported {} and {} to {}",
            engram::plural(sessions, "session", "sessions"),
            engram::plural(entries, "memory entry", "memory entries"),
            path.display()
        );
    }
    Ok(())
}

pub(crate) fn import(global: &GlobalArgs, file: &Path) -> anyhow::Result<()> {
    let path = memory::db_path(global)?;
    let bytes = conversation_file::read_bytes(Some(file))?;
    let text = std::str::from_utf8(&bytes).map_err(|e| {
        user_error!(
            "{}: invalid UTF-8 at byte {}",
            file.display(),
            e.valid_up_to()
        )
    })?;
    // Every line is read and checked before anything is stored.
    let config = crate::config::load(global)?;
    let mut add = AddMemory::new(config.memory.redact);
    let mut reader = SessionReader::default();
    let mut entries = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = |message: String| user_error!("{}: line {}: {message}", file.display(), i + 1);
        let value: Value =
            serde_json::from_str(line).map_err(|e| at(format!("invalid JSON: {e}")))?;
        let Value::Object(map) = &value else {
            return Err(at("expected an object".into()));
        };
        match map.get("type").and_then(Value::as_str) {
            None | Some("memory") => {
                entries.push(add.entry(&value).map_err(|e| match (e.field(), e.why()) {
                    (Some(field), Some(why)) if !field.is_empty() => {
                        at(format!("field `{field}`: {why}"))
                    }
                    _ => at(e.to_string()),
                })?);
            }
            Some(kind) => reader.push(kind, map).map_err(|e| at(e.to_string()))?,
        }
    }
    let store = SqliteStore::open(&path)?;
    // Each session imports in a transaction of its own, then the entries in one: a re-run after
    // an interrupted import skips what is stored already (the same session, message for
    // message; entries by id) and completes the rest.
    let mut fresh = Vec::new();
    let mut already = 0;
    for dump in &reader.sessions {
        if store.session(&dump.info.id)?.is_none() {
            fresh.push(dump);
            continue;
        }
        let stored = store.session_log(&dump.info.id, 0, true)?;
        let same = stored.len() == dump.messages.len()
            && stored
                .iter()
                .zip(&dump.messages)
                .all(|(a, b)| a.seq == b.seq && a.id == b.id && a.message == b.message);
        if !same {
            return Err(user_error!(
                "session {:?} exists already in {} with other messages; nothing was imported (delete it first with `engram session delete`)",
                dump.info.id,
                path.display()
            ));
        }
        already += 1;
    }
    for dump in &fresh {
        store.import_session(dump)?;
    }
    let inserted = store.insert(&entries)?;
    crate::outln!(
        "imported {} and {} ({} skipped: already stored) into {}",
        engram::plural(fresh.len(), "session", "sessions"),
        engram::plural(inserted.inserted, "memory entry", "memory entries"),
        already + inserted.skipped,
        path.display()
    )?;
    Ok(())
}
