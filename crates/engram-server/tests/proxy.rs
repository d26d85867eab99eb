//! The drop-in proxy against a fake upstream on a real socket that records what it receives:
//! byte-for-byte pass-through when nothing needs doing, a long real trajectory sent turn by turn
//! arriving within the window with its tool pairs intact, streams relayed byte for byte, one
//! harder retry on "context length exceeded" (never a loop), other /v1 routes passed through,
//! the caller's Authorization forwarded and the engram key (X-Engram-Key) not.

use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use engram::compact::summarize::{DeterministicSummarizer, Summarizer, SummaryRequest};
use engram_server::{ApiKeys, App, RecallTools, ServeConfig, StoreLocation, router};
use serde_json::{Value, json};
use tower::ServiceExt;

mod support;

/// What the fake upstream saw, and how it answers.
#[derive(Default)]
struct Upstream {
    received: Vec<(String, HeaderMap, Bytes)>,
    /// Answer "context length exceeded" to this many more chat requests.
    reject: usize,
    /// Answer every chat request with a 400 and this body.
    error_body: Option<Bytes>,
    /// Answer a Responses request that ends with the compaction trigger with a compaction item,
    /// as OpenAI does (otherwise it is answered as any turn, as a local model server does).
    compacts: bool,
}

type Shared = Arc<Mutex<Upstream>>;

const SSE: &str = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"}}]}\n\n\
data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\n\n\
data: [DONE]\n\n";

async fn chat(State(up): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let mut up = up.lock().expect("lock");
    up.received
        .push(("/v1/chat/completions".into(), headers, body.clone()));
    if let Some(body) = up.error_body.clone() {
        return (
            StatusCode::BAD_REQUEST,
            [(header::CONTENT_TYPE, "text/plain")],
            body,
        )
            .into_response();
    }
    if up.reject > 0 {
        up.reject -= 1;
        return (
            StatusCode::BAD_REQUEST,
            [(header::CONTENT_TYPE, "application/json")],
            r#"{"error":{"message":"This model's maximum context length is 4096 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
        )
            .into_response();
    }
    let request: Value = serde_json::from_slice(&body).expect("the proxy sends JSON");
    if request["stream"] == json!(true) {
        return (
            [(header::CONTENT_TYPE, "text/event-stream")],
            Body::from_stream(futures_stream(SSE)),
        )
            .into_response();
    }
    let n = request["messages"].as_array().map_or(0, Vec::len);
    (
        [(header::CONTENT_TYPE, "application/json"), (header::HeaderName::from_static("x-upstream"), "fake")],
        json!({
            "id": "chatcmpl-1", "object": "chat.completion", "model": request["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": format!("saw {n} messages")}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
        })
        .to_string(),
    )
        .into_response()
}

/// The SSE text in three pieces, as a server would flush it.
fn futures_stream(
    text: &'static str,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    let (a, rest) = text.split_at(text.len() / 3);
    let (b, c) = rest.split_at(rest.len() / 2);
    futures_util::stream::iter([a, b, c].map(|piece| Ok(Bytes::from(piece))))
}

async fn anthropic(State(up): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    up.lock()
        .expect("lock")
        .received
        .push(("/v1/messages".into(), headers, body.clone()));
    let request: Value = serde_json::from_slice(&body).expect("the proxy sends JSON");
    (
        [(header::CONTENT_TYPE, "application/json")],
        json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": request["model"],
            "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 10, "output_tokens": 1}
        })
        .to_string(),
    )
        .into_response()
}

const RESPONSES_SSE: &str = "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"in_progress\",\"output\":[]}}\n\n\
event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":1,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"ok\"}\n\n\
event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":2,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"completed\",\"output\":[]}}\n\n";

/// `POST /v1/responses`: "context length exceeded" while `reject` lasts, a stream when asked,
/// else a response saying how many input items it saw.
async fn responses(State(up): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let mut up = up.lock().expect("lock");
    up.received
        .push(("/v1/responses".into(), headers, body.clone()));
    if up.reject > 0 {
        up.reject -= 1;
        return (
            StatusCode::BAD_REQUEST,
            [(header::CONTENT_TYPE, "application/json")],
            r#"{"error":{"message":"Your input exceeds the context window of this model.","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
        )
            .into_response();
    }
    let request: Value = serde_json::from_slice(&body).expect("the proxy sends JSON");
    if up.compacts && engram::formats::remote_compaction::asks_compaction(&request) {
        return (
            [(header::CONTENT_TYPE, "application/json")],
            json!({"id": "resp_c", "object": "response", "status": "completed",
                   "output": [{"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAA-provider"}],
                   "usage": {"input_tokens": 10, "output_tokens": 3, "total_tokens": 13}})
            .to_string(),
        )
            .into_response();
    }
    if request["stream"] == json!(true) {
        return (
            [(header::CONTENT_TYPE, "text/event-stream")],
            Body::from_stream(futures_stream(RESPONSES_SSE)),
        )
            .into_response();
    }
    let n = request["input"].as_array().map_or(1, Vec::len);
    (
        [(header::CONTENT_TYPE, "application/json")],
        json!({
            "id": "resp_1", "object": "response", "status": "completed", "model": request["model"],
            "output": [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": format!("saw {n} items"), "annotations": []}]}],
            "usage": {"input_tokens": 10, "output_tokens": 3, "total_tokens": 13}
        })
        .to_string(),
    )
        .into_response()
}

async fn models(State(up): State<Shared>, headers: HeaderMap) -> Response {
    up.lock()
        .expect("lock")
        .received
        .push(("/v1/models".into(), headers, Bytes::new()));
    (
        [(header::CONTENT_TYPE, "application/json")],
        r#"{"object":"list","data":[{"id":"gpt-4o","object":"model"}]}"#,
    )
        .into_response()
}

/// The fake upstream on a real socket; its base URL (`/v1` included).
async fn upstream() -> (String, Shared) {
    let shared: Shared = Arc::default();
    let app = axum::Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/messages", post(anthropic))
        .route("/v1/responses", post(responses))
        .route("/v1/models", get(models))
        .with_state(Arc::clone(&shared));
    (format!("http://{}/v1", on_loopback(app).await), shared)
}

/// Serves `app` on a free loopback port; its address.
async fn on_loopback(app: axum::Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        axum::serve(listener, app).await.ok();
    });
    addr
}

const KEY: &str = "acme-0123456789abcdef";
const OTHER_KEY: &str = "umbrella-0123456789abcdef";

fn engram(base: &str, keys: bool) -> axum::Router {
    engram_with(base, keys, None)
}

/// engram in front of `base`; with `keys`, two tenants (acme: KEY, umbrella: OTHER_KEY).
fn engram_with(base: &str, keys: bool, summarizer: Option<Arc<dyn Summarizer>>) -> axum::Router {
    engram_tuned(base, keys, |config| {
        config.sleep.compact.summarizer = summarizer
    })
}

/// Like [`engram_with`], with the configuration changed by `tune` before the app starts.
fn engram_tuned(base: &str, keys: bool, tune: impl FnOnce(&mut ServeConfig)) -> axum::Router {
    let dir = std::env::temp_dir().join(format!(
        "engram-proxy-{}-{:?}",
        std::process::id(),
        std::time::SystemTime::now()
    ));
    std::fs::create_dir_all(&dir).expect("dir");
    let mut config = ServeConfig::new(dir.join("engram.db"));
    config.proxy.openai_upstream = Some(base.to_owned());
    // The Anthropic SDK's base URL has no /v1.
    config.proxy.anthropic_upstream = Some(base.trim_end_matches("/v1").to_owned());
    config.proxy.model_windows.insert("gpt-4o".into(), 16_000);
    config
        .proxy
        .model_windows
        .insert("claude-sonnet-4".into(), 16_000);
    if keys {
        config.api_keys = Some(
            ApiKeys::parse(&format!("acme:{KEY}\numbrella:{OTHER_KEY}\n"), "test").expect("keys"),
        );
    }
    tune(&mut config);
    router(App::new(config).expect("app"))
}

async fn send(app: &axum::Router, request: Request<Body>) -> (StatusCode, HeaderMap, Bytes) {
    let response = app.clone().oneshot(request).await.expect("response");
    let status = response.status();
    let headers = response.headers().clone();
    let body = axum::body::to_bytes(response.into_body(), 64 << 20)
        .await
        .expect("body");
    (status, headers, body)
}

fn post_json(path: &str, body: &[u8]) -> Request<Body> {
    Request::builder()
        .method("POST")
        .uri(path)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::AUTHORIZATION, "Bearer sk-caller-own-key")
        .body(Body::from(body.to_vec()))
        .expect("request")
}

/// An Anthropic Messages request of `body`, as the SDK sends it.
fn post_messages(body: &Value) -> Request<Body> {
    Request::builder()
        .method("POST")
        .uri("/v1/messages")
        .header(header::CONTENT_TYPE, "application/json")
        .header("anthropic-version", "2023-06-01")
        .body(Body::from(body.to_string()))
        .expect("request")
}

/// `body` posted to `/v1/messages`, answered and compacted: what went upstream, as text and
/// as JSON.
async fn send_compacted_messages(app: &axum::Router, up: &Shared, body: &Value) -> (String, Value) {
    let (status, headers, _) = send(app, post_messages(body)).await;
    assert_eq!(status, StatusCode::OK);
    assert_ne!(header_str(&headers, "x-engram-steps"), "none");
    let sent = last_sent(up);
    let got: Value = serde_json::from_slice(&sent).expect("json");
    (String::from_utf8(sent.to_vec()).expect("utf-8"), got)
}

fn trajectory() -> Vec<Value> {
    longest_in("sweagent_demos.jsonl")
}

/// The messages of the longest record of a dev data file, without engram's ids and metadata.
fn longest_in(file: &str) -> Vec<Value> {
    let lines = engram_testkit::dev_lines(file);
    let longest = lines.iter().max_by_key(|l| l.len()).expect("a line");
    let record: Value = serde_json::from_str(longest).expect("json");
    record["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            let mut m = m.clone();
            let map = m.as_object_mut().expect("object");
            map.remove("id");
            map.remove("meta");
            m
        })
        .collect()
}

/// The body of the last request the upstream received.
fn last_sent(up: &Shared) -> Bytes {
    up.lock()
        .expect("lock")
        .received
        .last()
        .map(|r| r.2.clone())
        .expect("received")
}

/// `request` carrying the engram key `key`.
fn with_key(mut request: Request<Body>, key: &str) -> Request<Body> {
    request
        .headers_mut()
        .insert("x-engram-key", key.parse().expect("header"));
    request
}

fn header_str<'h>(headers: &'h HeaderMap, name: &str) -> &'h str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_request_and_its_reply_pass_byte_for_byte() {
    let (base, up) = upstream().await;
    let app = engram(&base, false);
    // Odd spacing and key order: forwarded exactly as sent.
    let body =
        br#"{ "model":"gpt-4o",  "messages":[{"role":"user","content":"hi"}], "temperature":0.2 }"#;
    let (status, headers, reply) = send(&app, post_json("/v1/chat/completions", body)).await;
    assert_eq!(status, StatusCode::OK);
    let received = up.lock().expect("lock").received.clone();
    assert_eq!(received.len(), 1);
    assert_eq!(
        &received[0].2[..],
        &body[..],
        "the upstream got the bytes sent"
    );
    assert_eq!(
        header_str(&received[0].1, "authorization"),
        "Bearer sk-caller-own-key",
        "the caller's key goes through"
    );
    assert_eq!(
        header_str(&headers, "x-upstream"),
        "fake",
        "the upstream's headers come back"
    );
    assert_eq!(header_str(&headers, "x-engram-steps"), "none");
    assert_eq!(header_str(&headers, "x-engram-window"), "16000");
    let reply: Value = serde_json::from_slice(&reply).expect("json");
    assert_eq!(reply["choices"][0]["message"]["content"], "saw 1 messages");
}

/// A request under the threshold reaches the upstream exactly as sent, on all three routes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_requests_pass_byte_for_byte_on_every_route() {
    let (base, up) = upstream().await;
    let app = engram(&base, false);
    for (path, body) in [
        ("/v1/chat/completions", &br#"{ "messages":[{"content":"hi","role":"user","id":"c1"}],"model":"gpt-4o" }"#[..]),
        ("/v1/responses", &br#"{"model":"gpt-4o",  "instructions":"Be brief.","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}],"x_vendor":1}"#[..]),
        ("/v1/messages", &br#"{"model":"claude-sonnet-4","max_tokens":100,"system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],"messages":[{"content":"hi","role":"user"}]}"#[..]),
    ] {
        let (status, headers, _) = send(&app, post_json(path, body)).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert_eq!(header_str(&headers, "x-engram-steps"), "none", "{path}");
        let (got_path, _, got) = up.lock().expect("lock").received.last().cloned().expect("sent");
        assert_eq!(got_path, path);
        assert_eq!(&got[..], body, "{path}: byte for byte");
    }
}

/// The proxy decides with the sessions' policy (`[session] threshold` and `target` of the
/// configuration), measured against the room the request leaves for its reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_takes_its_threshold_and_target_from_the_session_policy() {
    let messages: Vec<Value> = (0..40)
        .flat_map(|i| {
            [
                json!({"role": "user", "content": format!("question {i}: {}", "why does the build fail on step seven ".repeat(6))}),
                json!({"role": "assistant", "content": format!("answer {i}: {}", "the linker cannot find the symbol ".repeat(6))}),
            ]
        })
        .chain([json!({"role": "user", "content": "and now?"})])
        .collect();
    let body =
        serde_json::to_vec(&json!({"model": "gpt-4o", "messages": messages, "max_tokens": 1000}))
            .expect("json");
    let tokens = |headers: &HeaderMap, name: &str| -> usize {
        header_str(headers, name).parse().expect("a number")
    };

    // Room: 16,000 - 1,000 for the reply. The request (about 4,000 tokens) is under 0.8 of it.
    let (base, _up) = upstream().await;
    let (status, headers, _) = send(
        &engram(&base, false),
        post_json("/v1/chat/completions", &body),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let before = tokens(&headers, "x-engram-tokens-before");
    assert!((2_000..12_000).contains(&before), "{before}");
    assert_eq!(
        tokens(&headers, "x-engram-tokens-after"),
        before,
        "not compacted"
    );

    // A lower threshold and target: compacted, down to the target.
    let (base, _up) = upstream().await;
    let app = engram_tuned(&base, false, |config| {
        config.sleep.sessions.trigger.threshold = 0.1;
        config.sleep.sessions.trigger.target = Some(0.05);
    });
    let (status, headers, _) = send(&app, post_json("/v1/chat/completions", &body)).await;
    assert_eq!(status, StatusCode::OK);
    let after = tokens(&headers, "x-engram-tokens-after");
    assert!(
        after <= 15_000 / 20,
        "{after} tokens: over the target of 750"
    );
    assert_ne!(header_str(&headers, "x-engram-steps"), "none");
}

/// A compacted request (`sent`, as text) of turn `end` carries the work ledger of `asked` (the
/// conversation the caller sent) and still names every file the agent's calls named, however
/// much of the history was set aside.
fn assert_ledger_kept(asked: &[engram::Message], sent: &str, end: usize) {
    let ledger = engram::ledger::Ledger::of(asked, 0);
    assert!(
        ledger.is_empty() || sent.contains("[Work ledger]"),
        "turn {end}: no work ledger"
    );
    for file in &ledger.files {
        assert!(
            sent.contains(&file.path),
            "turn {end}: {} is no longer named",
            file.path
        );
    }
}

/// Sends `messages` turn by turn as an agent resends its growing history (a request after each
/// user or tool message) and checks what the upstream got each time: within the window, the
/// system prompt and the newest message there, every tool result after the call it answers,
/// the reported count what was sent. The response headers of each turn, and the body the
/// upstream got.
async fn drive(
    app: &axum::Router,
    up: &Shared,
    key: Option<&str>,
    messages: &[Value],
) -> Vec<(HeaderMap, Value)> {
    let counter = engram::TokenCounter::new(engram::Tokenizer::o200k().expect("o200k"));
    let mut out = Vec::new();
    for end in 2..=messages.len() {
        // Agents send after a user or tool message.
        if messages[end - 1]["role"] == "assistant" {
            continue;
        }
        let body = json!({"model": "gpt-4o", "messages": &messages[..end], "max_tokens": 1000});
        let mut request = post_json("/v1/chat/completions", body.to_string().as_bytes());
        if let Some(key) = key {
            request = with_key(request, key);
        }
        let (status, headers, _) = send(app, request).await;
        assert_eq!(status, StatusCode::OK);
        let got: Value = serde_json::from_slice(&last_sent(up)).expect("json");
        let conversation = engram::parse_conversation(got.to_string().as_bytes()).expect("parses");
        let tokens = counter.count_conversation(&conversation).total();
        assert!(
            tokens <= 16_000 - 1000,
            "turn {end}: {tokens} tokens upstream"
        );
        let list = got["messages"].as_array().expect("messages");
        assert_eq!(list[0], messages[0], "the system prompt stays");
        assert_eq!(
            list.last(),
            messages.get(end - 1),
            "the newest message stays"
        );
        // Every tool result follows the assistant message that called it.
        let mut open: Vec<String> = Vec::new();
        for m in list {
            if let Some(calls) = m["tool_calls"].as_array() {
                open = calls
                    .iter()
                    .map(|c| c["id"].as_str().expect("id").to_owned())
                    .collect();
            } else if m["role"] == "tool" {
                let id = m["tool_call_id"].as_str().expect("tool_call_id");
                assert!(
                    open.iter().any(|o| o == id),
                    "turn {end}: orphan tool result {id}"
                );
            }
        }
        if header_str(&headers, "x-engram-steps") != "none" {
            let before: usize = header_str(&headers, "x-engram-tokens-before")
                .parse()
                .expect("n");
            let after: usize = header_str(&headers, "x-engram-tokens-after")
                .parse()
                .expect("n");
            assert!(after < before);
            assert_eq!(after, tokens, "the reported count is what the upstream got");
            let asked = engram::parse_conversation(body.to_string().as_bytes()).expect("parses");
            assert_ledger_kept(&asked.messages, &got.to_string(), end);
        }
        out.push((headers, got));
    }
    out
}

/// A long real SWE-agent trajectory, sent turn by turn as an agent resends its growing history:
/// every request arrives within the window, the system prompt and the task stay, tool calls keep
/// their results.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_trajectory_arrives_within_the_window_with_tool_pairs_intact() {
    let (base, up) = upstream().await;
    let app = engram(&base, false);
    let turns: Vec<HeaderMap> = drive(&app, &up, None, &trajectory())
        .await
        .into_iter()
        .map(|(h, _)| h)
        .collect();
    let compacted = turns
        .iter()
        .filter(|h| header_str(h, "x-engram-steps") != "none")
        .count();
    assert!(
        compacted > 0 && turns.len() > compacted,
        "{compacted} of {} turns compacted",
        turns.len()
    );
    // The operator's view: every proxied request counted by route, model, status and cache,
    // with the tokens before and after and the time to the answer.
    let (status, _, metrics) = send(
        &app,
        Request::builder()
            .uri("/metrics")
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let text = String::from_utf8_lossy(&metrics);
    let counted: usize = text
        .lines()
        .filter(|l| l.starts_with("engram_proxy_requests_total{route=\"/v1/chat/completions\",model=\"gpt-4o\",status=\"200\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<usize>().ok())
        .sum();
    assert_eq!(counted, turns.len(), "{text}");
    let tokens = |when: &str| -> u64 {
        let prefix = format!(
            "engram_proxy_tokens_total{{route=\"/v1/chat/completions\",model=\"gpt-4o\",when=\"{when}\"}} "
        );
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix)?.parse().ok())
            .expect("tokens")
    };
    assert!(tokens("after") < tokens("before"));
    assert!(text.contains(&format!(
        "engram_proxy_duration_seconds_count{{route=\"/v1/chat/completions\"}} {}",
        turns.len()
    )));
}

/// A compacted request keeps the caller's messages as the caller sent them: every field (their
/// own `id`, vendor keys) in the caller's key order, so each kept message's bytes appear
/// unchanged in what the upstream receives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_messages_reach_the_upstream_byte_for_byte() {
    let (base, up) = upstream().await;
    let app = engram(&base, false);
    // The trajectory with each message's keys reordered (content first), an id of the caller's
    // own and a vendor key.
    let messages: Vec<Value> = trajectory()
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            let mut out = serde_json::Map::new();
            let map = m.as_object().expect("object");
            for key in map.keys().rev() {
                out.insert(key.clone(), map[key].clone());
            }
            out.insert("id".into(), json!(format!("caller-{i}")));
            out.insert("x_vendor".into(), json!({"turn": i}));
            Value::Object(out)
        })
        .collect();
    let body = json!({"model": "gpt-4o", "messages": messages, "max_tokens": 1000});
    let (status, headers, _) = send(
        &app,
        post_json("/v1/chat/completions", body.to_string().as_bytes()),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_ne!(header_str(&headers, "x-engram-steps"), "none", "compacted");
    let sent = last_sent(&up);
    let sent_text = std::str::from_utf8(&sent).expect("utf-8");
    let got: Value = serde_json::from_slice(&sent).expect("json");
    let list = got["messages"].as_array().expect("messages");
    assert!(list.len() < messages.len());
    let mut verbatim = 0;
    for m in list {
        let Some(original) = messages.iter().find(|c| c["id"] == m["id"]) else {
            continue; // A message engram wrote (the digest).
        };
        if m["content"] == original["content"] {
            let bytes = original.to_string();
            assert!(sent_text.contains(&bytes), "kept as sent: {bytes:.200}");
            verbatim += 1;
        } else {
            // Masked: the caller's other fields stay.
            assert_eq!(m["x_vendor"], original["x_vendor"]);
        }
    }
    assert!(verbatim >= 3, "{verbatim} messages kept verbatim");
}

/// A summarizer that counts its calls (and whether each merged a previous summary), writing
/// the deterministic summary.
#[derive(Debug, Default)]
struct Counting {
    calls: Mutex<Vec<bool>>,
}

impl Summarizer for Counting {
    fn name(&self) -> &str {
        "counting"
    }

    fn summarize(&self, request: &SummaryRequest<'_>) -> Result<String, engram::Error> {
        self.calls
            .lock()
            .expect("lock")
            .push(request.previous.is_some());
        DeterministicSummarizer.summarize(request)
    }
}

/// The proxy keeps the provider's prompt cache warm: every request it does not compact goes
/// upstream as the previous one plus what is new, byte for byte; a compaction keeps the head
/// (the system prompt, the task, the earlier summaries) and appends a summary block after it;
/// the task goes up whole in every request. With a summarizer, each compaction calls it once and
/// an extended request never; a resent request costs nothing and repeats the same bytes; another
/// tenant never builds on this tenant's view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_extend_the_previous_one_and_compactions_keep_the_head() {
    let (base, up) = upstream().await;
    let counting = Arc::new(Counting::default());
    let app = engram_with(
        &base,
        true,
        Some(Arc::clone(&counting) as Arc<dyn Summarizer>),
    );
    // A long mini-SWE-agent run (286 messages, about 76,000 tokens) in a 16,000-token window.
    let messages = longest_in("minisweagent_swebv_gemini3pro.jsonl");
    let task = messages
        .iter()
        .find(|m| m["role"] == "user")
        .expect("a task")
        .clone();
    let turns = drive(&app, &up, Some(KEY), &messages).await;
    let prefix: Vec<&str> = turns
        .iter()
        .map(|(h, _)| header_str(h, "x-engram-prefix"))
        .collect();
    let count = |what: &str| prefix.iter().filter(|c| **c == what).count();
    let (extended, appended, rebuilt) = (count("extended"), count("appended"), count("rebuilt"));
    eprintln!(
        "{} turns: {} as sent, {extended} extended, {appended} appended, {rebuilt} rebuilt",
        turns.len(),
        count("")
    );
    assert!(
        rebuilt >= 1 && appended >= 1 && extended > 2 * (appended + rebuilt),
        "{prefix:?}"
    );
    // A summary is a system message the caller never sent.
    let summaries = |sent: &Value| -> Vec<Value> {
        sent["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .filter(|m| m["role"] == "system" && !messages.contains(m))
            .cloned()
            .collect()
    };
    for (i, pair) in turns.windows(2).enumerate() {
        let ((_, before), (h, after)) = (&pair[0], &pair[1]);
        let (b, a) = (
            before["messages"].as_array().expect("messages"),
            after["messages"].as_array().expect("messages"),
        );
        match header_str(h, "x-engram-prefix") {
            "" | "extended" => assert_eq!(&a[..b.len()], &b[..], "turn {i}: extends the previous"),
            "appended" => {
                let kept = summaries(before);
                assert!(!kept.is_empty());
                assert_eq!(
                    &a[..2],
                    &b[..2],
                    "turn {i}: the system prompt and the task stay"
                );
                assert_eq!(
                    summaries(after)[..kept.len()],
                    kept[..],
                    "turn {i}: earlier blocks stay"
                );
                assert_eq!(
                    summaries(after).len(),
                    kept.len() + 1,
                    "turn {i}: one block more"
                );
            }
            other => assert_eq!(other, "rebuilt"),
        }
        assert_eq!(a[1], task, "turn {i}: the task goes up whole");
    }
    assert_eq!(
        counting.calls.lock().expect("lock").len(),
        appended + rebuilt,
        "one summarizer call per compaction, none for an extended request"
    );

    // The same request again: the same bytes, no call.
    let body = json!({"model": "gpt-4o", "messages": &messages, "max_tokens": 1000});
    let request = || {
        with_key(
            post_json("/v1/chat/completions", body.to_string().as_bytes()),
            KEY,
        )
    };
    let (status, _, _) = send(&app, request()).await;
    assert_eq!(status, StatusCode::OK);
    let before = counting.calls.lock().expect("lock").len();
    let sent_first = last_sent(&up);
    let (_, again, _) = send(&app, request()).await;
    assert_eq!(header_str(&again, "x-engram-prefix"), "extended");
    assert_eq!(
        last_sent(&up),
        sent_first,
        "a resent request repeats the bytes"
    );
    assert_eq!(counting.calls.lock().expect("lock").len(), before);

    // Another tenant sending the same history: compacted for it, never this tenant's view.
    let other = with_key(
        post_json("/v1/chat/completions", body.to_string().as_bytes()),
        OTHER_KEY,
    );
    let (status, headers, _) = send(&app, other).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header_str(&headers, "x-engram-prefix"), "rebuilt");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_comes_back_byte_for_byte() {
    let (base, _up) = upstream().await;
    let app = engram(&base, false);
    let body = br#"{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let (status, headers, reply) = send(&app, post_json("/v1/chat/completions", body)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header_str(&headers, "content-type"), "text/event-stream");
    assert_eq!(std::str::from_utf8(&reply).expect("utf-8"), SSE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_length_exceeded_is_retried_once_harder_and_never_looped() {
    let (base, up) = upstream().await;
    let app = engram(&base, false);
    let messages = trajectory();
    // Small enough that engram does not compact it, large enough to compact when told.
    let body = json!({"model": "gpt-4o", "messages": &messages[..12]}).to_string();
    up.lock().expect("lock").reject = 1;
    let (status, headers, _) = send(&app, post_json("/v1/chat/completions", body.as_bytes())).await;
    assert_eq!(status, StatusCode::OK, "the retry went through");
    assert_eq!(header_str(&headers, "x-engram-retried"), "true");
    {
        let received = &up.lock().expect("lock").received;
        assert_eq!(received.len(), 2);
        assert_eq!(&received[0].2[..], body.as_bytes(), "first as sent");
        assert!(received[1].2.len() < received[0].2.len(), "then smaller");
    }
    // An upstream that keeps refusing gets exactly one retry; its error comes back.
    up.lock().expect("lock").reject = 100;
    let (status, _, reply) = send(&app, post_json("/v1/chat/completions", body.as_bytes())).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(String::from_utf8_lossy(&reply).contains("context_length_exceeded"));
    assert_eq!(
        up.lock().expect("lock").received.len(),
        4,
        "one retry, no loop"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_requests_are_compacted_in_their_own_format() {
    let (base, up) = upstream().await;
    let app = engram(&base, false);
    // The trajectory in Anthropic's format: system on top, text turns (long ones).
    let mut turns = Vec::new();
    for i in 0..60 {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        turns.push(json!({"role": role, "content": format!("turn {i}: {}", "details of the failing build in src/lib.rs ".repeat(40))}));
    }
    turns.push(json!({"role": "user", "content": "Now fix the failing test in tests/api.rs"}));
    let body = json!({"model": "claude-sonnet-4", "max_tokens": 1024, "system": "You are a careful engineer.", "messages": turns, "metadata": {"user_id": "u1"}});
    let request = Request::builder()
        .method("POST")
        .uri("/v1/messages")
        .header(header::CONTENT_TYPE, "application/json")
        .header("x-api-key", "sk-ant-caller")
        .header("anthropic-version", "2023-06-01")
        .body(Body::from(body.to_string()))
        .expect("request");
    let (status, headers, _) = send(&app, request).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        header_str(&headers, "x-engram-estimated"),
        "true",
        "Claude's counts are estimates"
    );
    assert_ne!(header_str(&headers, "x-engram-steps"), "none");
    let (path, got_headers, got) = up
        .lock()
        .expect("lock")
        .received
        .last()
        .cloned()
        .expect("received");
    assert_eq!(path, "/v1/messages");
    assert_eq!(header_str(&got_headers, "x-api-key"), "sk-ant-caller");
    let got: Value = serde_json::from_slice(&got).expect("json");
    // The system prompt goes up with a cache breakpoint (the caller marked none) and the task
    // (the first turn) whole after it: the head of the prompt cache. (What was dropped repeats
    // the kept turns: no digest is worth it.)
    assert_eq!(
        got["system"],
        json!([{"type": "text", "text": "You are a careful engineer.", "cache_control": {"type": "ephemeral"}}])
    );
    assert_eq!(
        got["messages"][0]["content"][0]["text"], body["messages"][0]["content"],
        "the task first, whole"
    );
    assert_eq!(got["max_tokens"], 1024);
    assert_eq!(
        got["metadata"],
        json!({"user_id": "u1"}),
        "unmodelled keys pass through"
    );
    let list = got["messages"].as_array().expect("messages");
    assert!(list.len() < 61, "compacted: {} messages", list.len());
    assert_eq!(
        list.last().expect("last")["content"],
        json!([{"type": "text", "text": "Now fix the failing test in tests/api.rs", "cache_control": {"type": "ephemeral"}}]),
        "the newest message, with the last breakpoint"
    );
}

/// On `/v1/messages` a request whose caller marked no cache breakpoint gets them (the system
/// prompt, the newest message; the end of the head when engram compacted), within Anthropic's
/// four; one with the caller's own goes as sent; `--cache-breakpoints off` leaves every request
/// as sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_requests_get_cache_breakpoints_unless_the_caller_set_some() {
    let (base, up) = upstream().await;
    let body = br#"{"model":"claude-sonnet-4","max_tokens":100,"system":"Be brief.","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"go on"}]}"#;
    let eph = json!({"type": "ephemeral"});
    let app = engram(&base, false);
    let (status, _, _) = send(&app, post_json("/v1/messages", body)).await;
    assert_eq!(status, StatusCode::OK);
    let got: Value = serde_json::from_slice(&last_sent(&up)).expect("json");
    assert_eq!(got["system"][0]["cache_control"], eph);
    assert_eq!(got["messages"][2]["content"][0]["cache_control"], eph);
    let marks = got.to_string().matches("cache_control").count();
    assert_eq!(marks, 2, "{got}");
    // A long history compacted: the end of the kept head is marked too, at most four in all.
    let mut turns = vec![json!({"role": "user", "content": "Fix the failing build in src/lib.rs"})];
    for i in 0..60 {
        let role = if i % 2 == 0 { "assistant" } else { "user" };
        turns.push(json!({"role": role, "content": format!("turn {i}: error E{i} in src/module_{i}.rs {}", "trace line ".repeat(150))}));
    }
    turns.push(json!({"role": "user", "content": "Now fix tests/api.rs"}));
    let long = json!({"model": "claude-sonnet-4", "max_tokens": 1024, "system": "You are careful.", "messages": turns});
    let (status, headers, _) =
        send(&app, post_json("/v1/messages", long.to_string().as_bytes())).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header_str(&headers, "x-engram-prefix"), "rebuilt");
    let got: Value = serde_json::from_slice(&last_sent(&up)).expect("json");
    let marks = got.to_string().matches("cache_control").count();
    assert!((3..=4).contains(&marks), "{marks} breakpoints: {got}");
    // Off: as sent.
    let off = engram_tuned(&base, false, |c| c.proxy.cache_breakpoints = false);
    send(&off, post_json("/v1/messages", body)).await;
    assert_eq!(&last_sent(&up)[..], &body[..]);
}

/// On the Anthropic route too, a message engram keeps goes upstream as the caller sent it: its
/// keys in the caller's order, tool blocks and their extra keys, byte for byte; so does the
/// system prompt when no summary joins it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_kept_messages_reach_the_upstream_byte_for_byte() {
    let (base, up) = upstream().await;
    let app = engram(&base, false);
    let filler = "details of the failing build in src/lib.rs ".repeat(40);
    let mut turns = Vec::new();
    for i in 0..30 {
        turns.push(json!({"content": format!("turn {i}: {filler}"), "role": "user"}));
        turns.push(json!({"content": [
            {"text": format!("step {i}"), "type": "text"},
            {"input": {"z": i, "a": "ls"}, "name": "sh", "id": format!("t{i}"), "type": "tool_use"}
        ], "role": "assistant"}));
        turns.push(json!({"content": [
            {"is_error": false, "content": format!("output {i}: {filler}"), "tool_use_id": format!("t{i}"),
             "type": "tool_result", "cache_control": {"type": "ephemeral"}}
        ], "role": "user"}));
        turns.push(json!({"content": format!("noted {i}"), "role": "assistant"}));
    }
    turns.push(json!({"content": "Now fix the failing test", "role": "user"}));
    let body = json!({"model": "claude-sonnet-4", "max_tokens": 1024, "messages": &turns});
    let (sent_text, got) = send_compacted_messages(&app, &up, &body).await;
    let list = got["messages"].as_array().expect("messages");
    assert!(list.len() < turns.len());
    let mut verbatim = 0;
    for m in list {
        if let Some(original) = turns.iter().find(|t| *t == m) {
            assert!(
                sent_text.contains(&original.to_string()),
                "kept as sent: {original:.200}"
            );
            verbatim += 1;
        }
    }
    assert!(verbatim >= 3, "{verbatim} messages kept verbatim");
    assert_eq!(list.last(), turns.last());
}

/// A masked tool output on the Anthropic route (here an output a later run of the same command
/// supersedes) is the caller's own `tool_result` block with only its content replaced, and the
/// other blocks of its message (Claude Code's reminders after the results) go as the caller sent
/// them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_masked_outputs_keep_the_rest_of_the_callers_message() {
    let (base, up) = upstream().await;
    let app = engram(&base, false);
    let filler = "warning: unused variable in src/lib.rs line 40 ".repeat(60);
    let mut turns = vec![json!({"role": "user", "content": "Fix the failing build."})];
    for i in 0..24 {
        turns.push(json!({"role": "assistant", "content": [
            {"type": "text", "text": format!("Running step {i}.")},
            {"type": "tool_use", "id": format!("t{i}"), "name": "Bash", "input": {"command": "make"}}
        ]}));
        turns.push(json!({"role": "user", "content": [
            {"tool_use_id": format!("t{i}"), "type": "tool_result", "content": format!("output {i}: {filler}"), "is_error": false},
            {"text": format!("<reminder>step {i} of the plan</reminder>"), "type": "text"}
        ]}));
    }
    let body = json!({"model": "claude-sonnet-4", "max_tokens": 1024, "system": "You are a coding agent.", "messages": &turns});
    let (sent_text, got) = send_compacted_messages(&app, &up, &body).await;
    let mut masked = 0;
    for m in got["messages"].as_array().expect("messages") {
        let Some(block) = m["content"].get(0).filter(|b| b["type"] == "tool_result") else {
            continue;
        };
        let id = block["tool_use_id"].as_str().expect("an id");
        let callers = turns
            .iter()
            .find(|t| t["content"][0]["tool_use_id"] == id)
            .expect("the caller's message");
        if block["content"] == callers["content"][0]["content"] {
            continue;
        }
        masked += 1;
        let mut expected = callers["content"][0].clone();
        expected["content"] = block["content"].clone();
        assert!(
            sent_text.contains(&expected.to_string()),
            "the caller's block, its keys in order, only its content replaced: {block}"
        );
        assert!(
            sent_text.contains(&callers["content"][1].to_string()),
            "the reminder beside it as sent"
        );
    }
    assert!(masked > 0, "some outputs were masked: {got:.400}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_routes_pass_through_and_the_engram_key_stays_with_engram() {
    let (base, up) = upstream().await;
    let app = engram(&base, true);
    let get_models = |key: Option<&str>| {
        let mut r = Request::builder()
            .uri("/v1/models")
            .header(header::AUTHORIZATION, "Bearer sk-caller-own-key");
        if let Some(k) = key {
            r = r.header("x-engram-key", k);
        }
        r.body(Body::empty()).expect("request")
    };
    let (status, _, body) = send(&app, get_models(None)).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "{}",
        String::from_utf8_lossy(&body)
    );
    assert!(String::from_utf8_lossy(&body).contains("X-Engram-Key"));
    let (status, _, _) = send(&app, get_models(Some("wrong-0123456789abcdef"))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(
        up.lock().expect("lock").received.is_empty(),
        "nothing reached the upstream"
    );
    let (status, _, body) = send(&app, get_models(Some(KEY))).await;
    assert_eq!(status, StatusCode::OK);
    assert!(String::from_utf8_lossy(&body).contains("gpt-4o"));
    let (path, headers, _) = up.lock().expect("lock").received[0].clone();
    assert_eq!(path, "/v1/models");
    assert_eq!(
        header_str(&headers, "authorization"),
        "Bearer sk-caller-own-key"
    );
    assert!(
        headers.get("x-engram-key").is_none(),
        "the engram key is not forwarded"
    );
    // The REST routes still take the key as a bearer token and are not proxied.
    let (status, _, _) = send(
        &app,
        Request::builder()
            .uri("/v1/sessions")
            .header(header::AUTHORIZATION, format!("Bearer {KEY}"))
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(up.lock().expect("lock").received.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_upstream_the_proxy_routes_say_what_to_configure() {
    let dir = std::env::temp_dir().join(format!("engram-proxy-none-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let app = router(App::new(ServeConfig::new(dir.join("e.db"))).expect("app"));
    let (status, _, body) = send(
        &app,
        post_json(
            "/v1/chat/completions",
            br#"{"model":"gpt-4o","messages":[]}"#,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert!(
        String::from_utf8_lossy(&body).contains("--upstream"),
        "{}",
        String::from_utf8_lossy(&body)
    );
    let (status, _, _) = send(
        &app,
        Request::builder()
            .uri("/v1/models")
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "no upstream: unknown routes stay 404s"
    );
}

/// Anthropic requires the first message to be a user turn: a compacted history whose kept
/// suffix starts on an assistant turn is opened by a user turn that points at the summary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_requests_always_start_with_a_user_turn() {
    let (base, up) = upstream().await;
    let app = engram(&base, false);
    for n in [59usize, 60, 299] {
        let mut turns = Vec::new();
        for i in 0..n {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            turns.push(json!({"role": role, "content": format!("turn {i}: {}", "the build fails in src/lib.rs ".repeat(30 + i % 7))}));
        }
        if turns.last().is_some_and(|t| t["role"] == "assistant") {
            turns.push(json!({"role": "user", "content": "go on"}));
        }
        let body = json!({"model": "claude-sonnet-4", "max_tokens": 256, "system": "You are careful.", "messages": turns});
        let (status, headers, _) =
            send(&app, post_json("/v1/messages", body.to_string().as_bytes())).await;
        assert_eq!(status, StatusCode::OK);
        assert_ne!(
            header_str(&headers, "x-engram-steps"),
            "none",
            "{n} turns are compacted"
        );
        let got: Value = serde_json::from_slice(&last_sent(&up)).expect("json");
        let messages = got["messages"].as_array().expect("messages");
        assert_eq!(messages[0]["role"], "user", "{n} turns: {}", messages[0]);
        for pair in messages.windows(2) {
            assert_ne!(
                pair[0]["role"], pair[1]["role"],
                "{n} turns: roles alternate"
            );
        }
    }
}

/// A pass-through path never climbs out of the upstream's base: dot segments, raw or
/// percent-encoded, are refused before anything is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dot_segments_never_reach_the_upstream() {
    let (base, up) = upstream().await;
    let app = engram(&base, false);
    for path in [
        "/v1/%2e%2e/admin/secret",
        "/v1/%2E%2E/admin/secret",
        "/v1/../admin/secret",
        "/v1/models/%2e%2e/%2e%2e/admin",
        "/v1/.%2e/admin",
        "/v1/./models",
        // An encoded slash makes `..%2f..%2f` two dot segments to a server that decodes it.
        "/v1/models/..%2f..%2fadmin",
        "/v1/models/..%2F..%2Fadmin",
        "/v1/models/..%5c..%5cadmin",
        "/v1/models/%252e%252e/admin",
        "/v1/models/%2e%2e%2fadmin",
    ] {
        let request = Request::builder()
            .method("GET")
            .uri(path)
            .body(Body::empty())
            .expect("request");
        let (status, _, body) = send(&app, request).await;
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "{path}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    assert!(
        up.lock().expect("lock").received.is_empty(),
        "nothing was sent upstream"
    );
    // An ordinary pass-through still goes through.
    let request = Request::builder()
        .method("GET")
        .uri("/v1/models")
        .body(Body::empty())
        .expect("request");
    let (status, _, _) = send(&app, request).await;
    assert_ne!(status, StatusCode::BAD_REQUEST);
}

/// The proxy takes bodies larger than the REST limit (the longest histories most need
/// compacting), up to its own limit, and its 413 names that limit and the flag that sets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_body_limit_is_its_own_and_says_how_to_raise_it() {
    let (base, up) = upstream().await;
    let dir = std::env::temp_dir().join(format!("engram-proxy-limit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let make = |proxy_limit: Option<usize>| {
        let mut config = ServeConfig::new(dir.join("engram.db"));
        config.proxy.openai_upstream = Some(base.clone());
        if let Some(limit) = proxy_limit {
            config.max_proxy_body_bytes = limit;
        }
        router(App::new(config).expect("app"))
    };
    // 10 MB of history: over the REST limit (8 MiB), under the proxy's default (64 MiB).
    let turns: Vec<Value> = (0..400)
        .map(|i| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": format!("turn {i} ").repeat(3_300)}))
        .collect();
    let body = json!({"model": "gpt-4o", "messages": turns}).to_string();
    assert!(body.len() > 9 << 20, "{}", body.len());
    let (status, _, reply) = send(
        &make(None),
        post_json("/v1/chat/completions", body.as_bytes()),
    )
    .await;
    assert_ne!(
        status,
        StatusCode::PAYLOAD_TOO_LARGE,
        "{}",
        String::from_utf8_lossy(&reply)
    );
    assert!(
        !up.lock().expect("lock").received.is_empty(),
        "it reached the upstream"
    );
    let (status, _, reply) = send(
        &make(Some(1 << 20)),
        post_json("/v1/chat/completions", body.as_bytes()),
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let text = String::from_utf8_lossy(&reply);
    assert!(
        text.contains("1 MiB") && text.contains("--max-proxy-body-mb"),
        "{text}"
    );
}

/// An upstream's large error body is relayed byte for byte, as it comes (the proxy reads only
/// its first 64 KiB to look for a context-length error; it used to hold the whole body).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_upstream_error_body_is_relayed_whole() {
    let (base, up) = upstream().await;
    let app = engram(&base, false);
    let error: Vec<u8> = (0..6u32 << 20).map(|i| b'a' + (i % 26) as u8).collect();
    up.lock().expect("lock").error_body = Some(Bytes::from(error.clone()));
    for n in [2usize, 200] {
        // Small (forwarded unchanged) and compacted requests alike.
        let turns: Vec<Value> = (0..n)
            .map(|i| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": format!("turn {i} ").repeat(400)}))
            .collect();
        let body = json!({"model": "gpt-4o", "messages": turns}).to_string();
        let (status, _, reply) =
            send(&app, post_json("/v1/chat/completions", body.as_bytes())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(reply.len(), error.len(), "{n} turns");
        assert!(
            reply == error,
            "{n} turns: the body is the upstream's, byte for byte"
        );
    }
}

/// An upstream that cannot be reached gets a 502, one that does not start answering within
/// `upstream_timeout` a 504; both say which upstream (its host) and why, and how to wait
/// longer. The proxy keeps answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_down_or_slow_upstream_gets_a_502_or_504_naming_it() {
    // Slow: accepts the request, answers after 5 s.
    let slow = axum::Router::new().route(
        "/v1/chat/completions",
        post(|| async {
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            "late"
        }),
    );
    let slow_addr = on_loopback(slow).await;
    // Down: a port nothing listens on.
    let down_addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    };
    let body = br#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#;

    let app = engram_tuned(&format!("http://{down_addr}/v1"), false, |_| {});
    let (status, _, reply) = send(&app, post_json("/v1/chat/completions", body)).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    let text = String::from_utf8_lossy(&reply);
    assert!(
        text.contains(&format!("the upstream at {down_addr}")) && text.contains("cannot connect"),
        "{text}"
    );

    let app = engram_tuned(&format!("http://{slow_addr}/v1"), false, |config| {
        config.proxy.upstream_timeout = std::time::Duration::from_secs(1);
    });
    let started = std::time::Instant::now();
    let (status, _, reply) = send(&app, post_json("/v1/chat/completions", body)).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert!(started.elapsed() < std::time::Duration::from_secs(4));
    let reply: Value = serde_json::from_slice(&reply).expect("a JSON error");
    let message = reply.to_string();
    assert!(
        message.contains(&format!(
            "the upstream at {slow_addr} did not answer within 1 s"
        )) && message.contains("--upstream-timeout-secs"),
        "{message}"
    );
}

/// The trajectory as Responses items, the way the Agents SDK and Codex send them: the system
/// prompt as `instructions`; each assistant turn as a reasoning item (with encrypted content),
/// its text as an output message and its calls as `function_call`s; each tool result as a
/// `function_call_output`. The items of `messages[..end]` after the system prompt.
fn as_items(messages: &[Value]) -> Vec<Value> {
    let mut items = Vec::new();
    for (i, m) in messages.iter().enumerate().skip(1) {
        let text = m["content"].as_str().unwrap_or_default();
        match m["role"].as_str().expect("role") {
            "assistant" => {
                items.push(
                    json!({"type": "reasoning", "id": format!("rs_{i}"), "summary": [],
                                  "encrypted_content": format!("gAAAAB{i:0>40}")}),
                );
                if !text.is_empty() {
                    items.push(json!({"type": "message", "id": format!("msg_{i}"), "role": "assistant",
                                      "status": "completed",
                                      "content": [{"type": "output_text", "text": text, "annotations": []}]}));
                }
                for call in m["tool_calls"].as_array().into_iter().flatten() {
                    items.push(json!({"type": "function_call", "id": format!("fc_{}", call["id"].as_str().expect("id")),
                                      "call_id": call["id"], "name": call["function"]["name"],
                                      "arguments": call["function"]["arguments"], "status": "completed"}));
                }
            }
            "tool" => items.push(
                json!({"type": "function_call_output", "call_id": m["tool_call_id"],
                                        "output": text}),
            ),
            role => items.push(
                json!({"type": "message", "id": format!("in_{i}"), "role": role,
                                      "content": [{"type": "input_text", "text": text}]}),
            ),
        }
    }
    items
}

/// Sends a Responses history turn by turn (after each input message or tool output that ends
/// a turn) and checks every request the upstream got: within the window with `instructions`
/// untouched and the client's newest item at the end, byte for byte; every call with its output
/// and every output with its call; every reasoning item still followed by the item it preceded;
/// every item engram kept the caller's bytes; a request engram did not compact again extends the
/// previous one. Returns (turns, rewritten, extended).
async fn drive_responses(
    app: &axum::Router,
    up: &Shared,
    instructions: &str,
    items: &[Value],
) -> (usize, usize, usize) {
    let counter = engram::TokenCounter::new(engram::Tokenizer::o200k().expect("o200k"));
    let (mut compacted, mut hits, mut turns) = (0, 0, 0);
    let mut previous: Option<Vec<Value>> = None;
    let caller_side =
        |item: &Value| item["type"] == "function_call_output" || item["role"] == "user";
    for end in 2..=items.len() {
        if !caller_side(&items[end - 1])
            || items
                .get(end)
                .is_some_and(|n| n["type"] == "function_call_output")
        {
            continue;
        }
        turns += 1;
        let items = &items[..end];
        let body = json!({"model": "gpt-4o", "instructions": instructions, "input": items,
                          "max_output_tokens": 1000, "store": false});
        let (status, headers, reply) =
            send(app, post_json("/v1/responses", body.to_string().as_bytes())).await;
        assert_eq!(status, StatusCode::OK);
        let reply: Value = serde_json::from_slice(&reply).expect("json");
        assert_eq!(reply["object"], "response");
        let sent_bytes = last_sent(up);
        let sent_text = std::str::from_utf8(&sent_bytes).expect("utf-8");
        let sent: Value = serde_json::from_slice(&sent_bytes).expect("json");
        assert_eq!(sent["instructions"], instructions, "turn {end}");
        assert_eq!(sent["store"], false);
        let input = sent["input"].as_array().expect("input");
        let newest = items.last().expect("an item").to_string();
        assert_eq!(
            input.last(),
            items.last(),
            "turn {end}: the newest item stays"
        );
        assert!(
            sent_text.ends_with(&format!("{newest}]}}"))
                || sent_text.contains(&format!("{newest}],")),
            "turn {end}: the newest item, byte for byte"
        );
        let read =
            engram::formats::responses::from_request(&sent).expect("the upstream gets items");
        let tokens = counter.count_conversation(&read.conversation).total();
        assert!(
            tokens <= 16_000 - 1000,
            "turn {end}: {tokens} tokens upstream"
        );
        if header_str(&headers, "x-engram-steps") == "none" {
            assert_eq!(
                &sent_bytes[..],
                body.to_string().as_bytes(),
                "turn {end}: under the threshold, byte for byte"
            );
            continue;
        }
        compacted += 1;
        let asked = engram::formats::responses::from_request(&body).expect("items");
        assert_ledger_kept(&asked.conversation.messages, sent_text, end);
        if header_str(&headers, "x-engram-prefix") == "extended" {
            hits += 1;
            let before = previous.as_ref().expect("a request before");
            assert_eq!(
                &input[..before.len()],
                &before[..],
                "turn {end}: extends the previous"
            );
        }
        previous = Some(input.clone());
        let after: usize = header_str(&headers, "x-engram-tokens-after")
            .parse()
            .expect("n");
        assert_eq!(
            after, tokens,
            "turn {end}: the reported count is what was sent"
        );
        // Calls and outputs in pairs, outputs after their calls.
        let mut called = std::collections::HashSet::new();
        for item in input {
            match item["type"].as_str() {
                Some("function_call") => {
                    called.insert(item["call_id"].clone());
                    assert!(
                        input.iter().any(|o| o["type"] == "function_call_output"
                            && o["call_id"] == item["call_id"]),
                        "turn {end}: a call without its output: {item}"
                    );
                }
                Some("function_call_output") => assert!(
                    called.contains(&item["call_id"]),
                    "turn {end}: an output before or without its call: {item}"
                ),
                _ => {}
            }
        }
        // Kept items are the caller's, byte for byte; a reasoning item keeps its successor.
        let by_id: std::collections::HashMap<&str, usize> = items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| Some((item["id"].as_str()?, i)))
            .collect();
        let mut verbatim = 0;
        for (j, item) in input.iter().enumerate() {
            let Some(&i) = item["id"].as_str().and_then(|id| by_id.get(id)) else {
                continue;
            };
            assert_eq!(
                item, &items[i],
                "turn {end}: an item with the caller's id changed"
            );
            assert!(
                sent_text.contains(&items[i].to_string()),
                "turn {end}: not byte for byte"
            );
            verbatim += 1;
            if item["type"] == "reasoning" {
                assert_eq!(
                    input.get(j + 1),
                    items.get(i + 1),
                    "turn {end}: reasoning split from its turn"
                );
            }
        }
        assert!(verbatim > 0);
    }
    (turns, compacted, hits)
}

/// The SWE-agent trajectory, converted to Responses items, sent turn by turn: compacted once it
/// outgrows the window, and later turns extend the view the first compacted turn got.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_requests_are_compacted_item_by_item() {
    let (base, up) = upstream().await;
    let app = engram(&base, false);
    let messages = trajectory();
    let instructions = messages[0]["content"].as_str().expect("system prompt");
    let (turns, compacted, hits) =
        drive_responses(&app, &up, instructions, &as_items(&messages)).await;
    assert!(
        compacted > 0 && compacted < turns,
        "{compacted} of {turns} turns compacted"
    );
    assert!(hits > 0, "later turns extend the compacted view");
}

/// A real mini-SWE-agent trajectory as Codex and the Agents SDK send it (the fixture in
/// testdata/responses: reasoning items, output messages, function calls and their outputs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mini_swe_agent_run_in_responses_items_fits_with_every_call_paired() {
    let (base, up) = upstream().await;
    let app = engram(&base, false);
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/responses/minisweagent_items.json");
    let fixture: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("the fixture")).expect("json");
    let items = fixture["input"].as_array().expect("input");
    let instructions = fixture["instructions"].as_str().expect("instructions");
    let (turns, compacted, _) = drive_responses(&app, &up, instructions, items).await;
    assert!(
        turns > 40 && compacted > 0 && compacted < turns,
        "{compacted} of {turns} turns compacted"
    );
}

/// A Responses request whose conversation the provider holds (`previous_response_id`,
/// `conversation`, `store: true`) is forwarded as sent, with a header saying why; a stream
/// comes back byte for byte; "context length exceeded" gets one harder retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_state_held_by_the_provider_streams_and_retries() {
    let (base, up) = upstream().await;
    let app = engram(&base, false);
    let messages = trajectory();
    let items = as_items(&messages[..messages.len() - 1]);
    for (key, value, why) in [
        (
            "previous_response_id",
            json!("resp_0"),
            "previous_response_id",
        ),
        ("conversation", json!("conv_1"), "conversation"),
        ("store", json!(true), "store: true"),
    ] {
        let body = json!({"model": "gpt-4o", "input": &items, key: value}).to_string();
        let (status, headers, _) = send(&app, post_json("/v1/responses", body.as_bytes())).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            &last_sent(&up)[..],
            body.as_bytes(),
            "{key}: forwarded as sent"
        );
        assert!(
            header_str(&headers, "x-engram-note").starts_with(why),
            "{key}: {headers:?}"
        );
    }
    // The same history without provider state is compacted.
    let body = json!({"model": "gpt-4o", "input": &items, "stream": true}).to_string();
    let (status, headers, reply) = send(&app, post_json("/v1/responses", body.as_bytes())).await;
    assert_eq!(status, StatusCode::OK);
    assert_ne!(header_str(&headers, "x-engram-steps"), "none");
    assert!(last_sent(&up).len() < body.len());
    assert_eq!(std::str::from_utf8(&reply).expect("utf-8"), RESPONSES_SSE);
    // One harder retry when the upstream counts more than engram did, never a loop.
    let few = as_items(&messages[..12]);
    let small = json!({"model": "gpt-4o", "input": &few}).to_string();
    up.lock().expect("lock").reject = 1;
    let before = up.lock().expect("lock").received.len();
    let (status, headers, _) = send(&app, post_json("/v1/responses", small.as_bytes())).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header_str(&headers, "x-engram-retried"), "true");
    {
        let received = &up.lock().expect("lock").received;
        assert_eq!(received.len(), before + 2);
        assert_eq!(&received[before].2[..], small.as_bytes(), "first as sent");
        let retried: Value = serde_json::from_slice(&received[before + 1].2).expect("json");
        assert!(retried["input"].as_array().expect("input").len() < few.len());
    }
    up.lock().expect("lock").reject = 100;
    let (status, _, _) = send(&app, post_json("/v1/responses", small.as_bytes())).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        up.lock().expect("lock").received.len(),
        before + 4,
        "one retry, no loop"
    );
}

/// Replies in the providers' own shapes with a prompt-cache usage, as the OpenAI and Anthropic
/// SDKs receive them (streamed when asked): Chat Completions' `prompt_tokens_details`, the
/// Responses API's `input_tokens_details`, Anthropic's cache reads and writes.
async fn cached_usage_upstream() -> String {
    async fn chat(body: Bytes) -> Response {
        let request: Value = serde_json::from_slice(&body).expect("json");
        let usage = json!({"prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
            "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}});
        if request["stream"] == json!(true) {
            let text = format!(
                "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
                json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}], "usage": null}),
                json!({"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": usage})
            );
            return ([(header::CONTENT_TYPE, "text/event-stream")], text).into_response();
        }
        let reply = json!({"id": "c", "object": "chat.completion", "created": 0, "model": request["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": usage});
        (
            [(header::CONTENT_TYPE, "application/json")],
            reply.to_string(),
        )
            .into_response()
    }
    async fn responses(body: Bytes) -> Response {
        let request: Value = serde_json::from_slice(&body).expect("json");
        let usage = json!({"input_tokens": 2006, "input_tokens_details": {"cached_tokens": 1920},
            "output_tokens": 300, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 2306});
        let response = json!({"id": "resp_1", "object": "response", "created_at": 0, "status": "completed",
            "model": request["model"], "output": [{"type": "message", "id": "m", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": "ok", "annotations": []}]}], "usage": usage});
        if request["stream"] == json!(true) {
            let text = format!(
                "event: response.created\ndata: {}\n\nevent: response.completed\ndata: {}\n\n",
                json!({"type": "response.created", "sequence_number": 0, "response": {"id": "resp_1", "status": "in_progress", "usage": null}}),
                json!({"type": "response.completed", "sequence_number": 1, "response": response})
            );
            return ([(header::CONTENT_TYPE, "text/event-stream")], text).into_response();
        }
        (
            [(header::CONTENT_TYPE, "application/json")],
            response.to_string(),
        )
            .into_response()
    }
    async fn anthropic(body: Bytes) -> Response {
        let request: Value = serde_json::from_slice(&body).expect("json");
        if request["stream"] == json!(true) {
            let text = format!(
                "event: message_start\ndata: {}\n\nevent: content_block_delta\ndata: {}\n\nevent: message_delta\ndata: {}\n\nevent: message_stop\ndata: {}\n\n",
                json!({"type": "message_start", "message": {"id": "msg", "type": "message", "role": "assistant", "model": request["model"], "content": [],
                    "stop_reason": null, "usage": {"input_tokens": 6, "cache_creation_input_tokens": 80, "cache_read_input_tokens": 1920, "output_tokens": 1}}}),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}}),
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 300}}),
                json!({"type": "message_stop"})
            );
            return ([(header::CONTENT_TYPE, "text/event-stream")], text).into_response();
        }
        let reply = json!({"id": "msg", "type": "message", "role": "assistant", "model": request["model"],
            "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 6, "cache_creation_input_tokens": 80, "cache_read_input_tokens": 1920, "output_tokens": 300}});
        (
            [(header::CONTENT_TYPE, "application/json")],
            reply.to_string(),
        )
            .into_response()
    }
    let app = axum::Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/responses", post(responses))
        .route("/v1/messages", post(anthropic));
    format!("http://{}/v1", on_loopback(app).await)
}

/// The tokens the upstream reports reading from its prompt cache reach `/metrics` and the
/// inspector's list of requests (with the cached share and the cost), on every route, streamed
/// or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_tokens_the_upstream_reports_reach_the_metrics_and_the_inspector() {
    let base = cached_usage_upstream().await;
    let app = engram(&base, false);
    for stream in [false, true] {
        for (path, body) in [
            (
                "/v1/chat/completions",
                json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "stream": stream, "stream_options": if stream { json!({"include_usage": true}) } else { Value::Null }}),
            ),
            (
                "/v1/responses",
                json!({"model": "gpt-4o", "input": "hi", "stream": stream, "store": false}),
            ),
            (
                "/v1/messages",
                json!({"model": "claude-sonnet-4", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}], "stream": stream}),
            ),
        ] {
            let mut request = post_json(path, body.to_string().as_bytes());
            if path == "/v1/messages" {
                request
                    .headers_mut()
                    .insert("anthropic-version", "2023-06-01".parse().expect("header"));
            }
            let (status, _, reply) = send(&app, request).await;
            assert_eq!(
                status,
                StatusCode::OK,
                "{path}: {}",
                String::from_utf8_lossy(&reply)
            );
        }
    }
    let get = |uri: &str| {
        Request::builder()
            .uri(uri)
            .body(Body::empty())
            .expect("request")
    };
    let (_, _, metrics) = send(&app, get("/metrics")).await;
    let metrics = String::from_utf8_lossy(&metrics);
    for (route, model) in [
        ("/v1/chat/completions", "gpt-4o"),
        ("/v1/responses", "gpt-4o"),
        ("/v1/messages", "claude-sonnet-4"),
    ] {
        let line = format!(
            "engram_proxy_upstream_input_tokens_total{{route=\"{route}\",model=\"{model}\",kind=\"cached\"}} 3840"
        );
        assert!(metrics.contains(&line), "{line} in:\n{metrics}");
        let all = format!(
            "engram_proxy_upstream_input_tokens_total{{route=\"{route}\",model=\"{model}\",kind=\"all\"}} 4012"
        );
        assert!(metrics.contains(&all), "{all}");
    }
    assert!(metrics.contains(
        "engram_proxy_upstream_input_tokens_total{route=\"/v1/messages\",model=\"claude-sonnet-4\",kind=\"cache_write\"} 160"
    ));
    let (_, _, listed) = send(&app, get("/v1/proxy/requests")).await;
    let listed: Value = serde_json::from_slice(&listed).expect("json");
    let requests = listed["requests"].as_array().expect("requests");
    assert_eq!(requests.len(), 6);
    for r in requests {
        let usage = &r["usage"];
        assert_eq!(usage["cached_tokens"], 1920, "{r}");
        assert_eq!(usage["input_tokens"], 2006, "{r}");
        assert_eq!(usage["output_tokens"], 300, "{r}");
        assert!(
            usage["cached_share"].as_f64().is_some_and(|s| s > 0.95),
            "{r}"
        );
        assert!(usage["cost_usd"].as_f64().is_some_and(|c| c > 0.0), "{r}");
    }
}

/// Two servers on one PostgreSQL behind a load balancer serve one agent's growing conversation
/// alternately: a request that lands on the other server extends the view the first one sent,
/// byte for byte, and each summary is written once between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_postgres_share_the_views_they_sent() {
    if !cfg!(feature = "postgres") {
        engram_testkit::skip("feature", "built without the `postgres` feature");
        return;
    }
    let Some((url, schema)) = support::pg_schema("views") else {
        return;
    };
    let (base, up) = upstream().await;
    let counting = Arc::new(Counting::default());
    let mut servers = Vec::new();
    for _ in 0..2 {
        let (url, base, counting) = (url.clone(), base.clone(), Arc::clone(&counting));
        // PostgreSQL's client blocks: the app is made off the async threads.
        let app = tokio::task::spawn_blocking(move || {
            let mut config = ServeConfig::with_store(StoreLocation::Postgres(url));
            config.proxy.openai_upstream = Some(base);
            config.proxy.model_windows.insert("gpt-4o".into(), 16_000);
            config.sleep.compact.summarizer = Some(counting as Arc<dyn Summarizer>);
            App::new(config).expect("app")
        })
        .await
        .expect("task");
        servers.push(router(app));
    }
    let messages = longest_in("minisweagent_swebv_gemini3pro.jsonl");
    let (mut previous, mut prefixes): (Option<Value>, Vec<String>) = (None, Vec::new());
    for end in 2..=messages.len() {
        if messages[end - 1]["role"] == "assistant" {
            continue;
        }
        let body = json!({"model": "gpt-4o", "messages": &messages[..end], "max_tokens": 1000});
        let server = &servers[prefixes.len() % 2];
        let (status, headers, _) = send(
            server,
            post_json("/v1/chat/completions", body.to_string().as_bytes()),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        let prefix = header_str(&headers, "x-engram-prefix").to_owned();
        let sent: Value = serde_json::from_slice(&last_sent(&up)).expect("json");
        if let (Some(before), "" | "extended") = (&previous, prefix.as_str()) {
            let (b, a) = (
                before["messages"].as_array().expect("messages"),
                sent["messages"].as_array().expect("messages"),
            );
            assert_eq!(
                &a[..b.len()],
                &b[..],
                "turn {end}: extends the other server's request"
            );
        }
        previous = Some(sent);
        prefixes.push(prefix);
    }
    let count = |what: &str| prefixes.iter().filter(|p| *p == what).count();
    eprintln!(
        "{} turns: {} extended, {} appended, {} rebuilt",
        prefixes.len(),
        count("extended"),
        count("appended"),
        count("rebuilt")
    );
    // What one server alone does with the same conversation: the two together did the same.
    let alone = engram_with(&base, false, Some(Arc::new(Counting::default())));
    let mut one = Vec::new();
    for end in 2..=messages.len() {
        if messages[end - 1]["role"] == "assistant" {
            continue;
        }
        let body = json!({"model": "gpt-4o", "messages": &messages[..end], "max_tokens": 1000});
        let (_, headers, _) = send(
            &alone,
            post_json("/v1/chat/completions", body.to_string().as_bytes()),
        )
        .await;
        one.push(header_str(&headers, "x-engram-prefix").to_owned());
    }
    assert_eq!(
        prefixes, one,
        "two servers build on each other's views as one does on its own"
    );
    assert!(count("appended") > 0 && count("extended") > 4 * count("appended"));
    assert_eq!(
        counting.calls.lock().expect("lock").len(),
        count("appended") + count("rebuilt"),
        "each summary written once, by whichever server compacted"
    );
    std::thread::spawn(move || {
        if let Ok(mut c) = postgres::Client::connect(&support::pg_url(), postgres::NoTls) {
            c.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                .ok();
        }
    })
    .join()
    .ok();
}

/// An Anthropic upstream that bills half a token per byte of the request, whatever engram
/// thinks: its own count.
async fn billing_upstream() -> String {
    async fn messages(body: Bytes) -> Response {
        (
            [(header::CONTENT_TYPE, "application/json")],
            json!({
                "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4",
                "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                "usage": {"input_tokens": body.len() / 2, "output_tokens": 1}
            })
            .to_string(),
        )
            .into_response()
    }
    let app = axum::Router::new().route("/v1/messages", post(messages));
    format!("http://{}", on_loopback(app).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_counts_are_calibrated_from_the_upstreams_usage_and_kept_in_the_store() {
    let base = billing_upstream().await;
    let dir = std::env::temp_dir().join(format!("engram-proxy-calibration-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let db = dir.join("engram.db");
    let app_on = |db: &std::path::Path| {
        let mut config = ServeConfig::new(db.to_path_buf());
        config.proxy.anthropic_upstream = Some(base.clone());
        router(App::new(config).expect("app"))
    };
    let request = |turns: usize| {
        let messages: Vec<Value> = (0..turns)
            .map(|i| {
                json!({"role": if i % 2 == 0 { "user" } else { "assistant" },
                       "content": format!("turn {i}: {}", "words of the agent ".repeat(20))})
            })
            .collect();
        serde_json::to_vec(
            &json!({"model": "claude-sonnet-4", "max_tokens": 64, "messages": messages}),
        )
        .expect("json")
    };
    let tokens_after = |headers: &HeaderMap| -> f64 {
        header_str(headers, "x-engram-tokens-after")
            .parse()
            .expect("a count")
    };
    let app = app_on(&db);
    let (status, headers, _) = send(&app, post_json("/v1/messages", &request(5))).await;
    assert_eq!(status, StatusCode::OK);
    let before = tokens_after(&headers);
    for turns in [7, 9, 11, 13] {
        send(&app, post_json("/v1/messages", &request(turns))).await;
    }
    // The calibration is written once the reply has ended, off the async threads.
    let store = engram_store::SqliteStore::open(&db).expect("the store");
    let mut calibration = None;
    for _ in 0..100 {
        calibration = engram::calibrate::CalibrationStore::calibration(&store, "claude-sonnet-4")
            .expect("read");
        if calibration.as_ref().is_some_and(|c| c.samples == 5) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let calibration = calibration.expect("kept in the store");
    assert_eq!(calibration.samples, 5);
    let factor = calibration.factor().expect("calibrated");
    assert!(
        factor > 1.5,
        "the upstream counts more than cl100k x 1.25: {factor}"
    );
    // A new server on the same store counts the first request with what the first one learned.
    let again = app_on(&db);
    let (_, headers, _) = send(&again, post_json("/v1/messages", &request(5))).await;
    let after = tokens_after(&headers);
    let expected = before / 1.25 * factor;
    assert!(
        (after - expected).abs() / expected < 0.05,
        "{before} tokens at 1.25, {after} at {factor} (expected about {expected})"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A chat upstream playing a model that, offered engram's history search, looks up the day the
/// meeting moved to before it answers, and answers with what the search returned.
async fn recalling_upstream() -> (String, Shared) {
    async fn chat(State(up): State<Shared>, body: Bytes) -> Response {
        up.lock().expect("lock").received.push((
            "/v1/chat/completions".into(),
            HeaderMap::new(),
            body.clone(),
        ));
        let request: Value = serde_json::from_slice(&body).expect("JSON");
        let offered = request["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t["function"]["name"] == "engram_search_history");
        let messages = request["messages"].as_array().expect("messages");
        let last = messages.last().expect("a message");
        let message = if offered && last["role"] != "tool" {
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_recall", "type": "function", "function": {
                    "name": "engram_search_history", "arguments": "{\"query\": \"meeting moved\"}"}},
                {"id": "call_theirs", "type": "function", "function": {
                    "name": "bash", "arguments": "{\"command\": \"ls\"}"}}
            ]})
        } else {
            let found = last["content"].as_str().unwrap_or("");
            json!({"role": "assistant", "content": format!("recalled: {}", found.contains("moved to Tuesday"))})
        };
        (
            [(header::CONTENT_TYPE, "application/json")],
            json!({"id": "c", "object": "chat.completion", "model": "gpt-4o",
                   "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105}})
            .to_string(),
        )
            .into_response()
    }
    let shared: Shared = Arc::default();
    let app = axum::Router::new()
        .route("/v1/chat/completions", post(chat))
        .with_state(Arc::clone(&shared));
    (format!("http://{}/v1", on_loopback(app).await), shared)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_gets_back_what_was_compacted_through_engrams_search() {
    let (base, up) = recalling_upstream().await;
    let app = engram_tuned(&base, false, |c| {
        c.proxy.model_windows.insert("gpt-4o".into(), 3_000);
    });
    let mut messages = vec![
        json!({"role": "system", "content": "You are a helpful assistant."}),
        json!({"role": "user", "content": "Plan the release with me."}),
        json!({"role": "assistant", "content": "Sure. What changed?"}),
        json!({"role": "user", "content": format!(
            "Here are my notes from the call, in no order.\n{}\nthe meeting moved to Tuesday afternoon\n{}",
            "we talked about many things and nothing much came of it\n".repeat(6),
            "then we chatted about the weather for a while\n".repeat(6))}),
    ];
    for i in 0..40 {
        messages.push(json!({"role": "assistant", "content": format!("Step {i}: checked build_{i}.log, lint_{i}.txt and report_{i}.md; all fine.")}));
        messages.push(json!({"role": "user", "content": format!("Next {i}: {}", "more details about packaging and docs ".repeat(8))}));
    }
    messages.push(json!({"role": "user", "content": "When is the meeting now?"}));
    let body = serde_json::to_vec(&json!({"model": "gpt-4o", "messages": messages})).expect("json");
    let (status, headers, reply) = send(&app, post_json("/v1/chat/completions", &body)).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&reply)
    );
    let reply: Value = serde_json::from_slice(&reply).expect("JSON");
    assert_eq!(header_str(&headers, "x-engram-recall-calls"), "1");
    assert_eq!(
        reply["choices"][0]["message"]["content"], "recalled: true",
        "{reply}"
    );
    assert!(
        reply["choices"][0]["message"].get("tool_calls").is_none(),
        "{reply}"
    );
    assert_eq!(
        reply["usage"]["prompt_tokens"], 100,
        "the last round's usage, never a sum over engram's rounds: {reply}"
    );
    let received = up.lock().expect("lock").received.clone();
    assert_eq!(received.len(), 2, "asked again once");
    let first: Value = serde_json::from_slice(&received[0].2).expect("JSON");
    let second: Value = serde_json::from_slice(&received[1].2).expect("JSON");
    assert!(
        !first.to_string().contains("moved to Tuesday"),
        "compacted out of the request"
    );
    let digest = first["messages"].to_string();
    assert!(
        digest.contains("engram_read_history"),
        "the digest names the tool the model has"
    );
    assert!(!digest.contains(" read_history"), "and no other: {digest}");
    let sent = second["messages"].as_array().expect("messages");
    let n = sent.len();
    assert_eq!(
        sent[n - 2]["tool_calls"].as_array().map(Vec::len),
        Some(1),
        "engram's call only"
    );
    assert_eq!(sent[n - 1]["role"], "tool");
    assert!(
        sent[n - 1]["content"]
            .as_str()
            .expect("text")
            .contains("moved to Tuesday")
    );
    assert_eq!(
        second["tools"], first["tools"],
        "the tools stay as they were"
    );
}

/// One request of a long system prompt over a 3,000-token window: the compaction keeps the
/// prompt and the task (cached), and sets aside little against them.
fn long_head_request(turns: usize) -> Vec<u8> {
    let mut messages = vec![
        json!({"role": "system", "content": "Follow the airline's policy below to the letter.\n".repeat(110)}),
        json!({"role": "user", "content": "Change my flight, please."}),
    ];
    for i in 0..turns {
        messages.push(
            json!({"role": "assistant", "content": format!("Looking at reservation R{i}: ")
            + &"checking seats and fares ".repeat(12)}),
        );
        messages.push(json!({"role": "user", "content": format!("Reservation R{i} is {i}A.")}));
    }
    serde_json::to_vec(&json!({"model": "gpt-4o", "messages": messages})).expect("json")
}

#[tokio::test]
async fn the_history_tools_wait_until_what_is_set_aside_pays_for_the_prefix_they_renew() {
    for (setting, offered) in [
        (RecallTools::Auto, false),
        (RecallTools::Always, true),
        (RecallTools::Off, false),
    ] {
        let (base, up) = upstream().await;
        let app = engram_tuned(&base, false, |c| {
            c.proxy.model_windows.insert("gpt-4o".into(), 3_000);
            c.proxy.recall_tools = setting;
        });
        let (status, headers, reply) = send(
            &app,
            post_json("/v1/chat/completions", &long_head_request(20)),
        )
        .await;
        assert_eq!(
            status,
            StatusCode::OK,
            "{}",
            String::from_utf8_lossy(&reply)
        );
        assert_ne!(header_str(&headers, "x-engram-steps"), "none", "compacted");
        let sent: Value = serde_json::from_slice(&last_sent(&up)).expect("JSON");
        let has = sent["tools"].as_array().is_some_and(|t| {
            t.iter()
                .any(|t| t["function"]["name"] == "engram_search_history")
        });
        assert_eq!(has, offered, "{setting:?}: {}", sent["tools"]);
        let digest = sent["messages"].to_string();
        assert_eq!(
            digest.contains("engram_read_history"),
            offered,
            "{setting:?}: the digest names only tools the model has"
        );
    }
}

/// A caller cannot grow the metrics or a header without bound: 100 requests with 3 KB model
/// names (all unknown to the registry) leave `/metrics` within 1% of the size the same traffic
/// with one known model gives, and the `x-engram-model` header stays short.
#[tokio::test]
async fn model_names_cannot_grow_the_metrics() {
    let (base, _up) = upstream().await;
    let ask = |model: String| {
        let body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
        post_json("/v1/chat/completions", body.to_string().as_bytes())
    };
    let metrics = |app: axum::Router| async move {
        let (_, _, text) = send(
            &app,
            Request::builder()
                .uri("/metrics")
                .body(Body::empty())
                .expect("request"),
        )
        .await;
        text.len()
    };
    let mut sizes = Vec::new();
    for long in [false, true] {
        let app = engram(&base, false);
        // One known model and one long name first: the series every operator has.
        send(&app, ask("gpt-4o".into())).await;
        let (_, headers, _) = send(&app, ask("x".repeat(3_000))).await;
        assert_eq!(header_str(&headers, "x-engram-model"), "other");
        for i in 0..100 {
            let model = if long {
                format!("{i:03}{}", "m".repeat(3_000))
            } else {
                "gpt-4o".to_owned()
            };
            let (status, headers, _) = send(&app, ask(model)).await;
            assert_eq!(status, StatusCode::OK);
            assert!(header_str(&headers, "x-engram-model").len() <= 64);
        }
        sizes.push(metrics(app).await);
    }
    let (known, long) = (sizes[0] as f64, sizes[1] as f64);
    assert!(
        (long - known).abs() <= known * 0.01,
        "/metrics: {known} bytes after 100 requests for gpt-4o, {long} after 100 with 3 KB names"
    );
}

/// Calls of a shell tool reading a file each (the `files`-th), with their outputs, as
/// Responses items.
fn shell_items(files: std::ops::Range<usize>) -> Vec<Value> {
    files
        .flat_map(|i| {
            [
                json!({"type": "function_call", "call_id": format!("call_{i}"), "name": "shell",
                "arguments": json!({"command": ["cat", format!("src/module_{i}.rs")]}).to_string()}),
                json!({"type": "function_call_output", "call_id": format!("call_{i}"),
                "output": format!("fn module_{i}() {{}}\n").repeat(40)}),
            ]
        })
        .collect()
}

/// `POST /v1/responses/compact` (what Codex calls when its context fills up): an upstream that
/// does not offer it gets engram's own compaction, in the shape Codex reads back.
#[tokio::test]
async fn an_upstream_without_responses_compaction_gets_engrams() {
    let (base, up) = upstream().await;
    let app = engram_tuned(&base, false, |c| {
        c.proxy.model_windows.insert("gpt-4o".into(), 6_000);
    });
    let mut input = vec![
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix the parser's trailing commas."}]}),
    ];
    input.extend(shell_items(0..30));
    let body = json!({"model": "gpt-4o", "instructions": "You are Codex.", "input": input});
    let (status, headers, reply) = send(
        &app,
        post_json("/v1/responses/compact", body.to_string().as_bytes()),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&reply)
    );
    let reply: Value = serde_json::from_slice(&reply).expect("JSON");
    assert_eq!(reply["object"], "response.compaction");
    let output = reply["output"].as_array().expect("output items");
    assert!(
        output.len() < input.len(),
        "{} of {} items",
        output.len(),
        input.len()
    );
    assert_eq!(output[0], input[0], "the task as it was sent");
    let calls: Vec<&Value> = output
        .iter()
        .filter(|i| i["type"] == "function_call")
        .collect();
    for call in &calls {
        assert!(
            output
                .iter()
                .any(|o| o["type"] == "function_call_output" && o["call_id"] == call["call_id"]),
            "a call without its output"
        );
    }
    assert!(
        header_str(&headers, "x-engram-tokens-after")
            .parse::<usize>()
            .expect("a count")
            < header_str(&headers, "x-engram-tokens-before")
                .parse::<usize>()
                .expect("a count")
    );
    let asked: Vec<String> = up
        .lock()
        .expect("lock")
        .received
        .iter()
        .map(|r| r.0.clone())
        .collect();
    assert!(
        !asked.iter().any(|p| p == "/v1/responses"),
        "no model call: {asked:?}"
    );
}

/// A model that takes OpenAI's explicit cache breakpoints (GPT-5.6 and later) gets them on the
/// stable prefix of a request that marks none; another model's request goes as it was sent.
#[tokio::test]
async fn openais_explicit_cache_breakpoints_mark_the_stable_prefix() {
    let (base, up) = upstream().await;
    let app = engram(&base, false);
    for (model, marked) in [("gpt-6.2-sol", true), ("gpt-4o", false)] {
        let body = json!({"model": model, "messages": [
            {"role": "system", "content": "You are a careful agent."},
            {"role": "user", "content": "Fix the build."},
            {"role": "assistant", "content": "Looking."},
            {"role": "user", "content": "Go on."}
        ]});
        let (status, _, _) = send(
            &app,
            post_json("/v1/chat/completions", body.to_string().as_bytes()),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        let sent: Value = serde_json::from_slice(&last_sent(&up)).expect("JSON");
        let marks = sent.to_string().matches("prompt_cache_breakpoint").count();
        assert_eq!(marks, if marked { 2 } else { 0 }, "{model}: {sent}");
        if marked {
            assert_eq!(
                sent["messages"][0]["content"][0]["text"],
                "You are a careful agent."
            );
            assert_eq!(
                sent["messages"][1]["content"][0]["prompt_cache_breakpoint"]["mode"],
                "explicit"
            );
            assert_eq!(
                sent["messages"][3], body["messages"][3],
                "the newest message as sent"
            );
        } else {
            assert_eq!(sent, body);
        }
    }
}

/// `body` posted to `/v1/responses`, answered 200 (the body says why not); the headers and body.
async fn responses_ok(app: &axum::Router, body: &Value) -> (HeaderMap, Bytes) {
    let (status, headers, reply) =
        send(app, post_json("/v1/responses", body.to_string().as_bytes())).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&reply)
    );
    (headers, reply)
}

/// Codex's compaction within a conversation (a Responses request whose input ends with the
/// compaction trigger): an upstream that answers it as a turn gets engram's compaction item,
/// which later requests carry and the upstream receives as the items it stands for; an upstream
/// that compacts is answered as it answered.
#[tokio::test]
async fn a_compaction_trigger_gets_one_compaction_item_and_it_comes_back_as_items() {
    let (base, up) = upstream().await;
    let app = engram(&base, false);
    let task = json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix the parser's trailing commas."}]});
    let mut input = vec![task.clone()];
    input.extend(shell_items(0..30));
    let mut asked = input.clone();
    asked.push(json!({"type": "compaction_trigger"}));
    for stream in [true, false] {
        let body = json!({"model": "gpt-4o", "instructions": "You are Codex.", "input": asked, "stream": stream});
        let (headers, reply) = responses_ok(&app, &body).await;
        assert_eq!(
            engram::formats::remote_compaction::compactions_in_reply(&reply),
            1,
            "stream {stream}: {}",
            String::from_utf8_lossy(&reply)
        );
        assert!(header_str(&headers, "x-engram-note").contains("engram compacted"));
        let sent: Value = serde_json::from_slice(&last_sent(&up)).expect("json");
        assert_eq!(
            sent["input"], body["input"],
            "the upstream was asked first, as sent"
        );
    }
    let (_, reply) = responses_ok(&app, &json!({"model": "gpt-4o", "input": asked})).await;
    let reply: Value = serde_json::from_slice(&reply).expect("json");
    let item = reply["output"][0].clone();
    assert_eq!(item["type"], "compaction");

    // The next request, as Codex sends it: the task, the compaction item, a new turn.
    let next = json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Now run the tests."}]});
    let body =
        json!({"model": "gpt-4o", "instructions": "You are Codex.", "input": [task, item, next]});
    responses_ok(&app, &body).await;
    let sent_bytes = last_sent(&up);
    let sent: Value = serde_json::from_slice(&sent_bytes).expect("json");
    let items = sent["input"].as_array().expect("input");
    assert!(
        !String::from_utf8_lossy(&sent_bytes).contains(engram::formats::remote_compaction::MARK),
        "the upstream never sees engram's item"
    );
    assert!(
        items.len() > 3,
        "the item became the items it stands for: {items:?}"
    );
    assert_eq!(items.first(), Some(&task));
    assert_eq!(items.last(), Some(&next));
    for call in items.iter().filter(|i| i["type"] == "function_call") {
        assert!(
            items
                .iter()
                .any(|o| o["type"] == "function_call_output" && o["call_id"] == call["call_id"]),
            "a call without its output: {call}"
        );
    }
    assert!(
        items.iter().any(|i| i["call_id"] == "call_29"),
        "the newest call is kept"
    );
    // engram's summaries, which the item carries as a developer's messages (kept whole).
    let summary = |items: &[Value]| -> String {
        items
            .iter()
            .map(|i| i["content"].to_string())
            .filter(|text| text.contains(engram::compact::DIGEST_HEADER))
            .collect()
    };
    assert!(
        summary(items).contains("src/module_0.rs"),
        "the summary names the first file read"
    );

    // Compacting again once the conversation has grown as much: what the first item stood for
    // competes with the new steps for the second item's summary.
    let mut again = vec![task.clone(), item.clone(), next.clone()];
    again.extend(shell_items(30..60));
    again.push(json!({"type": "compaction_trigger"}));
    let (_, reply) = responses_ok(&app, &json!({"model": "gpt-4o", "input": again})).await;
    let reply: Value = serde_json::from_slice(&reply).expect("json");
    let second = reply["output"][0].clone();
    assert_eq!(second["type"], "compaction");
    let mut request = json!({"input": [task, second]});
    engram::formats::remote_compaction::expand(&mut request).expect("expands");
    let items = request["input"].as_array().expect("input");
    assert!(
        summary(items).contains("src/module_0.rs"),
        "the first summary is kept through the second compaction: {items:?}"
    );

    // An upstream that compacts answers for itself.
    up.lock().expect("lock").compacts = true;
    let (headers, reply) = responses_ok(&app, &json!({"model": "gpt-4o", "input": asked})).await;
    assert_eq!(header_str(&headers, "x-engram-note"), "");
    let reply: Value = serde_json::from_slice(&reply).expect("json");
    assert_eq!(reply["output"][0]["encrypted_content"], "gAAAA-provider");
}

/// A provider's compaction item stands for everything before it: a request that carries one and
/// outgrows the window is compacted around it, the item kept as it came.
#[tokio::test]
async fn a_providers_compaction_item_is_kept_through_engrams_compaction() {
    let (base, up) = upstream().await;
    let app = engram_tuned(&base, false, |c| {
        c.proxy.model_windows.insert("gpt-4o".into(), 6_000);
    });
    let task = json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix the parser's trailing commas."}]});
    let theirs = json!({"type": "compaction", "id": "cmp_1", "encrypted_content": format!("gAAAA-provider-{}", "x".repeat(400))});
    let mut input = vec![task, theirs.clone()];
    input.extend(shell_items(0..30));
    let (headers, _) = responses_ok(&app, &json!({"model": "gpt-4o", "input": input})).await;
    assert_ne!(header_str(&headers, "x-engram-steps"), "none", "compacted");
    let sent: Value = serde_json::from_slice(&last_sent(&up)).expect("json");
    let items = sent["input"].as_array().expect("input");
    assert!(items.len() < 62, "compacted: {} items", items.len());
    assert!(
        items.contains(&theirs),
        "the provider's item, as it came: {items:?}"
    );
}

/// engram's earlier summaries, which its compaction items keep whole, are summarised with the
/// rest once they no longer fit what a compaction may keep.
#[tokio::test]
async fn kept_summaries_that_no_longer_fit_are_summarised_again() {
    let (base, _up) = upstream().await;
    let app = engram(&base, false);
    let task =
        json!({"type": "message", "role": "user", "content": "Fix the parser's trailing commas."});
    let lines: String = (0..2000)
        .map(|i| format!("- [shell] read src/earlier_{i}.rs: fn earlier_{i}() {{}}\n"))
        .collect();
    let summary = json!({"type": "message", "role": "system",
        "content": format!("{} (key lines of 2000 earlier messages)\n{lines}", engram::compact::DIGEST_HEADER)});
    // An earlier compaction item of engram's, which holds the summary kept whole.
    let earlier = engram::formats::remote_compaction::item_for(&[summary], &[]);
    let mut input = vec![task, earlier];
    input.extend(shell_items(0..30));
    input.push(json!({"type": "compaction_trigger"}));
    let (_, reply) = responses_ok(&app, &json!({"model": "gpt-4o", "input": input})).await;
    assert_eq!(
        engram::formats::remote_compaction::compactions_in_reply(&reply),
        1
    );
}
