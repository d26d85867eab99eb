//! `POST /v1/responses/compact`: the Responses API's compaction, which Codex calls when its
//! context fills up. Passed to the upstream; an upstream that does not offer it (a local model
//! server answers 404, 405 or 501) gets engram's own: the conversation compacted to the policy's
//! target, in the shape Codex reads back (`object: response.compaction`, the new history as
//! `output` items: the caller's items kept as they were, engram's summaries as messages).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::plan::{options, plan, stable};
use super::upstream::{Incoming, incoming, relay, send};
use super::wire::{Format, parse};
use crate::app::App;
use crate::auth::proxy_tenant;
use crate::error::ApiError;

/// `POST /v1/responses/compact`.
pub(crate) async fn responses_compact(State(app): State<Arc<App>>, request: Request) -> Response {
    answer(app, request)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn answer(app: Arc<App>, request: Request) -> Result<Response, ApiError> {
    let tenant = proxy_tenant(&app, request.headers())?;
    let Incoming {
        url,
        method,
        headers,
        body,
    } = incoming(&app, Format::Responses, request).await?;
    let upstream = send(&app, method, &url, &headers, body.clone()).await;
    match upstream {
        Ok(response)
            if !matches!(
                response.status(),
                StatusCode::NOT_FOUND
                    | StatusCode::METHOD_NOT_ALLOWED
                    | StatusCode::NOT_IMPLEMENTED
            ) =>
        {
            return Ok(relay(response, None));
        }
        _ => {}
    }
    let app2 = Arc::clone(&app);
    tokio::task::spawn_blocking(move || compacted(&app2, &tenant, &body))
        .await
        .map_err(ApiError::internal)?
}

/// engram's compaction of a Responses conversation, as the compaction endpoint answers it.
fn compacted(app: &App, tenant: &str, body: &Bytes) -> Result<Response, ApiError> {
    let parsed = parse(Format::Responses, body).map_err(ApiError::bad)?;
    let items = parsed
        .items
        .as_ref()
        .ok_or_else(|| ApiError::bad("a Responses request without `input`"))?;
    let plan = plan(app, tenant, &parsed);
    let conversation = &parsed.conversation;
    let tokens = plan.counter.count_conversation(conversation).total();
    let fixed =
        engram::compact::policy::fixed_head(&conversation.messages, &plan.counter, plan.room);
    let target = app
        .config
        .policy()
        .trigger
        .target_tokens(plan.room, fixed.tokens)
        .min(tokens);
    let options = options(app);
    let (view, report) = stable(app, &plan, &options)
        .rebuild(conversation, &plan.counter, target)
        .map_err(|e| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()))?;
    let output = engram::responses::to_items(items, &view.messages, &view.origins);
    let id = format!("resp_engram_{:016x}", xxhash_rust::xxh3::xxh3_64(body));
    let answer = json!({
        "id": id,
        "object": "response.compaction",
        "created_at": engram::timestamp::now() / 1000,
        "output": output,
        "usage": {
            "input_tokens": tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 0,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": tokens,
        },
    });
    let mut response = (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        answer.to_string(),
    )
        .into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        ("x-engram-tokens-before", tokens.to_string()),
        ("x-engram-tokens-after", report.tokens_after.to_string()),
        ("x-engram-steps", report.steps.join(",")),
        (
            "x-engram-note",
            "the upstream offers no compaction: engram compacted the conversation".to_owned(),
        ),
    ] {
        if let Ok(value) = axum::http::HeaderValue::from_str(&value) {
            headers.insert(axum::http::HeaderName::from_static(name), value);
        }
    }
    Ok(response)
}
