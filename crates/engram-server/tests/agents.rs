//! The proxy under the requests coding agents send, end to end over real sockets: engram in
//! front of a scripted model that records every body it receives and answers as the script
//! says (text, calls to engram's tools or the agent's own, streamed slowly or whole).
//!
//! Claude Code's requests (system messages among the messages, `context_management`,
//! `output_config`, adaptive thinking) are compacted with their instructions in place; the
//! recall rounds keep the count, the usage and the next request's prefix as they would be
//! without them; streaming goes on while the tools are offered; no engram tool ever reaches the
//! caller; a follow-up stays within the window; a request that cannot fit is masked, else
//! refused in the provider's own words.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use engram_server::{App, RecallTools, ServeConfig, router};
use serde_json::{Value, json};

/// What the scripted model says to one request.
#[derive(Clone, Debug, Default)]
struct Say {
    /// Text, streamed in pieces.
    text: String,
    /// Tool calls: (name, input).
    calls: Vec<(String, Value)>,
    /// The input tokens it reports.
    input_tokens: u64,
}

type Script = Arc<dyn Fn(&Value, usize) -> Say + Send + Sync>;

#[derive(Clone)]
struct Model {
    received: Arc<Mutex<Vec<Value>>>,
    script: Script,
    /// The pause between two streamed events.
    pause: Duration,
}

fn anthropic_events(say: &Say, model: &str) -> Vec<Value> {
    let mut events = vec![json!({"type": "message_start", "message": {
        "id": "msg_x", "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": say.input_tokens, "output_tokens": 1}}})];
    let mut index = 0;
    if !say.text.is_empty() {
        events.push(json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}));
        for piece in say.text.split_inclusive(' ') {
            events.push(json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}));
        }
        events.push(json!({"type": "content_block_stop", "index": index}));
        index += 1;
    }
    for (n, (name, input)) in say.calls.iter().enumerate() {
        events.push(json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": format!("toolu_{n}"), "name": name, "input": {}}}));
        events.push(json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}));
        events.push(json!({"type": "content_block_stop", "index": index}));
        index += 1;
    }
    let stop = if say.calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    events.push(
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
        "usage": {"input_tokens": say.input_tokens, "output_tokens": 7}}),
    );
    events.push(json!({"type": "message_stop"}));
    events
}

fn anthropic_whole(say: &Say, model: &str) -> Value {
    let mut content = Vec::new();
    if !say.text.is_empty() {
        content.push(json!({"type": "text", "text": say.text}));
    }
    for (n, (name, input)) in say.calls.iter().enumerate() {
        content.push(
            json!({"type": "tool_use", "id": format!("toolu_{n}"), "name": name, "input": input}),
        );
    }
    json!({"id": "msg_x", "type": "message", "role": "assistant", "model": model, "content": content,
        "stop_reason": if say.calls.is_empty() { "end_turn" } else { "tool_use" }, "stop_sequence": null,
        "usage": {"input_tokens": say.input_tokens, "output_tokens": 7}})
}

async fn messages(State(model): State<Model>, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).expect("the proxy sends JSON");
    let n = {
        let mut received = model.received.lock().expect("lock");
        received.push(request.clone());
        received.len()
    };
    let say = (model.script)(&request, n);
    let name = request["model"].as_str().unwrap_or("claude").to_owned();
    if request["stream"] == json!(true) {
        let events = anthropic_events(&say, &name);
        let pause = model.pause;
        let stream = futures_util::stream::unfold(events.into_iter(), move |mut rest| async move {
            let event = rest.next()?;
            tokio::time::sleep(pause).await;
            let text = format!(
                "event: {}\ndata: {event}\n\n",
                event["type"].as_str().unwrap_or("")
            );
            Some((Ok::<_, std::io::Error>(Bytes::from(text)), rest))
        });
        return (
            [(header::CONTENT_TYPE, "text/event-stream")],
            Body::from_stream(stream),
        )
            .into_response();
    }
    (
        [(header::CONTENT_TYPE, "application/json")],
        anthropic_whole(&say, &name).to_string(),
    )
        .into_response()
}

async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        axum::serve(listener, app).await.ok();
    });
    format!("http://{addr}")
}

/// The scripted model on a socket, and engram in front of it (`window` tokens for the model).
async fn setup(
    script: Script,
    pause: Duration,
    window: usize,
    tune: impl FnOnce(&mut ServeConfig),
) -> (String, Arc<Mutex<Vec<Value>>>) {
    let received = Arc::new(Mutex::new(Vec::new()));
    let model = Model {
        received: Arc::clone(&received),
        script,
        pause,
    };
    let upstream = serve(
        axum::Router::new()
            .route("/v1/messages", axum::routing::post(messages))
            .with_state(model),
    )
    .await;
    let dir = std::env::temp_dir().join(format!(
        "engram-agents-{}-{:?}",
        std::process::id(),
        std::time::SystemTime::now()
    ));
    std::fs::create_dir_all(&dir).expect("dir");
    let mut config = ServeConfig::new(dir.join("engram.db"));
    config.proxy.anthropic_upstream = Some(upstream);
    config
        .proxy
        .model_windows
        .insert("claude-opus-5-5".into(), window);
    tune(&mut config);
    let engram = serve(router(App::new(config).expect("app"))).await;
    (engram, received)
}

async fn post(base: &str, body: &Value) -> (StatusCode, HeaderMap, String) {
    let client = reqwest::Client::new();
    let response = client
        .post(format!("{base}/v1/messages?beta=true"))
        .header("content-type", "application/json")
        .header("x-api-key", "sk-ant-test")
        .header("anthropic-version", "2023-06-01")
        .body(body.to_string())
        .send()
        .await
        .expect("engram answers");
    let status = response.status();
    let headers = response.headers().clone();
    (status, headers, response.text().await.expect("body"))
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> &'h str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// A Claude Code request: its system blocks, a dozen tools, a user turn with a reminder and the
/// task, a system message among the messages, and `steps` tool calls with long outputs, one
/// system message every few steps; its other keys as Claude Code sends them.
fn claude_code_request(steps: usize, stream: bool) -> Value {
    let tools: Vec<Value> = [
        "Agent",
        "Bash",
        "Edit",
        "Read",
        "Write",
        "Skill",
        "ToolSearch",
        "Workflow",
    ]
    .iter()
    .map(|name| {
        json!({"name": name, "description": format!("The {name} tool. ").repeat(20),
            "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}})
    })
    .collect();
    let mut messages = vec![
        json!({"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>\nAttribution for git commits.\n</system-reminder>\n"},
            {"type": "text", "text": "Make the parser accept trailing commas; run the tests."}]}),
        json!({"role": "system", "content": [{"type": "text", "text": "# Environment\nPrimary working directory: /work/app\nPlatform: linux"}]}),
    ];
    for i in 0..steps {
        messages.push(json!({"role": "assistant", "content": [
            {"type": "text", "text": format!("Step {i}: running the check for module_{i}.")},
            {"type": "tool_use", "id": format!("toolu_s{i}"), "name": "Bash", "input": {"command": format!("pytest tests/test_module_{i}.py")}}]}));
        let output: String = (0..60)
            .map(|l| format!("tests/test_module_{i}.py::test_case_{l} PASSED [{l}%] in module_{i} of the parser\n"))
            .collect();
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": format!("toolu_s{i}"), "content": output}]}));
        if i % 4 == 3 {
            messages.push(json!({"role": "system", "content": format!("Reminder {i}: keep the todo list current.")}));
        }
    }
    json!({
        "model": "claude-opus-5-5",
        "max_tokens": 8000,
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332;"},
            {"type": "text", "text": "You are a Claude agent.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Be careful with the user's files. ".repeat(200)}],
        "messages": messages,
        "tools": tools,
        "metadata": {"user_id": "u"},
        "thinking": {"type": "adaptive", "display": "omitted"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "medium"},
        "stream": stream,
    })
}

/// Whether an Anthropic request is one the API takes: tool results right after their calls,
/// and every system message among the messages right after a user turn (or another).
fn valid(request: &Value) -> Result<(), String> {
    let messages = request["messages"].as_array().ok_or("no messages")?;
    if messages.first().map(|m| &m["role"]) != Some(&json!("user")) {
        return Err("the first message is not a user turn".into());
    }
    for (i, m) in messages.iter().enumerate() {
        if m["role"] == "system" && i > 0 && messages[i - 1]["role"] == "assistant" {
            return Err(format!(
                "message {i}: a system message after an assistant turn"
            ));
        }
        let calls: Vec<&str> = m["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| b["type"] == "tool_use")
            .filter_map(|b| b["id"].as_str())
            .collect();
        if !calls.is_empty() {
            let next = messages.get(i + 1).ok_or("a call without its result")?;
            for id in calls {
                let answered = next["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|b| b["type"] == "tool_result" && b["tool_use_id"] == id);
                if !answered {
                    return Err(format!(
                        "message {i}: call {id} without its result after it"
                    ));
                }
            }
        }
    }
    Ok(())
}

fn plain_text(_: &Value, _: usize) -> Say {
    Say {
        text: "Done with this step.".into(),
        input_tokens: 1_000,
        ..Say::default()
    }
}

/// Claude Code's requests, step by step past the window, are compacted with every system
/// message among the messages kept in place, and every key Claude Code sends kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_codes_requests_are_compacted_with_their_instructions_in_place() {
    let (engram, received) = setup(Arc::new(plain_text), Duration::ZERO, 30_000, |_| {}).await;
    let mut compacted = 0;
    for steps in (2..=40).step_by(2) {
        let request = claude_code_request(steps, false);
        let (status, headers, body) = post(&engram, &request).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(
            header(&headers, "x-engram-uncompacted"),
            "",
            "{:?}",
            header(&headers, "x-engram-note")
        );
        let sent = received
            .lock()
            .expect("lock")
            .last()
            .cloned()
            .expect("a request");
        valid(&sent).unwrap_or_else(|e| panic!("step {steps}: {e}"));
        if header(&headers, "x-engram-steps") != "none" {
            compacted += 1;
            // The work ledger names every test file the agent ran, the set-aside ones too.
            let text = sent.to_string();
            assert!(text.contains("[Work ledger]"), "step {steps}: no ledger");
            for i in 0..steps {
                let file = format!("tests/test_module_{i}.py");
                assert!(text.contains(&file), "step {steps}: {file} is not named");
            }
        }
        for key in [
            "thinking",
            "context_management",
            "output_config",
            "metadata",
        ] {
            assert_eq!(sent[key], request[key], "{key} kept");
        }
        // Every system message the agent gave is still sent, as a system message.
        let systems = |r: &Value| -> Vec<String> {
            r["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|m| m["role"] == "system")
                .map(|m| m["content"].to_string())
                .collect()
        };
        assert_eq!(
            systems(&sent),
            systems(&request),
            "step {steps}: the instructions among the messages"
        );
    }
    assert!(compacted >= 3, "compacted {compacted} times");
}

/// The tool results of a request's last user turn, by the id of the call they answer.
fn results(request: &Value) -> Vec<(String, String)> {
    request["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_array())
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "tool_result")
        .map(|b| {
            let content = match &b["content"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (b["tool_use_id"].as_str().unwrap_or("").to_owned(), content)
        })
        .collect()
}

/// Whether a request offers engram's history search.
fn offers_recall(request: &Value) -> bool {
    request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| t["name"] == "engram_search_history")
}

/// A model that, offered engram's tools, first calls `call` and answers once it has the result.
fn recalling(call: (&'static str, Value)) -> Script {
    Arc::new(move |request: &Value, _| {
        let answered = results(request)
            .iter()
            .any(|(id, _)| id.starts_with("toolu_") && !id.starts_with("toolu_s"));
        let input_tokens = (request.to_string().len() / 4) as u64;
        if offers_recall(request) && !answered {
            Say {
                text: "Let me look back.".into(),
                calls: vec![(call.0.to_owned(), call.1.clone())],
                input_tokens,
            }
        } else {
            Say {
                text: "All tests pass now.".into(),
                input_tokens,
                ..Say::default()
            }
        }
    })
}

/// After the model's call of engram's search: the caller's usage is the last round's, the
/// count of the same request does not change (the calibration does not learn from a sum of
/// rounds), the next request extends the one sent, and the rounds are counted in /metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recall_round_leaves_the_count_the_usage_and_the_prefix_as_they_were() {
    let script = recalling(("engram_search_history", json!({"query": "module_1"})));
    let (engram, received) = setup(script, Duration::ZERO, 30_000, |c| {
        c.proxy.recall_tools = RecallTools::Always;
    })
    .await;
    // Replies without a recall round first, for the calibration to learn from.
    for steps in [2, 4, 6] {
        let (status, headers, _) = post(&engram, &claude_code_request(steps, false)).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(header(&headers, "x-engram-recall-calls"), "");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let request = claude_code_request(30, false);
    let (status, headers, body) = post(&engram, &request).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        header(&headers, "x-engram-recall-calls"),
        "1",
        "the model searched once"
    );
    let before: u64 = header(&headers, "x-engram-tokens-before")
        .parse()
        .expect("a count");
    let reply: Value = serde_json::from_str(&body).expect("JSON");
    let rounds = received.lock().expect("lock").clone();
    let (first, last) = (&rounds[rounds.len() - 2], &rounds[rounds.len() - 1]);
    assert_eq!(
        reply["usage"]["input_tokens"],
        (last.to_string().len() / 4) as u64,
        "the last round's usage, never a sum"
    );
    assert!(!body.contains("engram_search_history"), "{body}");
    valid(first).expect("the request");
    valid(last).expect("the follow-up");
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The same request again: counted as before.
    let (_, headers, _) = post(&engram, &request).await;
    let again: u64 = header(&headers, "x-engram-tokens-before")
        .parse()
        .expect("a count");
    assert_eq!(
        again, before,
        "the calibration learned nothing from the rounds"
    );
    // The conversation goes on: the request extends the one sent.
    let mut next = request.clone();
    let list = next["messages"].as_array_mut().expect("messages");
    list.push(
        json!({"role": "assistant", "content": [{"type": "text", "text": "All tests pass now."}]}),
    );
    list.push(json!({"role": "user", "content": "Thanks. Commit it."}));
    let (status, headers, body) = post(&engram, &next).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        header(&headers, "x-engram-prefix"),
        "extended",
        "{:?}",
        header(&headers, "x-engram-steps")
    );
    let metrics = reqwest::get(format!("{engram}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains(
            "engram_proxy_recall_calls_total{route=\"/v1/messages\",model=\"claude-opus-5-5\"}"
        ),
        "{metrics}"
    );
}

/// With engram's tools offered, a streamed reply streams: the first round's text reaches the
/// caller before the reply ends, engram's call never does, and the continuation comes in the
/// same message with its blocks numbered on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_reply_streams_while_the_tools_are_offered() {
    let script = recalling(("engram_search_history", json!({"query": "module_1"})));
    let (engram, received) = setup(script, Duration::from_millis(60), 30_000, |c| {
        c.proxy.recall_tools = RecallTools::Always;
    })
    .await;
    let started = Instant::now();
    let response = reqwest::Client::new()
        .post(format!("{engram}/v1/messages"))
        .header("content-type", "application/json")
        .header("x-api-key", "sk-ant-test")
        .body(claude_code_request(30, true).to_string())
        .send()
        .await
        .expect("engram answers");
    assert_eq!(response.status(), StatusCode::OK);
    let mut stream = response.bytes_stream();
    let mut text = String::new();
    let mut first_text = None;
    use futures_util::StreamExt;
    while let Some(chunk) = stream.next().await {
        text.push_str(&String::from_utf8_lossy(&chunk.expect("a chunk")));
        if first_text.is_none() && text.contains("\"text\":\"Let \"") {
            first_text = Some(started.elapsed());
        }
    }
    let ended = started.elapsed();
    let first = first_text.expect("the first round's text");
    assert!(
        first + Duration::from_millis(400) < ended,
        "the text came at {first:?}, the reply ended at {ended:?}"
    );
    assert_eq!(
        received.lock().expect("lock").len(),
        2,
        "two rounds upstream"
    );
    assert!(!text.contains("engram_search_history"), "{text}");
    let events: Vec<Value> = text
        .split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    assert_eq!(
        events
            .iter()
            .filter(|e| e["type"] == "message_start")
            .count(),
        1
    );
    let blocks: Vec<u64> = events
        .iter()
        .filter(|e| e["type"] == "content_block_start")
        .filter_map(|e| e["index"].as_u64())
        .collect();
    assert_eq!(blocks, [0, 1], "the second round's text numbered on");
    let delta = events
        .iter()
        .rev()
        .find(|e| e["type"] == "message_delta")
        .expect("a delta");
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    let said: String = events
        .iter()
        .filter_map(|e| e["delta"]["text"].as_str())
        .collect();
    assert_eq!(said, "Let me look back.All tests pass now.");
}

/// An upstream that ignores `tool_choice: none` and calls engram's tool in the last round
/// still never gets a call of it to the caller, streamed or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_call_of_engrams_tools_reaches_the_caller_even_from_an_upstream_that_ignores_tool_choice()
 {
    let stubborn: Script = Arc::new(|request: &Value, _| Say {
        text: "Still looking.".into(),
        calls: if offers_recall(request) {
            vec![("engram_search_history".into(), json!({"query": "module_2"}))]
        } else {
            Vec::new()
        },
        input_tokens: 500,
    });
    let (engram, received) = setup(stubborn, Duration::ZERO, 30_000, |c| {
        c.proxy.recall_tools = RecallTools::Always;
    })
    .await;
    for stream in [false, true] {
        let (status, _, body) = post(&engram, &claude_code_request(30, stream)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(!body.contains("engram_search_history"), "{body}");
        assert!(body.contains("end_turn"), "{body}");
    }
    let rounds = received.lock().expect("lock").clone();
    let last = rounds.last().expect("a round");
    assert_eq!(
        last["tool_choice"],
        json!({"type": "none"}),
        "the last round asked for none"
    );
}

/// A read of the whole history asked for by the model is sized to the room the request leaves:
/// the follow-up stays within the window, and says what was left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_stays_within_the_window() {
    let script = recalling((
        "engram_read_history",
        json!({"from": "m0", "max_tokens": 1_000_000}),
    ));
    let (engram, received) = setup(script, Duration::ZERO, 20_000, |c| {
        c.proxy.recall_tools = RecallTools::Always;
    })
    .await;
    let (status, _, body) = post(&engram, &claude_code_request(40, false)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let rounds = received.lock().expect("lock").clone();
    assert_eq!(rounds.len(), 2, "asked again once");
    let follow_up = &rounds[1];
    let counter = engram::TokenCounter::new(
        engram::Tokenizer::from_name("cl100k")
            .expect("cl100k")
            .scaled(1.25),
    );
    let conversation =
        engram::formats::anthropic::from_anthropic(follow_up).expect("an Anthropic request");
    let tokens = counter.count_conversation(&conversation).total();
    assert!(
        tokens <= 20_000 - 8_000,
        "the follow-up holds {tokens} tokens"
    );
    let (_, read) = results(follow_up).into_iter().next().expect("the answer");
    assert!(read.contains("left out") || read.contains("cut"), "{read}");
}

/// `engram_search_history` says truthfully which of its hits the model still has in view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_search_says_what_the_model_has_in_view() {
    let script = recalling((
        "engram_search_history",
        json!({"query": "trailing commas module_1"}),
    ));
    let (engram, received) = setup(script, Duration::ZERO, 30_000, |c| {
        c.proxy.recall_tools = RecallTools::Always;
    })
    .await;
    let (status, _, body) = post(&engram, &claude_code_request(30, false)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let rounds = received.lock().expect("lock").clone();
    let (_, found) = results(&rounds[1]).into_iter().next().expect("the answer");
    let found: Value = serde_json::from_str(&found).expect("a JSON answer");
    let hits = found["hits"]
        .as_array()
        .or(found["results"].as_array())
        .expect("hits");
    let sent = rounds[0].to_string();
    for hit in hits {
        let snippet = hit["snippet"].as_str().unwrap_or_default();
        let probe: String = snippet.chars().skip(5).take(40).collect();
        if probe.len() < 20 {
            continue;
        }
        assert_eq!(
            hit["in_view"].as_bool(),
            Some(sent.contains(&probe)),
            "in_view of {}: {snippet}",
            hit["id"]
        );
    }
    assert!(hits.iter().any(|h| h["in_view"] == false), "{found}");
}

/// A lone surrogate in a request (a cut emoji) does not turn compaction off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_surrogate_is_compacted_like_any_request() {
    let (engram, _) = setup(Arc::new(plain_text), Duration::ZERO, 30_000, |_| {}).await;
    let body = claude_code_request(30, false).to_string().replacen(
        "PASSED [3%]",
        "PASSED \\ud83d [3%]",
        1,
    );
    let response = reqwest::Client::new()
        .post(format!("{engram}/v1/messages"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("answers");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(header(response.headers(), "x-engram-uncompacted"), "");
    assert_ne!(header(response.headers(), "x-engram-steps"), "none");
}

/// A newest tool output over the window is masked (the rest of the request sent); a newest
/// message that cannot be masked and is over the window gets the provider's own error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_cannot_fit_is_masked_else_refused_in_the_providers_words() {
    let (engram, received) = setup(Arc::new(plain_text), Duration::ZERO, 20_000, |_| {}).await;
    let mut request = claude_code_request(4, false);
    let huge: String = (0..6_000)
        .map(|i| format!("log line {i}: all is well so far\n"))
        .collect();
    request["messages"]
        .as_array_mut()
        .expect("messages")
        .extend([
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_big", "name": "Bash", "input": {"command": "cat build.log"}}]}),
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_big", "content": huge}]}),
        ]);
    let (status, headers, body) = post(&engram, &request).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        header(&headers, "x-engram-steps").starts_with("mask-newest"),
        "{:?}",
        header(&headers, "x-engram-steps")
    );
    let sent = received
        .lock()
        .expect("lock")
        .last()
        .cloned()
        .expect("sent");
    let text = sent.to_string();
    assert!(text.contains("[TOOL OUTPUT ARCHIVED"), "masked");
    assert!(
        text.contains("log line 0:") && text.contains("log line 5999:"),
        "its head and tail"
    );
    valid(&sent).expect("valid");

    let upstream_before = received.lock().expect("lock").len();
    let mut too_long = claude_code_request(2, false);
    too_long["messages"]
        .as_array_mut()
        .expect("messages")
        .push(json!({"role": "user", "content": "Please review this: ".to_owned() + &"the quick brown fox jumps over the lazy dog ".repeat(9_000)}));
    let (status, headers, body) = post(&engram, &too_long).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let error: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    let message = error["error"]["message"].as_str().expect("a message");
    assert!(message.starts_with("prompt is too long: "), "{message}");
    assert_eq!(header(&headers, "x-engram-uncompacted"), "cannot_fit");
    assert_eq!(
        received.lock().expect("lock").len(),
        upstream_before,
        "nothing went upstream"
    );
}

/// A request engram cannot read is forwarded as sent, and never silently: a header, and a
/// counter by route, model and reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_engram_cannot_read_is_counted_and_said() {
    let lenient: Script = Arc::new(|_, _| Say {
        text: "ok".into(),
        input_tokens: 10,
        ..Say::default()
    });
    let (engram, received) = setup(lenient, Duration::ZERO, 30_000, |_| {}).await;
    let odd = json!({"model": "claude-opus-5-5", "max_tokens": 10, "messages": [{"role": "user", "content": 42}]});
    let (status, headers, _) = post(&engram, &odd).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header(&headers, "x-engram-uncompacted"), "unreadable");
    assert_eq!(
        received.lock().expect("lock").last(),
        Some(&odd),
        "forwarded as sent"
    );
    let metrics = reqwest::get(format!("{engram}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains("engram_proxy_uncompacted_total{route=\"/v1/messages\",model=\"claude-opus-5-5\",reason=\"unreadable\"} 1"),
        "{metrics}"
    );
}

/// Observing, every request goes upstream as the agent sent it, and engram says what it would
/// have saved: per request and in all, from the upstream's reported usage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observing_forwards_every_request_as_sent_and_says_what_engram_would_save() {
    let (engram, received) = setup(Arc::new(plain_text), Duration::ZERO, 30_000, |c| {
        c.proxy.observe = true;
    })
    .await;
    let mut sent = Vec::new();
    for steps in (2..=30).step_by(2) {
        let request = claude_code_request(steps, false);
        let (status, headers, body) = post(&engram, &request).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(header(&headers, "x-engram-observed"), "true");
        sent.push(request);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let received = received.lock().expect("lock").clone();
    assert_eq!(
        received, sent,
        "every request went upstream as the agent sent it"
    );
    let savings: Value = reqwest::get(format!("{engram}/v1/proxy/savings"))
        .await
        .expect("savings")
        .json()
        .await
        .expect("JSON");
    assert_eq!(savings["observe"], true);
    let s = &savings["savings"];
    assert_eq!(s["requests"], sent.len() as u64);
    let (actual, would) = (
        s["actual_usd"].as_f64().expect("actual"),
        s["engram_usd"].as_f64().expect("engram"),
    );
    assert!(
        would < actual,
        "engram would have cost {would}, the traffic cost {actual}"
    );
    assert!(savings["saved_share"].as_f64().expect("a share") > 0.0);
    assert_eq!(s["conversations"].as_array().map(Vec::len), Some(1), "{s}");
    let metrics = reqwest::get(format!("{engram}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(metrics.contains("engram_proxy_observed_usd_total{route=\"/v1/messages\",model=\"claude-opus-5-5\",bill=\"engram\"}"));
}
