//! The router: every route of `engram serve` and the layers around them (what a web page can
//! forge, the tenant, the body limits and deadline, the metrics). The handlers are in `rest`, `proxy`, `mcp` and `ui`.

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::app::App;
use crate::auth::authenticate;
use crate::body::body_deadline;
use crate::error::ApiError;
use crate::{guard, rest};

/// The router (for tests and embedding).
pub fn router(app: Arc<App>) -> Router {
    let limit = app.config.max_body_bytes;
    let v1 = Router::new()
        .route(
            "/v1/sessions",
            post(rest::create_session).get(rest::list_sessions),
        )
        .route(
            "/v1/sessions/{id}",
            get(rest::show_session).delete(rest::delete_session),
        )
        .route(
            "/v1/sessions/{id}/messages",
            post(rest::append).get(rest::messages),
        )
        .route(
            "/v1/sessions/{id}/context",
            post(rest::context).get(rest::context_query),
        )
        .route("/v1/sessions/{id}/compact", post(rest::compact))
        .route("/v1/sessions/{id}/status", get(rest::status))
        .route("/v1/sessions/{id}/window", get(rest::window))
        .route("/v1/sessions/{id}/timeline", get(rest::timeline))
        .route("/v1/sessions/{id}/ledger", get(rest::ledger))
        .route("/v1/proxy/requests", get(crate::proxy::recent_requests))
        .route("/v1/proxy/savings", get(crate::proxy::savings))
        .route("/v1/sessions/{id}/tools/{name}", post(rest::tool_call))
        .route("/v1/tools", get(rest::tool_schemas))
        .route(
            "/v1/sessions/{id}/checkpoints",
            post(rest::checkpoint).get(rest::checkpoints),
        )
        .route(
            "/v1/sessions/{id}/checkpoints/{name}/restore",
            post(rest::restore),
        )
        .route("/v1/memory", post(rest::add_memory))
        .route("/v1/memory/search", get(rest::search))
        .route("/v1/memory/forget", post(rest::forget))
        .route("/v1/memory/sleep", post(rest::sleep))
        .route("/v1/memory/log", get(rest::log))
        .route("/v1/memory/stats", get(rest::memory_stats))
        .nest_service(
            "/mcp",
            tower::Layer::layer(
                &middleware::from_fn(crate::mcp::http_answers),
                crate::mcp::http_service(Arc::clone(&app)),
            ),
        )
        .route("/metrics", get(rest::metrics))
        .route_layer(middleware::from_fn(guard::json_body))
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
    let proxy = Router::new()
        .route("/v1/chat/completions", post(crate::proxy::chat_completions))
        .route("/v1/messages", post(crate::proxy::anthropic_messages))
        .route(
            "/v1/responses",
            post(crate::proxy::responses).get(crate::proxy::responses_websocket),
        )
        .route(
            "/v1/responses/compact",
            post(crate::proxy::responses_compact),
        )
        .route_layer(middleware::from_fn(guard::json_body));
    Router::new()
        .merge(v1)
        .merge(proxy)
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/ui", get(crate::ui::index))
        .route("/ui/", get(crate::ui::index))
        .route("/ui/app.js", get(crate::ui::script))
        .route("/ui/app.css", get(crate::ui::style))
        .route("/ui/config.json", get(crate::ui::config))
        .route("/openapi.json", get(rest::openapi))
        .fallback(fallback)
        .method_not_allowed_fallback(method_not_allowed)
        // The proxy's routes (and the pass-through) take larger bodies; the REST routes above
        // keep their own limit (the innermost limit is the one that applies).
        .layer(DefaultBodyLimit::max(app.config.max_proxy_body_bytes))
        .layer(middleware::from_fn_with_state(Arc::clone(&app), measure))
        // Outermost: what a web page can forge is refused before anything reads the request.
        .layer(middleware::from_fn_with_state(
            Arc::clone(&app),
            guard::same_origin,
        ))
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
