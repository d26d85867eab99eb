//! The compaction invariants, for every strategy, over random histories: tool pairs intact,
//! pinned instructions first and verbatim, the newest unit last and verbatim, the budget met by
//! exact count (or a CannotFit error that is right to refuse), provenance pointing at real input
//! messages, and the input left untouched.
#![cfg(feature = "openai-bpe")]

use std::collections::HashSet;

use engram::compact::{CompactOptions, Kind, Strategy as Steps, compact};
use engram::{Conversation, Message, Role, TokenCounter, Tokenizer, ToolCall};
use proptest::prelude::*;

const STRATEGIES: [Steps; 6] = [
    Steps::Auto,
    Steps::Truncate,
    Steps::Dedupe,
    Steps::Mask,
    Steps::Extractive,
    Steps::Summarize,
];

/// A block of text with the things compaction looks at: paths, identifiers, numbers, prose.
fn text(max_lines: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just("src/parser.rs:182 fn parse_list(&mut self)".to_owned()),
            Just("error: TrailingComma at line 12".to_owned()),
            Just("The weather was lovely and we went for a walk.".to_owned()),
            Just(
                "{\"reservation_id\": \"H9ZU1C\", \"user_id\": \"mia_kim_4397\", \"total\": 329}"
                    .to_owned()
            ),
            "[a-z ]{0,60}",
            "[A-Za-z0-9_./]{4,20}",
        ],
        0..max_lines,
    )
    .prop_map(|lines| lines.join("\n"))
}

/// A tool output: short, long (many lines), or one of a few outputs that repeat verbatim.
fn tool_output() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => text(8),
        2 => (text(6), 5usize..40).prop_map(|(t, n)| format!("{t}\n").repeat(n)),
        1 => (0usize..3).prop_map(|k| format!("listing {k}: src/module_{k}/lib.rs ok\n").repeat(30)),
    ]
}

/// One step of a history: a user turn, an assistant reply, a tool group (call + results, maybe
/// an unanswered call or an orphan result), or a mid-history system marker.
#[derive(Debug, Clone)]
enum Step {
    User(String),
    Assistant(String),
    Tools {
        results: Vec<String>,
        unanswered: bool,
    },
    Orphan(String),
    Marker(String),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => text(4).prop_map(Step::User),
        3 => text(6).prop_map(Step::Assistant),
        4 => (proptest::collection::vec(tool_output(), 1..3), proptest::bool::weighted(0.1))
            .prop_map(|(results, unanswered)| Step::Tools { results, unanswered }),
        1 => text(2).prop_map(Step::Orphan),
        1 => "[a-z0-9 ]{5,30}".prop_map(|s| Step::Marker(format!("[Session {s}]"))),
    ]
}

fn history() -> impl Strategy<Value = Vec<Message>> {
    (
        proptest::option::of(text(3)),
        proptest::bool::ANY,
        proptest::collection::vec(step(), 1..45),
        proptest::bool::ANY,
        proptest::option::weighted(0.3, 2usize..9),
    )
        .prop_map(|(system, developer, steps, with_ids, pin_every)| {
            let mut messages = Vec::new();
            if let Some(s) = system {
                messages.push(Message::system(format!("You are an agent. {s}")));
                if developer {
                    messages.push(Message::new(Role::Developer, "Be brief."));
                }
            }
            let mut call = 0;
            for step in steps {
                match step {
                    Step::User(t) => messages.push(Message::user(t)),
                    Step::Assistant(t) => messages.push(Message::assistant(t)),
                    Step::Marker(t) => messages.push(Message::system(t)),
                    Step::Orphan(t) => messages.push(Message::tool("ghost", t)),
                    Step::Tools {
                        results,
                        unanswered,
                    } => {
                        let ids: Vec<String> = (0..results.len() + usize::from(unanswered))
                            .map(|_| {
                                call += 1;
                                format!("call_{call}")
                            })
                            .collect();
                        let calls = ids
                            .iter()
                            .map(|id| {
                                ToolCall::function(
                                    id.clone(),
                                    "shell",
                                    format!("{{\"command\": \"cat src/{id}.rs\"}}"),
                                )
                            })
                            .collect();
                        messages.push(Message::assistant_tool_calls(calls));
                        for (id, result) in ids.iter().zip(results) {
                            messages.push(Message::tool(id.clone(), result));
                        }
                    }
                }
            }
            if with_ids {
                for (i, m) in messages.iter_mut().enumerate() {
                    m.id = Some(format!("m{i}"));
                }
            }
            if let Some(every) = pin_every {
                for (i, m) in messages.iter_mut().enumerate() {
                    if m.role == Role::User && i % every == 0 {
                        m.extra_mut()
                            .insert("pinned".into(), serde_json::Value::Bool(true));
                    }
                }
            }
            messages
        })
}

fn check(
    messages: &[Message],
    budget: usize,
    strategy: Steps,
    query: Option<&str>,
    keep: usize,
) -> Result<(), TestCaseError> {
    let counter = TokenCounter::new(Tokenizer::cl100k().expect("cl100k"));
    let conversation = Conversation::new(messages.to_vec());
    let before = conversation.clone();
    let mut options = CompactOptions::new(budget);
    options.strategy = strategy;
    options.query = query.map(str::to_owned);
    options.mask_keep_last = keep;
    options.preserve_window = keep % 2 == 1;
    if strategy == Steps::Summarize {
        options.summarizer = Some(std::sync::Arc::new(
            engram::compact::summarize::DeterministicSummarizer,
        ));
    }
    let result = compact(&conversation, &counter, &options);
    prop_assert_eq!(&conversation, &before, "the input is never changed");

    let pinned: Vec<&Message> = messages
        .iter()
        .take_while(|m| m.role.is_instruction())
        .collect();
    let out = match result {
        Err(engram::Error::CannotFit { required, .. }) => {
            if std::env::var_os("ENGRAM_TEST_STATS").is_some() {
                eprintln!("STATS {strategy:?} cannot-fit");
            }
            prop_assert!(required > budget);
            return Ok(());
        }
        Err(e) => return Err(TestCaseError::fail(format!("unexpected error {e}"))),
        Ok(out) => out,
    };
    let view: Vec<&Message> = out.messages.iter().map(|v| &v.message).collect();
    if std::env::var_os("ENGRAM_TEST_STATS").is_some() {
        eprintln!("STATS {:?} {:?}", strategy, out.report.steps);
    }

    // 4. The budget, by exact count.
    let total = counter
        .count_messages(&view.iter().map(|m| (*m).clone()).collect::<Vec<_>>())
        .total();
    prop_assert!(total <= budget, "{} > {} ({:?})", total, budget, strategy);
    prop_assert_eq!(out.report.tokens_after, total);

    // 2. Pinned instructions first, verbatim.
    for (i, p) in pinned.iter().enumerate() {
        prop_assert_eq!(
            view.get(i).copied(),
            Some(*p),
            "pinned message {} ({:?})",
            i,
            strategy
        );
    }

    // 3. The newest message last, verbatim (a tool result: its call comes with it).
    let last = messages.last().expect("non-empty");
    let out_last = *view.last().expect("non-empty view");
    if last.role == Role::Tool {
        // An orphan result is repaired into a user message that quotes it.
        prop_assert!(out_last == last || out_last.text().contains(last.text().as_ref()));
    } else {
        prop_assert_eq!(out_last, last);
    }

    // 2b. Messages the caller pinned survive verbatim, in their order.
    let pinned_later: Vec<&Message> = messages
        .iter()
        .filter(|m| {
            m.role == Role::User && m.extra().get("pinned") == Some(&serde_json::Value::Bool(true))
        })
        .collect();
    let mut cursor = 0;
    for p in &pinned_later {
        let found = view[cursor..].iter().position(|m| m == p);
        prop_assert!(
            found.is_some(),
            "pinned message lost or out of order ({:?})",
            strategy
        );
        cursor += found.unwrap_or(0) + 1;
    }

    // 1. Every call answered (but the newest message's), every result after its call.
    let mut open: HashSet<&str> = HashSet::new();
    for (i, m) in view.iter().enumerate() {
        if m.role == Role::Tool {
            let id = m.tool_call_id().unwrap_or("");
            prop_assert!(
                open.remove(id),
                "result {} at {} answers no open call ({:?})",
                id,
                i,
                strategy
            );
        } else {
            let is_last_unit = view[i..].iter().skip(1).all(|n| n.role == Role::Tool);
            if !is_last_unit {
                prop_assert!(
                    open.is_empty(),
                    "calls {:?} unanswered before message {} ({:?})",
                    open,
                    i,
                    strategy
                );
            }
            open.clear();
            open.extend(m.calls().iter().map(|c| c.id.as_str()));
        }
    }

    // 5. Provenance: every source id names an input message; originals are verbatim copies.
    let ids: Vec<String> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| m.id.clone().unwrap_or_else(|| i.to_string()))
        .collect();
    for v in &out.messages {
        for s in &v.source_ids {
            prop_assert!(ids.contains(s), "unknown source id {}", s);
        }
        if matches!(v.kind, Kind::Original | Kind::Recalled) && v.message.role != Role::User {
            let i = ids
                .iter()
                .position(|s| s == &v.source_ids[0])
                .expect("known id");
            prop_assert_eq!(&v.message, &messages[i]);
        }
        // An excerpt is one message's role and calls with part of its own text.
        if let Some(rest) = v.message.text().strip_prefix("[EXCERPT - ") {
            prop_assert_eq!(v.kind, Kind::Masked);
            let i = ids
                .iter()
                .position(|s| s == &v.source_ids[0])
                .expect("known id");
            let original = messages[i].text();
            prop_assert_eq!(v.message.role, messages[i].role);
            prop_assert_eq!(v.message.calls(), messages[i].calls());
            let (_, kept) = rest
                .split_once('\n')
                .expect("a marker line, then what was kept");
            for part in kept.split(" … ") {
                let part = part.trim_matches('…');
                prop_assert!(
                    original.contains(part),
                    "{:?} is not in {:?}",
                    part,
                    original
                );
            }
        }
    }

    // 6. What stands for input messages keeps their order (a digest stands before all it covers).
    let mut at = 0;
    for v in out.messages.iter().filter(|v| v.kind != Kind::Summary) {
        let Some(i) = v
            .source_ids
            .first()
            .and_then(|s| ids.iter().position(|id| id == s))
        else {
            continue;
        };
        prop_assert!(
            i >= at,
            "message {} ({:?}) after message {} ({:?})",
            i,
            v.kind,
            at,
            strategy
        );
        at = i;
    }

    // 7. The report counts the input messages the context does not hold verbatim (ids are
    // distinct here; `messages_removed_counts_by_place_when_ids_repeat` covers repeats).
    let verbatim: HashSet<&str> = out
        .messages
        .iter()
        .filter(|v| matches!(v.kind, Kind::Original | Kind::Recalled))
        .flat_map(|v| v.source_ids.iter().map(String::as_str))
        .collect();
    let removed = ids
        .iter()
        .filter(|id| !verbatim.contains(id.as_str()))
        .count();
    prop_assert_eq!(out.report.messages_removed, removed, "{:?}", strategy);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(engram_testkit::proptest_cases(200)))]

    /// The classic assembly under engram's invariants: the budget (less the reply reserve), the
    /// system prompt first, the new message last, a suffix of whole units in between.
    #[test]
    fn assembly_keeps_the_invariants(messages in history(), total in 100usize..6000, tail in 0usize..20,
                                     memory in proptest::collection::vec("[a-z ]{5,80}", 0..8)) {
        use engram::assembly::{ContextBuilder, Parts, TokenBudget};
        let counter = TokenCounter::new(Tokenizer::cl100k().expect("cl100k"));
        let history: Vec<Message> = messages.into_iter().skip_while(|m| m.role.is_instruction()).collect();
        let new = Message::user("What should we do next?");
        let budget = TokenBudget { total, fresh_tail_count: tail, reply_reserve: total / 10, ..TokenBudget::default() };
        let parts = Parts { system: "You are an agent.", new_message: Some(&new), history: &history, memory_results: &memory, ..Parts::default() };
        match ContextBuilder::new(&counter, budget).build(&parts) {
            Err(engram::Error::NoRoom { required, budget }) => prop_assert!(required > budget),
            Err(e) => prop_assert!(false, "{e}"),
            Ok((out, report)) => {
                let exact = counter.count_messages(&out).total();
                prop_assert_eq!(exact, report.tokens);
                prop_assert!(exact <= total - total / 10, "{} > {}", exact, total - total / 10);
                prop_assert_eq!(out[0].role, Role::System);
                prop_assert_eq!(out.last(), Some(&new));
                let mut open: HashSet<&str> = HashSet::new();
                for m in &out[1..out.len() - 1] {
                    if m.role == Role::Tool {
                        prop_assert!(open.remove(m.tool_call_id().unwrap_or("")), "orphan result sent");
                    } else {
                        prop_assert!(open.is_empty(), "unanswered call sent");
                        open.extend(m.calls().iter().map(|c| c.id.as_str()));
                    }
                }
                prop_assert!(open.is_empty() || out[out.len() - 2].role == Role::Tool || out.len() == 2);
            }
        }
    }


    #[test]
    fn every_strategy_keeps_the_invariants(messages in history(), budget in 40usize..6000, keep in 0usize..12) {
        for strategy in STRATEGIES {
            check(&messages, budget, strategy, None, keep)?;
        }
    }

    #[test]
    fn recall_keeps_the_invariants(messages in history(), budget in 40usize..3000, query in prop_oneof![
        "[a-z_ ]{3,30}",
        // Words the histories hold, so that long outputs are recalled and cut to them.
        Just("which error at line 12 came from the parser?".to_owned()),
        Just("the weather on our walk".to_owned()),
    ]) {
        check(&messages, budget, Steps::Auto, Some(&query), 10)?;
    }
}

/// A history whose first user message (the task) is about apples and is pinned nowhere, a
/// pinned note after it, a long reply to drop, and `repeat` as the id of a later message.
fn apples(repeat: &str) -> Vec<Message> {
    let with_id = |mut m: Message, id: &str| {
        m.id = Some(id.to_owned());
        m
    };
    let mut note = with_id(Message::user("pinned note"), "p");
    note.extra_mut()
        .insert("pinned".into(), serde_json::Value::Bool(true));
    vec![
        Message::system("sys"),
        with_id(Message::user("first message about apples ".repeat(3)), "x"),
        with_id(Message::assistant("reply ".repeat(3)), "y"),
        note,
        with_id(Message::assistant("filler words ".repeat(200)), "z"),
        with_id(Message::user("a later message"), repeat),
        with_id(Message::assistant("ok"), "w"),
        with_id(Message::user("newest"), "q"),
    ]
}

fn compact_apples(repeat: &str) -> Vec<(Kind, String)> {
    let counter = TokenCounter::new(Tokenizer::cl100k().expect("cl100k"));
    let mut options = CompactOptions::new(200);
    options.query = Some("apples".into());
    let out = compact(&Conversation::new(apples(repeat)), &counter, &options).expect("fits");
    out.messages
        .iter()
        .map(|v| (v.kind, v.message.text().into_owned()))
        .collect()
}

#[test]
fn a_pinned_message_keeps_its_place_when_ids_repeat() {
    // The recalled task stands before the pinned note, as in the input, whether or not a later
    // message repeats its id.
    for repeat in ["x2", "x"] {
        let out = compact_apples(repeat);
        let at = |text: &str| {
            out.iter()
                .position(|(kind, t)| *kind != Kind::Summary && t.starts_with(text))
                .unwrap_or_else(|| panic!("{text:?} missing: {out:?}"))
        };
        assert!(
            at("first message about apples") < at("pinned note"),
            "{repeat}: {out:?}"
        );
        assert!(
            at("pinned note") < at("a later message"),
            "{repeat}: {out:?}"
        );
    }
}

#[test]
fn messages_removed_counts_by_place_when_ids_repeat() {
    // With a later message repeating the recalled one's id, the report still counts the input
    // messages the context does not hold verbatim, one by one.
    let counter = TokenCounter::new(Tokenizer::cl100k().expect("cl100k"));
    let mut options = CompactOptions::new(200);
    options.query = Some("apples".into());
    let with_id = |mut m: Message, id: &str| {
        m.id = Some(id.to_owned());
        m
    };
    let dropped_namesake = |repeat: &str| {
        vec![
            Message::system("sys"),
            with_id(Message::user("pears and more ".repeat(300)), "x"),
            with_id(Message::assistant("long reply ".repeat(300)), "y"),
            with_id(Message::user("the newest question"), repeat),
        ]
    };
    let inputs = ["x2", "x"]
        .into_iter()
        .flat_map(|repeat| [(repeat, apples(repeat)), (repeat, dropped_namesake(repeat))]);
    for (repeat, input) in inputs {
        let out = compact(&Conversation::new(input.clone()), &counter, &options).expect("fits");
        let verbatim = out
            .messages
            .iter()
            .filter(|v| matches!(v.kind, Kind::Original | Kind::Recalled))
            .count();
        assert!(verbatim < input.len(), "something was left out: {out:?}");
        assert_eq!(
            out.report.messages_removed,
            input.len() - verbatim,
            "{repeat}: {:?}",
            out.messages
        );
    }
}

#[test]
fn a_recalled_task_is_not_repeated_in_the_digest() {
    let out = compact_apples("x2");
    let recalled = out
        .iter()
        .filter(|(_, t)| t.contains("first message about apples"))
        .map(|(kind, _)| *kind)
        .collect::<Vec<_>>();
    assert_eq!(recalled, [Kind::Recalled], "{out:?}");
}

#[test]
fn refuses_with_the_reason_when_the_newest_message_alone_is_too_big() {
    let counter = TokenCounter::new(Tokenizer::cl100k().expect("cl100k"));
    let conversation = Conversation::new(vec![
        Message::system("You are terse."),
        Message::user("word ".repeat(500)),
    ]);
    let err = compact(&conversation, &counter, &CompactOptions::new(100)).expect_err("too big");
    let text = err.to_string();
    assert!(
        text.contains("the newest message (") && text.contains("budget of 100"),
        "{text}"
    );
    match err {
        engram::Error::CannotFit {
            over,
            required,
            budget,
            ..
        } => assert_eq!(over, required - budget),
        other => panic!("{other}"),
    }
}

#[test]
fn a_history_that_fits_is_returned_as_it_is() {
    let counter = TokenCounter::new(Tokenizer::cl100k().expect("cl100k"));
    let messages = vec![
        Message::system("s"),
        Message::user("hello"),
        Message::assistant("hi"),
    ];
    let out = compact(
        &Conversation::new(messages.clone()),
        &counter,
        &CompactOptions::new(1000),
    )
    .expect("fits");
    let view: Vec<Message> = out.messages.into_iter().map(|v| v.message).collect();
    assert_eq!(view, messages);
    assert!(out.report.steps.is_empty());
    assert_eq!(out.report.messages_removed, 0);
}

/// A summarizer that fails, or writes far more than it may.
#[derive(Debug)]
struct Faulty {
    fail: bool,
}

impl engram::compact::summarize::Summarizer for Faulty {
    fn name(&self) -> &str {
        "faulty"
    }
    fn summarize(
        &self,
        _: &engram::compact::summarize::SummaryRequest<'_>,
    ) -> Result<String, engram::Error> {
        if self.fail {
            Err(engram::Error::Summarizer {
                summarizer: "faulty".into(),
                reason: "connection refused".into(),
            })
        } else {
            Ok("word ".repeat(5000))
        }
    }
}

#[test]
fn summaries_fall_back_to_the_digest_when_the_summarizer_fails_or_overruns() {
    let counter = TokenCounter::new(Tokenizer::cl100k().expect("cl100k"));
    let mut messages = vec![
        Message::system("You are an agent."),
        Message::user("Fix src/parser.rs"),
    ];
    for i in 0..40 {
        messages.push(Message::assistant(format!(
            "Looked at src/module_{i}.rs: error: E{i:04} in parse_{i}"
        )));
        messages.push(Message::user(format!("ok, continue with step {i}")));
    }
    let conversation = Conversation::new(messages);
    for (fail, reason) in [(true, "connection refused"), (false, "tokens;")] {
        let mut options = CompactOptions::new(600);
        options.strategy = Steps::Summarize;
        options.summarizer = Some(std::sync::Arc::new(Faulty { fail }));
        let out = compact(&conversation, &counter, &options).expect("falls back");
        assert!(out.report.tokens_after <= 600);
        assert!(
            out.report
                .summary_fallback
                .as_deref()
                .expect("reason")
                .contains(reason)
        );
        assert!(
            out.report.steps.contains(&"extractive"),
            "{:?}",
            out.report.steps
        );
        assert!(out.messages.iter().any(|v| v.kind == Kind::Summary));
    }
    let mut options = CompactOptions::new(600);
    options.strategy = Steps::Summarize;
    options.summarizer = Some(std::sync::Arc::new(
        engram::compact::summarize::DeterministicSummarizer,
    ));
    options.focus = Some("the parser".into());
    let out = compact(&conversation, &counter, &options).expect("summarizes");
    assert_eq!(out.report.summarizer.as_deref(), Some("deterministic"));
    let summary = out
        .messages
        .iter()
        .find(|v| v.kind == Kind::Summary)
        .expect("summary");
    assert!(
        summary
            .message
            .text()
            .starts_with("[CONTEXT SUMMARY]\n## Completed work")
    );
    assert!(out.report.steps.contains(&"summarize"));
}

#[test]
fn a_previous_summary_is_merged_reused_or_left_alone() {
    use engram::compact::summarize::{DeterministicSummarizer, PreviousSummary};
    let counter = TokenCounter::new(Tokenizer::cl100k().expect("cl100k"));
    let mut messages = vec![
        Message::system("You are an agent."),
        Message::user("Fix src/parser.rs"),
    ];
    for i in 0..40 {
        messages.push(Message::assistant(format!(
            "Looked at src/module_{i}.rs: error: E{i:04} in parse_{i}"
        )));
        messages.push(Message::user(format!("ok, continue with step {i}")));
    }
    let mut options = CompactOptions::new(600);
    options.strategy = Steps::Summarize;
    options.summarizer = Some(std::sync::Arc::new(DeterministicSummarizer));
    let first = compact(&Conversation::new(messages.clone()), &counter, &options).expect("first");
    let summary = first
        .messages
        .iter()
        .find(|v| v.kind == Kind::Summary)
        .expect("summary");
    assert_eq!(first.report.summary_previous, None);
    let text = summary
        .message
        .text()
        .trim_start_matches("[CONTEXT SUMMARY]\n")
        .to_owned();
    let previous = PreviousSummary {
        text: text.clone(),
        covers: summary.source_ids.clone(),
    };

    // Nothing new dropped: the previous summary stands, and no summarizer is called.
    options.previous_summary = Some(previous.clone());
    options.summarizer = Some(std::sync::Arc::new(Faulty { fail: true }));
    let again = compact(&Conversation::new(messages.clone()), &counter, &options).expect("again");
    assert_eq!(again.report.summary_previous, Some("reused"));
    assert_eq!(again.report.summary_fallback, None);
    let reused = again
        .messages
        .iter()
        .find(|v| v.kind == Kind::Summary)
        .expect("summary");
    assert_eq!(reused.message.text(), summary.message.text());

    // A previous summary that covers a message still in the view is not merged.
    let mut stale = previous.clone();
    stale.covers.push((messages.len() - 1).to_string());
    options.previous_summary = Some(stale);
    options.summarizer = Some(std::sync::Arc::new(DeterministicSummarizer));
    let out = compact(&Conversation::new(messages.clone()), &counter, &options).expect("stale");
    assert_eq!(out.report.summary_previous, None);

    // More history: the new messages are merged into the previous summary.
    for i in 40..60 {
        messages.push(Message::assistant(format!(
            "Looked at src/module_{i}.rs: error: E{i:04} in parse_{i}"
        )));
        messages.push(Message::user(format!("ok, continue with step {i}")));
    }
    options.previous_summary = Some(previous.clone());
    let merged = compact(&Conversation::new(messages), &counter, &options).expect("merged");
    assert_eq!(merged.report.summary_previous, Some("merged"));
    let new = merged
        .messages
        .iter()
        .find(|v| v.kind == Kind::Summary)
        .expect("summary");
    assert!(previous.covers.iter().all(|id| new.source_ids.contains(id)));
    assert!(
        new.message.text().contains("\"Fix src/parser.rs\""),
        "{}",
        new.message.text()
    );
    assert!(merged.report.tokens_after <= 600);
}
