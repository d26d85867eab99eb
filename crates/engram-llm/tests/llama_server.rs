//! A real model, end to end: llama.cpp's `llama-server` serving SmolLM2-135M-Instruct, driven
//! through its OpenAI and its Anthropic endpoints. A real compaction of a real dev trajectory
//! must produce a validated summary or a clean fallback, and the invariants must hold.
//!
//! `scripts/llama_server.sh` provides the server and the model (ENGRAM_LLAMA_SERVER,
//! ENGRAM_SMOLLM2_GGUF). Locally, without them, the test says it is skipped; in CI (CI set) it
//! fails instead, so it is never skipped there.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use engram::compact::{CompactOptions, Kind, Strategy, compact};
use engram::{Conversation, Message, TokenCounter, Tokenizer};
use engram_llm::{Api, Client, LlmSummarizer, ProviderConfig};
use serde_json::Value;

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

fn setup() -> Option<(PathBuf, PathBuf)> {
    let server = std::env::var_os("ENGRAM_LLAMA_SERVER").map(PathBuf::from);
    let model = std::env::var_os("ENGRAM_SMOLLM2_GGUF").map(PathBuf::from);
    match (server, model) {
        (Some(s), Some(m)) if s.is_file() && m.is_file() => Some((s, m)),
        _ => {
            engram_testkit::skip_or_fail_in_ci(
                "llama",
                "the real-model test needs llama-server and SmolLM2: eval \"$(scripts/llama_server.sh)\" (ENGRAM_LLAMA_SERVER, ENGRAM_SMOLLM2_GGUF)",
            );
            None
        }
    }
}

fn start(server: &PathBuf, model: &PathBuf) -> (Server, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let child = Command::new(server)
        .args(["-m"])
        .arg(model)
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "-t",
            "2",
            "-c",
            "4096",
            // The server caps each reply at 256 tokens whatever a request asks for (what engram
            // sends is unchanged): the test proves the path to a real model and back, or to the
            // fallback, in seconds rather than minutes of SmolLM2 writing a whole budget.
            "-n",
            "256",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("llama-server starts");
    let server = Server(child);
    let deadline = Instant::now() + Duration::from_secs(120);
    let http = reqwest::blocking::Client::new();
    loop {
        let ok = http
            .get(format!("http://127.0.0.1:{port}/health"))
            .send()
            .is_ok_and(|r| r.status().is_success());
        if ok {
            return (server, port);
        }
        assert!(
            Instant::now() < deadline,
            "llama-server did not become ready"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The first `upto` messages of the first mini-swe-agent trajectory of the dev data.
fn trajectory(upto: usize) -> Vec<Message> {
    let lines = engram_testkit::dev_lines("minisweagent_swebv_gemini3pro.jsonl");
    let first: Value = serde_json::from_str(&lines[0]).expect("json");
    first["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .take(upto)
        .map(|m| {
            let mut m = m.clone();
            m.as_object_mut().expect("object").remove("meta");
            Message::from_value(m).expect("valid")
        })
        .collect()
}

#[test]
fn a_real_model_summarises_or_falls_back_cleanly_through_both_apis() {
    let Some((server, model)) = setup() else {
        return;
    };
    let (_server, port) = start(&server, &model);
    let messages = trajectory(40);
    let conversation = Conversation::new(messages.clone());
    let counter = TokenCounter::new(Tokenizer::cl100k().expect("cl100k"));
    let total = counter.count_conversation(&conversation).total();
    let budget = 3_000.min(total - 1);

    for (api, base) in [
        (Api::OpenAi, format!("http://127.0.0.1:{port}/v1")),
        (Api::Anthropic, format!("http://127.0.0.1:{port}")),
    ] {
        let mut config = ProviderConfig::new(api, "SmolLM2-135M-Instruct");
        config.base_url = base;
        config.api_key_env = None;
        config.max_summary_tokens = 256;
        config.timeout = Duration::from_secs(120);
        let summarizer = Arc::new(LlmSummarizer::new(
            Client::new(config).expect("client"),
            4_096,
        ));
        let mut options = CompactOptions::new(budget);
        options.strategy = Strategy::Summarize;
        options.summarizer = Some(summarizer.clone());
        let out = compact(&conversation, &counter, &options).expect("compaction");
        let api = api.as_str();

        // The invariants, whatever the model wrote.
        assert!(
            out.report.tokens_after <= budget,
            "{api}: {} > {budget}",
            out.report.tokens_after
        );
        let sent: Vec<Message> = out.messages.iter().map(|v| v.message.clone()).collect();
        assert_eq!(
            counter.count_messages(&sent).total(),
            out.report.tokens_after,
            "{api}"
        );
        assert_eq!(
            sent[0], messages[0],
            "{api}: the system prompt survives verbatim"
        );
        assert_eq!(
            sent.last(),
            messages.last(),
            "{api}: the newest message survives verbatim"
        );
        for (i, m) in sent.iter().enumerate() {
            for call in m.calls() {
                assert!(
                    sent[i + 1..]
                        .iter()
                        .any(|r| r.tool_call_id() == Some(call.id.as_str())),
                    "{api}: call {} lost its result",
                    call.id
                );
            }
        }
        // A validated summary, or a clean fallback that says why.
        let summary = out
            .messages
            .iter()
            .find(|v| v.kind == Kind::Summary)
            .expect("a summary or digest");
        match (&out.report.summarizer, &out.report.summary_fallback) {
            (Some(name), None) => {
                assert!(name.starts_with(api), "{name}");
                assert!(summary.message.text().starts_with("[CONTEXT SUMMARY]"));
                eprintln!("{api}: SmolLM2's summary passed validation");
            }
            (None, Some(why)) => {
                assert!(!why.is_empty());
                assert!(
                    summary
                        .message
                        .text()
                        .starts_with("[Session context consolidated]")
                );
                eprintln!("{api}: fell back to the extractive digest: {why}");
            }
            other => panic!("{api}: {other:?}"),
        }
        // The server's usage fields were read.
        let usage = summarizer.usage();
        assert!(
            usage.calls >= 1 && usage.input_tokens > 0 && usage.output_tokens > 0,
            "{api}: {usage:?}"
        );
    }

    let summarizer = Arc::new(LlmSummarizer::new(
        Client::new(smollm2(port)).expect("client"),
        4_096,
    ));
    a_real_session_merges_summaries(&messages, summarizer.clone());
    a_real_sleep_keeps_lineage(summarizer.as_ref());
    a_real_timeline_has_a_line_per_part(summarizer);
}

fn smollm2(port: u16) -> ProviderConfig {
    let mut config = ProviderConfig::new(Api::OpenAi, "SmolLM2-135M-Instruct");
    config.base_url = format!("http://127.0.0.1:{port}/v1");
    config.api_key_env = None;
    config.max_summary_tokens = 256;
    config.timeout = Duration::from_secs(120);
    config
}

/// A session `id` in `store` for SmolLM2 (a 6,000-token window) whose summaries `summarizer`
/// writes.
fn smollm2_session<'s>(
    store: &'s engram::in_memory::InMemoryStore,
    id: &str,
    summarizer: Arc<LlmSummarizer>,
) -> engram::session::Session<'s> {
    use engram::session::{NewSession, Session};
    let mut options = CompactOptions::new(0);
    options.summarizer = Some(summarizer);
    Session::create(
        store,
        &NewSession {
            id: Some(id.into()),
            name: None,
            model: "SmolLM2-135M-Instruct".into(),
            tokenizer: "cl100k".into(),
            token_factor: 1.0,
            window: 6_000,
            metadata: Value::Null,
            created_at: 0,
        },
    )
    .expect("session")
    .with_options(options)
}

/// A session fed the trajectory turn by turn compacts at its threshold with the model; a
/// model-written summary is merged into the next one, and the invariants hold throughout.
fn a_real_session_merges_summaries(messages: &[Message], summarizer: Arc<LlmSummarizer>) {
    use engram::in_memory::InMemoryStore;
    use engram::session::SessionStore;
    let store = InMemoryStore::new();
    let mut session = smollm2_session(&store, "real", summarizer);
    let mut merged = 0;
    let mut model_written_before = false;
    for (i, m) in messages.iter().enumerate() {
        let out = session.append(vec![m.clone()]).expect("append");
        assert!(
            out.view_tokens <= 6_000,
            "message {i}: {} tokens",
            out.view_tokens
        );
        let view = session.view().expect("view");
        assert_eq!(
            view.messages[0].message, messages[0],
            "the system prompt stays first"
        );
        assert_eq!(
            view.messages.last().map(|v| &v.message),
            Some(m),
            "the newest message stays"
        );
        if out.compaction.is_some() {
            let record = store
                .compactions("real", false)
                .expect("records")
                .pop()
                .expect("record");
            let previous = record.report["summary_previous"].as_str();
            if model_written_before && record.report["summarizer"].is_string() {
                assert!(
                    matches!(previous, Some("merged" | "reused")),
                    "message {i}: a model-written summary was there to merge: {}",
                    record.report
                );
            }
            merged += usize::from(previous == Some("merged"));
            model_written_before = store
                .summaries("real")
                .expect("summaries")
                .last()
                .is_some_and(|s| s.text.starts_with("[CONTEXT SUMMARY]"));
        }
    }
    let summaries = store.summaries("real").expect("summaries");
    assert!(!summaries.is_empty(), "the trajectory passed the threshold");
    eprintln!(
        "session: {} summaries, {merged} merged into the previous one",
        summaries.len()
    );
}

/// Sleep with the model: each group gets the model's summary or the extractive one, and the
/// lineage holds either way.
fn a_real_sleep_keeps_lineage(summarizer: &LlmSummarizer) {
    use engram::in_memory::InMemoryStore;
    use engram::memory::consolidation::{SleepPolicy, sleep_with};
    use engram::memory::{MemoryStore, NewEntry, Tier};
    let store = InMemoryStore::new();
    let now = engram::memory::parse_time("2026-05-01T00:00:00Z").expect("time");
    let entries: Vec<NewEntry> = [
        "User asked to rename src/parser.rs to src/lexer.rs",
        "decided: keep the public API of parse_expr unchanged",
        "error: tests/lexer.rs:12 expected Token::Comma, found Token::Semi",
        "Fixed the comma handling in src/lexer.rs line 88",
    ]
    .iter()
    .enumerate()
    .map(|(i, text)| NewEntry {
        created_at: now - 20 * 3600 * 1000 + i as i64,
        ..NewEntry::working(*text, "chat")
    })
    .collect();
    store.insert(&entries).expect("insert");
    let report = sleep_with(&store, now, &SleepPolicy::default(), Some(summarizer)).expect("sleep");
    assert_eq!(
        (report.items_consolidated, report.summaries_created),
        (4, 1)
    );
    let record = store.log(1).expect("log").remove(0);
    assert!(
        record.strategy == "summarizer" || record.strategy.starts_with("extractive (fallback: "),
        "{}",
        record.strategy
    );
    let summary = store
        .get(&record.ids_out[0])
        .expect("get")
        .expect("summary");
    assert_eq!(summary.tier, Tier::Episodic);
    assert_eq!(summary.summary_of.len(), 4);
    for id in &summary.summary_of {
        assert_eq!(
            store.get(id).expect("get").expect("original").tier,
            Tier::Archive
        );
    }
    eprintln!("sleep: {}", record.strategy);
}

/// A session's timeline with the model: each part of a chat log gets the model's line or, where
/// the model fails, the extractive one (counted); every line keeps its sources, is redacted, and
/// an unchanged history is not written again.
fn a_real_timeline_has_a_line_per_part(summarizer: Arc<LlmSummarizer>) {
    use engram::in_memory::InMemoryStore;
    use engram::session::timeline::EXTRACTIVE;
    let store = InMemoryStore::new();
    let mut session = smollm2_session(&store, "chat", summarizer);
    // The key is a made-up one in the shape of an OpenAI key: the model may repeat it.
    let key = "sk-proj-T3stOnlyN0tARealKey0123456789abcdefABCDEF";
    // Each part is longer than a line may be (80 tokens), so that a model's line can pass the
    // check that a summary is shorter than what it stands for.
    let log = [
        Message::system("[Session 1 - 8 May, 2023]"),
        Message::user(
            "I made a pottery bowl at my class yesterday, with a blue glaze on the inside.",
        ),
        Message::assistant(
            "A blue pottery bowl sounds lovely. How long have you been taking the class?",
        ),
        Message::user(
            "Three months now. The teacher shows us how to centre the clay on the wheel first.",
        ),
        Message::assistant(
            "Centring is the hard part, I hear. Did the kiln fire the bowl well in the end?",
        ),
        Message::user(format!(
            "Yes, it came out well. My key for the class site is {key}."
        )),
        Message::assistant("Glad it worked. Will you make a set of bowls for your kitchen next?"),
        Message::user(
            "Maybe four bowls and two mugs, all with the same blue glaze, before the summer.",
        ),
        Message::system("[Session 2 - 25 May, 2023]"),
        Message::user("My sister is moving to Lisbon for a new job at a design studio next month."),
        Message::assistant(
            "Lisbon is a great city. Will you visit her there once she has settled?",
        ),
        Message::user(
            "I will fly to Lisbon in July to help her settle into the new flat near the river.",
        ),
        Message::assistant(
            "That sounds like a good trip. Is she nervous about the new job at the studio?",
        ),
        Message::user(
            "A little. She has never worked abroad, but her new team already invited her to dinner.",
        ),
        Message::assistant(
            "A warm start. Will you bring her one of your blue bowls as a house present?",
        ),
        Message::user(
            "Yes, the best one, wrapped in a towel in my hand luggage so that it does not break.",
        ),
    ];
    for m in &log {
        session.append(vec![m.clone()]).expect("append");
    }
    let built = session.update_timeline().expect("timeline");
    assert_eq!((built.parts, built.written), (2, 2), "{built:?}");
    let timeline = session.timeline().expect("read").expect("built");
    let mut failed = 0;
    for part in &timeline.parts {
        assert!(!part.line.trim().is_empty(), "{part:?}");
        assert!(
            !part.line.contains(key),
            "a line holds the key in clear: {}",
            part.line
        );
        assert!(!part.sources.is_empty(), "{part:?}");
        if part.written_by == EXTRACTIVE {
            failed += 1;
        } else {
            assert!(part.written_by.starts_with("openai"), "{}", part.written_by);
            assert_eq!(
                part.sources.len() as u64,
                part.to_seq - part.from_seq + 1,
                "a model's line stands for the whole part"
            );
        }
        eprintln!("timeline ({}): {}", part.written_by, part.render());
    }
    assert_eq!(built.summarizer_failed, failed, "each fallback is counted");
    assert_eq!(
        timeline.parts[1].heading.as_deref(),
        Some("Session 2 - 25 May, 2023")
    );
    let again = session.update_timeline().expect("timeline again");
    assert_eq!(
        again.written, 0,
        "an unchanged history is not written again"
    );
}
