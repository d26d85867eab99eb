//! Who a request is: the tenant its API key names. The REST routes and MCP take the key as
//! `Authorization: Bearer`, the proxy routes as `X-Engram-Key` (their `Authorization` is the
//! upstream's); without keys every request is the local tenant's.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::app::App;
use crate::config::LOCAL_TENANT;
use crate::error::ApiError;

/// The tenant an API key names (on the request, for the handlers and for MCP).
#[derive(Clone)]
pub(crate) struct Tenant(pub(crate) String);

/// The REST routes' and MCP's key check (`Authorization: Bearer`): the tenant goes on the
/// request, or the answer is a 401.
pub(crate) async fn authenticate(
    State(app): State<Arc<App>>,
    mut request: Request,
    next: Next,
) -> Response {
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

/// Checks the engram key (`X-Engram-Key`) when the server has keys; the tenant it names (the
/// local tenant without keys).
pub(crate) fn proxy_tenant(app: &App, headers: &HeaderMap) -> Result<String, ApiError> {
    let Some(keys) = &app.config.api_keys else {
        return Ok(LOCAL_TENANT.to_owned());
    };
    let key = headers
        .get("x-engram-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    match key.and_then(|k| keys.tenant(k)) {
        Some(tenant) => Ok(tenant.to_owned()),
        None => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            if key.is_none() {
                "missing engram key: send X-Engram-Key: <key> (Authorization goes to the upstream)"
            } else {
                "unknown engram key (X-Engram-Key)"
            },
        )),
    }
}
