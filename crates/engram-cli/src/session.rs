//! `engram session …`: drive an agent session from the shell.

use engram::plural;
use std::io::Write;

use engram::compact::{Strategy, render};
use engram::memory::{MemoryEntry, MemoryStore, SearchQuery, Tier};
use engram::memory::{format_time, now};
use engram::session::{Session, SessionStore, Trigger, new_session};
use engram::{Message, Role};
use engram_store::SqliteStore;
use serde_json::{Value, json};

use crate::cli::{GlobalArgs, InputFormatArg, SessionCommand};
use crate::{config, input, memory, registry, user_error};

pub(crate) fn run(global: &GlobalArgs, command: &SessionCommand) -> anyhow::Result<()> {
    let config = config::load(global)?;
    let path = memory::db_path(global)?;
    let store = SqliteStore::open(&path)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let policy = config.session_policy();
    let registry = registry::load(global)?;
    // The model's prices, for the cost in status updates.
    let open = |id: &str| {
        Session::open(&store, id).map(|s| {
            let price = registry.resolve(&s.info().model).spec.price;
            s.with_policy(policy).with_price(price)
        })
    };
    match command {
        SessionCommand::New {
            id,
            name,
            model,
            window,
            json,
        } => {
            let model = model
                .clone()
                .or_else(|| config.session.model.clone())
                .unwrap_or_else(|| registry.default_model().to_owned());
            if *window == Some(0) {
                return Err(user_error!("--window must be positive"));
            }
            if let Some(warning) = registry.resolve(&model).warning() {
                eprintln!("engram: warning: {warning}");
            }
            let mut new = new_session(&registry, &model, *window, now());
            new.id = id.clone();
            new.name = name.clone();
            if let Some(id) = &new.id
                && id.trim().is_empty()
            {
                return Err(user_error!("--id is empty"));
            }
            let session = Session::create(&store, &new)?;
            let info = session.info();
            if *json {
                serde_json::to_writer(&mut out, info)?;
                writeln!(out)?;
            } else {
                writeln!(out, "{}", info.id)?;
            }
            config::auto_sleep(&store, &config)?;
        }
        SessionCommand::Append {
            id,
            file,
            user,
            assistant,
            system,
            json,
        } => {
            let messages = match (user, assistant, system) {
                (Some(text), _, _) => vec![Message::user(text.clone())],
                (_, Some(text), _) => vec![Message::assistant(text.clone())],
                (_, _, Some(text)) => vec![Message::system(text.clone())],
                _ => {
                    let bytes = input::read_bytes(file.as_deref())?;
                    let conversation = input::parse(&bytes, InputFormatArg::Auto)?;
                    if !conversation.tools.is_empty() {
                        eprintln!(
                            "engram: note: the input's tool definitions are not stored with the session"
                        );
                    }
                    conversation.messages
                }
            };
            if messages.is_empty() {
                return Err(user_error!("no messages to append"));
            }
            let mut session = open(id)?;
            let appended = session.append(messages)?;
            if *json {
                serde_json::to_writer(&mut out, &appended)?;
                writeln!(out)?;
            } else {
                writeln!(out, "{}", appended.ids.join(" "))?;
                if let Some(c) = &appended.compaction {
                    eprintln!(
                        "engram: the view passed {:.0}% of the window: compacted {} -> {} tokens",
                        policy.trigger.threshold * 100.0,
                        c.tokens_before,
                        c.tokens_after
                    );
                }
                if let Some(status) = &appended.status {
                    // Due: for the caller to insert before the next model call.
                    eprintln!("{}", status.text());
                }
                if let Some(why) = &appended.over_threshold {
                    eprintln!(
                        "engram: warning: the messages are stored, but the view ({} of {} tokens) stays over the threshold: {why}",
                        appended.view_tokens, appended.window
                    );
                }
                if appended.breaker_open {
                    eprintln!(
                        "engram: warning: the view is over the threshold and automatic compaction keeps failing to bring it down; run `engram session compact {id}`"
                    );
                }
            }
            config::auto_sleep(&store, &config)?;
        }
        SessionCommand::Show { id, json, all } => {
            let session = open(id)?;
            let info = session.info();
            let view = session.view()?;
            let compactions = store.compactions(id, *all)?;
            let summaries = store.summaries(id)?;
            let checkpoints = store.checkpoints(id)?;
            if *json {
                let doc = json!({
                    "session": info,
                    "view": {
                        "tokens": view.tokens,
                        "compaction_id": view.compaction_id,
                        "messages": view.messages.iter().map(|m| m.to_value(false)).collect::<Vec<_>>(),
                    },
                    "compactions": compactions,
                    "summaries": summaries,
                    "checkpoints": checkpoints,
                    "abandoned_messages": if *all {
                        store.session_log(id, 0, true)?.iter().filter(|m| m.abandoned).map(|m| m.message.to_value()).collect::<Vec<_>>()
                    } else { Vec::new() },
                });
                serde_json::to_writer_pretty(&mut out, &doc)?;
                writeln!(out)?;
            } else {
                writeln!(
                    out,
                    "session {}{}: model {} ({} tokens, {}), {}, created {}, updated {}",
                    info.id,
                    info.name
                        .as_deref()
                        .map(|n| format!(" ({n})"))
                        .unwrap_or_default(),
                    info.model,
                    info.window,
                    info.tokenizer,
                    plural(info.messages, "message", "messages"),
                    format_time(info.created_at),
                    format_time(info.updated_at)
                )?;
                writeln!(
                    out,
                    "view: {}, {} tokens ({:.1}% of the window)",
                    plural(view.messages.len(), "message", "messages"),
                    view.tokens,
                    100.0 * view.tokens as f64 / info.window as f64
                )?;
                write!(out, "{}", render(&view.messages, 100))?;
                if !compactions.is_empty() {
                    writeln!(out, "compactions:")?;
                    for c in &compactions {
                        writeln!(
                            out,
                            "  #{} {} {} {}: {} -> {} tokens, log up to {}{}",
                            c.id,
                            format_time(c.created_at),
                            c.trigger,
                            c.strategy,
                            c.tokens_before,
                            c.tokens_after,
                            c.log_end,
                            if c.abandoned { " (abandoned)" } else { "" }
                        )?;
                    }
                }
                if !summaries.is_empty() {
                    writeln!(out, "summaries:")?;
                    for s in &summaries {
                        writeln!(
                            out,
                            "  {} depth {}, {}, covers {} to {}{}",
                            s.id,
                            s.depth,
                            plural(s.covers.len(), "message", "messages"),
                            format_time(s.from),
                            format_time(s.to),
                            if s.covers_summaries.is_empty() {
                                String::new()
                            } else {
                                format!(", supersedes {}", s.covers_summaries.join(", "))
                            }
                        )?;
                    }
                }
                if !checkpoints.is_empty() {
                    writeln!(out, "checkpoints:")?;
                    for c in &checkpoints {
                        writeln!(
                            out,
                            "  {} {} ({}){}",
                            c.name,
                            format_time(c.created_at),
                            plural(c.messages, "message", "messages"),
                            if c.abandoned { " (abandoned)" } else { "" }
                        )?;
                    }
                }
            }
        }
        SessionCommand::Context {
            id,
            budget,
            query,
            plain,
            memory,
        } => {
            if *budget == Some(0) {
                return Err(user_error!("--budget must be positive"));
            }
            let session = open(id)?;
            let query = query.as_deref().filter(|q| !q.trim().is_empty());
            let compacted = if *memory {
                // What memory should serve: the query, else the newest user message.
                let topic = match query {
                    Some(q) => q.to_owned(),
                    None => session
                        .log()?
                        .iter()
                        .rev()
                        .find(|m| m.message.role == Role::User)
                        .map(|m| m.message.text().into_owned())
                        .unwrap_or_default(),
                };
                let hits = |tiers: Vec<Tier>, limit: usize| -> anyhow::Result<Vec<MemoryEntry>> {
                    Ok(store
                        .search(&SearchQuery {
                            tiers,
                            ..SearchQuery::new(topic.clone(), limit)
                        })?
                        .into_iter()
                        .map(|h| h.entry)
                        .collect())
                };
                let relevant = hits(vec![Tier::Working, Tier::Episodic], 10)?;
                let learnings = hits(vec![Tier::Learning], 5)?;
                session.context_with_memory(*budget, query, &relevant, &learnings)?
            } else {
                session.context(*budget, query)?
            };
            let mut doc = serde_json::Map::new();
            if !plain {
                doc.insert("schema_version".into(), json!(1));
            }
            doc.insert(
                "messages".into(),
                Value::Array(
                    compacted
                        .messages
                        .iter()
                        .map(|m| m.to_value(*plain))
                        .collect(),
                ),
            );
            if !plain {
                let mut report = serde_json::to_value(&compacted.report)?;
                if let Value::Object(map) = &mut report {
                    map.insert("session_id".into(), json!(id));
                    map.insert("window".into(), json!(session.info().window));
                    map.insert(
                        "tokenizer".into(),
                        json!(session.counter().tokenizer().id()),
                    );
                }
                doc.insert("report".into(), report);
            }
            serde_json::to_writer(&mut out, &doc)?;
            writeln!(out)?;
        }
        SessionCommand::Compact {
            id,
            focus,
            target,
            strategy,
            json,
            summarizer,
        } => {
            let strategy =
                Strategy::from_name(strategy).map_err(|e| user_error!("--strategy: {e}"))?;
            let session = open(id)?;
            let target = engram::compact::policy::requested_target(
                *target,
                session.info().window,
                &policy.trigger,
            )
            .map_err(|e| user_error!("--target: {e}"))?;
            let mut options = engram::compact::CompactOptions::new(target);
            options.strategy = strategy;
            options.prompt = crate::summarizer::prompt(summarizer)?;
            if let Some(s) = crate::summarizer::from_args(&registry, summarizer, &config)? {
                options.summarizer =
                    Some(s as std::sync::Arc<dyn engram::compact::summarize::Summarizer>);
            }
            let mut session = session.with_options(options);
            let focus = focus.as_deref().filter(|f| !f.trim().is_empty());
            let outcome = session.compact(Trigger::Manual, target, focus)?;
            if *json {
                serde_json::to_writer(&mut out, &outcome.to_value())?;
                writeln!(out)?;
            } else {
                writeln!(out, "{}", outcome.describe(id))?;
            }
        }
        SessionCommand::Status { id, json } => {
            let status = open(id)?.status()?.to_message();
            if *json {
                serde_json::to_writer(&mut out, &status.to_value())?;
                writeln!(out)?;
            } else {
                writeln!(out, "{}", status.text())?;
            }
        }
        SessionCommand::CompactHistory {
            id,
            arguments,
            schema,
        } => {
            if let Some(format) = schema {
                let tool = if format == "anthropic" {
                    engram::agent::compact_history_tool_anthropic()
                } else {
                    engram::agent::compact_history_tool_openai()
                };
                serde_json::to_writer_pretty(&mut out, &tool)?;
                writeln!(out)?;
            } else {
                let id = id.as_deref().unwrap_or_default();
                let args = engram::agent::CompactHistoryArgs::parse(&Value::String(
                    arguments.clone().unwrap_or_default(),
                ))
                .map_err(|e| user_error!("compact_history arguments: {e}"))?;
                let mut session = open(id)?;
                writeln!(out, "{}", session.compact_history(&args)?)?;
            }
        }
        SessionCommand::Checkpoint { id, name } => {
            let session = open(id)?;
            let cp = session.checkpoint(name)?;
            writeln!(
                out,
                "checkpoint {:?} of session {id}: {}",
                cp.name,
                plural(cp.messages, "message", "messages")
            )?;
        }
        SessionCommand::Restore { id, name } => {
            let mut session = open(id)?;
            let restored = session.restore(name)?;
            writeln!(
                out,
                "restored session {id} to {name:?}: {}, {} and {} set aside (kept; `session show --all` lists them)",
                plural(restored.messages_abandoned, "message", "messages"),
                plural(restored.compactions_abandoned, "compaction", "compactions"),
                plural(restored.checkpoints_abandoned, "checkpoint", "checkpoints")
            )?;
        }
        SessionCommand::List { json } => {
            let sessions = store.sessions()?;
            if *json {
                serde_json::to_writer_pretty(&mut out, &json!({"sessions": sessions}))?;
                writeln!(out)?;
            } else if sessions.is_empty() {
                writeln!(out, "no sessions yet (`engram session new` creates one)")?;
            } else {
                for s in &sessions {
                    writeln!(
                        out,
                        "{}  {}  {:>6} {}  {}  {}",
                        s.id,
                        format_time(s.updated_at),
                        s.messages,
                        if s.messages == 1 {
                            "message "
                        } else {
                            "messages"
                        },
                        s.model,
                        s.name.as_deref().unwrap_or("")
                    )?;
                }
            }
        }
        SessionCommand::Delete { id } => {
            let deleted = store.delete_session(id)?;
            writeln!(
                out,
                "deleted session {id}: {}, {}, {}, {}, {}",
                plural(deleted.messages, "message", "messages"),
                plural(deleted.compactions, "compaction", "compactions"),
                plural(deleted.summaries, "summary", "summaries"),
                plural(deleted.checkpoints, "checkpoint", "checkpoints"),
                plural(deleted.memory_entries, "memory entry", "memory entries")
            )?;
        }
    }
    out.flush()?;
    Ok(())
}
