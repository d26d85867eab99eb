//! The agent's tools as an MCP server (the official Rust SDK, `rmcp`): over standard input and
//! output for desktop hosts (`engram mcp`), and over streamable HTTP at `/mcp` in
//! `engram serve`, behind the same API keys and tenants as the REST API (each call opens the
//! store of the tenant its key names, and holds the session's write lock).
//!
//! A thin adapter: the tool list is [`engram::tools::definitions`] (plus `sessions_list` when
//! the server is not bound to one session) and every call goes to
//! [`Session::handle_tool_call`], the dispatcher the CLI, the REST API and Python use. Bad
//! arguments come back as a tool error (`isError`), never as a protocol error; an unknown
//! session is a tool error that names `sessions_list`.

use std::sync::Arc;

use engram::compact::CompactOptions;
use engram::session::{EngramStore, Session, SessionPolicy};
use engram::{ModelRegistry, tools};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, InitializeResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::{Value, json};

use crate::error::Error;

/// The tool that lists the sessions, offered when the server serves more than one.
pub const SESSIONS_LIST: &str = "sessions_list";

/// What the MCP server serves: a store (or the server's tenants' stores), and optionally the
/// one session every call is about.
#[derive(Clone)]
pub struct EngramMcp {
    backing: Backing,
    registry: Arc<ModelRegistry>,
    policy: SessionPolicy,
    /// The summarizer and embedder every session's compactions and searches use.
    models: CompactOptions,
    session: Option<String>,
}

/// Where the sessions are.
#[derive(Clone)]
enum Backing {
    /// One store (`engram mcp`).
    Store(Arc<dyn EngramStore>),
    /// The server's tenants (`/mcp` in `engram serve`).
    Served(Arc<crate::app::App>),
}

/// The MCP endpoint for `engram serve` (streamable HTTP), answering for every tenant.
pub(crate) fn http_service(
    app: Arc<crate::app::App>,
) -> rmcp::transport::streamable_http_server::StreamableHttpService<
    EngramMcp,
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
> {
    let keys = app.config.api_keys.is_some();
    let server = EngramMcp::served(app);
    let mut config = rmcp::transport::streamable_http_server::StreamableHttpServerConfig::default();
    if keys {
        // The API keys guard the endpoint, as they guard the REST API: any Host may reach it.
        // Without keys the server is on loopback, and the Host check (localhost, 127.0.0.1,
        // ::1) keeps a web page's DNS rebinding away from the agent's history.
        config = config.disable_allowed_hosts();
    }
    rmcp::transport::streamable_http_server::StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::default(),
        config,
    )
}

impl std::fmt::Debug for EngramMcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngramMcp")
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

impl EngramMcp {
    /// A server over `store`; `session` binds every call to that session. `models` (their
    /// [`CompactOptions::take_models`]) write the summaries and rank by meaning.
    pub fn new(
        store: Arc<dyn EngramStore>,
        registry: ModelRegistry,
        policy: SessionPolicy,
        models: &CompactOptions,
        session: Option<String>,
    ) -> Self {
        let mut own = CompactOptions::new(1);
        own.take_models(models);
        EngramMcp {
            backing: Backing::Store(store),
            registry: Arc::new(registry),
            policy,
            models: own,
            session,
        }
    }

    /// The server's tenants, with its registry, policy and summarizer.
    pub(crate) fn served(app: Arc<crate::app::App>) -> Self {
        EngramMcp {
            registry: Arc::new(app.config.registry.clone()),
            policy: *app.config.policy(),
            models: {
                let mut own = CompactOptions::new(1);
                own.take_models(&app.config.sleep.compact);
                own
            },
            session: None,
            backing: Backing::Served(app),
        }
    }

    /// Serves MCP on standard input and output until the client closes them.
    pub async fn serve_stdio(self) -> Result<(), Error> {
        self.serve_lines(tokio::io::stdin(), tokio::io::stdout())
            .await
    }

    /// Serves MCP over newline-delimited JSON-RPC on `input` and `output` until `input` ends.
    /// Every line gets an answer: one that is not JSON a parse error (-32700), one that is not a
    /// JSON-RPC message an invalid request (-32600), one longer than [`MAX_LINE_BYTES`] an
    /// error naming the limit; the others go to the server.
    pub async fn serve_lines<R, W>(self, input: R, output: W) -> Result<(), Error>
    where
        R: tokio::io::AsyncRead + Unpin + Send + 'static,
        W: tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        let (mut to_server, server_in) = tokio::io::duplex(1 << 16);
        let (server_out, from_server) = tokio::io::duplex(1 << 16);
        let (errors, mut errors_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        // One writer: the server's lines and the transport's errors, a line at a time.
        let writer = tokio::spawn(async move {
            let mut output = output;
            let mut lines = tokio::io::BufReader::new(from_server).lines();
            let (mut server_open, mut errors_open) = (true, true);
            while server_open || errors_open {
                let line = tokio::select! {
                    line = lines.next_line(), if server_open => match line {
                        Ok(Some(line)) => line,
                        _ => { server_open = false; continue; }
                    },
                    error = errors_rx.recv(), if errors_open => match error {
                        Some(error) => error,
                        None => { errors_open = false; continue; }
                    },
                };
                if output.write_all(line.as_bytes()).await.is_err()
                    || output.write_all(b"\n").await.is_err()
                    || output.flush().await.is_err()
                {
                    break;
                }
            }
        });
        let reader = tokio::spawn(async move {
            let mut input = tokio::io::BufReader::new(input);
            while let Ok(Some(line)) = read_line(&mut input, MAX_LINE_BYTES).await {
                let answer = match line {
                    Line::TooLong(bytes) => Some(rpc_error(
                        Value::Null,
                        -32600,
                        &format!(
                            "a message of more than {bytes} bytes is over this server's limit of {} MiB a line; nothing was done",
                            MAX_LINE_BYTES >> 20
                        ),
                    )),
                    Line::Whole(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => None,
                    Line::Whole(bytes) => match serde_json::from_slice::<Value>(&bytes) {
                        Err(e) => {
                            Some(rpc_error(Value::Null, -32700, &format!("Parse error: {e}")))
                        }
                        Ok(message) if is_rpc(&message) => {
                            if to_server.write_all(&bytes).await.is_err()
                                || to_server.write_all(b"\n").await.is_err()
                            {
                                break;
                            }
                            None
                        }
                        Ok(message) => Some(rpc_error(
                            message.get("id").cloned().unwrap_or(Value::Null),
                            -32600,
                            "Invalid Request: expected a JSON-RPC 2.0 message (an object with \"jsonrpc\": \"2.0\")",
                        )),
                    },
                };
                if let Some(answer) = answer
                    && errors.send(answer).is_err()
                {
                    break;
                }
            }
        });
        let running = match self.serve((server_in, server_out)).await {
            Ok(running) => running,
            // The client went before it initialized: nothing to serve.
            Err(_) if reader.is_finished() => {
                let _ = writer.await;
                return Ok(());
            }
            Err(e) => {
                return Err(Error::Io {
                    doing: "MCP start-up".into(),
                    source: std::io::Error::other(e),
                });
            }
        };
        let served = running.waiting().await.map_err(|e| Error::Io {
            doing: "MCP".into(),
            source: std::io::Error::other(e),
        });
        let _ = reader.await;
        let _ = writer.await;
        served.map(|_| ())
    }

    /// The tools' definitions as `tools/list` gives them: each with the arguments it takes
    /// (`session` when the server serves several), the schema of its answer's data and whether
    /// it changes anything.
    fn tool_list(&self) -> Vec<Value> {
        let sessions = if self.session.is_some() {
            tools::Sessions::One
        } else {
            tools::Sessions::Many
        };
        let mut list: Vec<Value> = tools::definitions_for(sessions)
            .iter()
            .map(|d| {
                json!({
                    "name": d.name,
                    "description": d.description,
                    "inputSchema": d.parameters,
                    "outputSchema": d.output,
                    "annotations": annotations(d.read_only),
                })
            })
            .collect();
        if self.session.is_none() {
            list.push(json!({
                "name": SESSIONS_LIST,
                "description": "Lists the sessions of this store (id, name, model, messages, last update), newest first; pass one's id as `session` to the other tools.",
                "inputSchema": {"type": "object", "properties": {}, "additionalProperties": false},
                "outputSchema": {
                    "type": "object",
                    "properties": {"sessions": {"type": "array", "items": {"type": "object"}}},
                    "required": ["sessions"],
                },
                "annotations": annotations(true),
            }));
        }
        list
    }

    /// Runs one call for `tenant` (the REST API's tenant, when served); the text and whether
    /// it is a tool error.
    fn run(
        &self,
        tenant: Option<&str>,
        name: &str,
        arguments: Value,
    ) -> Result<tools::ToolReply, String> {
        let store = self.store_for(tenant)?;
        let lock_of = match (&self.backing, tenant) {
            (Backing::Served(app), Some(tenant)) => Some((app.as_ref(), tenant)),
            _ => None,
        };
        if name == SESSIONS_LIST && self.session.is_none() {
            let sessions = store.sessions().map_err(|e| e.to_string())?;
            let list: Vec<Value> = sessions
                .iter()
                .map(|s| {
                    json!({
                        "id": s.id, "name": s.name, "model": s.model, "messages": s.messages,
                        "updated_at": engram::timestamp::format_time(s.updated_at),
                    })
                })
                .collect();
            return Ok(tools::ToolReply::data(&json!({ "sessions": list })));
        }
        if !tools::TOOL_NAMES.contains(&name) {
            return Ok(tools::ToolReply::error(tools::unknown_tool(name)));
        }
        let id = match (
            &self.session,
            arguments.get("session").and_then(Value::as_str),
        ) {
            (Some(bound), _) => bound.clone(),
            (None, Some(id)) => id.to_owned(),
            (None, None) => {
                // Memory is the store's, not a session's: its tools run without one.
                let embedder = self.models.embedder.as_deref();
                if let Some(reply) = engram::request::tool_calls::run_memory_tool(
                    store.as_ref(),
                    embedder,
                    None,
                    self.policy.redact_memory,
                    name,
                    &arguments,
                ) {
                    return reply.map_err(|e| e.to_string());
                }
                return Ok(tools::ToolReply::error(format!(
                    "{name}: `session` is required: the session's id ({SESSIONS_LIST} lists them)"
                )));
            }
        };
        let mut arguments = arguments;
        if self.session.is_none()
            && let Some(map) = arguments.as_object_mut()
        {
            map.remove("session");
        }
        // Served, a call holds the session's write lock as a REST request does.
        let lock = lock_of.map(|(app, tenant)| app.session_lock(tenant, &id));
        let _guard = lock
            .as_ref()
            .map(|l| l.lock().unwrap_or_else(|p| p.into_inner()));
        let session = match Session::open_with(store.as_ref(), &id, &self.registry, self.policy) {
            Ok(s) => s,
            Err(engram::Error::NotFound { message: m, .. }) => {
                return Ok(tools::ToolReply::error(format!(
                    "{name}: {m} ({SESSIONS_LIST} lists them)"
                )));
            }
            Err(e) => return Err(e.to_string()),
        };
        let mut session = session.with_models(&self.models);
        match session.handle_tool_call(name, &arguments) {
            Some(Ok(reply)) => Ok(reply),
            Some(Err(e)) => Err(e.to_string()),
            None => Ok(tools::ToolReply::error(tools::unknown_tool(name))),
        }
    }
}

/// The most one line of the stdio transport may hold: the HTTP endpoint's body limit.
pub const MAX_LINE_BYTES: usize = crate::config::DEFAULT_MAX_BODY_BYTES;

/// One line of input: whole, or only its length when it is over the limit (its bytes are read
/// and let go).
enum Line {
    Whole(Vec<u8>),
    TooLong(usize),
}

/// The next line of `input`, without its newline; `None` at the end.
async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(
    input: &mut R,
    limit: usize,
) -> std::io::Result<Option<Line>> {
    use tokio::io::AsyncBufReadExt;
    let mut line = Vec::new();
    let mut total = 0usize;
    loop {
        let buffer = input.fill_buf().await?;
        if buffer.is_empty() {
            return Ok(match total {
                0 => None,
                n if n > limit => Some(Line::TooLong(n)),
                _ => Some(Line::Whole(line)),
            });
        }
        let (chunk, done) = match buffer.iter().position(|&b| b == b'\n') {
            Some(at) => (&buffer[..at], Some(at + 1)),
            None => (buffer, None),
        };
        total += chunk.len();
        if total <= limit {
            line.extend_from_slice(chunk);
        } else {
            line = Vec::new();
        }
        let used = done.unwrap_or(buffer.len());
        input.consume(used);
        if done.is_some() {
            return Ok(Some(if total > limit {
                Line::TooLong(total)
            } else {
                Line::Whole(line)
            }));
        }
    }
}

/// True for what can be a JSON-RPC 2.0 message (or a batch of them).
fn is_rpc(message: &Value) -> bool {
    match message {
        Value::Object(map) => map.get("jsonrpc").and_then(Value::as_str) == Some("2.0"),
        Value::Array(items) => !items.is_empty() && items.iter().all(is_rpc),
        _ => false,
    }
}

/// A JSON-RPC error response, as one line.
fn rpc_error(id: Value, code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

/// MCP over HTTP answered as the REST API answers: an error as JSON (`{"error": {"message"}}`),
/// and the end of a session (DELETE) as 204 No Content, which the MCP SDKs take for success.
pub(crate) async fn http_answers(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    let delete = request.method() == axum::http::Method::DELETE;
    let response = next.run(request).await;
    let status = response.status();
    if delete && status == StatusCode::ACCEPTED {
        return StatusCode::NO_CONTENT.into_response();
    }
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.contains("json") || t.contains("event-stream"));
    if !(status.is_client_error() || status.is_server_error()) || json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 64 << 10)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_owned()
    } else {
        text
    };
    let mut answer = (
        status,
        axum::Json(json!({"error": {"message": format!("MCP: {message}")}})),
    )
        .into_response();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            answer.headers_mut().insert(name.clone(), value.clone());
        }
    }
    answer
}

/// MCP's hints about a tool: whether it changes anything (none deletes; none is idempotent
/// that writes).
fn annotations(read_only: bool) -> Value {
    if read_only {
        json!({"readOnlyHint": true, "openWorldHint": false})
    } else {
        json!({"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false, "openWorldHint": false})
    }
}

/// A resource's address: `engram://sessions/{id}/view` or `.../compactions`.
fn resource_uri(id: &str, what: &str) -> String {
    format!("engram://sessions/{id}/{what}")
}

impl EngramMcp {
    /// The store a call works on: the one store, or the tenant's when served.
    fn store_for(&self, tenant: Option<&str>) -> Result<Arc<dyn EngramStore>, String> {
        match (&self.backing, tenant) {
            (Backing::Store(store), _) => Ok(Arc::clone(store)),
            (Backing::Served(app), Some(tenant)) => Ok(Arc::clone(
                &app.tenant_store(tenant).map_err(|e| e.to_string())?.store,
            )),
            (Backing::Served(_), None) => Err("no tenant on the request".to_owned()),
        }
    }

    /// Each session's view and compaction records (the bound session's only, when bound).
    fn resource_list(&self, tenant: Option<&str>) -> Result<Vec<Value>, String> {
        let store = self.store_for(tenant)?;
        let ids: Vec<String> = match &self.session {
            Some(id) => vec![id.clone()],
            None => store
                .sessions()
                .map_err(|e| e.to_string())?
                .into_iter()
                .map(|s| s.id)
                .collect(),
        };
        Ok(ids
            .iter()
            .flat_map(|id| {
                [
                    json!({
                        "uri": resource_uri(id, "view"),
                        "name": format!("session {id}: view"),
                        "description": "The messages in the session's context now, with where each came from",
                        "mimeType": "application/json",
                    }),
                    json!({
                        "uri": resource_uri(id, "compactions"),
                        "name": format!("session {id}: compactions"),
                        "description": "The session's compactions: when, why, tokens before and after, what each covered",
                        "mimeType": "application/json",
                    }),
                ]
            })
            .collect())
    }

    /// A resource's text; `Ok(None)` when there is no such resource.
    fn read(&self, tenant: Option<&str>, uri: &str) -> Result<Option<String>, String> {
        let Some((id, what)) = uri
            .strip_prefix("engram://sessions/")
            .and_then(|rest| rest.rsplit_once('/'))
        else {
            return Ok(None);
        };
        if self.session.as_deref().is_some_and(|bound| bound != id) {
            return Ok(None);
        }
        let store = self.store_for(tenant)?;
        let session = match Session::open_with(store.as_ref(), id, &self.registry, self.policy) {
            Ok(s) => s,
            Err(engram::Error::NotFound { .. }) => {
                return Ok(None);
            }
            Err(e) => return Err(e.to_string()),
        };
        let value = match what {
            "view" => {
                let view = session.view().map_err(|e| e.to_string())?;
                json!({
                    "session_id": id,
                    "tokens": view.tokens,
                    "compaction_id": view.compaction_id,
                    "messages": view.messages.iter().map(|m| m.to_value(false)).collect::<Vec<_>>(),
                })
            }
            "compactions" => json!({
                "session_id": id,
                "compactions": store.compactions(id, false).map_err(|e| e.to_string())?,
            }),
            _ => return Ok(None),
        };
        Ok(Some(
            serde_json::to_string_pretty(&value).unwrap_or_default(),
        ))
    }
}

/// The tenant the API key named, when the call came over HTTP.
fn tenant_of(context: &RequestContext<RoleServer>) -> Option<String> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<crate::auth::Tenant>())
        .map(|t| t.0.clone())
}

impl ServerHandler for EngramMcp {
    fn get_info(&self) -> ServerConfig {
        let capabilities =
            serde_json::from_value(json!({"tools": {}, "resources": {}})).unwrap_or_default();
        let server = serde_json::from_value(json!({
            "name": "engram",
            "version": env!("CARGO_PKG_VERSION"),
        }))
        .unwrap_or_default();
        InitializeResult::new(capabilities)
            .with_server_info(server)
            .with_instructions(
                "engram keeps this conversation's whole history. When your context says a tool output was archived or earlier messages were consolidated, search_history finds them and read_history reads them back verbatim; context_status says how full your context is and compact_history frees room.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        serde_json::from_value(json!({ "tools": self.tool_list() }))
            .map_err(|e| ErrorData::internal_error(format!("tool list: {e}"), None))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let tenant = tenant_of(&context);
        let server = self.clone();
        let list = tokio::task::spawn_blocking(move || server.resource_list(tenant.as_deref()))
            .await
            .map_err(|e| ErrorData::internal_error(format!("resources: {e}"), None))?
            .map_err(|e| ErrorData::internal_error(e, None))?;
        serde_json::from_value(json!({ "resources": list }))
            .map_err(|e| ErrorData::internal_error(format!("resource list: {e}"), None))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let tenant = tenant_of(&context);
        let uri = request.uri;
        let server = self.clone();
        let wanted = uri.clone();
        let text = tokio::task::spawn_blocking(move || server.read(tenant.as_deref(), &wanted))
            .await
            .map_err(|e| ErrorData::internal_error(format!("resource: {e}"), None))?
            .map_err(|e| ErrorData::internal_error(e, None))?
            .ok_or_else(|| {
                ErrorData::resource_not_found(
                    format!("no resource {uri}: resources/list lists them"),
                    None,
                )
            })?;
        let result: ReadResourceResult = serde_json::from_value(json!({
            "contents": [{"uri": uri, "mimeType": "application/json", "text": text}],
        }))
        .map_err(|e| ErrorData::internal_error(format!("resource: {e}"), None))?;
        Ok(result.into())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        // Served, the tenant the API key named (the authentication middleware put it on the
        // HTTP request, which rmcp hands over with the call).
        let tenant = tenant_of(&context);
        let server = self.clone();
        let outcome =
            tokio::task::spawn_blocking(move || server.run(tenant.as_deref(), &name, arguments))
                .await
                .map_err(|e| ErrorData::internal_error(format!("tool call: {e}"), None))?;
        let reply = match outcome {
            Ok(reply) => reply,
            Err(e) => {
                tracing::error!(error = %e, "MCP tool call failed");
                tools::ToolReply::error(format!("engram could not answer: {e}"))
            }
        };
        // The data as the tool's output schema describes it, and the text for hosts that read
        // only that.
        let mut result = json!({
            "content": [{"type": "text", "text": reply.text}],
            "isError": reply.is_error,
        });
        if let Some(data) = reply.structured() {
            result["structuredContent"] = data;
        }
        let result: CallToolResult = serde_json::from_value(result)
            .map_err(|e| ErrorData::internal_error(format!("tool result: {e}"), None))?;
        Ok(result.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engram::Message;
    use engram::in_memory::InMemoryStore;
    use engram::session::{NewSession, Session};

    #[test]
    fn search_history_ranks_by_meaning_with_the_servers_embedder() {
        let store: Arc<dyn EngramStore> = Arc::new(InMemoryStore::new());
        let new = NewSession {
            id: Some("s".into()),
            model: "test-model".into(),
            tokenizer: "chars4".into(),
            token_factor: 1.0,
            window: 100_000,
            ..NewSession::default()
        };
        let mut session = Session::create(store.as_ref(), &new).expect("creates");
        let mut messages = vec![Message::user("My dog Rex chases frisbees in the park")];
        for i in 0..20 {
            messages.push(Message::user(format!("the meeting moved to room {i}")));
        }
        session.append(messages).expect("appends");
        drop(session);
        let search = |models: &CompactOptions| {
            let server = EngramMcp::new(
                store.clone(),
                ModelRegistry::builtin(),
                SessionPolicy::default(),
                models,
                Some("s".into()),
            );
            let reply = server
                .run(
                    None,
                    "search_history",
                    json!({"query": "which pet do I have", "limit": 3}),
                )
                .expect("answers");
            assert!(!reply.is_error, "{}", reply.text);
            reply.text.contains("Rex")
        };
        let mut models = CompactOptions::new(1);
        models.embedder = None;
        assert!(!search(&models), "no word in common, by words alone");
        models.embedder = Some(Arc::new(engram::embed::Topics));
        assert!(search(&models), "found by meaning");
    }
}
