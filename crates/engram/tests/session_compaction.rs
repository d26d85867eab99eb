//! Compactions of random sessions, as an agent drives them: appends (with threshold
//! compactions), the agent's `compact_history` tool with any `preserveRecentMessages`, manual
//! compactions with any target, strategy and focus, checkpoints and restores. After every step:
//! - the task statement (the first user message) is in the view, verbatim or word for word
//!   inside a summary;
//! - a manual compaction or `compact_history` never makes the view larger;
//! - messages that leave the view are summarised (a summary stands for them) or kept;
//! - what stands for log messages in the view keeps the log's order;
//! - a restore gives back the view its checkpoint named; a refused checkpoint or restore
//!   changes nothing;
//! - `compact_history`'s answer says what the recorded compaction did (or that nothing was).
#![cfg(feature = "openai-bpe")]

use engram::compact::{CompactOptions, Kind, Strategy as CompactStrategy};
use engram::in_memory::InMemoryStore;
use engram::session::{Compaction, Session, SessionStore, SessionView, Trigger, new_session};
use engram::tools::CompactHistoryArgs;
use engram::{Message, ModelRegistry, ToolCall};
use proptest::prelude::*;
use serde_json::json;

const TASK: &str = "Fix the failing test in src/lib.rs";

/// One agent turn: a user message, a tool call with its output, the assistant's answer.
fn turn(i: usize, words: usize, user: bool) -> Vec<Message> {
    let mut out = Vec::new();
    if user {
        out.push(Message::user(format!("also check src/module_{i}.rs")));
    }
    out.push(Message::assistant_tool_calls(vec![ToolCall::function(
        format!("call_{i}"),
        "bash",
        format!("{{\"cmd\": \"cargo test module_{i}\"}}"),
    )]));
    out.push(Message::tool(
        format!("call_{i}"),
        format!(
            "error[E0{i:03}]: test module_{i}::works failed at src/module_{i}.rs:{}\n{}",
            10 + i,
            "log line ".repeat(words)
        ),
    ));
    out.push(Message::assistant(format!(
        "Fixed module_{i} by handling the empty case."
    )));
    out
}

#[derive(Debug, Clone)]
enum Step {
    Append {
        words: usize,
        user: bool,
    },
    CompactHistory {
        keep: usize,
    },
    Compact {
        target: Option<usize>,
        strategy: CompactStrategy,
        focus: bool,
    },
    Checkpoint(usize),
    Restore(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0usize..400, any::<bool>()).prop_map(|(words, user)| Step::Append { words, user }),
        1 => (1usize..=12).prop_map(|keep| Step::CompactHistory { keep }),
        1 => (
            proptest::option::of(1usize..6_000),
            prop_oneof![
                Just(CompactStrategy::Auto),
                Just(CompactStrategy::Truncate),
                Just(CompactStrategy::Mask),
                Just(CompactStrategy::Extractive),
                Just(CompactStrategy::Summarize),
            ],
            any::<bool>(),
        )
            .prop_map(|(target, strategy, focus)| Step::Compact { target, strategy, focus }),
        1 => (0usize..3).prop_map(Step::Checkpoint),
        1 => (0usize..3).prop_map(Step::Restore),
    ]
}

/// The task statement is in the view: verbatim, or word for word inside a summary.
fn task_kept(view: &SessionView, task: &str) -> bool {
    view.messages.iter().any(|v| match v.kind {
        Kind::Original | Kind::Recalled => v.message.text() == task,
        Kind::Summary => v.message.text().contains(task.trim()),
        _ => false,
    })
}

/// Every message of the active log is in the view or stood for by a summary in it.
fn nothing_lost_without_a_summary(s: &Session<'_>, view: &SessionView) {
    let traced: std::collections::HashSet<&str> = view
        .messages
        .iter()
        .flat_map(|v| v.source_ids.iter().map(String::as_str))
        .collect();
    let lost: Vec<String> = s
        .log()
        .expect("log")
        .into_iter()
        .filter(|m| !traced.contains(m.id.as_str()))
        .map(|m| m.id)
        .collect();
    let summaries = view.messages.iter().any(|v| v.kind == Kind::Summary);
    assert!(
        lost.is_empty() || summaries,
        "messages {lost:?} left the view with no summary standing for them"
    );
}

/// What stands for log messages in the view (a summary apart) keeps the log's order.
fn in_log_order(s: &Session<'_>, view: &SessionView) {
    let log: std::collections::HashMap<String, usize> = s
        .log()
        .expect("log")
        .into_iter()
        .enumerate()
        .map(|(i, m)| (m.id, i))
        .collect();
    let places: Vec<usize> = view
        .messages
        .iter()
        .filter(|v| v.kind != Kind::Summary)
        .filter_map(|v| log.get(v.source_ids.first()?).copied())
        .collect();
    assert!(
        places.is_sorted(),
        "the view's messages are out of the log's order: {places:?}"
    );
}

/// The number after `prefix` in `text`.
fn number_after(text: &str, prefix: &str) -> Option<usize> {
    let rest = &text[text.find(prefix)? + prefix.len()..];
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(engram_testkit::proptest_cases(64)))]

    #[test]
    fn compactions_keep_the_task_and_never_grow_the_view(
        window in 2_000usize..8_000,
        first_words in 0usize..300,
        task_words in prop_oneof![Just(0usize), 1usize..250],
        steps in proptest::collection::vec(step(), 1..14),
    ) {
        let store = InMemoryStore::new();
        let registry = ModelRegistry::builtin();
        let new = new_session(&registry, "gpt-4o-mini", Some(window), engram::memory::now());
        let mut s = Session::create(&store, &new).expect("create");
        s.append(vec![Message::system("You are a coding agent.")]).expect("append");
        // A one-line task, or one with a long description (more than the digest keeps whole).
        let task = if task_words == 0 {
            TASK.to_owned()
        } else {
            format!("{TASK}. Details:\n{}", "the parser rejects empty input ".repeat(task_words / 5 + 1))
        };
        s.append(vec![Message::user(task.as_str())]).expect("append");
        let _ = s.append(turn(0, first_words, false));
        // Each live checkpoint's view when it was named.
        let mut checkpoints: std::collections::HashMap<String, SessionView> = Default::default();
        for (i, step) in steps.into_iter().enumerate() {
            let i = i + 1;
            let before = s.view().expect("view");
            let records_before = compactions(&store, &s.info().id);
            match step {
                Step::Append { words, user } => {
                    // Over the window even after compaction: refused or accepted, the task
                    // stays (the caller learns of it either way).
                    let _ = s.append(turn(i, words, user));
                }
                Step::CompactHistory { keep } => {
                    let args = CompactHistoryArgs::parse(&json!({"preserveRecentMessages": keep}))
                        .expect("args");
                    let text = s.compact_history(&args).expect("compact_history");
                    let after = s.view().expect("view");
                    let records = compactions(&store, &s.info().id);
                    prop_assert!(after.tokens <= before.tokens, "{text}: {} -> {}", before.tokens, after.tokens);
                    if let Some(n) = number_after(&text, "Successfully compacted ") {
                        prop_assert_eq!(records, records_before + 1, "{}", text);
                        let summarized: usize = after.messages.iter()
                            .filter(|v| v.kind == Kind::Summary)
                            .map(|v| v.source_ids.len())
                            .sum();
                        prop_assert_eq!(n, summarized, "{}", text);
                        let said = format!("({} -> {} tokens)", before.tokens, after.tokens);
                        prop_assert!(text.contains(&said), "{} does not say {}", text, said);
                        let preserved = number_after(&text, "preserving the ").expect("preserved");
                        let tail = after.messages.iter().rev()
                            .take_while(|v| v.kind == Kind::Original).count();
                        prop_assert_eq!(preserved, tail, "{}", text);
                    } else {
                        prop_assert!(text.contains("No changes made"), "{}", text);
                        prop_assert_eq!(records, records_before, "{}", text);
                        prop_assert_eq!(&after, &before);
                    }
                }
                Step::Compact { target, strategy, focus } => {
                    let target = target.map(|t| t.min(window)).unwrap_or(window * 6 / 10);
                    let mut options = CompactOptions::new(target);
                    options.strategy = strategy;
                    let mut session = Session::open(&store, &s.info().id).expect("open").with_options(options);
                    let outcome = session
                        .compact(Trigger::Manual, target, focus.then_some("module_1 src/module_1.rs"))
                        .expect("a manual compaction");
                    let after = s.view().expect("view");
                    match &outcome {
                        Compaction::Recorded(r) => {
                            prop_assert!(r.tokens_after < r.tokens_before, "{:?}", r);
                            prop_assert_eq!(r.tokens_before, before.tokens);
                            prop_assert_eq!(after.tokens, r.tokens_after);
                        }
                        Compaction::Unchanged { tokens, reason } => {
                            prop_assert_eq!(*tokens, before.tokens, "{}", reason);
                            prop_assert_eq!(&after, &before, "{}", reason);
                        }
                    }
                }
                Step::Checkpoint(k) => {
                    let name = format!("c{k}");
                    match s.checkpoint(&name) {
                        Ok(_) => {
                            checkpoints.insert(name, before.clone());
                        }
                        // A name in use: nothing changes.
                        Err(e) => {
                            let named = store.checkpoints(&s.info().id).expect("checkpoints")
                                .iter().any(|c| c.name == name);
                            prop_assert!(named, "{}: {}", name, e);
                        }
                    }
                    prop_assert_eq!(&s.view().expect("view"), &before);
                }
                Step::Restore(k) => {
                    let name = format!("c{k}");
                    match s.restore(&name) {
                        Ok(_) => {
                            let saved = checkpoints.get(&name).expect("a live checkpoint");
                            prop_assert_eq!(&s.view().expect("view"), saved, "restored {}", name);
                            // Later checkpoints are abandoned with what came after.
                            let live: Vec<String> = store.checkpoints(&s.info().id).expect("checkpoints")
                                .into_iter().filter(|c| !c.abandoned).map(|c| c.name).collect();
                            checkpoints.retain(|n, _| live.contains(n));
                        }
                        Err(_) => {
                            prop_assert!(!checkpoints.contains_key(&name), "{} is live", name);
                            prop_assert_eq!(&s.view().expect("view"), &before);
                        }
                    }
                }
            }
            let view = s.view().expect("view");
            prop_assert!(task_kept(&view, &task), "the task left the view after {:?}", view.messages.iter().map(|v| (v.kind, v.message.text().chars().take(60).collect::<String>())).collect::<Vec<_>>());
            nothing_lost_without_a_summary(&s, &view);
            in_log_order(&s, &view);
        }
    }
}

/// How many compactions the session has recorded.
fn compactions(store: &InMemoryStore, id: &str) -> usize {
    store.compactions(id, false).expect("compactions").len()
}

/// A context asked for a tighter budget keeps a long task statement as the session's own
/// compactions do: the digest keeps only its key lines, so it is pinned whole while it fits.
#[test]
fn a_context_for_a_budget_keeps_the_task() {
    let store = InMemoryStore::new();
    let registry = ModelRegistry::builtin();
    let new = new_session(
        &registry,
        "gpt-4o-mini",
        Some(100_000),
        engram::memory::now(),
    );
    let mut s = Session::create(&store, &new).expect("create");
    let task = format!(
        "{TASK}. Details:\n{}",
        "the parser rejects empty input ".repeat(41)
    );
    s.append(vec![
        Message::system("You are a coding agent."),
        Message::user(task.as_str()),
    ])
    .expect("append");
    for i in 0..30 {
        s.append(turn(i, 20, i % 3 == 0)).expect("append");
    }
    for budget in [400, 600, 1_000] {
        for (how, context) in [
            ("context", s.context(Some(budget), None)),
            ("with a query", s.context(Some(budget), Some("module_7"))),
            (
                "with memory",
                s.context_with_memory(Some(budget), None, &[], &[]),
            ),
        ] {
            let context = context.expect("a context");
            assert!(context.report.tokens_after <= budget, "{how} {budget}");
            assert!(
                context
                    .messages
                    .iter()
                    .any(|v| v.kind == Kind::Original && v.message.text() == task),
                "{how} at {budget} dropped the task: {:?}",
                context
                    .messages
                    .iter()
                    .map(|v| (
                        v.kind,
                        v.message.text().chars().take(50).collect::<String>()
                    ))
                    .collect::<Vec<_>>()
            );
        }
    }
}

/// A manual compaction asked of a view under its target says so, and how to go further.
#[test]
fn a_compaction_of_a_view_under_its_target_says_so() {
    let store = InMemoryStore::new();
    let registry = ModelRegistry::builtin();
    let new = new_session(&registry, "gpt-4o", Some(10_000), 0);
    let mut session = Session::create(&store, &new).expect("session");
    session
        .append(vec![
            Message::system("You are a coding agent."),
            Message::user(TASK),
            Message::assistant("Looking at it."),
        ])
        .expect("append");
    match session
        .compact(Trigger::Manual, 5_000, None)
        .expect("answers")
    {
        Compaction::Unchanged { reason, .. } => {
            assert!(
                reason.contains("% of the window")
                    && reason.contains("under the 5000-token target"),
                "{reason}"
            );
            assert!(reason.contains("a lower target"), "{reason}");
        }
        other => panic!("compacted a view under its target: {other:?}"),
    }
}

/// The agent's compaction of a long history saves: its summary holds at most a quarter of what
/// it stands for (a compaction of 279 messages once wrote a summary as large as they were).
#[test]
fn compact_history_writes_a_summary_much_smaller_than_what_it_replaces() {
    let store = InMemoryStore::new();
    let registry = ModelRegistry::builtin();
    let new = new_session(&registry, "gpt-4o", Some(1_000_000), 0);
    let mut session = Session::create(&store, &new).expect("session");
    let mut messages = vec![
        Message::system("You are a coding agent."),
        Message::user(TASK),
    ];
    for i in 0..92 {
        messages.extend(turn(i, 60, false));
    }
    session.append(messages).expect("append");
    let before = session.view_tokens().expect("tokens");
    let reply = session
        .handle_tool_call("compact_history", &json!({"preserveRecentMessages": 3}))
        .expect("a tool")
        .expect("answers");
    assert!(
        reply.text.starts_with("Successfully compacted"),
        "{}",
        reply.text
    );
    let after = session.view_tokens().expect("tokens");
    assert!(
        after * 3 < before,
        "{before} -> {after} tokens: {}",
        reply.text
    );
    let summaries = store.summaries(&session.info().id).expect("summaries");
    let summary = summaries.last().expect("a summary");
    assert!(
        summary.tokens * 4 <= before + 200,
        "{} tokens for {before}",
        summary.tokens
    );
}
