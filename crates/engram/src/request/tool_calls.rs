//! The one dispatcher of the agent's tools: [`Session::handle_tool_call`] runs any tool that
//! [`crate::tools::definitions`] lists (the CLI, the server, Python and MCP all call it), and
//! [`run_memory_tool`] runs the memory tools, which need no session. Bad arguments are tool
//! errors the model reads; only a failing store is an `Err`.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{AddMemory, Names, SearchRequest, from_json};
use crate::Error;
use crate::session::Session;
use crate::session::history::{self, DEFAULT_READ_TOKENS, History, HistorySelection};
use crate::session::timeline::Timeline;
use crate::tools::{self, CompactHistoryArgs, ToolReply};

/// The most parts of the timeline a `search_history` reply lists beside its hits.
const TIMELINE_PARTS: usize = 3;

impl Session<'_> {
    /// Runs one of the agent's tools ([`crate::tools::definitions`]) with the call's
    /// `arguments` (a JSON string or an object). `None` when `name` is not one of engram's
    /// tools (the caller runs it); bad arguments and unknown ids are tool errors, never a
    /// failure of the call; only a failing store is an `Err`. Only `compact_history` and
    /// `memory_add` write.
    pub fn handle_tool_call(
        &mut self,
        name: &str,
        arguments: &Value,
    ) -> Option<Result<ToolReply, Error>> {
        if !tools::TOOL_NAMES.contains(&name) {
            return None;
        }
        Some(self.run_tool(name, arguments))
    }

    fn run_tool(&mut self, name: &str, arguments: &Value) -> Result<ToolReply, Error> {
        let args = match tools::arguments_object(arguments) {
            Ok(args) => args,
            Err(e) => return Ok(ToolReply::error(format!("{name}: {e}"))),
        };
        if let Some(session) = args.get("session").and_then(Value::as_str)
            && session != self.info().id
        {
            return Ok(ToolReply::error(format!(
                "`session`: this call is bound to session {}, not {session}",
                self.info().id
            )));
        }
        let reply = match name {
            tools::SEARCH_HISTORY => search_tool(self, args, self.timeline()?.as_ref()),
            tools::READ_HISTORY => read_tool(self, args),
            tools::COMPACT_HISTORY => match CompactHistoryArgs::parse(&args) {
                Ok(a) => Ok(ToolReply::ok(self.compact_history(&a)?)),
                Err(e) => Err(Failure::Arguments(e.to_string())),
            },
            tools::CONTEXT_STATUS => self.status_tool(args),
            tools::MEMORY_SEARCH => {
                memory_search_tool(self.store(), self.options().embedder.as_deref(), args)
            }
            tools::MEMORY_ADD => memory_add_tool(
                self.store(),
                Some(&self.info().id),
                self.policy().redact_memory,
                args,
            ),
            _ => Err(Failure::Arguments(tools::unknown_tool(name))),
        };
        tool_reply(name, reply)
    }

    /// `context_status`: the status numbers and, once a tool call did something the ledger
    /// records, the work ledger's text (at most [`STATUS_LEDGER_CHARS`]).
    fn status_tool(&self, args: Value) -> Result<ToolReply, Failure> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Args {
            #[allow(dead_code)]
            session: Option<String>,
        }
        let _: Args = parse(args)?;
        let status = self.status()?;
        let compactions = self.store().compactions(&self.info().id, false)?.len();
        let mut doc = serde_json::Map::new();
        doc.insert("session_id".into(), json!(self.info().id));
        doc.extend(status.numbers());
        doc.insert("compactions".into(), json!(compactions));
        let ledger = self.ledger()?;
        if !ledger.is_empty() {
            doc.insert("ledger".into(), json!(ledger.render(STATUS_LEDGER_CHARS)));
        }
        Ok(ToolReply::data(&Value::Object(doc)))
    }
}

/// `search_history` over `h`, with the parts of `timeline` that carry the query.
fn search_tool(
    h: &dyn History,
    args: Value,
    timeline: Option<&Timeline>,
) -> Result<ToolReply, Failure> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Args {
        query: Option<String>,
        limit: Option<usize>,
        #[allow(dead_code)]
        session: Option<String>,
    }
    let a: Args = parse(args)?;
    let query = a
        .query
        .filter(|q| !q.trim().is_empty())
        .ok_or_else(|| args_error("`query` is required: the words to look for"))?;
    let limit = limit(a.limit, tools::DEFAULT_TOOL_HITS)?;
    let hits = history::search(h, &query, limit)?;
    let mut reply = json!({ "query": query, "hits": hits });
    // The parts of the history that carried the topic, from the timeline sleep built:
    // each with the first and last ids `read_history` takes to read it whole.
    if let Some(timeline) = timeline {
        let parts = timeline.search_json(&query, TIMELINE_PARTS);
        if !parts.is_empty() {
            reply["timeline"] = Value::Array(parts);
        }
    }
    Ok(ToolReply::data(&reply))
}

/// `read_history` over `h`.
fn read_tool(h: &dyn History, args: Value) -> Result<ToolReply, Failure> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Args {
        ids: Option<Names>,
        from: Option<String>,
        to: Option<String>,
        max_tokens: Option<usize>,
        metadata: Option<bool>,
        #[allow(dead_code)]
        session: Option<String>,
    }
    let a: Args = parse(args)?;
    let selection = match (a.ids, a.from) {
        (Some(_), Some(_)) => {
            return Err(args_error("give `ids` or `from` (and `to`), not both"));
        }
        (Some(ids), None) => {
            let ids: Vec<String> = match ids {
                Names::One(s) => s.split(',').map(|i| i.trim().to_owned()).collect(),
                Names::Many(v) => v,
            };
            let ids: Vec<String> = ids.into_iter().filter(|i| !i.is_empty()).collect();
            if ids.is_empty() {
                return Err(args_error("`ids` is empty: name the messages to read"));
            }
            HistorySelection::Ids(ids)
        }
        (None, Some(from)) => HistorySelection::Range { from, to: a.to },
        (None, None) => {
            return Err(args_error(
                "`ids` or `from` is required: the messages to read",
            ));
        }
    };
    let max_tokens = match a.max_tokens {
        Some(0) => return Err(args_error("`max_tokens` must be positive")),
        Some(n) => n,
        None => DEFAULT_READ_TOKENS,
    };
    let read = history::read(h, &selection, max_tokens, a.metadata.unwrap_or(false))?;
    Ok(ToolReply::data(&json!(read)))
}

/// Runs `search_history` or `read_history` over a history that is not a session's (a request
/// that carries its whole conversation): the tools' one argument check and answer, as a
/// session's calls get them. `None` for every other tool.
pub(crate) fn run_history_tool(
    h: &dyn History,
    name: &str,
    arguments: &Value,
) -> Option<ToolReply> {
    let args = match tools::arguments_object(arguments) {
        Ok(args) => args,
        Err(e) => return Some(ToolReply::error(format!("{name}: {e}"))),
    };
    let reply = match name {
        tools::SEARCH_HISTORY => search_tool(h, args, None),
        tools::READ_HISTORY => read_tool(h, args),
        _ => return None,
    };
    Some(tool_reply(name, reply).unwrap_or_else(|e| ToolReply::error(format!("{name}: {e}"))))
}

/// The most characters of the work ledger `context_status` returns: the open failures, the plan
/// and the newest files first, about a thousand tokens.
const STATUS_LEDGER_CHARS: usize = 4_000;

/// Runs `memory_search` or `memory_add` on `store`, which need no session: a front serving
/// several sessions (MCP without `--session`) calls this when the call names none, and a
/// session's own calls come here too. `memory_search` ranks as memory search does everywhere
/// (fused with meaning when `embedder` is given); `memory_add`'s entry belongs to `session`,
/// or to none, and loses its secrets when `redact` (the `[memory] redact` setting) says so.
/// `None` for every other tool (they need a session). Bad arguments are tool
/// errors; only a failing store is an `Err`.
pub fn run_memory_tool(
    store: &dyn crate::memory::MemoryStore,
    embedder: Option<&dyn crate::embed::Embedder>,
    session: Option<&str>,
    redact: bool,
    name: &str,
    arguments: &Value,
) -> Option<Result<ToolReply, Error>> {
    if name != tools::MEMORY_SEARCH && name != tools::MEMORY_ADD {
        return None;
    }
    let args = match tools::arguments_object(arguments) {
        Ok(args) => args,
        Err(e) => return Some(Ok(ToolReply::error(format!("{name}: {e}")))),
    };
    let reply = if name == tools::MEMORY_SEARCH {
        memory_search_tool(store, embedder, args)
    } else {
        memory_add_tool(store, session, redact, args)
    };
    Some(tool_reply(name, reply))
}

/// A tool's outcome as its caller gets it: bad arguments are a tool error naming the tool;
/// only a failing store is an `Err`.
fn tool_reply(name: &str, reply: Result<ToolReply, Failure>) -> Result<ToolReply, Error> {
    match reply {
        Ok(reply) => Ok(reply),
        Err(Failure::Arguments(e)) => Ok(ToolReply::error(format!("{name}: {e}"))),
        Err(Failure::Store(e)) => Err(e),
    }
}

fn memory_search_tool(
    store: &dyn crate::memory::MemoryStore,
    embedder: Option<&dyn crate::embed::Embedder>,
    args: Value,
) -> Result<ToolReply, Failure> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Args {
        query: Option<String>,
        limit: Option<usize>,
        tier: Option<Names>,
        #[allow(dead_code)]
        session: Option<String>,
    }
    let a: Args = parse(args)?;
    let query = SearchRequest {
        text: a.query,
        limit: Some(limit(a.limit, tools::DEFAULT_TOOL_HITS)?),
        tiers: a.tier,
        ..SearchRequest::default()
    }
    .into_query("query")
    .map_err(|e| Failure::Arguments(e.to_string()))?;
    let hits = crate::memory::search::find(store, &query, embedder)?;
    let results: Vec<Value> = hits.iter().map(|h| h.to_json()).collect();
    Ok(ToolReply::data(&json!({ "results": results })))
}

fn memory_add_tool(
    store: &dyn crate::memory::MemoryStore,
    session: Option<&str>,
    redact: bool,
    args: Value,
) -> Result<ToolReply, Failure> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Args {
        content: Option<String>,
        source: Option<String>,
        #[allow(dead_code)]
        session: Option<String>,
    }
    let a: Args = parse(args)?;
    let entry = AddMemory::new(redact)
        .tool_call(a.content, a.source, session)
        .map_err(|e| Failure::Arguments(e.to_string()))?;
    let id = entry.id.clone();
    store.insert(&[entry])?;
    Ok(ToolReply::data(
        &json!({ "id": id, "tier": "working", "session_id": session }),
    ))
}

/// Why a tool call did not answer: its arguments (a tool error the model reads), or the store.
enum Failure {
    Arguments(String),
    Store(Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Store(e)
    }
}

fn args_error(message: &str) -> Failure {
    Failure::Arguments(message.to_owned())
}

/// A tool's arguments into its type; a mistake names the argument.
fn parse<T: serde::de::DeserializeOwned>(args: Value) -> Result<T, Failure> {
    from_json(args).map_err(|e| Failure::Arguments(e.to_string()))
}

fn limit(value: Option<usize>, default: usize) -> Result<usize, Failure> {
    match value {
        None => Ok(default),
        Some(n) if (1..=tools::MAX_TOOL_HITS).contains(&n) => Ok(n),
        Some(n) => Err(Failure::Arguments(format!(
            "`limit` must be from 1 to {}, not {n}",
            tools::MAX_TOOL_HITS
        ))),
    }
}
