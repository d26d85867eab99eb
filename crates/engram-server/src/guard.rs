//! What a web page can forge, refused on every route: a web page the user opens can send a
//! request to a server on the same machine (loopback does not protect against a browser), and
//! a DNS-rebinding page can even read the answers. Three checks, before a handler runs:
//!
//! - **Host** names this server: with a loopback listen address, `localhost`, a
//!   `*.localhost` name or a loopback address, plus the names `--allow-host` adds; a server
//!   listening elsewhere (keys required) takes any Host unless names are configured. A
//!   rebinding page's requests carry its own name (`Host: evil.example:8420`): 403.
//! - **Origin**: a browser names the page that sent a request; one that is not this server's
//!   own origin (or `null`), and a request the browser marks as coming from another site, is
//!   refused (403): the inspector, served from this origin, keeps working.
//! - **Content type**: a body the server reads as JSON must say so (`application/json` or
//!   `application/*+json`): 415 otherwise. A page can send `text/plain` or a form to any
//!   address without asking; it cannot send `application/json` to another origin without a
//!   CORS preflight, which this server never grants.
//!
//! Clients that are not browsers (the SDKs, agents, curl) send a Host that names the server and
//! no Origin, so nothing changes for them.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::app::App;
use crate::error::ApiError;

/// Whether a Host header names this server, listening on `listen` with the extra names
/// `allowed` (`*` takes any).
pub(crate) fn host_allowed(host: &str, listen: IpAddr, allowed: &[String]) -> bool {
    let name = host_name(host).to_ascii_lowercase();
    if allowed
        .iter()
        .any(|a| a.eq_ignore_ascii_case(&name) || a == "*")
    {
        return true;
    }
    if !listen.is_loopback() {
        // A server on another address has keys (the CLI refuses otherwise); without configured
        // names the keys are the guard.
        return allowed.is_empty();
    }
    name == "localhost"
        || name.ends_with(".localhost")
        || name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The name part of a Host header (`127.0.0.1:8420` -> `127.0.0.1`, `[::1]:8420` -> `[::1]`).
fn host_name(host: &str) -> &str {
    let host = host.trim();
    if host.starts_with('[') {
        return host.split_inclusive(']').next().unwrap_or(host);
    }
    host.rsplit_once(':')
        .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
        .map_or(host, |(name, _)| name)
}

/// Whether a browser sent this request from a page of another origin: an `Origin` that is not
/// `http(s)://<Host>`, or `Sec-Fetch-Site` saying another site (a page's navigation to the
/// server, a link the user follows, is not refused).
fn cross_origin(headers: &HeaderMap) -> Option<String> {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("null");
        let own = ["http://", "https://"]
            .iter()
            .any(|scheme| origin.strip_prefix(scheme) == Some(host));
        if !own || host.is_empty() {
            return Some(format!("a request from the page at {origin:?}"));
        }
    }
    let site = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let navigation = headers
        .get("sec-fetch-mode")
        .is_some_and(|v| v.as_bytes() == b"navigate");
    if matches!(site, "cross-site" | "same-site") && !navigation {
        return Some(format!("a request from a page of another site ({site})"));
    }
    None
}

/// Whether a request carries a body: one that is not known to be empty (a length above zero,
/// or one sent in chunks).
fn has_body(request: &Request) -> bool {
    use axum::body::HttpBody;
    request.body().size_hint().exact() != Some(0)
}

/// Whether a content type says JSON (`application/json`, `application/x.y+json`, with any
/// parameters).
fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// The Host and Origin checks, on every route but `/healthz`.
pub(crate) async fn same_origin(
    State(app): State<Arc<App>>,
    request: Request,
    next: Next,
) -> Response {
    if request.uri().path() != "/healthz" {
        if let Some(host) = request.headers().get(header::HOST) {
            let host = host.to_str().unwrap_or_default();
            if !host_allowed(host, app.config.listen.ip(), &app.config.allowed_hosts) {
                return ApiError::new(
                    StatusCode::FORBIDDEN,
                    format!(
                        "Host {host:?} does not name this server; a client on this machine uses 127.0.0.1 or localhost (engram serve --allow-host NAME adds a name)"
                    ),
                )
                .into_response();
            }
        }
        if let Some(why) = cross_origin(request.headers()) {
            return ApiError::new(
                StatusCode::FORBIDDEN,
                format!(
                    "{why}: engram serve answers no web page but its own (/ui), so that a page the user opens cannot read or change the agent's memory"
                ),
            )
            .into_response();
        }
    }
    next.run(request).await
}

/// Routes that read their body as JSON take it only with a JSON content type.
pub(crate) async fn json_body(request: Request, next: Next) -> Response {
    let writes = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    if writes && has_body(&request) {
        let content_type = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if !is_json(content_type) {
            let said = if content_type.is_empty() {
                "no content type".to_owned()
            } else {
                format!("content type {content_type:?}")
            };
            return ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("a JSON body must be sent as content-type: application/json (this one has {said})"),
            )
            .into_response();
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loopback_server_takes_loopback_names_only() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        for ok in [
            "127.0.0.1:8420",
            "localhost:8420",
            "LOCALHOST",
            "[::1]:8420",
            "127.0.0.2",
            "app.localhost:8420",
        ] {
            assert!(host_allowed(ok, lo, &[]), "{ok}");
        }
        for bad in [
            "evil.example:8420",
            "evil.example",
            "10.0.0.1:8420",
            "localhost.evil.example",
        ] {
            assert!(!host_allowed(bad, lo, &[]), "{bad}");
        }
        assert!(host_allowed("box.lan:8420", lo, &["box.lan".to_owned()]));
    }

    #[test]
    fn a_server_on_another_address_takes_its_configured_names() {
        let any: IpAddr = "0.0.0.0".parse().unwrap();
        assert!(host_allowed("engram.internal:8420", any, &[]));
        let names = ["engram.internal".to_owned()];
        assert!(host_allowed("engram.internal:8420", any, &names));
        assert!(!host_allowed("evil.example:8420", any, &names));
    }

    #[test]
    fn an_origin_must_be_the_servers_own() {
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, v.parse().unwrap());
            }
            h
        };
        assert!(cross_origin(&headers(&[("host", "127.0.0.1:8420")])).is_none());
        assert!(
            cross_origin(&headers(&[
                ("host", "127.0.0.1:8420"),
                ("origin", "http://127.0.0.1:8420")
            ]))
            .is_none()
        );
        for origin in [
            "http://evil.example",
            "null",
            "http://localhost:8420",
            "http://127.0.0.1:3000",
        ] {
            assert!(
                cross_origin(&headers(&[("host", "127.0.0.1:8420"), ("origin", origin)])).is_some(),
                "{origin}"
            );
        }
        assert!(
            cross_origin(&headers(&[
                ("host", "127.0.0.1:8420"),
                ("sec-fetch-site", "cross-site"),
                ("sec-fetch-mode", "no-cors")
            ]))
            .is_some()
        );
        assert!(
            cross_origin(&headers(&[
                ("host", "127.0.0.1:8420"),
                ("sec-fetch-site", "cross-site"),
                ("sec-fetch-mode", "navigate")
            ]))
            .is_none()
        );
    }

    #[test]
    fn json_content_types() {
        for ok in [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON",
            "application/vnd.api+json",
        ] {
            assert!(is_json(ok), "{ok}");
        }
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "",
        ] {
            assert!(!is_json(bad), "{bad}");
        }
    }
}
