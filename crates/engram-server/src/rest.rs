//! The REST API's handlers: sessions (create, list, show, append, the log, context, compact,
//! status, window, the agent's tools, checkpoints, delete) and memory (add, search, forget,
//! sleep, log, stats), `/metrics` and `/openapi.json`. Each runs the core on the blocking pool
//! with the tenant's store.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use engram::Message;
use engram::memory::{SearchHit, format_time, now};
use engram::request::{
    AddMemory, CheckpointRequest, ContextRequest, ForgetRequest, NewSessionRequest, SearchRequest,
    SessionCompactRequest, SleepRequest, from_json,
};
use engram::session::{Session, Trigger};
use engram::sleep::sleep_tick;
use serde_json::{Value, json};

use crate::app::{App, TenantStore};
use crate::auth::Tenant;
use crate::body::{Params, flag, json_object};
use crate::error::{ApiError, ApiResult, ok};

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

pub(crate) async fn create_session(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    bytes: Bytes,
) -> ApiResult {
    let request = from_json::<NewSessionRequest>(json_object(&bytes)?)?;
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
pub(crate) struct ListParams {
    usage: Option<String>,
}

/// `GET /v1/sessions/{id}`'s query string.
#[derive(serde::Deserialize)]
pub(crate) struct ShowParams {
    summaries: Option<String>,
}

/// `GET /v1/tools`'s query string.
#[derive(serde::Deserialize)]
pub(crate) struct ToolsParams {
    format: Option<String>,
}

pub(crate) async fn list_sessions(
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
            value["view_tokens"] = json!(app.open_session(store, &info.id)?.view_tokens()?);
            out.push(value);
        }
        ok(json!({ "sessions": out }))
    })
    .await
}

pub(crate) async fn show_session(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    Path(id): Path<String>,
    Params(params): Params<ShowParams>,
) -> ApiResult {
    // `summaries=false` leaves out the summaries' texts and lineage (the bulk of a long session).
    let summaries = flag(params.summaries.as_deref(), "summaries", true)?;
    with_store(&app, &tenant, move |app, store| {
        let session = app.open_session(store, &id)?;
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
    let messages = engram::formats::anthropic::parse_request(bytes)
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
pub(crate) async fn append(
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
        let mut session = app.open_session(store, &id)?;
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
pub(crate) struct Page {
    after: Option<u64>,
    limit: Option<usize>,
}

pub(crate) async fn messages(
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
pub(crate) async fn context_query(
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

pub(crate) async fn context(
    State(app): State<Arc<App>>,
    tenant: axum::Extension<Tenant>,
    path: Path<String>,
    bytes: Bytes,
) -> ApiResult {
    context_of(app, tenant, path, json_object(&bytes)?).await
}

pub(crate) async fn context_of(
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
        let session = app.open_session(store, &id)?;
        ok(Value::Object(args.document(&session, plain)?))
    })
    .await
}

pub(crate) async fn compact(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> ApiResult {
    let request: SessionCompactRequest = from_json(json_object(&bytes)?)?;
    let key = id.clone();
    with_session_lock(&app, &tenant, &key, move |app, store| {
        let session = app.open_session(store, &id)?;
        let manual = request.resolve(
            session.info().window,
            session.fixed_tokens()?,
            session.recent_tokens()?,
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

pub(crate) async fn status(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    Path(id): Path<String>,
) -> ApiResult {
    with_store(&app, &tenant, move |app, store| {
        let status = app.open_session(store, &id)?.status()?;
        ok(status.to_document())
    })
    .await
}

/// `GET .../window`: what fills the session's window, by kind (the inspector's bar).
pub(crate) async fn window(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    Path(id): Path<String>,
) -> ApiResult {
    with_store(&app, &tenant, move |app, store| {
        let session = app.open_session(store, &id)?;
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

#[derive(serde::Deserialize)]
pub(crate) struct TimelineParams {
    query: Option<String>,
    limit: Option<usize>,
}

/// `GET .../timeline`: the session's timeline as sleep built it; with `query`, the parts that
/// carry it, best first.
pub(crate) async fn timeline(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    Path(id): Path<String>,
    Params(p): Params<TimelineParams>,
) -> ApiResult {
    with_store(&app, &tenant, move |app, store| {
        let session = app.open_session(store, &id)?;
        ok(session.timeline_document(p.query.as_deref(), p.limit)?)
    })
    .await
}

/// `GET .../ledger`: the session's work ledger (files, commands, failures, plan) and its text.
pub(crate) async fn ledger(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    Path(id): Path<String>,
) -> ApiResult {
    with_store(&app, &tenant, move |app, store| {
        ok(app.open_session(store, &id)?.ledger()?.to_document())
    })
    .await
}

/// `POST .../tools/{name}`: the agent's tool call, its arguments as the body; the answer is
/// the tool's result (`is_error` for bad arguments: a tool error, not a failed request).
pub(crate) async fn tool_call(
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
    let arguments = json_object(&bytes)?;
    let key = id.clone();
    with_session_lock(&app, &tenant, &key, move |app, store| {
        let mut session = app.open_session(store, &id)?;
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
pub(crate) async fn tool_schemas(Params(params): Params<ToolsParams>) -> ApiResult {
    let format = params.format.as_deref().unwrap_or("openai");
    let format = engram::tools::SchemaFormat::from_name(format)
        .map_err(|e| ApiError::field("format", e.to_string()))?;
    ok(json!({ "tools": engram::tools::schemas(format) }))
}

pub(crate) async fn checkpoint(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> ApiResult {
    let name = from_json::<CheckpointRequest>(json_object(&bytes)?)?.into_name()?;
    let key = id.clone();
    with_session_lock(&app, &tenant, &key, move |app, store| {
        let cp = app.open_session(store, &id)?.checkpoint(&name)?;
        let mut r =
            axum::Json(serde_json::to_value(&cp).map_err(ApiError::internal)?).into_response();
        *r.status_mut() = StatusCode::CREATED;
        Ok(r)
    })
    .await
}

/// `GET /v1/sessions/{id}/checkpoints`: the session's checkpoints, oldest first.
pub(crate) async fn checkpoints(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    Path(id): Path<String>,
) -> ApiResult {
    with_store(&app, &tenant, move |app, store| {
        // Opening it answers 404 for a session this tenant does not have.
        app.open_session(store, &id)?;
        ok(json!({ "checkpoints": store.store.checkpoints(&id)? }))
    })
    .await
}

pub(crate) async fn restore(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    Path((id, name)): Path<(String, String)>,
) -> ApiResult {
    let key = id.clone();
    with_session_lock(&app, &tenant, &key, move |app, store| {
        let restored = app.open_session(store, &id)?.restore(&name)?;
        ok(serde_json::to_value(restored).map_err(ApiError::internal)?)
    })
    .await
}

/// `DELETE /v1/sessions/{id}`: the session with its log, compactions, summaries, checkpoints
/// and memory entries; answers what was deleted.
pub(crate) async fn delete_session(
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
pub(crate) async fn forget(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    bytes: Bytes,
) -> ApiResult {
    let what = from_json::<ForgetRequest>(json_object(&bytes)?)?.into_forget()?;
    with_store(&app, &tenant, move |_, store| {
        let forgotten = store.store.forget(&what)?;
        if forgotten.entries == 0 {
            return Err(what.matched_nothing().into());
        }
        ok(serde_json::to_value(forgotten).map_err(ApiError::internal)?)
    })
    .await
}

pub(crate) async fn add_memory(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    bytes: Bytes,
) -> ApiResult {
    let entries = AddMemory::new(app.config.policy().redact_memory).body(&json_object(&bytes)?)?;
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

pub(crate) async fn search(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    Params(request): Params<SearchRequest>,
) -> ApiResult {
    let query = request.into_query("q")?;
    with_store(&app, &tenant, move |app, store| {
        let hits = engram::memory::search::find(
            store.store.as_ref(),
            &query,
            app.config.embedder().map(AsRef::as_ref),
        )?;
        let results: Vec<Value> = hits.iter().map(SearchHit::to_json).collect();
        ok(json!({ "results": results }))
    })
    .await
}

/// `GET /v1/memory/stats`: entries per tier, and the counts each sleep recorded (`history`,
/// oldest first).
pub(crate) async fn memory_stats(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
) -> ApiResult {
    with_store(&app, &tenant, |_, store| {
        let mut doc = serde_json::to_value(store.store.stats()?).map_err(ApiError::internal)?;
        let history: Vec<Value> = engram::memory::tier_history(store.store.as_ref())?
            .into_iter()
            .map(|c| {
                let mut v = serde_json::to_value(c).unwrap_or_default();
                v["at"] = json!(engram::timestamp::format_time(c.at));
                v
            })
            .collect();
        doc["history"] = Value::Array(history);
        ok(doc)
    })
    .await
}

pub(crate) async fn sleep(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    bytes: Bytes,
) -> ApiResult {
    let mut settings = app.config.sleep.clone();
    let at = from_json::<SleepRequest>(json_object(&bytes)?)?.apply(&mut settings)?;
    with_store(&app, &tenant, move |app, store| {
        let tick = sleep_tick(store.store.as_ref(), at, &settings)?;
        store.sync_index()?;
        for (_, c) in &tick.sessions.compacted {
            app.metrics.compaction(c.tokens_before, c.tokens_after);
        }
        ok(tick.to_document())
    })
    .await
}

#[derive(serde::Deserialize)]
pub(crate) struct LogParams {
    limit: Option<usize>,
}

pub(crate) async fn log(
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

pub(crate) async fn metrics(State(app): State<Arc<App>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
        .into_response()
}

pub(crate) async fn openapi() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        include_str!("../openapi.json"),
    )
        .into_response()
}
