//! The Responses API's compaction, which Codex asks for when its context fills up, in either of
//! its two forms; each is passed to the upstream first, and answered by engram's own compaction
//! (the conversation compacted to the policy's target) when the upstream cannot:
//! - `POST /v1/responses/compact`: an upstream that answers 404, 405 or 501 gets engram's, in
//!   the shape Codex reads back (`object: response.compaction`, the new history as `output`
//!   items: the caller's items kept as they were, engram's summaries as messages);
//! - a `POST /v1/responses` whose input ends with the compaction trigger: an upstream whose
//!   answer holds no compaction item (it answered a turn, or refused the item) gets engram's,
//!   one compaction item that carries the compacted items and that engram expands in every
//!   later request (`engram::formats::remote_compaction`).

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use engram::formats::remote_compaction;
use serde_json::{Value, json};

use super::plan::{options, plan, stable};
use super::upstream::{Incoming, incoming, relay, send, skipped};
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
    let compacted = tokio::task::spawn_blocking(move || compact_items(&app2, &tenant, &body))
        .await
        .map_err(ApiError::internal)??;
    let answer = json!({
        "id": format!("resp_engram_{:016x}", compacted.hash),
        "object": "response.compaction",
        "created_at": engram::timestamp::now() / 1000,
        "output": compacted.items,
        "usage": usage(compacted.tokens),
    });
    Ok(compacted.answer("application/json", answer.to_string()))
}

/// A Responses request whose input ends with the compaction trigger (`incoming`, engram's earlier
/// compaction items expanded; `as_sent`, the caller's body): the upstream's answer when it holds
/// exactly one compaction item, else engram's.
pub(super) async fn trigger(
    app: Arc<App>,
    tenant: String,
    incoming: Incoming,
    as_sent: &[u8],
) -> Result<Response, ApiError> {
    let body = incoming.body;
    let asked_upstream = send(
        &app,
        incoming.method,
        &incoming.url,
        &incoming.headers,
        body.clone(),
    );
    if let Ok(response) = asked_upstream.await {
        let status = response.status();
        let head = response.headers().clone();
        if let Ok(reply) = response.bytes().await
            && status.is_success()
            && remote_compaction::compactions_in_reply(&reply) == 1
        {
            let mut out = Response::new(Body::from(reply));
            *out.status_mut() = status;
            for (name, value) in &head {
                if !skipped(name) {
                    out.headers_mut().append(name.clone(), value.clone());
                }
            }
            return Ok(out);
        }
    }
    let request: Value = serde_json::from_slice(&body).map_err(|e| ApiError::bad(e.to_string()))?;
    let stream = request["stream"] == true;
    let asked = remote_compaction::without_trigger(&request);
    // The caller's own items, as it sent them: what an earlier item of engram's stood for is
    // not among them, and stays in the new item.
    let input = serde_json::from_slice::<Value>(as_sent)
        .ok()
        .and_then(|sent| sent["input"].as_array().cloned())
        .unwrap_or_default();
    let asked = Bytes::from(asked.to_string());
    let app2 = Arc::clone(&app);
    let compacted = tokio::task::spawn_blocking(move || compact_items(&app2, &tenant, &asked))
        .await
        .map_err(ApiError::internal)??;
    let item = remote_compaction::item_for(&compacted.items, &input);
    let text = remote_compaction::reply(&request, &item, &usage(compacted.tokens), stream);
    let kind = if stream {
        "text/event-stream"
    } else {
        "application/json"
    };
    Ok(compacted.answer(kind, text))
}

/// The `usage` of engram's answer: the conversation's tokens read, none written.
fn usage(tokens: usize) -> Value {
    json!({
        "input_tokens": tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 0,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": tokens,
    })
}

/// A conversation engram compacted for a caller that asked for a compaction.
struct Compacted {
    /// The new history, as Responses items.
    items: Vec<Value>,
    /// The conversation's tokens before.
    tokens: usize,
    /// What compaction did.
    report: Box<engram::CompactReport>,
    /// A hash of the request, for the answer's id.
    hash: u64,
}

impl Compacted {
    /// `body` as the answer, with engram's headers saying what it did.
    fn answer(&self, content_type: &'static str, body: String) -> Response {
        let mut response =
            ([(axum::http::header::CONTENT_TYPE, content_type)], body).into_response();
        let headers = response.headers_mut();
        for (name, value) in [
            ("x-engram-tokens-before", self.tokens.to_string()),
            (
                "x-engram-tokens-after",
                self.report.tokens_after.to_string(),
            ),
            ("x-engram-steps", self.report.steps.join(",")),
            (
                "x-engram-note",
                "the upstream offers no compaction: engram compacted the conversation".to_owned(),
            ),
        ] {
            if let Ok(value) = axum::http::HeaderValue::from_str(&value) {
                headers.insert(axum::http::HeaderName::from_static(name), value);
            }
        }
        response
    }
}

/// engram's compaction of a Responses conversation (`body`, a request). A caller that asks for
/// a compaction has reached its own limit, which may be below the model's window: the
/// conversation is compacted to the policy's target for a limit of its own size (or of the
/// model's room, when that is smaller).
fn compact_items(app: &App, tenant: &str, body: &Bytes) -> Result<Compacted, ApiError> {
    let parsed = parse(Format::Responses, body).map_err(ApiError::bad)?;
    let items = parsed
        .items
        .as_ref()
        .ok_or_else(|| ApiError::bad("a Responses request without `input`"))?;
    let plan = plan(app, tenant, &parsed);
    let conversation = &parsed.conversation;
    let tokens = plan.counter.count_conversation(conversation).total();
    let limit = plan.room.min(tokens);
    let fixed = engram::compact::policy::fixed_head(&conversation.messages, &plan.counter, limit);
    let target = app
        .config
        .policy()
        .trigger
        .target_tokens(
            limit,
            fixed.tokens,
            engram::compact::policy::recent_tokens(conversation.messages.iter(), &plan.counter),
        )
        .min(tokens);
    let options = options(app);
    let (view, report) =
        match stable(app, &plan, &options).rebuild(conversation, &plan.counter, target) {
            Ok(done) => done,
            Err(e) => {
                // engram's earlier summaries, kept whole, no longer fit: summarised with the rest.
                if matches!(e, engram::Error::CannotFit { .. })
                    && let Ok(mut request) = serde_json::from_slice::<Value>(body)
                    && remote_compaction::unpin_summaries(&mut request) > 0
                {
                    return compact_items(app, tenant, &Bytes::from(request.to_string()));
                }
                return Err(ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    e.to_string(),
                ));
            }
        };
    Ok(Compacted {
        items: engram::formats::responses::to_items(items, &view.messages, &view.origins),
        tokens,
        report,
        hash: xxhash_rust::xxh3::xxh3_64(body),
    })
}
