//! `engram session …`: drive an agent session from the shell.

use engram::plural;
use std::io::Write;

use engram::Message;
use engram::compact::render;
use engram::memory::{format_time, now};
use engram::request::{ContextRequest, NewSessionRequest, SessionCompactRequest};
use engram::session::{Session, SessionStore, Trigger};
use engram_store::SqliteStore;
use serde_json::{Value, json};

use crate::cli::{GlobalArgs, InputFormatArg, RecallArgs, SessionCommand};
use crate::{config, conversation_file, flag_error, memory, registry, user_error};

/// `session` with the embedder `--recall` asks for: the built-in model, MiniLM, or none (words
/// alone).
fn with_recall<'s>(session: Session<'s>, recall: &RecallArgs) -> Session<'s> {
    let mut options = session.options().clone();
    options.embedder = crate::embeddings::from_args(recall, crate::embeddings::Keep::Store);
    session.with_options(options)
}

pub(crate) fn run(global: &GlobalArgs, command: &SessionCommand) -> anyhow::Result<()> {
    let config = config::load(global)?;
    let path = memory::db_path(global)?;
    let store = SqliteStore::open(&path)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let policy = config.session_policy();
    let registry = registry::load(global)?;
    let open = |id: &str| Session::open_with(&store, id, &registry, policy);
    match command {
        SessionCommand::New {
            id,
            name,
            model,
            window,
            json,
        } => {
            let request = NewSessionRequest {
                model: model.clone(),
                window: *window,
                id: id.clone(),
                name: name.clone(),
            };
            let default_model = config.session.model.as_deref();
            if let Some(warning) = request.model_warning(&registry, default_model) {
                eprintln!("engram: warning: {warning}");
            }
            let new = request
                .into_new_session(&registry, default_model, now())
                .map_err(flag_error)?;
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
            idempotency_key,
            json,
        } => {
            let messages = match (user, assistant, system) {
                (Some(text), _, _) => vec![Message::user(text.clone())],
                (_, Some(text), _) => vec![Message::assistant(text.clone())],
                (_, _, Some(text)) => vec![Message::system(text.clone())],
                _ => {
                    let bytes = conversation_file::read_bytes(file.as_deref())?;
                    let conversation = conversation_file::parse(&bytes, InputFormatArg::Auto)?;
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
            let appended = session.append_once(messages, idempotency_key.as_deref())?;
            if appended.replayed && !*json {
                eprintln!(
                    "engram: this key's append was stored before; nothing was appended again"
                );
            }
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
            format,
            memory,
            recall,
        } => {
            let args = ContextRequest {
                budget: *budget,
                query: query.clone(),
                memory: Some(*memory),
                format: Some(format.clone()),
                ..ContextRequest::default()
            }
            .resolve(&registry)
            .map_err(flag_error)?;
            let session = with_recall(open(id)?, recall);
            let mut doc = serde_json::Map::new();
            if !plain {
                doc.insert("schema_version".into(), json!(1));
            }
            doc.extend(args.document(&session, *plain)?);
            if *plain {
                doc.remove("report");
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
            let session = open(id)?;
            let manual = SessionCompactRequest {
                target: target.map(|t| t as f64),
                strategy: Some(strategy.clone()),
                focus: focus.clone(),
                summary_prompt: crate::summarizer::prompt(summarizer)?,
            }
            .resolve(
                session.info().window,
                session.fixed_tokens()?,
                session.recent_tokens()?,
                &policy.trigger,
            )
            .map_err(flag_error)?;
            let mut options = manual.options();
            if let Some(s) = crate::summarizer::from_args(&registry, summarizer, &config)? {
                options.summarizer =
                    Some(s as std::sync::Arc<dyn engram::compact::summarize::Summarizer>);
            }
            let mut session = session.with_options(options);
            let outcome =
                session.compact(Trigger::Manual, manual.target, manual.focus.as_deref())?;
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
        SessionCommand::Ledger { id, json } => {
            let ledger = open(id)?.ledger()?;
            if *json {
                serde_json::to_writer_pretty(&mut out, &ledger.to_document())?;
                writeln!(out)?;
            } else if ledger.is_empty() {
                writeln!(
                    out,
                    "session {id}: no tool call read or changed a file, ran a command or wrote a plan yet"
                )?;
            } else {
                writeln!(out, "{}", ledger.render(usize::MAX))?;
            }
        }
        SessionCommand::Timeline {
            id,
            query,
            limit,
            json,
        } => {
            if *limit == Some(0) {
                return Err(user_error!(
                    "--limit must be positive: the most parts to list"
                ));
            }
            let doc = open(id)?.timeline_document(query.as_deref(), *limit)?;
            if *json {
                serde_json::to_writer_pretty(&mut out, &doc)?;
                writeln!(out)?;
            } else if doc["built_to"].is_null() {
                writeln!(
                    out,
                    "session {id} has no timeline yet: `engram memory sleep` builds one"
                )?;
            } else {
                let parts = doc["parts"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                if parts.is_empty() {
                    writeln!(out, "no part of the timeline matches")?;
                }
                for p in parts {
                    let text = |k: &str| p[k].as_str().unwrap_or_default().to_owned();
                    writeln!(
                        out,
                        "{}  {}..{}  {}",
                        text("date"),
                        text("from_id"),
                        text("to_id"),
                        text("line")
                    )?;
                }
            }
        }
        SessionCommand::CompactHistory {
            id,
            arguments,
            schema,
        } => {
            if let Some(format) = schema {
                let tool = if format == "anthropic" {
                    engram::tools::compact_history_tool_anthropic()
                } else {
                    engram::tools::compact_history_tool_openai()
                };
                serde_json::to_writer_pretty(&mut out, &tool)?;
                writeln!(out)?;
            } else {
                let id = id.as_deref().unwrap_or_default();
                let args = engram::tools::CompactHistoryArgs::parse(&Value::String(
                    arguments.clone().unwrap_or_default(),
                ))
                .map_err(|e| user_error!("compact_history arguments: {e}"))?;
                let mut session = open(id)?;
                writeln!(out, "{}", session.compact_history(&args)?)?;
            }
        }
        SessionCommand::Tools { schema } => {
            let format =
                engram::tools::SchemaFormat::from_name(schema).map_err(|e| user_error!("{e}"))?;
            serde_json::to_writer_pretty(&mut out, &engram::tools::schemas(format))?;
            writeln!(out)?;
        }
        SessionCommand::Tool {
            id,
            name,
            arguments,
            recall,
        } => {
            let mut session = with_recall(open(id)?, recall);
            let arguments = Value::String(arguments.clone().unwrap_or_default());
            let Some(reply) = session.handle_tool_call(name, &arguments) else {
                return Err(user_error!("{}", engram::tools::unknown_tool(name)));
            };
            let reply = reply?;
            if reply.is_error {
                return Err(user_error!("{}", reply.text));
            }
            writeln!(out, "{}", reply.text)?;
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
