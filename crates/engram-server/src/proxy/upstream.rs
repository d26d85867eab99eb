//! Talking to the upstream: its URL for a path (never outside its base), the headers
//! forwarded, the call with its timeout, and its reply relayed byte for byte.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderName, StatusCode};
use axum::response::Response;

use super::outcome::Outcome;
use super::wire::Format;
use crate::app::App;
use crate::error::ApiError;

/// A proxied request taken apart: where it goes upstream, its method, headers and body (read
/// within the proxy's limit).
pub(super) struct Incoming {
    pub(super) url: String,
    pub(super) method: axum::http::Method,
    pub(super) headers: HeaderMap,
    pub(super) body: Bytes,
}

/// Takes `request` apart for the upstream of `format`.
pub(super) async fn incoming(
    app: &App,
    format: Format,
    request: axum::extract::Request,
) -> Result<Incoming, ApiError> {
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    Ok(Incoming {
        url: upstream_url(app, format, &path)?,
        method: request.method().clone(),
        headers: request.headers().clone(),
        body: crate::body::read_proxy_body(app, request.into_body()).await?,
    })
}

/// Headers never forwarded either way (hop by hop, or engram's own).
pub(super) fn skipped(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "host"
            | "content-length"
            | "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "upgrade"
            | "te"
            | "trailer"
            | "x-engram-key"
    )
}

/// The upstream URL for a request path under `/v1`.
pub(super) fn upstream_url(
    app: &App,
    format: Format,
    path_and_query: &str,
) -> Result<String, ApiError> {
    let (base, flag) = match format {
        Format::OpenAi | Format::Responses => (&app.config.proxy.openai_upstream, "--upstream URL"),
        Format::Anthropic => (
            &app.config.proxy.anthropic_upstream,
            "--anthropic-upstream URL",
        ),
    };
    let base = base.as_deref().ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_GATEWAY,
            format!("no upstream is configured for this route (the server's {flag} option)"),
        )
    })?;
    let base = base.trim_end_matches('/');
    // Every path stays under the base: a `.` or `..` segment would climb out of it, raw or in
    // any encoding a server on the way may decode (`%2e`, `%2f` for the slash, `%5c` for a
    // backslash, and the same encoded twice, `%252e`).
    let path = path_and_query.split('?').next().unwrap_or_default();
    if leaves_base(path) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "the path has a `.` or `..` segment; the proxy forwards only paths under its upstream",
        ));
    }
    let rest = path_and_query.strip_prefix("/v1").unwrap_or(path_and_query);
    // The OpenAI base includes /v1; the Anthropic SDK's does not (both spellings work).
    Ok(if format != Format::Anthropic || base.ends_with("/v1") {
        format!("{base}{rest}")
    } else {
        format!("{base}/v1{rest}")
    })
}

/// True when `path`, decoded as often as it decodes, has a `.` or `..` segment (separated by
/// `/` or `\\`).
pub(super) fn leaves_base(path: &str) -> bool {
    let mut decoded = path.as_bytes().to_vec();
    for _ in 0..4 {
        let once = percent_decode(&decoded);
        if once == decoded {
            break;
        }
        decoded = once;
    }
    decoded
        .split(|b| *b == b'/' || *b == b'\\')
        .any(|segment| segment == b"." || segment == b"..")
}

/// `%XX` sequences as the bytes they stand for; anything else as it is.
fn percent_decode(input: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while i < input.len() {
        if input[i] == b'%'
            && let (Some(hi), Some(lo)) = (
                input.get(i + 1).copied().and_then(hex),
                input.get(i + 2).copied().and_then(hex),
            )
        {
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(input[i]);
            i += 1;
        }
    }
    out
}

pub(super) async fn send(
    app: &App,
    method: axum::http::Method,
    url: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<reqwest::Response, ApiError> {
    let mut forwarded = reqwest::header::HeaderMap::new();
    for (name, value) in headers {
        // Identity bodies: engram reads an error reply to spot "context length exceeded".
        if !skipped(name) && name != axum::http::header::ACCEPT_ENCODING {
            forwarded.append(name.clone(), value.clone());
        }
    }
    // The message names the upstream's host, never the request's headers (keys) or path.
    let host = reqwest::Url::parse(url)
        .ok()
        .and_then(|u| {
            u.host_str().map(|h| {
                u.port()
                    .map_or_else(|| h.to_owned(), |p| format!("{h}:{p}"))
            })
        })
        .unwrap_or_else(|| "?".to_owned());
    let timeout = app.config.proxy.upstream_timeout;
    let answer = app
        .proxy
        .http
        .request(method, url)
        .headers(forwarded)
        .body(body)
        .send();
    match tokio::time::timeout(timeout, answer).await {
        Ok(Ok(response)) => Ok(response),
        Ok(Err(e)) => {
            let cause = if e.is_connect() {
                "cannot connect"
            } else if e.is_timeout() {
                "timed out"
            } else {
                "the connection failed"
            };
            Err(ApiError::new(
                StatusCode::BAD_GATEWAY,
                format!(
                    "the upstream at {host} did not answer ({cause}): {}",
                    e.without_url()
                ),
            ))
        }
        Err(_) => Err(ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            format!(
                "the upstream at {host} did not answer within {} s (engram serve --upstream-timeout-secs)",
                timeout.as_secs()
            ),
        )),
    }
}

/// The upstream's response, status, headers and body byte for byte (streamed), plus engram's
/// headers.
pub(super) fn relay(response: reqwest::Response, outcome: Option<&Outcome>) -> Response {
    let status = response.status();
    let mut headers = HeaderMap::new();
    for (name, value) in response.headers() {
        if !skipped(name) {
            headers.append(name.clone(), value.clone());
        }
    }
    if let Some(o) = outcome {
        o.headers(&mut headers);
    }
    let mut out = Response::new(Body::from_stream(response.bytes_stream()));
    *out.status_mut() = status;
    *out.headers_mut() = headers;
    if let Some(o) = outcome {
        o.attach_sent(&mut out);
    }
    out
}

/// True for an upstream's "the prompt is too long" answer.
pub(super) fn context_exceeded(status: StatusCode, body: &[u8]) -> bool {
    if !(status == StatusCode::BAD_REQUEST || status == StatusCode::PAYLOAD_TOO_LARGE) {
        return false;
    }
    let text = String::from_utf8_lossy(body).to_lowercase();
    [
        "context_length_exceeded",
        "maximum context length",
        "context length",
        "context window",
        "prompt is too long",
        "exceed_context_size",
        "exceeds the available context size",
        "too many tokens",
    ]
    .iter()
    .any(|needle| text.contains(needle))
}

/// Where a request goes upstream.
#[derive(Clone, Copy)]
pub(super) struct Upstream<'a> {
    pub(super) method: &'a axum::http::Method,
    pub(super) url: &'a str,
    pub(super) headers: &'a HeaderMap,
}

/// The most of an upstream's error body the proxy reads to decide on a retry (a context-length
/// error is a short JSON object); a larger body is relayed as it comes.
pub(super) const ERROR_BODY_CAP: usize = 64 << 10;

/// An upstream's response sent back as it was (its body read, or still coming).
pub(super) fn replay(
    status: StatusCode,
    headers: &reqwest::header::HeaderMap,
    body: Body,
    outcome: &Outcome,
) -> Response {
    let mut out = Response::new(body);
    *out.status_mut() = status;
    for (name, value) in headers {
        if !skipped(name) {
            out.headers_mut().append(name.clone(), value.clone());
        }
    }
    outcome.headers(out.headers_mut());
    outcome.attach_sent(&mut out);
    out
}
