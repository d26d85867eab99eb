//! Request bodies and query strings: read within their time and size limits, parsed into the
//! core's request types with errors that name the field.

use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::sync::Arc;

use crate::app::App;
use crate::error::ApiError;

/// A query string read into `T`. A parameter of the wrong type is a 400 whose `field` names
/// it, in the words a body's field gets (axum's `Query` answers in plain text).
pub(crate) struct Params<T>(pub(crate) T);

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

/// Reads a REST request's body within the body timeout (a client that dribbles its body is
/// answered 408 and its connection freed), then hands it on.
pub(crate) async fn body_deadline(
    State(app): State<Arc<App>>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let limit = app.config.max_body_bytes;
    let read = tokio::time::timeout(app.config.body_timeout, axum::body::to_bytes(body, limit));
    match read.await {
        Err(_) => body_too_slow(app.config.body_timeout).into_response(),
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

/// A JSON object body (an empty body is `{}`).
pub(crate) fn json_object(bytes: &Bytes) -> Result<Value, ApiError> {
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
pub(crate) fn flag(value: Option<&str>, key: &str, default: bool) -> Result<bool, ApiError> {
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

/// The error for a request body that did not arrive in time.
pub(crate) fn body_too_slow(timeout: std::time::Duration) -> ApiError {
    ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        format!(
            "the request body did not arrive within {} s (engram serve --body-timeout-secs)",
            timeout.as_secs()
        ),
    )
}

/// A proxied request's body, up to the proxy's limit (a 413 that names it and its flag).
pub(crate) async fn read_proxy_body(app: &App, body: Body) -> Result<Bytes, ApiError> {
    let limit = app.config.max_proxy_body_bytes;
    let timeout = app.config.body_timeout;
    let Ok(read) = tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await else {
        return Err(body_too_slow(timeout));
    };
    read.map_err(|_| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the request body is larger than {} MiB, the proxy's limit (engram serve --max-proxy-body-mb, or [server] max_proxy_body_mb)",
                limit >> 20
            ),
        )
    })
}
