//! `engram memory …`: the memory CLI, a fixed contract.

use engram::plural;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Instant;

use engram::memory::{Forget, MemoryStore, NewEntry, format_time};
use engram::request::{AddMemory, Names, SearchRequest, SleepRequest};
use engram::sleep::sleep_tick;
use engram_store::SqliteStore;
use serde_json::{Value, json};

use crate::cli::{GlobalArgs, MemoryCommand};
use crate::{flag_error, user_error};

/// `--db`, else ENGRAM_DB, else the user's data directory
/// ([`engram::discovery::Discovery::db_path`]).
pub(crate) fn db_path(global: &GlobalArgs) -> anyhow::Result<PathBuf> {
    global
        .discovery()
        .db_path()
        .map_err(|e| user_error!("{e} (--db PATH)"))
}

/// Entries sent at a time from the parsing thread to the storing one.
const PARSED_BATCH: usize = 256;

/// Reads `reader`'s JSONL entries (`name` is the file, for errors) and sends them in batches,
/// redacted when asked, until the end, the first bad line (sent as an error, naming the line,
/// the column or the field) or a receiver that has gone. Returns how many secrets it replaced.
fn parse_entries(
    reader: Box<dyn BufRead + Send>,
    name: &str,
    mut add: AddMemory,
    sender: &std::sync::mpsc::SyncSender<Vec<Result<NewEntry, engram::Error>>>,
) -> usize {
    let mut batch = Vec::with_capacity(PARSED_BATCH);
    for (i, line) in reader.lines().enumerate() {
        let reject = |m: String| engram::Error::Rejected(format!("{name}: line {}{m}", i + 1));
        let entry = match line {
            Ok(l) if l.trim().is_empty() => continue,
            Err(e) => Err(reject(format!(": {e}"))),
            Ok(line) => match serde_json::from_str::<Value>(&line) {
                Err(e) => Err(reject(format!(
                    ", column {}: invalid JSON: {e}",
                    e.column()
                ))),
                Ok(value) => add.entry(&value).map_err(|e| match (e.field(), e.why()) {
                    (Some(field), Some(why)) if !field.is_empty() => {
                        reject(format!(", field `{field}`: {why}"))
                    }
                    _ => reject(format!(": {e}")),
                }),
            },
        };
        let failed = entry.is_err();
        batch.push(entry);
        if failed || batch.len() == PARSED_BATCH {
            let full = std::mem::replace(&mut batch, Vec::with_capacity(PARSED_BATCH));
            if sender.send(full).is_err() || failed {
                return add.redacted();
            }
        }
    }
    let _ = sender.send(batch);
    add.redacted()
}

pub(crate) fn run(global: &GlobalArgs, command: &MemoryCommand) -> anyhow::Result<()> {
    let config = crate::config::load(global)?;
    let path = db_path(global)?;
    let store = SqliteStore::open(&path)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    match command {
        MemoryCommand::Import { file } => {
            let started = Instant::now();
            let reader = crate::conversation_file::open_lines(file)?;
            let name = file.display().to_string();
            let add = AddMemory::new(config.memory.redact);
            // One transaction, streamed: a bad line rolls back everything before it, so
            // nothing is stored unless every line is good. The lines are read, parsed and
            // redacted on a thread of their own while this one stores them.
            let (sender, receiver) = std::sync::mpsc::sync_channel(16);
            let (result, redacted) = std::thread::scope(|scope| {
                let parser = std::thread::Builder::new()
                    .name("engram-import-parse".into())
                    .spawn_scoped(scope, move || parse_entries(reader, &name, add, &sender))?;
                let mut entries = receiver.into_iter().flatten();
                let result = store.insert_stream(&mut entries);
                // Stops the parser when the store gave up early (it finds no receiver).
                drop(entries);
                let redacted = parser
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                anyhow::Ok((result?, redacted))
            })?;
            // Index now, so that the first search does not pay for the whole import.
            store.sync_index()?;
            crate::config::auto_sleep(&store, &config)?;
            writeln!(
                out,
                "imported {} ({} skipped: already stored) into {} in {:.0} ms{}",
                plural(result.inserted, "entry", "entries"),
                result.skipped,
                path.display(),
                started.elapsed().as_secs_f64() * 1e3,
                match redacted {
                    0 => String::new(),
                    n => format!("; {n} secrets replaced by placeholders"),
                }
            )?;
        }
        MemoryCommand::Add {
            source,
            tier,
            session,
            importance,
            text,
        } => {
            // The flags are an entry's fields, checked and redacted as every front's are.
            let mut add = AddMemory::new(config.memory.redact);
            let entry = add
                .entry(&json!({
                    "content": text,
                    "source": source,
                    "tier": tier,
                    "session_id": session,
                    "importance": importance,
                }))
                .map_err(|e| match (e.field(), e.why()) {
                    (Some("content"), Some(why)) => user_error!("the text {why}"),
                    (Some("session_id"), Some(why)) => user_error!("--session {why}"),
                    (_, Some(why)) => user_error!("{} {why}", e.flag().unwrap_or_default()),
                    _ => user_error!("{e}"),
                })?;
            if add.redacted() > 0 {
                eprintln!(
                    "engram: {} secrets replaced by placeholders before storing",
                    add.redacted()
                );
            }
            let id = entry.id.clone().unwrap_or_default();
            store.insert(&[entry])?;
            writeln!(out, "{id}")?;
            crate::config::auto_sleep(&store, &config)?;
        }
        MemoryCommand::Search {
            query,
            limit,
            tier,
            session,
            source,
            since,
            until,
            json,
            recall,
        } => {
            let request = SearchRequest {
                text: Some(query.clone()),
                limit: Some(*limit),
                tiers: (!tier.is_empty()).then(|| Names::Many(tier.clone())),
                session_id: session.clone(),
                source: source.clone(),
                since: since.clone(),
                until: until.clone(),
            };
            let query = request.into_query("query").map_err(|e| {
                match (e.field(), e.why()) {
                    // The query is a positional argument; the tiers come from --tier.
                    (Some("query"), Some(why)) => user_error!("the query {why}"),
                    (Some("tiers"), Some(why)) => user_error!("--tier: {why}"),
                    _ => flag_error(e),
                }
            })?;
            let embedder = crate::embeddings::from_args(recall, crate::embeddings::Keep::Store);
            let hits = engram::memory::search::find(&store, &query, embedder.as_deref())?;
            if *json {
                let results: Vec<Value> = hits
                    .iter()
                    .map(|h| {
                        json!({
                            "id": h.entry.id, "tier": h.entry.tier, "content": h.entry.content,
                            "source": h.entry.source, "session_id": h.entry.session_id,
                            "created_at": format_time(h.entry.created_at), "score": h.score,
                        })
                    })
                    .collect();
                serde_json::to_writer_pretty(&mut out, &json!({"results": results}))?;
                writeln!(out)?;
            } else if hits.is_empty() {
                writeln!(out, "no matches")?;
            } else {
                for h in &hits {
                    let text: String = h
                        .entry
                        .content
                        .chars()
                        .take(160)
                        .collect::<String>()
                        .replace('\n', " ");
                    writeln!(
                        out,
                        "{:7.2}  {}  {:<8}  {}  [{}]  {text}",
                        h.score,
                        h.entry.id,
                        h.entry.tier.as_str(),
                        format_time(h.entry.created_at),
                        h.entry.source
                    )?;
                }
            }
        }
        MemoryCommand::Sleep {
            now: at,
            ttl_hours,
            max_working,
            json,
            summarizer,
        } => {
            let mut settings = engram::sleep::SleepSettings::from_config(&config);
            let at = SleepRequest {
                now: at.clone(),
                ttl_hours: *ttl_hours,
                max_working: *max_working,
            }
            .apply(&mut settings)
            .map_err(flag_error)?;
            if summarizer.summary_prompt.is_some() {
                return Err(user_error!(
                    "--summary-prompt applies to conversations (compact, summarize); memory groups are summarised with engram's memory prompt"
                ));
            }
            let registry = crate::registry::load(global)?;
            let model = crate::summarizer::from_args(&registry, summarizer, &config)?;
            if let Some(model) = &model {
                settings.compact.summarizer = Some(model.clone());
            }
            let tick = sleep_tick(&store, at, &settings)?;
            store.sync_index()?;
            let report = tick.memory;
            if *json {
                let mut doc = tick.to_document();
                if let Some(model) = &model {
                    doc["summarizer_usage"] = crate::summarizer::usage_report(&registry, model);
                }
                serde_json::to_writer_pretty(&mut out, &doc)?;
                writeln!(out)?;
            } else {
                for (id, c) in &tick.sessions.compacted {
                    writeln!(
                        out,
                        "compacted session {id} during sleep: {} -> {} tokens, {} key facts into working memory",
                        c.tokens_before, c.tokens_after, c.facts_extracted
                    )?;
                }
                for (id, why) in &tick.sessions.failed {
                    eprintln!("engram: warning: session {id} could not be compacted: {why}");
                }
                if tick.sessions.timeline_lines > 0 {
                    writeln!(
                        out,
                        "wrote {} of the sessions' timelines (`engram session timeline ID`)",
                        plural(tick.sessions.timeline_lines, "line", "lines")
                    )?;
                }
                if tick.archive_deleted > 0 {
                    writeln!(
                        out,
                        "deleted {} archived originals past the retention setting",
                        tick.archive_deleted
                    )?;
                }
                writeln!(
                    out,
                    "consolidated {} into {} ({}{}) in {:.0} ms",
                    plural(
                        report.items_consolidated,
                        "working entry",
                        "working entries"
                    ),
                    plural(
                        report.summaries_created,
                        "episodic summary",
                        "episodic summaries"
                    ),
                    plural(report.groups, "group", "groups"),
                    if report.over_cap > 0 {
                        format!(", {} over the working cap", report.over_cap)
                    } else {
                        String::new()
                    },
                    report.duration_ms
                )?;
                if let Some(model) = &model {
                    let usage = model.usage();
                    writeln!(
                        out,
                        "summaries by {} ({}, {} tokens in, {} out); {} fell back to the extractive summary",
                        engram::compact::summarize::Summarizer::name(model.as_ref()),
                        plural(usage.calls, "call", "calls"),
                        usage.input_tokens,
                        usage.output_tokens,
                        plural(report.fallbacks, "group", "groups")
                    )?;
                }
            }
        }
        MemoryCommand::Log { limit, json } => {
            let log = store.log(*limit)?;
            if *json {
                let records: Vec<Value> = log
                    .iter()
                    .map(engram::memory::ConsolidationRecord::to_json)
                    .collect();
                serde_json::to_writer_pretty(&mut out, &json!({"log": records}))?;
                writeln!(out)?;
            } else if log.is_empty() {
                writeln!(out, "no consolidations yet")?;
            } else {
                for r in &log {
                    writeln!(
                        out,
                        "#{}  {}  {} from {}{}  {}  {:.1} ms  {}",
                        r.id,
                        format_time(r.created_at),
                        plural(r.items_consolidated, "entry", "entries"),
                        r.source,
                        r.session_id
                            .as_deref()
                            .map(|s| format!(" (session {s})"))
                            .unwrap_or_default(),
                        r.strategy,
                        r.duration_ms,
                        r.summary_preview
                            .chars()
                            .take(80)
                            .collect::<String>()
                            .replace('\n', " ")
                    )?;
                }
            }
        }
        MemoryCommand::Forget {
            id,
            session,
            source,
            all,
            yes,
        } => {
            let forgotten = if *all {
                if !yes {
                    return Err(user_error!(
                        "--all deletes every memory entry in {}; add --yes to confirm",
                        path.display()
                    ));
                }
                store.forget_all()?
            } else {
                let what = Forget {
                    id: id.clone(),
                    session_id: session.clone(),
                    source: source.clone(),
                };
                if what.is_empty() {
                    return Err(user_error!(
                        "say what to forget: --id ID, --session S, --source S (or --all --yes)"
                    ));
                }
                let forgotten = store.forget(&what)?;
                if forgotten.entries == 0 {
                    // Nothing matched: most often a mistyped id; say so, and fail.
                    return Err(anyhow::Error::new(what.matched_nothing()));
                }
                forgotten
            };
            writeln!(
                out,
                "forgot {} ({} lineage updated)",
                plural(forgotten.entries, "entry", "entries"),
                plural(forgotten.summaries_updated, "summary's", "summaries'")
            )?;
        }
        MemoryCommand::Export { session } => {
            let mut failed = None;
            engram::session::export::export_memory(&store, session.as_deref(), |line| {
                let written = serde_json::to_writer(&mut out, &line)
                    .map_err(std::io::Error::from)
                    .and_then(|()| writeln!(out));
                written.map_err(|e| {
                    let message = e.to_string();
                    failed = Some(e);
                    engram::Error::Backend(message)
                })
            })
            .map_err(|e| failed.map_or_else(|| anyhow::Error::from(e), anyhow::Error::from))?;
        }
        MemoryCommand::Stats { json } => {
            let stats = store.stats()?;
            if *json {
                serde_json::to_writer(&mut out, &stats)?;
                writeln!(out)?;
            } else {
                writeln!(
                    out,
                    "working {}  episodic {}  archive {}  learnings {}  journal {}  ({})",
                    stats.working,
                    stats.episodic,
                    stats.archive,
                    stats.learnings,
                    stats.journal,
                    path.display()
                )?;
            }
        }
    }
    out.flush()?;
    Ok(())
}
