//! Routes, authentication, errors.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequestParts, MatchedPath, Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header, request::Parts};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use engram::Message;
use engram::compact::CompactOptions;
use engram::memory::{SearchHit, StoreError, format_time, now};
use engram::request::{
    AddMemory, CheckpointRequest, ContextRequest, ForgetRequest, NewSessionRequest, RequestError,
    SearchRequest, SessionCompactRequest, SleepRequest, from_json,
};
use engram::session::{Session, SessionError, Trigger};
use engram::sleep::sleep_tick;
use serde_json::{Value, json};

use crate::{App, LOCAL_TENANT, TenantStore};

/// An error as the API reports it: `{"error": {"message", "field"?}}`.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    message: String,
    field: Option<String>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            field: None,
        }
    }

    fn bad(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    fn field(field: &str, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: format!("`{field}`: {}", message.into()),
            field: Some(field.to_owned()),
        }
    }

    /// A 500 whose detail goes to the log, never to the client.
    pub(crate) fn internal(detail: impl std::fmt::Display) -> Self {
        tracing::error!(%detail, "internal error");
        eprintln!("engram serve: internal error: {detail}");
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
    }
}

impl ApiError {
    /// A 503 for a tenant whose store cannot be opened (a foreign or damaged database file,
    /// an unreachable server): the detail, with the file, goes to the log; the client is told
    /// that the fault is on the server's side and lasting until an operator acts.
    fn store_unavailable(tenant: &str, detail: impl std::fmt::Display) -> Self {
        tracing::error!(%tenant, %detail, "cannot open the tenant's store");
        eprintln!("engram serve: cannot open the store of tenant {tenant:?}: {detail}");
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "this tenant's store cannot be opened; the server's log says why",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = json!({"message": self.message});
        if let Some(f) = self.field {
            error["field"] = json!(f);
        }
        (self.status, axum::Json(json!({ "error": error }))).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(m) => ApiError::new(StatusCode::NOT_FOUND, m),
            StoreError::Rejected(m) => ApiError::bad(m),
            StoreError::Conflict(m) => ApiError::new(StatusCode::CONFLICT, m),
            other => ApiError::internal(other),
        }
    }
}

impl From<SessionError> for ApiError {
    fn from(e: SessionError) -> Self {
        match e {
            SessionError::Store(m) => m.into(),
            SessionError::Invalid(m) => ApiError::bad(m),
            SessionError::Compact(c) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, c.to_string())
            }
            other => ApiError::internal(other),
        }
    }
}

impl From<RequestError> for ApiError {
    fn from(e: RequestError) -> Self {
        if e.field.is_empty() {
            ApiError::bad(e.message)
        } else {
            ApiError::field(&e.field, e.message)
        }
    }
}

/// A query string read into `T`. A parameter of the wrong type is a 400 whose `field` names
/// it, in the words a body's field gets (axum's `Query` answers in plain text).
pub(crate) struct Params<T>(T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let query = parts.uri.query().unwrap_or_default();
        let keys: Vec<String> = form_urlencoded::parse(query.as_bytes())
            .map(|(k, _)| k.into_owned())
            .collect();
        if let Some(e) = engram::request::unknown_field::<T>(&keys) {
            return Err(e.into());
        }
        let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(de)
            .map(Params)
            .map_err(|e| engram::request::field_error(e).into())
    }
}

type ApiResult = Result<Response, ApiError>;

fn ok(value: Value) -> ApiResult {
    Ok(axum::Json(value).into_response())
}

/// The tenant a request was authenticated as.
/// The tenant an API key names (on the request, for the handlers and for MCP).
#[derive(Clone)]
pub(crate) struct Tenant(pub(crate) String);

pub(crate) fn router(app: Arc<App>) -> Router {
    let limit = app.config.max_body_bytes;
    let v1 = Router::new()
        .route("/v1/sessions", post(create_session).get(list_sessions))
        .route(
            "/v1/sessions/{id}",
            get(show_session).delete(delete_session),
        )
        .route("/v1/sessions/{id}/messages", post(append).get(messages))
        .route(
            "/v1/sessions/{id}/context",
            post(context).get(context_query),
        )
        .route("/v1/sessions/{id}/compact", post(compact))
        .route("/v1/sessions/{id}/status", get(status))
        .route("/v1/sessions/{id}/window", get(window))
        .route("/v1/proxy/requests", get(crate::proxy::recent_requests))
        .route("/v1/sessions/{id}/tools/{name}", post(tool_call))
        .route("/v1/tools", get(tool_schemas))
        .route("/v1/sessions/{id}/checkpoints", post(checkpoint))
        .route(
            "/v1/sessions/{id}/checkpoints/{name}/restore",
            post(restore),
        )
        .route("/v1/memory", post(add_memory))
        .route("/v1/memory/search", get(search))
        .route("/v1/memory/forget", post(forget))
        .route("/v1/memory/sleep", post(sleep))
        .route("/v1/memory/log", get(log))
        .route("/v1/memory/stats", get(memory_stats))
        .nest_service(
            "/mcp",
            tower::Layer::layer(
                &middleware::from_fn(crate::mcp::http_answers),
                crate::mcp::http_service(Arc::clone(&app)),
            ),
        )
        .route_layer(middleware::from_fn_with_state(
            Arc::clone(&app),
            authenticate,
        ))
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&app),
            body_deadline,
        ));
    // The proxy's routes check X-Engram-Key themselves: Authorization is the upstream's.
    Router::new()
        .merge(v1)
        .route("/v1/chat/completions", post(crate::proxy::chat_completions))
        .route("/v1/messages", post(crate::proxy::anthropic_messages))
        .route("/v1/responses", post(crate::proxy::responses))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/ui", get(crate::ui::index))
        .route("/ui/", get(crate::ui::index))
        .route("/ui/app.js", get(crate::ui::script))
        .route("/ui/app.css", get(crate::ui::style))
        .route("/ui/config.json", get(crate::ui::config))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .fallback(fallback)
        .method_not_allowed_fallback(method_not_allowed)
        // The proxy's routes (and the pass-through) take larger bodies; the REST routes above
        // keep their own limit (the innermost limit is the one that applies).
        .layer(DefaultBodyLimit::max(app.config.max_proxy_body_bytes))
        .layer(middleware::from_fn_with_state(Arc::clone(&app), measure))
        .with_state(app)
}

/// Other `/v1/*` routes go to the upstream when one is configured; anything else is a 404.
async fn fallback(State(app): State<Arc<App>>, request: Request) -> Response {
    let proxied =
        app.config.proxy.openai_upstream.is_some() || app.config.proxy.anthropic_upstream.is_some();
    if proxied && request.uri().path().starts_with("/v1/") {
        return crate::proxy::pass_through(app, request).await;
    }
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no such route (GET /openapi.json lists them)",
    )
    .into_response()
}

/// A route asked with a method it does not take: a JSON error like every other (axum keeps
/// the `allow` header).
async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "{method} is not allowed on {}; the allow header lists the methods that are (GET /openapi.json lists every route)",
            uri.path()
        ),
    )
    .into_response()
}

async fn measure(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().as_str().to_owned();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "other".to_owned(), |p| p.as_str().to_owned());
    let response = next.run(request).await;
    app.metrics.request(
        &method,
        &route,
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}

/// Reads a REST request's body within the body timeout (a client that dribbles its body is
/// answered 408 and its connection freed), then hands it on.
async fn body_deadline(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let limit = app.config.max_body_bytes;
    let read = tokio::time::timeout(app.config.body_timeout, axum::body::to_bytes(body, limit));
    match read.await {
        Err(_) => crate::proxy::body_too_slow(app.config.body_timeout).into_response(),
        // Over the REST limit: a JSON error that says how to raise it.
        Ok(Err(_)) => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the request body is larger than {} MiB, the server's limit (engram serve --max-body-mb, or [server] max_body_mb)",
                limit >> 20
            ),
        )
        .into_response(),
        Ok(Ok(bytes)) => {
            next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
                .await
        }
    }
}

async fn authenticate(State(app): State<Arc<App>>, mut request: Request, next: Next) -> Response {
    let tenant = match &app.config.api_keys {
        None => LOCAL_TENANT.to_owned(),
        Some(keys) => {
            let key = bearer(request.headers());
            match key.and_then(|k| keys.tenant(k)) {
                Some(t) => t.to_owned(),
                None => {
                    let mut r = ApiError::new(
                        StatusCode::UNAUTHORIZED,
                        if key.is_none() {
                            "missing API key: send Authorization: Bearer <key>"
                        } else {
                            "unknown API key"
                        },
                    )
                    .into_response();
                    r.headers_mut().insert(
                        header::WWW_AUTHENTICATE,
                        header::HeaderValue::from_static("Bearer"),
                    );
                    return r;
                }
            }
        }
    };
    request.extensions_mut().insert(Tenant(tenant));
    next.run(request).await
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, key) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| key.trim())
}

/// Runs `work` with the tenant's store on the blocking pool.
async fn with_store<F>(app: &Arc<App>, tenant: &Tenant, work: F) -> ApiResult
where
    F: FnOnce(&App, &TenantStore) -> ApiResult + Send + 'static,
{
    let app = Arc::clone(app);
    let tenant = tenant.0.clone();
    tokio::task::spawn_blocking(move || {
        let store = app
            .tenant_store(&tenant)
            .map_err(|e| ApiError::store_unavailable(&tenant, e))?;
        work(&app, &store)
    })
    .await
    .map_err(ApiError::internal)?
}

/// Like [`with_store`], holding the session's write lock.
async fn with_session_lock<F>(app: &Arc<App>, tenant: &Tenant, id: &str, work: F) -> ApiResult
where
    F: FnOnce(&App, &TenantStore) -> ApiResult + Send + 'static,
{
    let lock = app.session_lock(&tenant.0, id);
    with_store(app, tenant, move |app, store| {
        let _guard = lock.lock().unwrap_or_else(|p| p.into_inner());
        work(app, store)
    })
    .await
}

fn body(bytes: &Bytes) -> Result<Value, ApiError> {
    if bytes.is_empty() {
        return Ok(json!({}));
    }
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        ApiError::bad(format!(
            "invalid JSON at line {}, column {}: {e}",
            e.line(),
            e.column()
        ))
    })?;
    if !value.is_object() {
        return Err(ApiError::bad("the body must be a JSON object"));
    }
    Ok(value)
}

/// A true-or-false query parameter (`true`/`1`, `false`/`0`); anything else is a 400 naming it.
fn flag(value: Option<&str>, key: &str, default: bool) -> Result<bool, ApiError> {
    match value {
        None => Ok(default),
        Some("true" | "1") => Ok(true),
        Some("false" | "0") => Ok(false),
        Some(other) => Err(ApiError::field(
            key,
            format!("expected true or false, not {other:?}"),
        )),
    }
}

fn open<'s>(app: &App, store: &'s TenantStore, id: &str) -> Result<Session<'s>, ApiError> {
    let session = Session::open_with(
        store.store.as_ref(),
        id,
        &app.config.registry,
        *app.config.policy(),
    )?;
    let mut options = CompactOptions::new(session.info().window);
    options.take_models(&app.config.sleep.compact);
    Ok(session.with_options(options))
}

async fn create_session(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    bytes: Bytes,
) -> ApiResult {
    let request = from_json::<NewSessionRequest>(body(&bytes)?)?;
    let warning = request.model_warning(&app.config.registry, None);
    let new = request.into_new_session(&app.config.registry, None, now())?;
    with_store(&app, &tenant, move |_, store| {
        let session = Session::create(store.store.as_ref(), &new)?;
        let info = engram::request::created_session_document(&session, warning);
        let mut r = axum::Json(info).into_response();
        *r.status_mut() = StatusCode::CREATED;
        Ok(r)
    })
    .await
}

/// `GET /v1/sessions`'s query string.
#[derive(serde::Deserialize)]
struct ListParams {
    usage: Option<String>,
}

/// `GET /v1/sessions/{id}`'s query string.
#[derive(serde::Deserialize)]
struct ShowParams {
    summaries: Option<String>,
}

/// `GET /v1/tools`'s query string.
#[derive(serde::Deserialize)]
struct ToolsParams {
    format: Option<String>,
}

async fn list_sessions(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    Params(params): Params<ListParams>,
) -> ApiResult {
    // With `usage=true`, each session's view tokens too (one count per session).
    let usage = flag(params.usage.as_deref(), "usage", false)?;
    with_store(&app, &tenant, move |app, store| {
        let sessions = store.store.sessions()?;
        if !usage {
            return ok(json!({ "sessions": sessions }));
        }
        let mut out = Vec::with_capacity(sessions.len());
        for info in &sessions {
            let mut value = serde_json::to_value(info).map_err(ApiError::internal)?;
            value["view_tokens"] = json!(open(app, store, &info.id)?.view_tokens()?);
            out.push(value);
        }
        ok(json!({ "sessions": out }))
    })
    .await
}

async fn show_session(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    Path(id): Path<String>,
    Params(params): Params<ShowParams>,
) -> ApiResult {
    // `summaries=false` leaves out the summaries' texts and lineage (the bulk of a long session).
    let summaries = flag(params.summaries.as_deref(), "summaries", true)?;
    with_store(&app, &tenant, move |app, store| {
        let session = open(app, store, &id)?;
        let view_tokens = session.view_tokens()?;
        let mut doc = json!({
            "session": session.info(),
            "view_tokens": view_tokens,
            "compactions": store.store.compactions(&id, false)?,
            "checkpoints": store.store.checkpoints(&id)?,
        });
        if summaries {
            doc["summaries"] = json!(store.store.summaries(&id)?);
        }
        ok(doc)
    })
    .await
}

/// Bodies above this size take a turn of [`App::large_appends`] before they are parsed.
const LARGE_APPEND: usize = 1 << 20;

/// An append's messages: what the CLI accepts (`{"messages": [...]}`, an array of messages, or
/// one message object; Anthropic's too), none larger than `limit` bytes.
fn append_body(bytes: &[u8], limit: usize) -> Result<Vec<Message>, ApiError> {
    let messages = engram::anthropic::parse_request(bytes)
        .map_err(|e| ApiError {
            status: StatusCode::BAD_REQUEST,
            field: Some(
                e.index
                    .map_or_else(|| "messages".to_owned(), |i| format!("messages[{i}]")),
            ),
            message: e.to_string(),
        })?
        .0
        .messages;
    if messages.is_empty() {
        return Err(ApiError::field("messages", "is empty"));
    }
    // A message is no larger than the body it came in: only a large body is measured.
    if bytes.len() > limit {
        for (i, m) in messages.iter().enumerate() {
            if m.to_value().to_string().len() > limit {
                return Err(ApiError {
                    status: StatusCode::PAYLOAD_TOO_LARGE,
                    message: format!("message {i} is larger than {limit} bytes"),
                    field: Some(format!("messages[{i}]")),
                });
            }
        }
    }
    Ok(messages)
}

/// `POST .../messages`. With an `Idempotency-Key` header, a retry of an append the session
/// stored already (the answer was lost: a timeout, a killed server) stores nothing and gets the
/// first answer again, with `Idempotent-Replayed: true`; the same key with other messages is a
/// 409.
async fn append(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    Path(id): Path<String>,
    headers: axum::http::HeaderMap,
    bytes: Bytes,
) -> ApiResult {
    let idempotency_key = match headers.get("idempotency-key") {
        None => None,
        Some(v) => Some(
            v.to_str()
                .map_err(|_| {
                    ApiError::field("Idempotency-Key", "must be printable ASCII (a UUID, say)")
                })?
                .to_owned(),
        ),
    };
    // A large body waits for its turn as bytes, not as parsed messages.
    let _turn = if bytes.len() > LARGE_APPEND {
        Some(
            app.large_appends
                .acquire()
                .await
                .map_err(ApiError::internal)?,
        )
    } else {
        None
    };
    let key = id.clone();
    with_session_lock(&app, &tenant, &key, move |app, store| {
        let messages = append_body(&bytes, app.config.max_message_bytes)?;
        drop(bytes);
        let mut session = open(app, store, &id)?;
        let appended = session.append_once(messages, idempotency_key.as_deref())?;
        if let Some(c) = appended.compaction.as_ref().filter(|_| !appended.replayed) {
            app.metrics.compaction(c.tokens_before, c.tokens_after);
        }
        let mut r = ok(serde_json::to_value(&appended).map_err(ApiError::internal)?)?;
        if appended.replayed {
            r.headers_mut().insert(
                "idempotent-replayed",
                axum::http::HeaderValue::from_static("true"),
            );
        }
        Ok(r)
    })
    .await
}

#[derive(serde::Deserialize)]
struct Page {
    after: Option<u64>,
    limit: Option<usize>,
}

async fn messages(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    Path(id): Path<String>,
    Params(page): Params<Page>,
) -> ApiResult {
    let limit = page.limit.unwrap_or(100).clamp(1, 1000);
    with_store(&app, &tenant, move |_, store| {
        if store.store.session(&id)?.is_none() {
            return Err(engram::session::store::no_session(&id).into());
        }
        // After the last possible sequence number there is nothing (no wrap to the start).
        let Some(from) = page.after.map_or(Some(0), |a| a.checked_add(1)) else {
            return ok(json!({ "messages": [], "next_after": null }));
        };
        if from > i64::MAX as u64 {
            return ok(json!({ "messages": [], "next_after": null }));
        }
        // One more than the page, to know whether there is a next one.
        let log = store.store.session_log_page(&id, from, limit + 1)?;
        let more = log.len() > limit;
        let items: Vec<Value> = log
            .iter()
            .take(limit)
            .map(|m| {
                json!({
                    "seq": m.seq,
                    "id": m.id,
                    "created_at": format_time(m.created_at),
                    "tokens": m.tokens,
                    "message": m.message.to_value(),
                })
            })
            .collect();
        let next = if more {
            log.get(limit - 1).map(|m| m.seq)
        } else {
            None
        };
        ok(json!({ "messages": items, "next_after": next }))
    })
    .await
}

/// `GET .../context?budget=&model=&query=&memory=&format=`: the same as the `POST` with those
/// fields.
async fn context_query(
    State(app): State<Arc<App>>,
    tenant: axum::Extension<Tenant>,
    path: Path<String>,
    Params(params): Params<HashMap<String, String>>,
) -> ApiResult {
    let mut b = serde_json::Map::new();
    for (key, value) in params {
        let value = match key.as_str() {
            "budget" => value
                .parse::<u64>()
                .map_or_else(|_| Value::String(value), Value::from),
            "model" | "query" | "format" => Value::String(value),
            "memory" | "provenance" => match value.as_str() {
                "true" | "1" => Value::Bool(true),
                "false" | "0" => Value::Bool(false),
                _ => Value::String(value),
            },
            other => {
                return Err(ApiError::field(
                    other,
                    "unknown query parameter; expected budget, model, query, memory, provenance or format",
                ));
            }
        };
        b.insert(key, value);
    }
    context_of(app, tenant, path, Value::Object(b)).await
}

async fn context(
    State(app): State<Arc<App>>,
    tenant: axum::Extension<Tenant>,
    path: Path<String>,
    bytes: Bytes,
) -> ApiResult {
    context_of(app, tenant, path, body(&bytes)?).await
}

async fn context_of(
    app: Arc<App>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    Path(id): Path<String>,
    b: Value,
) -> ApiResult {
    // With `provenance`, each message says what it is and which log messages it stands for.
    let mut b = b;
    let plain = match &mut b {
        Value::Object(map) => map.remove("provenance") != Some(Value::Bool(true)),
        _ => true,
    };
    let args = from_json::<ContextRequest>(b)?.resolve(&app.config.registry)?;
    with_store(&app, &tenant, move |app, store| {
        let session = open(app, store, &id)?;
        ok(Value::Object(args.document(&session, plain)?))
    })
    .await
}

async fn compact(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> ApiResult {
    let request: SessionCompactRequest = from_json(body(&bytes)?)?;
    let key = id.clone();
    with_session_lock(&app, &tenant, &key, move |app, store| {
        let session = open(app, store, &id)?;
        let manual = request.resolve(
            session.info().window,
            session.fixed_tokens()?,
            &app.config.policy().trigger,
        )?;
        let mut options = manual.options();
        options.take_models(&app.config.sleep.compact);
        let mut session = session.with_options(options);
        let outcome = session.compact(Trigger::Manual, manual.target, manual.focus.as_deref())?;
        if let engram::session::Compaction::Recorded(record) = &outcome {
            app.metrics
                .compaction(record.tokens_before, record.tokens_after);
        }
        ok(outcome.to_value())
    })
    .await
}

async fn status(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    Path(id): Path<String>,
) -> ApiResult {
    with_store(&app, &tenant, move |app, store| {
        let status = open(app, store, &id)?.status()?;
        ok(json!({
            "message": status.to_message().to_value(),
            "total_tokens": status.total_tokens,
            "max_tokens": status.max_tokens,
            "percent": status.percent(),
            "cost_usd": status.cost_usd,
        }))
    })
    .await
}

/// `GET .../window`: what fills the session's window, by kind (the inspector's bar).
async fn window(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    Path(id): Path<String>,
) -> ApiResult {
    with_store(&app, &tenant, move |app, store| {
        let session = open(app, store, &id)?;
        let max_output = app
            .config
            .registry
            .resolve(&session.info().model)
            .spec
            .max_output_tokens;
        ok(serde_json::to_value(session.window_use(max_output)?).map_err(ApiError::internal)?)
    })
    .await
}

/// `POST .../tools/{name}`: the agent's tool call, its arguments as the body; the answer is
/// the tool's result (`is_error` for bad arguments: a tool error, not a failed request).
async fn tool_call(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    Path((id, name)): Path<(String, String)>,
    bytes: Bytes,
) -> ApiResult {
    if !engram::tools::TOOL_NAMES.contains(&name.as_str()) {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            engram::tools::unknown_tool(&name),
        ));
    }
    let arguments = body(&bytes)?;
    let key = id.clone();
    with_session_lock(&app, &tenant, &key, move |app, store| {
        let mut session = open(app, store, &id)?;
        let Some(reply) = session.handle_tool_call(&name, &arguments) else {
            return Err(ApiError::internal(format!(
                "{name} is listed but not handled"
            )));
        };
        let reply = reply?;
        ok(json!({ "content": reply.text, "is_error": reply.is_error }))
    })
    .await
}

/// `GET /v1/tools?format=openai|anthropic`: the agent's tools as definitions for a model.
async fn tool_schemas(Params(params): Params<ToolsParams>) -> ApiResult {
    let format = params.format.as_deref().unwrap_or("openai");
    let format =
        engram::tools::SchemaFormat::from_name(format).map_err(|e| ApiError::field("format", e))?;
    ok(json!({ "tools": engram::tools::schemas(format) }))
}

async fn checkpoint(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> ApiResult {
    let name = from_json::<CheckpointRequest>(body(&bytes)?)?.into_name()?;
    let key = id.clone();
    with_session_lock(&app, &tenant, &key, move |app, store| {
        let cp = open(app, store, &id)?.checkpoint(&name)?;
        let mut r =
            axum::Json(serde_json::to_value(&cp).map_err(ApiError::internal)?).into_response();
        *r.status_mut() = StatusCode::CREATED;
        Ok(r)
    })
    .await
}

async fn restore(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    Path((id, name)): Path<(String, String)>,
) -> ApiResult {
    let key = id.clone();
    with_session_lock(&app, &tenant, &key, move |app, store| {
        let restored = open(app, store, &id)?.restore(&name)?;
        ok(serde_json::to_value(restored).map_err(ApiError::internal)?)
    })
    .await
}

/// `DELETE /v1/sessions/{id}`: the session with its log, compactions, summaries, checkpoints
/// and memory entries; answers what was deleted.
async fn delete_session(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    Path(id): Path<String>,
) -> ApiResult {
    let key = id.clone();
    with_session_lock(&app, &tenant, &key, move |_, store| {
        let deleted = store.store.delete_session(&id)?;
        ok(json!({ "deleted": deleted }))
    })
    .await
}

/// `POST /v1/memory/forget`: deletes the entries matching every filter given (`id`,
/// `session_id`, `source`; at least one), in every tier; 404 when none matches.
async fn forget(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    bytes: Bytes,
) -> ApiResult {
    let what = from_json::<ForgetRequest>(body(&bytes)?)?.into_forget()?;
    with_store(&app, &tenant, move |_, store| {
        let forgotten = store.store.forget(&what)?;
        if forgotten.entries == 0 {
            return Err(what.matched_nothing().into());
        }
        ok(serde_json::to_value(forgotten).map_err(ApiError::internal)?)
    })
    .await
}

async fn add_memory(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    bytes: Bytes,
) -> ApiResult {
    let entries = AddMemory::new(app.config.policy().redact_memory).body(&body(&bytes)?)?;
    let ids: Vec<String> = entries.iter().filter_map(|e| e.id.clone()).collect();
    with_store(&app, &tenant, move |_, store| {
        let inserted = store.store.insert(&entries)?;
        store.sync_index()?;
        let mut r = axum::Json(json!({
            "ids": ids,
            "inserted": inserted.inserted,
            "skipped": inserted.skipped,
        }))
        .into_response();
        *r.status_mut() = StatusCode::CREATED;
        Ok(r)
    })
    .await
}

async fn search(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    Params(request): Params<SearchRequest>,
) -> ApiResult {
    let query = request.into_query("q")?;
    with_store(&app, &tenant, move |app, store| {
        let hits = match app.config.embedder() {
            Some(embedder) => engram::memory::hybrid::search_hybrid(
                store.store.as_ref(),
                &query,
                embedder.as_ref(),
            )?,
            None => store.store.search(&query)?,
        };
        let results: Vec<Value> = hits.iter().map(SearchHit::to_json).collect();
        ok(json!({ "results": results }))
    })
    .await
}

/// `GET /v1/memory/stats`: entries per tier, and the counts each sleep recorded (`history`,
/// oldest first).
async fn memory_stats(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
) -> ApiResult {
    with_store(&app, &tenant, |_, store| {
        let mut doc = serde_json::to_value(store.store.stats()?).map_err(ApiError::internal)?;
        let history: Vec<Value> = engram::memory::tier_history(store.store.as_ref())?
            .into_iter()
            .map(|c| {
                let mut v = serde_json::to_value(c).unwrap_or_default();
                v["at"] = json!(engram::store::format_time(c.at));
                v
            })
            .collect();
        doc["history"] = Value::Array(history);
        ok(doc)
    })
    .await
}

async fn sleep(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    bytes: Bytes,
) -> ApiResult {
    let mut settings = app.config.sleep.clone();
    let at = from_json::<SleepRequest>(body(&bytes)?)?.apply(&mut settings)?;
    with_store(&app, &tenant, move |app, store| {
        let tick = sleep_tick(store.store.as_ref(), at, &settings)?;
        store.sync_index()?;
        for (_, c) in &tick.sessions.compacted {
            app.metrics.compaction(c.tokens_before, c.tokens_after);
        }
        let mut doc = serde_json::to_value(tick.memory).map_err(ApiError::internal)?;
        doc["sessions_compacted"] = json!(tick.sessions.compacted.len());
        doc["archive_deleted"] = json!(tick.archive_deleted);
        ok(doc)
    })
    .await
}

#[derive(serde::Deserialize)]
struct LogParams {
    limit: Option<usize>,
}

async fn log(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    Params(p): Params<LogParams>,
) -> ApiResult {
    let limit = p
        .limit
        .unwrap_or(engram::memory::DEFAULT_LOG_LIMIT)
        .clamp(1, 1000);
    with_store(&app, &tenant, move |_, store| {
        let records: Vec<Value> = store
            .store
            .log(limit)?
            .iter()
            .map(engram::memory::ConsolidationRecord::to_json)
            .collect();
        ok(json!({ "log": records }))
    })
    .await
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
        .into_response()
}

async fn openapi() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        include_str!("../openapi.json"),
    )
        .into_response()
}
