//! The inspector at `/ui`: one page, a script and a style sheet, compiled into the binary
//! (nothing is fetched from elsewhere, nothing is built at run time). The page holds no data:
//! it calls the REST API with the key its user enters, so it shows only that key's tenant,
//! and without keys the server listens on loopback only, as for the API.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("ui/index.html");
const SCRIPT: &str = include_str!("ui/app.js");
const STYLE: &str = include_str!("ui/app.css");

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Only the page's own files run; nothing may frame it.
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// `GET /ui`: the page.
pub(crate) async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

/// `GET /ui/app.js`.
pub(crate) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

/// `GET /ui/config.json`: whether the page must ask for an API key (so that it asks before
/// its first call rather than after a refusal).
pub(crate) async fn config(
    axum::extract::State(app): axum::extract::State<std::sync::Arc<crate::app::App>>,
) -> Response {
    let mut response =
        axum::Json(serde_json::json!({ "keys": app.config.api_keys.is_some() })).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// `GET /ui/app.css`.
pub(crate) async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}
