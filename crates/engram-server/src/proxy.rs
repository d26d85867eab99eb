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

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use engram::compact::stable::{Next, SentView, Stable};
use engram::compact::{CompactOptions, Strategy};
use engram::{Conversation, TokenCounter};
use serde_json::Value;

use crate::App;
use crate::api::ApiError;

/// How the proxy decides and where it forwards.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// The OpenAI-format upstream, as the OpenAI SDK takes a base URL (`/v1` included).
    pub openai_upstream: Option<String>,
    /// The Anthropic upstream, as the Anthropic SDK takes a base URL (`https://api.anthropic.com`;
    /// a trailing `/v1` is accepted too).
    pub anthropic_upstream: Option<String>,
    /// Windows of models the registry does not know (a local server's model, say).
    pub model_windows: BTreeMap<String, usize>,
    /// Extra room kept when the count is an estimate (Claude): 0.1 is 10%.
    pub estimate_margin: f64,
    /// How long the upstream has to start its answer (its status and headers; a stream may
    /// then take as long as it needs). Past it the caller gets a 504 naming the upstream.
    pub upstream_timeout: std::time::Duration,
    /// Log one JSON line per proxied model request on standard error (route, model, status,
    /// tokens before and after, steps, summary cache, milliseconds).
    pub log_requests: bool,
    /// Keep what was sent upstream (secrets redacted) for this many of the latest proxied
    /// requests, for the inspector; 0 (the default) keeps none. The requests' figures are
    /// always kept, for the latest 200.
    pub keep_bodies: usize,
    /// On `/v1/messages`, mark where Anthropic's prompt cache keeps the prefix (the system
    /// prompt, the end of a view's head, the newest message) when the caller marks none: without
    /// a breakpoint Anthropic caches nothing. On by default (`--cache-breakpoints auto`).
    pub cache_breakpoints: bool,
    /// Once a request's history is set aside, offer the model engram's history search and read
    /// (`engram_search_history`, `engram_read_history`), answer its calls from the history the
    /// request carried and ask the upstream again ([`engram::offered`]). On by default
    /// (`--recall-tools auto`).
    pub recall_tools: bool,
}

/// How many proxied requests the inspector lists (per server, newest first).
pub(crate) const RECENT_REQUESTS: usize = 200;

/// The default [`ProxyConfig::upstream_timeout`]: a long generation can take minutes.
pub(crate) const DEFAULT_UPSTREAM_TIMEOUT: std::time::Duration =
    std::time::Duration::from_secs(600);

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            openai_upstream: None,
            anthropic_upstream: None,
            model_windows: BTreeMap::new(),
            estimate_margin: 0.1,
            upstream_timeout: DEFAULT_UPSTREAM_TIMEOUT,
            log_requests: false,
            keep_bodies: 0,
            cache_breakpoints: true,
            recall_tools: true,
        }
    }
}

/// Parses `NAME=TOKENS` (the `--model-window` flag).
pub fn parse_model_window(text: &str) -> Result<(String, usize), String> {
    let (name, tokens) = text.split_once('=').ok_or_else(|| {
        format!("--model-window {text:?}: expected NAME=TOKENS, like llama3=8192")
    })?;
    let tokens: usize =
        tokens.trim().replace('_', "").parse().map_err(|_| {
            format!("--model-window {text:?}: {tokens:?} is not a number of tokens")
        })?;
    if name.trim().is_empty() || tokens == 0 {
        return Err(format!(
            "--model-window {text:?}: expected a model name and a positive window"
        ));
    }
    Ok((name.trim().to_owned(), tokens))
}

/// The proxy's state: an HTTP client, one counter per tokenizer, the summaries it wrote and
/// the latest requests it proxied.
pub(crate) struct Proxy {
    http: reqwest::Client,
    counters: Mutex<HashMap<String, Arc<TokenCounter>>>,
    pub(crate) views: crate::views::MemoryViews,
    /// The count calibrations read or learned, by tenant and model (the store keeps them).
    calibrations: Mutex<HashMap<(String, String), engram::calibrate::Calibration>>,
    recent: Mutex<VecDeque<Recent>>,
    next_id: std::sync::atomic::AtomicU64,
}

/// A proxied request as the inspector lists it.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Recent {
    #[serde(skip)]
    id: u64,
    #[serde(skip)]
    tenant: String,
    #[serde(serialize_with = "engram::store::serialize_time")]
    at: engram::Timestamp,
    route: String,
    model: String,
    status: u16,
    tokens_before: u64,
    tokens_after: u64,
    steps: String,
    cache: String,
    retried: bool,
    ms: f64,
    note: String,
    /// What the upstream said the call used (its prompt cache too), once the reply has ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Billed>,
    /// What went upstream, redacted (only with `keep_bodies`).
    #[serde(skip_serializing_if = "Option::is_none")]
    sent: Option<Value>,
}

/// What the proxy sent upstream for a request, carried on the response to [`observed`].
#[derive(Debug, Clone)]
struct Sent(Bytes);

/// engram's own count of what went upstream (its tokenizer without a factor), for a model whose
/// counts are estimates: what the upstream reports for it calibrates them
/// ([`engram::calibrate`]). Carried on the response to [`observed`].
#[derive(Debug, Clone)]
struct Counted {
    /// The calibration's model (the registry's id, else the name the caller gave).
    model: String,
    tokens: usize,
    tools: bool,
    /// The factor the count of what was sent carried (the registry's or the calibration's).
    factor: f64,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy").finish_non_exhaustive()
    }
}

impl Proxy {
    pub(crate) fn new() -> Proxy {
        Proxy {
            http: reqwest::Client::builder()
                .connect_timeout(std::time::Duration::from_secs(10))
                .build()
                .unwrap_or_else(|_| reqwest::Client::new()),
            counters: Mutex::new(HashMap::new()),
            views: crate::views::MemoryViews::default(),
            calibrations: Mutex::new(HashMap::new()),
            recent: Mutex::new(VecDeque::new()),
            next_id: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Lists a proxied request for the inspector; its id, for [`Proxy::billed`].
    fn remember(&self, mut recent: Recent, keep_bodies: usize) -> u64 {
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        recent.id = id;
        if recent.tenant.is_empty() {
            return id;
        }
        let mut list = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        list.push_front(recent);
        list.truncate(RECENT_REQUESTS);
        // Only the newest `keep_bodies` keep what was sent: the one that just aged out drops it.
        if let Some(r) = list.get_mut(keep_bodies) {
            r.sent = None;
        }
        id
    }

    /// What the request listed as `id` used, once its reply has ended.
    fn billed(&self, id: u64, billed: Billed) {
        let mut list = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = list.iter_mut().find(|r| r.id == id) {
            r.usage = Some(billed);
        }
    }

    /// The calibration of `model`'s counts for `tenant`: as last read or learned, else from the
    /// store (an error reads as none: the registry's factor and the margin apply).
    fn calibration(&self, app: &App, tenant: &str, model: &str) -> engram::calibrate::Calibration {
        let key = (tenant.to_owned(), model.to_owned());
        if let Some(c) = self
            .calibrations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return c.clone();
        }
        let read = app
            .tenant_store(tenant)
            .ok()
            .and_then(|s| s.store.calibration(model).ok().flatten())
            .unwrap_or_default();
        self.calibrations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, read.clone());
        read
    }

    /// Learns from what the upstream reported for a request engram counted `counted`.
    fn learn(&self, app: &App, tenant: &str, counted: &Counted, reported: usize) {
        let Ok(store) = app.tenant_store(tenant) else {
            return;
        };
        match store.store.observe_count(
            &counted.model,
            counted.tokens,
            counted.tools,
            reported,
            engram::store::now(),
        ) {
            Ok(c) => {
                self.calibrations
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert((tenant.to_owned(), counted.model.clone()), c);
            }
            Err(e) => tracing::warn!(error = %e, "proxy: the count calibration could not be kept"),
        }
    }

    fn counter(&self, tokenizer: engram::Tokenizer) -> Arc<TokenCounter> {
        let id = tokenizer.id().to_owned();
        let mut counters = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(
            counters
                .entry(id)
                .or_insert_with(|| Arc::new(TokenCounter::new(tokenizer))),
        )
    }
}

/// The three wire formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    OpenAi,
    Anthropic,
    /// OpenAI's Responses API (`instructions` and `input` items), to the OpenAI upstream.
    Responses,
}

impl Format {
    fn wire(self) -> engram::offered::Wire {
        match self {
            Format::OpenAi => engram::offered::Wire::Chat,
            Format::Anthropic => engram::offered::Wire::Anthropic,
            Format::Responses => engram::offered::Wire::Responses,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Format::OpenAi => "openai",
            Format::Anthropic => "anthropic",
            Format::Responses => "responses",
        }
    }
}

/// What engram did to a request (reported in `x-engram-*` headers).
#[derive(Debug, Default)]
struct Outcome {
    model: String,
    window: usize,
    tokens_before: usize,
    tokens_after: usize,
    estimated: bool,
    steps: Vec<&'static str>,
    retried: bool,
    /// What became of the prefix the provider caches, for a request engram rewrote: `extended`
    /// (the view this agent's previous request got, and the new messages after it),
    /// `appended` (compacted behind the head that view kept: a summary block added after the
    /// earlier ones) or `rebuilt` (the whole history compacted: the first compaction, the
    /// summaries merged, or a retry).
    prefix: Option<&'static str>,
    note: Option<String>,
    /// The body sent upstream (for the inspector's list of recent requests).
    sent: Option<Bytes>,
    /// engram's own count of what was sent, when its counts are estimates.
    counted: Option<Counted>,
    /// engram's history tools, when the request offered them to the model.
    offered: Option<engram::offered::Offered>,
    /// How many of the model's calls to them engram answered.
    recall_calls: usize,
}

impl Outcome {
    /// Carries the body sent upstream to [`observed`], which keeps it for the inspector.
    fn attach_sent(&self, response: &mut Response) {
        if let Some(sent) = &self.sent {
            response.extensions_mut().insert(Sent(sent.clone()));
        }
        if let Some(counted) = &self.counted {
            response.extensions_mut().insert(counted.clone());
        }
    }

    /// What was sent, as engram counted it without a factor (for a plan whose count is an
    /// estimate).
    fn count_sent(&mut self, plan: &Plan, tools: bool) {
        self.counted = plan.estimated.then(|| Counted {
            model: plan.calibration.clone(),
            tokens: (self.tokens_after as f64 / plan.factor).round() as usize,
            tools,
            factor: plan.factor,
        });
    }

    fn headers(&self, headers: &mut HeaderMap) {
        let mut put = |name: &'static str, value: String| {
            if let Ok(v) = HeaderValue::from_str(&value) {
                headers.insert(HeaderName::from_static(name), v);
            }
        };
        put("x-engram-model", self.model.clone());
        put("x-engram-tokens-before", self.tokens_before.to_string());
        put("x-engram-tokens-after", self.tokens_after.to_string());
        put("x-engram-window", self.window.to_string());
        put(
            "x-engram-steps",
            if self.steps.is_empty() {
                "none".to_owned()
            } else {
                self.steps.join(",")
            },
        );
        put("x-engram-estimated", self.estimated.to_string());
        if self.offered.is_some() {
            put("x-engram-recall-calls", self.recall_calls.to_string());
        }
        put("x-engram-retried", self.retried.to_string());
        if let Some(prefix) = self.prefix {
            put("x-engram-prefix", prefix.to_owned());
        }
        if let Some(note) = &self.note {
            put(
                "x-engram-note",
                note.chars()
                    .filter(|c| c.is_ascii_graphic() || *c == ' ')
                    .collect(),
            );
        }
    }
}

/// Headers never forwarded either way (hop by hop, or engram's own).
fn skipped(name: &HeaderName) -> bool {
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
fn upstream_url(app: &App, format: Format, path_and_query: &str) -> Result<String, ApiError> {
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
fn leaves_base(path: &str) -> bool {
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

/// Checks the engram key (`X-Engram-Key`) when the server has keys; the tenant it names (the
/// local tenant without keys).
fn authorize(app: &App, headers: &HeaderMap) -> Result<String, ApiError> {
    let Some(keys) = &app.config.api_keys else {
        return Ok(crate::LOCAL_TENANT.to_owned());
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

/// A model request forwarded, then counted in the metrics and listed for the inspector; when
/// the reply has ended, what the upstream said it used (input tokens, those read from and
/// written to its prompt cache, output) joins both and (with `log_requests`) one JSON line on
/// standard error: route, model, tokens before and after, steps, what became of the cached
/// prefix, the status the caller got (the upstream's, or engram's own 4xx/502/504), the time to
/// it, the usage and its cost.
async fn observed(app: Arc<App>, format: Format, route: &str, request: Request) -> Response {
    let started = Instant::now();
    let tenant = authorize(&app, request.headers()).ok();
    let mut response = forward_compacted(Arc::clone(&app), format, request)
        .await
        .unwrap_or_else(IntoResponse::into_response);
    let sent = response.extensions_mut().remove::<Sent>();
    let counted = response.extensions_mut().remove::<Counted>();
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
        model: &model,
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
        at: engram::store::now(),
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
            let usage = usage.map(|u| Billed::of(&app2, &recent, u));
            if let Some(u) = &usage {
                app2.metrics.usage(&recent.route, &recent.model, &u.usage);
                app2.proxy.billed(id, u.clone());
                // What the upstream counted calibrates an estimated count (a store write: off
                // the async threads).
                if let Some(counted) = counted
                    && u.usage.input_tokens > 0
                    && (200..300).contains(&recent.status)
                {
                    let (app3, tenant, reported) = (
                        Arc::clone(&app2),
                        recent.tenant.clone(),
                        u.usage.input_tokens,
                    );
                    let learn = move || app3.proxy.learn(&app3, &tenant, &counted, reported);
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

/// What a proxied call used, as the upstream reported it, and what it cost.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Billed {
    /// What the upstream reported (input tokens, cached ones included; those read from and
    /// written to its cache; output tokens).
    #[serde(flatten)]
    usage: engram::usage::CallUsage,
    /// The share of the input read from the cache.
    cached_share: f64,
    /// What the call cost at the registry's prices.
    cost_usd: f64,
    /// What it would have cost sent uncompacted (engram's count of the caller's request), with
    /// the same tokens read from the cache.
    uncompacted_usd: f64,
}

impl Billed {
    fn of(app: &App, recent: &Recent, usage: engram::usage::CallUsage) -> Billed {
        let price = app.config.registry.resolve(&recent.model).spec.price;
        let sent_whole = (recent.tokens_before as usize).max(usage.input_tokens);
        Billed {
            usage,
            cached_share: if usage.input_tokens == 0 {
                0.0
            } else {
                (usage.cached_tokens as f64 / usage.input_tokens as f64 * 1e3).round() / 1e3
            },
            cost_usd: usage.cost(&price),
            uncompacted_usd: price.cost(
                sent_whole.saturating_sub(usage.cached_tokens),
                usage.cached_tokens,
                usage.output_tokens,
            ),
        }
    }
}

/// `GET /v1/proxy/requests`: the tenant's latest proxied requests, newest first (with what was
/// sent upstream, redacted, for the latest `keep_bodies`).
pub(crate) async fn recent_requests(
    State(app): State<Arc<App>>,
    axum::Extension(tenant): axum::Extension<crate::api::Tenant>,
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

/// Any other `/v1/*` route: straight through (Anthropic's when the path or the headers say so).
pub(crate) async fn pass_through(app: Arc<App>, request: Request) -> Response {
    let result = async {
        authorize(&app, request.headers())?;
        let anthropic = request.uri().path().starts_with("/v1/messages")
            || request.headers().contains_key("anthropic-version")
            || request.headers().contains_key("x-api-key");
        let format = if anthropic && app.config.proxy.anthropic_upstream.is_some() {
            Format::Anthropic
        } else {
            Format::OpenAi
        };
        let path = request
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        let url = upstream_url(&app, format, &path)?;
        let method = request.method().clone();
        let headers = request.headers().clone();
        let body = read_body(&app, request.into_body()).await?;
        let response = send(&app, method, &url, &headers, body).await?;
        Ok::<Response, ApiError>(relay(response, None))
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
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
async fn read_body(app: &App, body: Body) -> Result<Bytes, ApiError> {
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

async fn send(
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
fn relay(response: reqwest::Response, outcome: Option<&Outcome>) -> Response {
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

/// The request as engram understands it.
struct Parsed {
    value: Value,
    conversation: Conversation,
    model: String,
    max_tokens: Option<usize>,
    /// A Responses request's items and where each message came from (its conversation moved
    /// to `conversation`).
    items: Option<engram::responses::Items>,
}

/// The request as engram understands it, or why engram leaves it alone.
fn parse(format: Format, body: &[u8]) -> Result<Parsed, String> {
    let not_parsed = |why: String| format!("not parsed ({why})");
    let value: Value = serde_json::from_slice(body).map_err(|e| not_parsed(e.to_string()))?;
    let model = value
        .get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| not_parsed("no `model`".into()))?
        .to_owned();
    let mut items = None;
    let conversation = match format {
        Format::OpenAi => {
            engram::parse_conversation(body).map_err(|e| not_parsed(e.to_string()))?
        }
        Format::Anthropic => {
            engram::anthropic::from_anthropic(&value).map_err(|e| not_parsed(e.to_string()))?
        }
        Format::Responses => {
            if let Some(why) = provider_state(&value) {
                return Err(why.to_owned());
            }
            let mut read =
                engram::responses::from_request(&value).map_err(|e| not_parsed(e.to_string()))?;
            let conversation = std::mem::take(&mut read.conversation);
            items = Some(read);
            conversation
        }
    };
    let max_tokens = ["max_completion_tokens", "max_tokens", "max_output_tokens"]
        .iter()
        .find_map(|k| value.get(*k).and_then(Value::as_u64))
        .map(|n| n as usize);
    Ok(Parsed {
        value,
        conversation,
        model,
        max_tokens,
        items,
    })
}

/// Why a Responses request's conversation is the provider's to keep, not engram's to compact:
/// it continues a stored response or conversation, or asks the provider to store it.
fn provider_state(request: &Value) -> Option<&'static str> {
    let set = |key: &str| request.get(key).is_some_and(|v| !v.is_null());
    if set("previous_response_id") {
        Some("previous_response_id: the provider holds this conversation")
    } else if set("conversation") {
        Some("conversation: the provider holds this conversation")
    } else if request.get("store") == Some(&Value::Bool(true)) {
        Some("store: true: the provider keeps this conversation as sent")
    } else {
        None
    }
}

/// The budget for a request: what the window leaves after the reply, less the margin when the
/// count is an estimate (narrowed, or widened, by the model's calibration once it has one).
struct Plan {
    counter: Arc<TokenCounter>,
    window: usize,
    room: usize,
    estimated: bool,
    /// The factor the counter multiplies its tokenizer's counts by.
    factor: f64,
    /// The model the count's calibration is kept under.
    calibration: String,
}

fn plan(app: &App, tenant: &str, parsed: &Parsed) -> Plan {
    let resolved = app.config.registry.resolve(&parsed.model);
    let configured = app.config.proxy.model_windows.get(&parsed.model).copied();
    let window = configured.unwrap_or(resolved.spec.context_window);
    let mut tokenizer = resolved
        .spec
        .tokenizer()
        .unwrap_or_else(|_| engram::Tokenizer::chars_per_token(4));
    let estimated = !tokenizer.is_exact();
    let mut room = engram::compact::policy::request_limit(
        window,
        resolved.spec.max_output_tokens,
        parsed.max_tokens,
    );
    let calibration = if resolved.spec.id.is_empty() {
        parsed.model.clone()
    } else {
        resolved.spec.id.clone()
    };
    if estimated {
        let mut margin = app.config.proxy.estimate_margin;
        let learned = app.proxy.calibration(app, tenant, &calibration);
        if let (Some(factor), Ok(base)) = (
            learned.factor(),
            engram::Tokenizer::from_name(&resolved.spec.tokenizer),
        ) {
            tokenizer = base.scaled(factor);
            margin = learned.margin(margin);
            if !parsed.conversation.tools.is_empty() {
                room = room.saturating_sub(learned.tools_overhead().unwrap_or(0));
            }
        }
        room = (room as f64 / (1.0 + margin)) as usize;
    }
    Plan {
        factor: tokenizer.factor(),
        counter: app.proxy.counter(tokenizer),
        window,
        room,
        estimated,
        calibration,
    }
}

/// The request body with `view`'s messages in place of the caller's, in the caller's format;
/// every other key as the caller sent it. A caller's message unchanged goes upstream as the
/// caller sent it, every field in the caller's order; the same view renders to the same bytes,
/// so that a request that extends it repeats them.
fn render(
    format: Format,
    parsed: &Parsed,
    view: &SentView,
    breakpoints: bool,
) -> Result<Vec<u8>, String> {
    let kept = &view.origins;
    let messages = &view.messages;
    let body = match format {
        Format::Responses => {
            let items = parsed
                .items
                .as_ref()
                .ok_or("a Responses request without items")?;
            let mut value = parsed.value.clone();
            value["input"] = Value::Array(engram::responses::to_items(items, messages, kept));
            if let Some(offered) = &view.offered {
                offered.offer(&mut value, format.wire());
            }
            value
        }
        Format::OpenAi => {
            let original = parsed.value.get("messages").and_then(Value::as_array);
            let mut value = parsed.value.clone();
            value["messages"] = Value::Array(
                messages
                    .iter()
                    .enumerate()
                    .map(|(n, m)| {
                        kept.get(n)
                            .and_then(|o| o.same())
                            .and_then(|i| original?.get(i).cloned())
                            .unwrap_or_else(|| m.to_value())
                    })
                    .collect(),
            );
            if let Some(offered) = &view.offered {
                offered.offer(&mut value, format.wire());
            }
            value
        }
        Format::Anthropic => {
            let mut value = engram::anthropic::rewrite_request(
                &parsed.value,
                &parsed.conversation,
                messages.clone(),
            )
            .map_err(|e| e.to_string())?;
            if let Some(offered) = &view.offered {
                offered.offer(&mut value, format.wire());
            }
            if breakpoints && !engram::anthropic::has_cache_breakpoints(&parsed.value) {
                let lead = engram::message::leading_instructions(&view.messages);
                let head = (view.head > lead)
                    .then(|| engram::anthropic::block_count(&view.messages[lead..view.head]));
                engram::anthropic::mark_cache_breakpoints(&mut value, head);
            }
            value
        }
    };
    serde_json::to_vec(&body).map_err(|e| e.to_string())
}

/// An Anthropic request sent as the caller sent it, with the breakpoints of its cache marked
/// when the caller marked none ([`ProxyConfig::cache_breakpoints`]); `None`: as it is.
fn with_breakpoints(app: &App, format: Format, parsed: &Parsed) -> Option<Bytes> {
    if format != Format::Anthropic
        || !app.config.proxy.cache_breakpoints
        || engram::anthropic::has_cache_breakpoints(&parsed.value)
    {
        return None;
    }
    let mut value = parsed.value.clone();
    (engram::anthropic::mark_cache_breakpoints(&mut value, None) > 0)
        .then(|| serde_json::to_vec(&value).ok().map(Bytes::from))
        .flatten()
}

/// The options every compaction of the proxy runs with: the configured pipeline (the
/// summarizer of `[summarizer]` / `--summarizer` when there is one).
fn options(app: &App) -> CompactOptions {
    let mut options = CompactOptions::new(1);
    options.strategy = Strategy::Auto;
    options.summarizer = app.config.summarizer().cloned();
    options
}

/// How the proxy compacts a request of `plan`: the sessions' policy, against the room the
/// request leaves for its reply.
fn stable<'o>(app: &App, plan: &Plan, options: &'o CompactOptions) -> Stable<'o> {
    Stable {
        trigger: app.config.policy().trigger,
        limit: plan.room,
        options,
    }
}

/// True for an upstream's "the prompt is too long" answer.
fn context_exceeded(status: StatusCode, body: &[u8]) -> bool {
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

async fn forward_compacted(
    app: Arc<App>,
    format: Format,
    request: Request,
) -> Result<Response, ApiError> {
    let tenant = authorize(&app, request.headers())?;
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let url = upstream_url(&app, format, &path)?;
    let method = request.method().clone();
    let headers = request.headers().clone();
    let body = read_body(&app, request.into_body()).await?;

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
        // provider holds): the upstream answers it as it would, and a header says why.
        Err(why) => {
            let outcome = Outcome {
                note: Some(format!("{why}; forwarded unchanged")),
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
    outcome.sent = Some(forwarded.clone());
    outcome.count_sent(&plan, !parsed.conversation.tools.is_empty());
    // What answering the model's calls to engram's tools needs of the request.
    let recall = outcome.offered.as_ref().map(|_| Recall {
        messages: Arc::new(parsed.conversation.messages.clone()),
        model: parsed.model.clone(),
        streamed: parsed.value.get("stream") == Some(&Value::Bool(true)),
        format,
    });
    let sent = forwarded.clone();
    let response = send(&app, method.clone(), &url, &headers, forwarded).await?;
    let status = response.status();
    if !(status == StatusCode::BAD_REQUEST || status == StatusCode::PAYLOAD_TOO_LARGE) {
        let to = Upstream {
            method: &method,
            url: &url,
            headers: &headers,
        };
        return recall_rounds(&app, to, recall.as_ref(), &sent, response, &mut outcome).await;
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
        let target =
            app2.config
                .policy()
                .trigger
                .retry_target(plan.room, fixed.tokens, sent_tokens);
        let options = options(&app2);
        let (mut view, report) = stable(&app2, &plan, &options)
            .rebuild(&parsed.conversation, &plan.counter, target)
            .map_err(|e| e.to_string())?;
        view.offered = offered;
        let bytes = render(format, &parsed, &view, app2.config.proxy.cache_breakpoints)?;
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
    recall_rounds(&app, to, recall.as_ref(), &bytes, response, &mut outcome).await
}

/// Where a request goes upstream.
#[derive(Clone, Copy)]
struct Upstream<'a> {
    method: &'a axum::http::Method,
    url: &'a str,
    headers: &'a HeaderMap,
}

/// What answering the model's calls to engram's history tools needs of the request: the
/// conversation it carried (the caller resends it whole), its model and whether it streams.
struct Recall {
    messages: Arc<Vec<engram::Message>>,
    model: String,
    streamed: bool,
    format: Format,
}

/// The reply the caller gets: the upstream's, as it comes, when engram offered no tools (or
/// the request failed); else, once the model's turn has ended, the turn read for calls to
/// engram's tools, which are answered and the upstream asked again (at most
/// [`engram::offered::MAX_ROUNDS`] times), until a reply calls none; its usage then holds every
/// round's.
async fn recall_rounds(
    app: &Arc<App>,
    to: Upstream<'_>,
    recall: Option<&Recall>,
    sent: &Bytes,
    response: reqwest::Response,
    outcome: &mut Outcome,
) -> Result<Response, ApiError> {
    let (Some(recall), Some(offered)) = (recall, outcome.offered.clone()) else {
        return Ok(relay(response, Some(outcome)));
    };
    let wire = recall.format.wire();
    let mut request: Value = serde_json::from_slice(sent).map_err(ApiError::internal)?;
    let mut response = response;
    let mut earlier = Value::Null;
    for round in 0..=engram::offered::MAX_ROUNDS {
        let status = response.status();
        if !status.is_success() {
            return Ok(relay(response, Some(outcome)));
        }
        let upstream_headers = response.headers().clone();
        let body = response.bytes().await.map_err(|e| {
            ApiError::new(
                StatusCode::BAD_GATEWAY,
                format!("the upstream's reply broke off: {e}"),
            )
        })?;
        let turn = engram::offered::read_reply(wire, &body, recall.streamed, &offered)
            .filter(|t| !t.calls.is_empty() && round < engram::offered::MAX_ROUNDS);
        let Some(turn) = turn else {
            let body = engram::offered::add_usage(wire, &body, recall.streamed, &earlier);
            return Ok(replay(status, &upstream_headers, Body::from(body), outcome));
        };
        let (app2, messages, model, calls, names) = (
            Arc::clone(app),
            Arc::clone(&recall.messages),
            recall.model.clone(),
            turn.calls.clone(),
            offered.clone(),
        );
        let replies = tokio::task::spawn_blocking(move || {
            engram::offered::answer(&calls, &messages, &app2.config.registry, &model, &names)
        })
        .await
        .map_err(ApiError::internal)?
        .unwrap_or_else(|e| {
            turn.calls
                .iter()
                .map(|_| engram::tools::ToolReply::error(format!("engram could not answer: {e}")))
                .collect()
        });
        outcome.recall_calls += turn.calls.len();
        earlier = engram::offered::sum_usage(&earlier, &turn.usage);
        let last = round + 1 == engram::offered::MAX_ROUNDS;
        engram::offered::follow_up(wire, &mut request, &turn, &replies, last);
        let bytes = Bytes::from(serde_json::to_vec(&request).map_err(ApiError::internal)?);
        response = send(app, to.method.clone(), to.url, to.headers, bytes).await?;
    }
    Err(ApiError::internal(
        "the recall rounds ended without a reply",
    ))
}

/// The most of an upstream's error body the proxy reads to decide on a retry (a context-length
/// error is a short JSON object); a larger body is relayed as it comes.
const ERROR_BODY_CAP: usize = 64 << 10;

/// An upstream's response sent back as it was (its body read, or still coming).
fn replay(
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

/// What goes upstream: what engram did, the request, its budget, the body, and the key the
/// view sent is kept under (when engram rewrote the request).
type Decision = (Outcome, Parsed, Plan, Bytes, Option<u128>);

/// Counts the request and decides what goes upstream: as sent while nothing needs compacting;
/// else the view this agent's previous request got plus what is new, while that stays under the
/// threshold; else a compaction behind the head that view kept (or of the whole history). The
/// reason when it is not a request engram compacts (forwarded unchanged).
fn decide(app: &App, tenant: &str, format: Format, body: &Bytes) -> Result<Decision, String> {
    let parsed = parse(format, body)?;
    let plan = plan(app, tenant, &parsed);
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
    let views = app.view_store(tenant);
    let previous = views
        .longest_view(&prefixes)
        .map_err(|e| format!("the views kept: {e}"))?;
    // engram's history tools, under the names this conversation got them by (they stay
    // offered once they were, so that the prefix stays): their definitions take room too.
    let wire = format.wire();
    let offered = app.config.proxy.recall_tools.then(|| {
        previous
            .as_ref()
            .and_then(|p| p.offered.clone())
            .unwrap_or_else(|| engram::offered::Offered::avoiding(&parsed.value, wire))
    });
    // They live in the room the threshold leaves above a view (a request is compacted past the
    // threshold, so what is sent holds at most the threshold's share of the limit): offered
    // only where they fit in half of it.
    let trigger = app.config.policy().trigger;
    let headroom = plan
        .room
        .saturating_sub(trigger.threshold_tokens(plan.room));
    let offered =
        offered.filter(|o| plan.counter.count_tools(&o.definitions(wire)) <= headroom / 2);
    let offered_tokens = offered
        .as_ref()
        .map_or(0, |o| plan.counter.count_tools(&o.definitions(wire)));
    let mut options = options(app);
    options.read_tool = offered.as_ref().map(|o| o.read.clone());
    let next =
        stable(app, &plan, &options).next(previous.as_ref(), &parsed.conversation, &plan.counter);
    let (view, prefix, steps) = match next {
        Ok(Next::AsSent) => {
            let sent = with_breakpoints(app, format, &parsed).unwrap_or_else(|| body.clone());
            return Ok((outcome, parsed, plan, sent, None));
        }
        Ok(Next::Extended(view)) => (view, "extended", vec!["extend"]),
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
            // What must be kept does not fit: the upstream gets the request as sent.
            outcome.note = Some(format!("not compacted: {e}"));
            let sent = with_breakpoints(app, format, &parsed).unwrap_or_else(|| body.clone());
            return Ok((outcome, parsed, plan, sent, None));
        }
    };
    let mut view = view;
    view.offered = offered;
    let bytes = render(format, &parsed, &view, app.config.proxy.cache_breakpoints)?;
    outcome.tokens_after = view.tokens(&plan.counter, &parsed.conversation.tools) + offered_tokens;
    outcome.offered = view.offered.clone();
    outcome.steps = steps;
    outcome.prefix = Some(prefix);
    if prefix != "extended" {
        app.metrics.compaction(tokens, outcome.tokens_after);
    }
    let key = prefixes[messages.len()];
    let replaces = previous.map(|p| prefixes[p.covers]);
    if let Err(e) = views.keep_view(key, view, replaces) {
        // The request goes all the same; the next one compacts again.
        tracing::warn!(error = %e, "proxy: the view sent could not be kept");
    }
    Ok((outcome, parsed, plan, Bytes::from(bytes), Some(key)))
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
