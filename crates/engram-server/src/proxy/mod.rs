//! The drop-in proxy: `POST /v1/chat/completions` (OpenAI format) and `POST /v1/messages`
//! (Anthropic format) are forwarded to a configured upstream, compacted first when the request
//! would not leave room in the model's window; every other `/v1/*` route the REST API does not
//! serve (`/v1/models`, `/v1/embeddings`, `/v1/messages/count_tokens`, ...) passes straight
//! through.
//!
//! The caller's own `Authorization` / `x-api-key` go to the upstream untouched (never logged,
//! never stored); with API keys configured, the engram key travels in `X-Engram-Key`. A request
//! that needs no compaction is forwarded byte for byte; responses, streamed or not, come back byte
//! for byte, with `x-engram-*` headers saying what engram did. When the upstream still answers
//! "context length exceeded", the request is compacted harder once and retried; never more.
//!
//! Counts come from the model's tokenizer (the registry; a `--model-window NAME=TOKENS` gives an
//! unknown model its window) through one counter per tokenizer whose cache is keyed by message
//! content, so an agent resending its growing history pays only for the new turn. Where the
//! count is an estimate (Claude), a safety margin is kept.
//!
//! Compaction keeps the provider's prompt cache warm ([`engram::compact::stable`]): the proxy
//! keeps the view it sent for each request ([`crate::views`]), so an agent's next request goes
//! upstream as that view plus what is new, byte for byte, until it passes the threshold; a
//! compaction then keeps the head (the system prompt, the task whole, the earlier summaries)
//! and appends a summary of what leaves after it. Summaries are written by the configured
//! pipeline (the summarizer of `[summarizer]` / `--summarizer`, else the extractive digest),
//! once each. When the reply has ended, what the upstream said the call used (its prompt cache
//! too) goes to the metrics, the inspector and the log line ([`crate::usage_tap`]).

mod outcome;
mod plan;
mod recall;
mod responses_compact;
mod upstream;
mod wire;

use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use engram::compact::stable::Next;
use serde_json::Value;

use crate::app::App;
use crate::auth::{Tenant, proxy_tenant};
use crate::config::RecallTools;
use crate::error::ApiError;
use crate::proxy_state::{Billed, Counted, Recent, Sent};
use outcome::Outcome;
use plan::{Plan, options, plan, stable};
use recall::{Recall, recall_rounds};
pub(crate) use responses_compact::responses_compact;
use upstream::{
    ERROR_BODY_CAP, Incoming, Upstream, context_exceeded, incoming, relay, replay, send,
};
use wire::{Format, Parsed, parse, render, with_breakpoints};

/// `POST /v1/chat/completions`.
pub(crate) async fn chat_completions(State(app): State<Arc<App>>, request: Request) -> Response {
    observed(app, Format::OpenAi, "/v1/chat/completions", request).await
}

/// `POST /v1/messages`.
pub(crate) async fn anthropic_messages(State(app): State<Arc<App>>, request: Request) -> Response {
    observed(app, Format::Anthropic, "/v1/messages", request).await
}

/// `POST /v1/responses`.
pub(crate) async fn responses(State(app): State<Arc<App>>, request: Request) -> Response {
    observed(app, Format::Responses, "/v1/responses", request).await
}

/// `GET /v1/responses`: the Responses API's WebSocket mode, which engram does not proxy. Codex
/// opens it first and falls back to HTTP at once on a 426 (on a 404 or 405 it retries five
/// times, several seconds); any other GET passes through.
pub(crate) async fn responses_websocket(State(app): State<Arc<App>>, request: Request) -> Response {
    let upgrade = request
        .headers()
        .get(axum::http::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if !upgrade {
        return pass_through(app, request).await;
    }
    ApiError::new(
        StatusCode::UPGRADE_REQUIRED,
        "engram's proxy takes the Responses API over HTTP (POST /v1/responses), not its WebSocket mode",
    )
    .into_response()
}

/// A model request forwarded, then counted in the metrics and listed for the inspector; when
/// the reply has ended, what the upstream said it used (input tokens, those read from and
/// written to its prompt cache, output) joins both and (with `log_requests`) one JSON line on
/// standard error: route, model, tokens before and after, steps, what became of the cached
/// prefix, the status the caller got (the upstream's, or engram's own 4xx/502/504), the time to
/// it, the usage and its cost.
async fn observed(app: Arc<App>, format: Format, route: &str, request: Request) -> Response {
    let started = Instant::now();
    let tenant = proxy_tenant(&app, request.headers()).ok();
    let mut response = forward_compacted(Arc::clone(&app), format, request)
        .await
        .unwrap_or_else(IntoResponse::into_response);
    let sent = response.extensions_mut().remove::<Sent>();
    let counted = response.extensions_mut().remove::<Counted>();
    let rounds = response
        .extensions_mut()
        .remove::<recall::RecallCount>()
        .unwrap_or_default();
    let seconds = started.elapsed().as_secs_f64();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let number = |name: &str| header(name).parse::<u64>().unwrap_or(0);
    let model = header("x-engram-model");
    let known = app.config.registry.resolve(&model).how != engram::ModelMatch::Fallback
        || app.config.proxy.model_windows.contains_key(&model);
    let label = app.metrics.model_label(&model, known);
    let uncompacted = header("x-engram-uncompacted");
    if !uncompacted.is_empty() && app.metrics.uncompacted(route, &label, &uncompacted) {
        tracing::warn!(
            route,
            model = %label,
            reason = %uncompacted,
            note = %header("x-engram-note"),
            "proxy: a request engram cannot compact was forwarded as sent (said once per model and reason; counted in engram_proxy_uncompacted_total)"
        );
    }
    let cache = match header("x-engram-prefix").as_str() {
        "" => "none".to_owned(),
        cache => cache.to_owned(),
    };
    let status = response.status().as_u16();
    let (before, after) = (
        number("x-engram-tokens-before"),
        number("x-engram-tokens-after"),
    );
    app.metrics.proxied(&crate::metrics::Proxied {
        route,
        model: &label,
        status,
        cache: &cache,
        tokens_before: before,
        tokens_after: after,
        seconds,
    });
    let keep = app.config.proxy.keep_bodies;
    let recent = Recent {
        id: 0,
        tenant: tenant.unwrap_or_default(),
        at: engram::timestamp::now(),
        route: route.to_owned(),
        model: model.clone(),
        status,
        tokens_before: before,
        tokens_after: after,
        steps: header("x-engram-steps"),
        cache,
        retried: header("x-engram-retried") == "true",
        ms: (seconds * 1e4).round() / 10.0,
        note: header("x-engram-note"),
        usage: None,
        observed: (header("x-engram-observed") == "true").then(|| crate::proxy_state::Would {
            reused: (!header("x-engram-reused").is_empty()).then(|| number("x-engram-reused")),
            conversation: header("x-engram-conversation"),
        }),
        sent: sent.filter(|_| keep > 0).map(|Sent(bytes)| {
            let (text, _) = engram::redact::redact(&String::from_utf8_lossy(&bytes));
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        }),
    };
    let id = app.proxy.remember(recent.clone(), keep);
    let app2 = Arc::clone(&app);
    crate::usage_tap::tap(
        response,
        Box::new(move |usage| {
            let usage = usage.map(|u| Billed::of(&app2.config.registry, &recent, u));
            if let Some(u) = &usage {
                app2.metrics.usage(&recent.route, &label, &u.usage);
                app2.proxy.billed(id, u.clone());
                if let Some(engram_usd) = u.engram_usd {
                    app2.proxy.observed(&recent, u);
                    app2.metrics
                        .observed(&recent.route, &label, u.cost_usd, engram_usd);
                }
                // What the upstream counted calibrates an estimated count (a store write: off
                // the async threads), from a reply to one request only: after engram's own
                // rounds the usage describes a longer request than the one counted.
                let recalled = rounds.calls.load(std::sync::atomic::Ordering::Relaxed);
                app2.metrics.recall(
                    &recent.route,
                    &label,
                    recalled,
                    rounds
                        .earlier_input
                        .load(std::sync::atomic::Ordering::Relaxed),
                );
                if let Some(counted) = counted
                    && recalled == 0
                    && u.usage.input_tokens > 0
                    && (200..300).contains(&recent.status)
                {
                    let (app3, tenant, reported) = (
                        Arc::clone(&app2),
                        recent.tenant.clone(),
                        u.usage.input_tokens,
                    );
                    let learn = move || {
                        if let Ok(store) = app3.tenant_store(&tenant) {
                            app3.proxy
                                .learn(store.store.as_ref(), &tenant, &counted, reported);
                        }
                    };
                    match tokio::runtime::Handle::try_current() {
                        Ok(runtime) => drop(runtime.spawn_blocking(learn)),
                        Err(_) => learn(),
                    }
                }
            }
            if app2.config.proxy.log_requests {
                let mut line = serde_json::json!({
                    "event": "proxy",
                    "route": recent.route,
                    "model": recent.model,
                    "status": recent.status,
                    "tokens_before": recent.tokens_before,
                    "tokens_after": recent.tokens_after,
                    "steps": recent.steps,
                    "cache": recent.cache,
                    "retried": recent.retried,
                    "ms": recent.ms,
                });
                if let Some(u) = usage
                    && let Ok(Value::Object(fields)) = serde_json::to_value(u)
                    && let Some(line) = line.as_object_mut()
                {
                    line.extend(fields);
                }
                eprintln!("{line}");
            }
        }),
    )
}

/// `GET /v1/proxy/requests`: the tenant's latest proxied requests, newest first (with what was
/// sent upstream, redacted, for the latest `keep_bodies`).
pub(crate) async fn recent_requests(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
) -> Response {
    let list: Vec<Recent> = app
        .proxy
        .recent
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|r| r.tenant == tenant.0)
        .cloned()
        .collect();
    axum::Json(serde_json::json!({
        "requests": list,
        "keep_bodies": app.config.proxy.keep_bodies,
    }))
    .into_response()
}

/// `GET /v1/proxy/savings`: observing (`--observe`), what the tenant's proxied traffic cost and
/// what it would have cost through engram, in all and per conversation.
pub(crate) async fn savings(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<Tenant>,
) -> Response {
    let s = app.proxy.savings(&tenant.0);
    let saved = if s.actual_usd > 0.0 {
        1.0 - s.engram_usd / s.actual_usd
    } else {
        0.0
    };
    axum::Json(serde_json::json!({
        "observe": app.config.proxy.observe,
        "saved_share": (saved * 1e4).round() / 1e4,
        "savings": s,
    }))
    .into_response()
}

/// Any other `/v1/*` route: straight through (Anthropic's when the path or the headers say so).
pub(crate) async fn pass_through(app: Arc<App>, request: Request) -> Response {
    let result = async {
        proxy_tenant(&app, request.headers())?;
        let anthropic = request.uri().path().starts_with("/v1/messages")
            || request.headers().contains_key("anthropic-version")
            || request.headers().contains_key("x-api-key");
        let format = if anthropic && app.config.proxy.anthropic_upstream.is_some() {
            Format::Anthropic
        } else {
            Format::OpenAi
        };
        let to = incoming(&app, format, request).await?;
        let response = send(&app, to.method, &to.url, &to.headers, to.body).await?;
        Ok::<Response, ApiError>(relay(response, None))
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

async fn forward_compacted(
    app: Arc<App>,
    format: Format,
    request: Request,
) -> Result<Response, ApiError> {
    let tenant = proxy_tenant(&app, request.headers())?;
    let mut incoming = incoming(&app, format, request).await?;
    if format == Format::Responses {
        // Codex's compaction: the compaction items engram wrote become the items they stand
        // for again, and a request that asks for one is answered as one (observing, it goes
        // upstream as sent, like any other).
        let as_sent = incoming.body.clone();
        if let Some(expanded) = engram::formats::remote_compaction::expand_body(&incoming.body)
            .map_err(|e| ApiError::bad(e.to_string()))?
        {
            incoming.body = Bytes::from(expanded);
        }
        if !app.config.proxy.observe
            && engram::formats::remote_compaction::body_asks_compaction(&incoming.body)
        {
            return responses_compact::trigger(app, tenant, incoming, &as_sent).await;
        }
    }
    let Incoming {
        url,
        method,
        headers,
        body,
    } = incoming;

    // Count and compact off the async threads (tokenizers and compaction are CPU work).
    let started = Instant::now();
    let app2 = Arc::clone(&app);
    let original = body.clone();
    let tenant2 = tenant.clone();
    let decided = tokio::task::spawn_blocking(move || decide(&app2, &tenant2, format, &original))
        .await
        .map_err(ApiError::internal)?;
    let (mut outcome, parsed, plan, forwarded, key) = match decided {
        Ok(d) => d,
        // Not a request engram compacts (one it cannot read, or one whose conversation the
        // provider holds): the upstream answers it as it would; a header, the log (once per
        // model and reason) and the metrics say why.
        Err(Skip {
            why,
            refuse: Some((tokens, window)),
            ..
        }) if !app.config.proxy.observe => {
            return Ok(too_long(format, tokens, window, &why));
        }
        Err(Skip { reason, why, .. }) => {
            let outcome = Outcome {
                model: serde_json::from_slice::<Value>(&body)
                    .ok()
                    .and_then(|v| v.get("model").and_then(Value::as_str).map(str::to_owned))
                    .unwrap_or_default(),
                note: Some(format!("{why}; forwarded unchanged")),
                uncompacted: Some(reason),
                sent: Some(body.clone()),
                ..Outcome::default()
            };
            let response = send(&app, method, &url, &headers, body).await?;
            return Ok(relay(response, Some(&outcome)));
        }
    };
    tracing::debug!(
        elapsed_ms = started.elapsed().as_secs_f64() * 1e3,
        "proxy: counted and compacted"
    );
    // Observing: the request goes as the caller sent it; what engram would have sent is
    // only counted.
    let observe = app.config.proxy.observe;
    let forwarded = if observe {
        outcome.observed = true;
        body.clone()
    } else {
        forwarded
    };
    outcome.sent = Some(forwarded.clone());
    if !observe {
        outcome.count_sent(&plan, !parsed.conversation.tools.is_empty());
    }
    // What answering the model's calls to engram's tools needs of the request.
    let recall = outcome.offered.as_ref().map(|_| Recall {
        messages: Arc::new(parsed.conversation.messages.clone()),
        model: parsed.model.clone(),
        streamed: parsed.value.get("stream") == Some(&Value::Bool(true)),
        format,
        in_view: std::mem::take(&mut outcome.in_view),
        counter: Arc::clone(&plan.counter),
        room: plan.room,
    });
    let sent = forwarded.clone();
    let response = send(&app, method.clone(), &url, &headers, forwarded).await?;
    let status = response.status();
    if observe || !(status == StatusCode::BAD_REQUEST || status == StatusCode::PAYLOAD_TOO_LARGE) {
        let to = Upstream {
            method: &method,
            url: &url,
            headers: &headers,
        };
        return recall_rounds(&app, to, recall, &sent, response, &mut outcome).await;
    }
    // An error: read up to ERROR_BODY_CAP; a larger one is relayed as it comes, never held
    // whole. "Context length exceeded": compact harder once and retry.
    let response_headers = response.headers().clone();
    let mut response = response;
    let mut head = Vec::new();
    let mut whole = true;
    while let Ok(Some(chunk)) = response.chunk().await {
        head.extend_from_slice(&chunk);
        if head.len() > ERROR_BODY_CAP {
            whole = false;
            break;
        }
    }
    if !whole {
        use futures_util::StreamExt;
        let first = futures_util::stream::once(async move { Ok(Bytes::from(head)) });
        let body = Body::from_stream(first.chain(response.bytes_stream()));
        return Ok(replay(status, &response_headers, body, &outcome));
    }
    let error_body = Bytes::from(head);
    if !context_exceeded(status, &error_body) {
        return Ok(replay(
            status,
            &response_headers,
            error_body.into(),
            &outcome,
        ));
    }
    // Our count was too low for this upstream: compacted harder, and the view that went out is
    // replaced by this one.
    let sent_tokens = outcome.tokens_after;
    let offered = outcome.offered.clone();
    let app2 = Arc::clone(&app);
    let retried = tokio::task::spawn_blocking(move || {
        let fixed = engram::compact::policy::fixed_head(
            &parsed.conversation.messages,
            &plan.counter,
            plan.room,
        );
        let target = app2.config.policy().trigger.retry_target(
            plan.room,
            fixed.tokens,
            engram::compact::policy::recent_tokens(
                parsed.conversation.messages.iter(),
                &plan.counter,
            ),
            sent_tokens,
        );
        let options = options(&app2);
        let (mut view, report) = stable(&app2, &plan, &options)
            .rebuild(&parsed.conversation, &plan.counter, target)
            .map_err(|e| e.to_string())?;
        view.offered = offered;
        let bytes = render(
            format,
            &parsed,
            &view,
            wire::breakpoints_for(
                app2.config.proxy.cache_breakpoints,
                format,
                &app2.config.registry,
                &parsed.model,
            ),
        )?;
        let tokens = report.tokens_after;
        if let Some(key) = key {
            let _ = app2.view_store(&tenant).keep_view(key, view, None);
        }
        Ok::<_, String>((bytes, tokens, report.steps))
    })
    .await
    .map_err(ApiError::internal)?;
    let Ok((bytes, tokens, steps)) = retried else {
        return Ok(replay(
            status,
            &response_headers,
            error_body.into(),
            &outcome,
        ));
    };
    outcome.retried = true;
    outcome.tokens_after = tokens;
    if let Some(counted) = outcome.counted.as_mut() {
        counted.tokens = (tokens as f64 / counted.factor).round() as usize;
    }
    outcome.steps = steps;
    outcome.prefix = Some("rebuilt");
    app.metrics
        .compaction(outcome.tokens_before, outcome.tokens_after);
    let bytes = Bytes::from(bytes);
    outcome.sent = Some(bytes.clone());
    let response = send(&app, method.clone(), &url, &headers, bytes.clone()).await?;
    let to = Upstream {
        method: &method,
        url: &url,
        headers: &headers,
    };
    recall_rounds(&app, to, recall, &bytes, response, &mut outcome).await
}

/// What goes upstream: what engram did, the request, its budget, the body, and the key the
/// view sent is kept under (when engram rewrote the request).
type Decision = (Outcome, Parsed, Plan, Bytes, Option<u128>);

/// Why engram leaves a request as it was sent (a reason for the metrics, and the detail), or
/// refuses it: `refuse` gives the request's tokens and the window when it cannot fit at all.
struct Skip {
    reason: &'static str,
    why: String,
    refuse: Option<(usize, usize)>,
}

impl Skip {
    fn new(reason: &'static str, why: impl Into<String>) -> Skip {
        Skip {
            reason,
            why: why.into(),
            refuse: None,
        }
    }
}

/// Counts the request and decides what goes upstream: as sent while nothing needs compacting;
/// else the view this agent's previous request got plus what is new, while that stays under the
/// threshold; else a compaction behind the head that view kept (or of the whole history). The
/// reason when it is not a request engram compacts (forwarded unchanged).
fn decide(app: &App, tenant: &str, format: Format, body: &Bytes) -> Result<Decision, Skip> {
    decide_once(app, tenant, format, body, false)
}

/// [`decide`]; `masked` once the newest tool outputs were masked (the last resort, tried once).
fn decide_once(
    app: &App,
    tenant: &str,
    format: Format,
    body: &Bytes,
    masked: bool,
) -> Result<Decision, Skip> {
    if let Some(why) = wire::provider_holds(format, body) {
        return Err(Skip::new("provider_state", why));
    }
    let parsed = parse(format, body).map_err(|why| Skip::new("unreadable", why))?;
    let plan = plan(app, tenant, &parsed);
    let marks = wire::breakpoints_for(
        app.config.proxy.cache_breakpoints,
        format,
        &app.config.registry,
        &parsed.model,
    );
    let tokens = plan
        .counter
        .count_conversation(&parsed.conversation)
        .total();
    let mut outcome = Outcome {
        model: parsed.model.clone(),
        window: plan.window,
        tokens_before: tokens,
        tokens_after: tokens,
        estimated: plan.estimated,
        ..Outcome::default()
    };
    let messages = &parsed.conversation.messages;
    let scope = format!("{tenant}\0{}", format.name());
    let prefixes = crate::views::prefix_hashes(&scope, messages);
    outcome.conversation = prefixes[messages.len().min(2)];
    let views = app.view_store(tenant);
    let previous = views
        .longest_view(&prefixes)
        .map_err(|e| Skip::new("store", format!("the views kept: {e}")))?;
    // engram's history tools, under the names this conversation got them by (they stay
    // offered once they were, so that the prefix stays): their definitions take room too.
    // Offered for the first time only by a compaction (a request that extends a view keeps
    // its prefix), and only where that is worth the prefix it makes new
    // ([`engram::offered::worth_offering`]): estimated before compacting, as the digest names
    // the tools it may use, from what the compaction would set aside (the request less the
    // target) and keep (the previous view's head, or the head a first compaction keeps).
    let wire = format.wire();
    let trigger = app.config.policy().trigger;
    let first_offer = |candidate: &engram::offered::Offered| {
        // A request under the threshold is sent as it is or extends a view: nothing to decide
        // (and nothing to count on the path most requests take).
        if !trigger.is_over(tokens, plan.room) {
            return false;
        }
        let counter = &plan.counter;
        let definitions = counter.count_tools(&candidate.definitions(wire));
        let kept = match &previous {
            Some(p) => p.messages[..p.head]
                .iter()
                .map(|m| counter.count_message(m).total())
                .sum(),
            None => engram::compact::policy::fixed_head(messages, counter, plan.room).tokens,
        };
        let recent = engram::compact::policy::recent_tokens(messages.iter(), counter);
        let set_aside = tokens.saturating_sub(trigger.target_tokens(plan.room, kept, recent));
        engram::offered::worth_offering(set_aside, kept, definitions)
    };
    let offered = match app.config.proxy.recall_tools {
        // Observing, nothing engram would answer goes upstream.
        _ if app.config.proxy.observe => None,
        RecallTools::Off => None,
        _ if previous.as_ref().is_some_and(|p| p.offered.is_some()) => {
            previous.as_ref().and_then(|p| p.offered.clone())
        }
        RecallTools::Always => Some(engram::offered::Offered::avoiding(&parsed.value, wire)),
        RecallTools::Auto => {
            Some(engram::offered::Offered::avoiding(&parsed.value, wire)).filter(first_offer)
        }
    };
    // They live in the room the threshold leaves above a view (a request is compacted past the
    // threshold, so what is sent holds at most the threshold's share of the limit): offered
    // only where they fit in half of it.
    let headroom = plan
        .room
        .saturating_sub(trigger.threshold_tokens(plan.room));
    let mut offered =
        offered.filter(|o| plan.counter.count_tools(&o.definitions(wire)) <= headroom / 2);
    let mut options = options(app);
    options.read_tool = offered.as_ref().map(|o| o.read.clone());
    let next =
        stable(app, &plan, &options).next(previous.as_ref(), &parsed.conversation, &plan.counter);
    let (view, prefix, steps) = match next {
        Ok(Next::AsSent) => {
            let sent = with_breakpoints(marks, format, &parsed).unwrap_or_else(|| body.clone());
            return Ok((outcome, parsed, plan, sent, None));
        }
        Ok(Next::Extended(mut view)) => {
            // What the view offered, and nothing new: an extension keeps the prefix.
            offered = offered.filter(|_| view.offered.is_some());
            view.offered = offered.clone();
            (view, "extended", vec!["extend"])
        }
        Ok(Next::Compacted(view, report)) => {
            let prefix = if previous
                .as_ref()
                .is_some_and(|p| p.head > 0 && view.messages.starts_with(&p.messages[..p.head]))
            {
                "appended"
            } else {
                "rebuilt"
            };
            (view, prefix, report.steps)
        }
        Err(e) => {
            // What must be kept (the instructions, the task, the newest message) does not fit.
            // The last resort: the newest tool outputs masked, with their way back.
            let read = offered.as_ref().map(|o| o.read.clone());
            let reads_back = |id: &str| match &read {
                Some(tool) => format!("; {tool} ids=[{id}] returns it whole"),
                None => String::new(),
            };
            if !masked
                && let Some(messages) = engram::compact::mask_newest_outputs(
                    &parsed.conversation.messages,
                    &plan.counter,
                    &reads_back,
                )
            {
                let origins = messages
                    .iter()
                    .zip(&parsed.conversation.messages)
                    .enumerate()
                    .map(|(i, (m, was))| {
                        if m == was {
                            engram::compact::Origin::Same(i)
                        } else {
                            engram::compact::Origin::Edited(i)
                        }
                    })
                    .collect();
                let view = engram::compact::stable::SentView {
                    covers: messages.len(),
                    messages,
                    origins,
                    head: 0,
                    offered: None,
                };
                if let Ok(bytes) = render(format, &parsed, &view, false) {
                    let mut decided = decide_once(app, tenant, format, &Bytes::from(bytes), true)?;
                    decided.0.tokens_before = tokens;
                    decided.0.steps.insert(0, "mask-newest");
                    if decided.4.is_none() && decided.0.uncompacted.is_none() {
                        // Sent as masked, not compacted further: it was not sent as it came.
                        decided.0.prefix = Some("rebuilt");
                    }
                    return Ok(decided);
                }
            }
            // A request over the whole window cannot be answered: the caller gets the
            // provider's own "too long" error, from engram, saying what did not fit.
            let over = if plan.estimated {
                tokens as f64 > plan.window as f64 * (1.0 + plan.margin)
            } else {
                tokens > plan.window
            };
            if over {
                return Err(Skip {
                    reason: "cannot_fit",
                    why: format!("{e}"),
                    refuse: Some((tokens, plan.window)),
                });
            }
            // Within the window, the upstream may take it: sent as it came, and said so.
            outcome.note = Some(format!("not compacted: {e}"));
            outcome.uncompacted = Some("cannot_fit");
            let sent = with_breakpoints(marks, format, &parsed).unwrap_or_else(|| body.clone());
            return Ok((outcome, parsed, plan, sent, None));
        }
    };
    let mut view = view;
    view.offered = offered;
    outcome.in_view = view
        .origins
        .iter()
        .filter_map(|o| o.same())
        .map(|i| messages[i].id.clone().unwrap_or_else(|| format!("m{i}")))
        .collect();
    let offered_tokens = view
        .offered
        .as_ref()
        .map_or(0, |o| plan.counter.count_tools(&o.definitions(wire)));
    let bytes =
        render(format, &parsed, &view, marks).map_err(|why| Skip::new("unreadable", why))?;
    outcome.tokens_after = view.tokens(&plan.counter, &parsed.conversation.tools) + offered_tokens;
    outcome.offered = view.offered.clone();
    outcome.steps = steps;
    outcome.prefix = Some(prefix);
    if prefix != "extended" {
        app.metrics.compaction(tokens, outcome.tokens_after);
    }
    // What a provider's cache would read of it again: the tools and the messages it shares with
    // what went before it (the view sent last, else the caller's own request, whose earlier
    // form went as sent).
    let before: &[engram::Message] = previous.as_ref().map_or(messages, |p| &p.messages);
    let shared = view
        .messages
        .iter()
        .zip(before)
        .take_while(|(a, b)| a == b)
        .count();
    outcome.reused = plan.counter.count_tools(&parsed.conversation.tools)
        + view.messages[..shared]
            .iter()
            .map(|m| plan.counter.count_message(m).total())
            .sum::<usize>();
    outcome.rewritten = true;
    let key = prefixes[messages.len()];
    let replaces = previous.map(|p| prefixes[p.covers]);
    if let Err(e) = views.keep_view(key, view, replaces) {
        // The request goes all the same; the next one compacts again.
        tracing::warn!(error = %e, "proxy: the view sent could not be kept");
    }
    Ok((outcome, parsed, plan, Bytes::from(bytes), Some(key)))
}

/// The provider's own "prompt is too long" answer, from engram, for a request whose
/// instructions, task and newest message alone are over the model's window: a client that
/// handles the provider's error (compacting, or telling the user) handles this one.
fn too_long(format: Format, tokens: usize, window: usize, why: &str) -> Response {
    let detail = format!(
        "engram: what must be kept of this request does not fit the model's window, even with the newest tool outputs masked ({why})"
    );
    let body = match format {
        Format::Anthropic => serde_json::json!({
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": format!("prompt is too long: {tokens} tokens > {window} maximum ({detail})"),
            }
        }),
        Format::OpenAi | Format::Responses => serde_json::json!({
            "error": {
                "message": format!("This model's maximum context length is {window} tokens. However, your messages resulted in {tokens} tokens. ({detail})"),
                "type": "invalid_request_error",
                "param": if format == Format::OpenAi { "messages" } else { "input" },
                "code": "context_length_exceeded",
            }
        }),
    };
    let mut response = (
        StatusCode::BAD_REQUEST,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response();
    let outcome = Outcome {
        tokens_before: tokens,
        tokens_after: tokens,
        window,
        uncompacted: Some("cannot_fit"),
        note: Some(format!("refused: {why}")),
        ..Outcome::default()
    };
    outcome.headers(response.headers_mut());
    response
}

/// The window each model of the registry (and of `--model-window`) gets, for the start-up log.
pub(crate) fn describe_windows(app: &App) -> Vec<String> {
    app.config
        .proxy
        .model_windows
        .iter()
        .map(|(name, tokens)| {
            let known = app.config.registry.resolve(name);
            let how = if known.how == engram::ModelMatch::Fallback {
                "configured (unknown to the registry)".to_owned()
            } else {
                format!(
                    "configured (the registry says {})",
                    known.spec.context_window
                )
            };
            format!("{name}: {tokens} tokens, {how}")
        })
        .collect()
}
