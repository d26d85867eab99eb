//! The conformance suite every [`Store`] backend runs for sessions: the in-memory store here,
//! SQLite in `engram-store`. `run` takes a factory of empty stores and panics with the failing
//! check's name.

use serde_json::json;

use crate::StoreError;
use crate::compact::{CompactOptions, Kind};
use crate::conformance::memory::{Dice, assert_same};
use crate::memory::{NewEntry, SearchQuery, Tier};
use crate::message::{Message, ToolCall};
use crate::session::{
    EngramStore, NewSession, Session, SessionPolicy, SessionStore, Trigger, sleep_sessions,
};

fn new_session(id: &str, window: usize) -> NewSession {
    NewSession {
        id: Some(id.into()),
        name: Some(format!("{id} name")),
        model: "test-model".into(),
        tokenizer: "chars4".into(),
        token_factor: 1.0,
        window,
        metadata: json!({"team": "infra"}),
        created_at: 1_000,
    }
}

/// An agent turn: a request, a tool call, its (long) result, and a reply naming a file.
fn turn(i: usize) -> Vec<Message> {
    vec![
        Message::user(format!(
            "Step {i}: fix the failing test in src/module_{i}.rs"
        )),
        Message::assistant_tool_calls(vec![ToolCall::function(
            format!("call_{i}"),
            "shell",
            format!("{{\"cmd\": \"cargo test module_{i}\"}}"),
        )]),
        Message::tool(
            format!("call_{i}"),
            format!(
                "error: test module_{i}::works failed at src/module_{i}.rs:{}\n{}",
                10 + i,
                "stack frame ".repeat(40)
            ),
        ),
        Message::assistant(format!(
            "Result: fixed module_{i} by handling the empty case."
        )),
    ]
}

/// Runs every check against fresh stores from `make`.
pub fn run(make: &dyn Fn() -> Box<dyn EngramStore>) {
    create_get_list(make().as_ref());
    append_is_atomic_and_ids_are_unique(make().as_ref());
    keyed_appends_are_stored_once(make().as_ref());
    threshold_compaction_keeps_the_log_and_the_invariants(make().as_ref());
    checkpoints_restore_without_deleting(make().as_ref());
    a_compaction_from_before_a_restore_is_refused(make().as_ref());
    sleep_compaction_extracts_facts_first(make().as_ref());
    deleting_a_session_removes_what_it_owns(make().as_ref());
    timelines_are_kept_per_session(make().as_ref());
    deleting_a_session_forgets_its_vectors(make().as_ref());
    the_agents_compact_history_tool(make().as_ref());
    the_agents_history_tools(make().as_ref());
    summaries_are_incremental(make().as_ref());
    status_updates_come_on_schedule_with_the_cost(make().as_ref());
    export_and_import_round_trip(make().as_ref(), make().as_ref());
    random_sessions_match_the_reference(make().as_ref());
}

/// What a backend shows of a session after a step, as far as it must agree with the reference:
/// the view, the active log, and the checkpoints (compaction ids and times are each store's own).
fn observed(store: &dyn EngramStore, s: &Session<'_>) -> String {
    let view = s.view().expect("view");
    let log: Vec<(u64, String, usize, Message)> = s
        .log()
        .expect("log")
        .into_iter()
        .map(|m| (m.seq, m.id, m.tokens, m.message))
        .collect();
    let checkpoints: Vec<(String, u64, bool, usize, bool)> = store
        .checkpoints(&s.info().id)
        .expect("checkpoints")
        .into_iter()
        .map(|c| {
            (
                c.name,
                c.log_end,
                c.compaction_id.is_some(),
                c.messages,
                c.abandoned,
            )
        })
        .collect();
    // What sleep wrote into memory for the session: its key facts (ids are the store's own).
    let mut facts: Vec<(Tier, String, String)> = store
        .entries(Some(&s.info().id), None, 10_000)
        .expect("the session's memory")
        .into_iter()
        .map(|e| (e.tier, e.content, e.source))
        .collect();
    facts.sort_by(|a, b| (a.1.as_str(), a.2.as_str()).cmp(&(b.1.as_str(), b.2.as_str())));
    without_times(&format!(
        "view {:?} ({} tokens, compacted {})\nlog {log:?}\ncheckpoints {checkpoints:?}\n\
         memory {facts:?}",
        view.messages,
        view.tokens,
        view.compaction_id.is_some()
    ))
}

/// `text` without times: a summary's header says when its messages were appended (to the
/// minute, `2026-11-21 07:00 UTC`), and tool results and answers carry RFC 3339 times, which
/// differ between two stores written one after the other.
fn without_times(text: &str) -> String {
    let bytes = text.as_bytes();
    let is_date = |b: &[u8]| {
        b.len() >= 11
            && b[..4].iter().all(u8::is_ascii_digit)
            && b[4] == b'-'
            && b[7] == b'-'
            && (b[10] == b'T' || b[10] == b' ')
    };
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        if is_date(&bytes[i..]) {
            let end = if bytes[i + 10] == b' ' {
                text[i..].find(" UTC").map(|e| e + " UTC".len())
            } else {
                text[i..].find('Z').map(|e| e + 1)
            };
            if let Some(end) = end {
                out.push_str("TIME");
                i += end;
                continue;
            }
        }
        let c = text[i..].chars().next().expect("a char");
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// One random step on a session, and what it answered (compaction ids left out).
fn random_step(store: &dyn EngramStore, s: &mut Session<'_>, step: u64, dice: &mut Dice) -> String {
    let id = s.info().id.clone();
    match dice.below(8) {
        0..=2 => {
            let mut messages = turn(step as usize);
            // Outputs of different sizes; sometimes a turn without the request.
            messages[2] = Message::tool(
                format!("call_{step}"),
                "stack frame ".repeat(dice.below(300) as usize),
            );
            if dice.below(3) == 0 {
                messages.remove(0);
            }
            match s.append(messages) {
                Ok(a) => format!(
                    "appended {:?} {:?} -> {} tokens, compacted {}",
                    a.ids,
                    a.seqs,
                    a.view_tokens,
                    a.compaction.is_some()
                ),
                Err(e) => format!("append refused: {e}"),
            }
        }
        3 => {
            let keep = 1 + dice.below(10);
            let args =
                crate::tools::CompactHistoryArgs::parse(&json!({"preserveRecentMessages": keep}))
                    .expect("args");
            s.compact_history(&args).expect("compact_history")
        }
        4 => {
            let window = s.info().window;
            let target = 1 + dice.below(window as u64) as usize;
            let mut options = CompactOptions::new(target);
            options.strategy = [
                crate::compact::Strategy::Auto,
                crate::compact::Strategy::Truncate,
                crate::compact::Strategy::Mask,
                crate::compact::Strategy::Extractive,
            ][dice.below(4) as usize];
            let mut manual = Session::open(store, &id)
                .expect("open")
                .with_options(options);
            match manual.compact(Trigger::Manual, target, None) {
                Ok(crate::session::Compaction::Recorded(r)) => {
                    format!("compacted {} -> {}", r.tokens_before, r.tokens_after)
                }
                Ok(crate::session::Compaction::Unchanged { tokens, reason }) => {
                    format!("unchanged at {tokens}: {reason}")
                }
                Err(e) => format!("compaction failed: {e}"),
            }
        }
        7 => {
            // Sleep-time compaction: key facts into memory first, then down to the sleep
            // target when the view is above the sleep threshold.
            let mut sleeper = Session::open(store, &id)
                .expect("open")
                .with_policy(SessionPolicy::default())
                .with_options(CompactOptions::new(s.info().window));
            match sleeper.sleep_compact() {
                Ok(Some(done)) => format!(
                    "slept {} -> {}, {} summaries, {} facts",
                    done.tokens_before, done.tokens_after, done.summaries, done.facts_extracted
                ),
                Ok(None) => "slept: nothing to do".to_owned(),
                Err(e) => format!("sleep failed: {e}"),
            }
        }
        5 => match s.checkpoint(&format!("c{}", dice.below(3))) {
            Ok(c) => format!("checkpoint {} at {}", c.name, c.log_end),
            Err(e) => format!("checkpoint refused: {e}"),
        },
        _ => match s.restore(&format!("c{}", dice.below(3))) {
            Ok(r) => format!("restored {r:?}"),
            Err(e) => format!("restore refused: {e}"),
        },
    }
}

/// Runs the same random `steps` on two sessions, `expected`'s first, and checks after each
/// that both answered the same and show the same session.
fn lockstep(
    label: &str,
    steps: std::ops::Range<u64>,
    expected: (&dyn EngramStore, &mut Session<'_>),
    got: (&dyn EngramStore, &mut Session<'_>),
    dice: &mut Dice,
) {
    let ((want_store, want), (got_store, have)) = (expected, got);
    for step in steps {
        let mut same_dice = Dice(dice.0);
        let wanted = without_times(&random_step(want_store, want, step, dice));
        let answered = without_times(&random_step(got_store, have, step, &mut same_dice));
        assert_same(
            &answered,
            &wanted,
            &format!("{label}, step {step}: the answers"),
        );
        assert_same(
            &observed(got_store, have),
            &observed(want_store, want),
            &format!("{label}, step {step} ({wanted}): the sessions"),
        );
    }
}

/// Random sessions (appends with threshold compactions, `compact_history`, manual compactions
/// of every strategy, sleep-time compactions with their key facts, checkpoints and restores)
/// run step for step on the store under test and on the in-memory reference: after each step
/// both answered the same and show the same view, active log, checkpoints and memory. Then each
/// session is exported and imported into another store, and the two go on step for step the
/// same way.
fn random_sessions_match_the_reference(store: &dyn EngramStore) {
    for seed in 0..10u64 {
        let reference = crate::in_memory::InMemoryStore::new();
        let mut dice = Dice(seed);
        let id = format!("random-{seed}");
        let window = 1_500 + dice.below(4_000) as usize;
        let mut a = Session::create(&reference, &new_session(&id, window)).expect("create");
        let mut b = Session::create(store, &new_session(&id, window)).expect("create");
        for s in [&mut a, &mut b] {
            s.append(vec![
                Message::system("You are a coding agent."),
                Message::user("Fix the failing tests in src/"),
            ])
            .expect("append");
        }
        let label = format!("seed {seed}");
        lockstep(
            &label,
            0..30,
            (&reference, &mut a),
            (store, &mut b),
            &mut dice,
        );
        // Exported from the store under test and imported into another store, the session is
        // the same, and goes on the same way: restores reach the same checkpoints' views
        // through the compaction ids the import assigned anew.
        let dump = crate::session::export_session(store, &id).expect("export");
        let imported = crate::in_memory::InMemoryStore::new();
        imported.import_session(&dump).expect("import");
        // With the session's memory (its journal and key facts), as `engram export --session`
        // writes its lines and `engram import` reads them.
        let memory: Vec<NewEntry> = store
            .entries(Some(&id), None, 10_000)
            .expect("the session's memory")
            .iter()
            .map(|e| {
                crate::request::AddMemory::new(false)
                    .entry(&crate::session::export::memory_line(e))
                    .expect("reads back")
            })
            .collect();
        crate::memory::MemoryStore::insert(&imported, &memory).expect("import the memory");
        let mut c = Session::open(&imported, &id).expect("open the imported session");
        assert_same(
            &observed(&imported, &c),
            &observed(store, &b),
            &format!("seed {seed}: the imported session"),
        );
        let label = format!("seed {seed}, after the import");
        lockstep(
            &label,
            30..40,
            (store, &mut b),
            (&imported, &mut c),
            &mut dice,
        );
    }
}

/// Records what each summary request carried, and answers as the deterministic summarizer.
#[derive(Debug, Default)]
struct Recording {
    /// (previous summary, messages' texts) per request.
    requests: std::sync::Mutex<Vec<(Option<String>, Vec<String>)>>,
}

impl crate::compact::summarize::Summarizer for Recording {
    fn name(&self) -> &str {
        "recording"
    }

    fn summarize(
        &self,
        request: &crate::compact::summarize::SummaryRequest<'_>,
    ) -> Result<String, crate::compact::summarize::SummarizeError> {
        self.requests.lock().expect("lock").push((
            request.previous.map(str::to_owned),
            request
                .messages
                .iter()
                .map(|m| m.text().into_owned())
                .collect(),
        ));
        crate::compact::summarize::DeterministicSummarizer.summarize(request)
    }
}

fn summaries_are_incremental(store: &dyn EngramStore) {
    let recording = std::sync::Arc::new(Recording::default());
    let mut options = CompactOptions::new(0);
    options.summarizer = Some(recording.clone());
    let mut s = Session::create(store, &new_session("inc", 3_000))
        .expect("create")
        .with_options(options);
    s.append(vec![Message::system("You are a coding agent.")])
        .expect("system");
    let mut compactions = 0;
    for i in 0..40 {
        if s.append(turn(i)).expect("append").compaction.is_some() {
            compactions += 1;
        }
    }
    assert!(compactions >= 3, "{compactions} compactions");
    let requests = recording.requests.lock().expect("lock").clone();
    assert_eq!(
        requests[0].0, None,
        "the first summary has nothing to merge"
    );
    let summaries = store.summaries("inc").expect("summaries");
    assert!(summaries.len() >= 3, "{} summaries", summaries.len());
    for (n, pair) in summaries.windows(2).enumerate() {
        let (before, after) = (&pair[0], &pair[1]);
        // The earlier summary was given to the summarizer, not its messages again.
        let (previous, messages) = &requests[n + 1];
        let previous = previous.as_deref().expect("a previous summary was merged");
        assert!(
            before.text.contains(previous),
            "request {}: the previous summary is the last one written",
            n + 1
        );
        let log = store.session_log("inc", 0, false).expect("log");
        for id in &before.covers {
            let text = log
                .iter()
                .find(|m| &m.id == id)
                .expect("covered message")
                .message
                .text()
                .into_owned();
            assert!(
                !messages.contains(&text) || text.is_empty(),
                "request {}: message {id} was summarised again",
                n + 1
            );
        }
        // Lineage: the merged summary covers what the earlier one did and supersedes it.
        assert!(before.covers.iter().all(|id| after.covers.contains(id)));
        assert!(after.covers_summaries.contains(&before.id));
        assert!(after.depth > before.depth);
        // Merged, not lost: the first request is still in the latest summary.
    }
    let last = summaries.last().expect("summaries");
    assert!(
        last.text.contains("Step 0: fix the failing test"),
        "the merged summary keeps the first request: {}",
        last.text
    );
    let record = store.compactions("inc", false).expect("compactions");
    assert_eq!(
        record.last().expect("a compaction").report["summary_previous"],
        "merged"
    );
}

fn status_updates_come_on_schedule_with_the_cost(store: &dyn EngramStore) {
    let price = crate::registry::Pricing {
        input: 1_000.0,
        output: 2_000.0,
        cached_input: Some(100.0),
        cache_write: None,
    };
    let mut s = Session::create(store, &new_session("st", 10_000))
        .expect("create")
        .with_price(price);
    assert!(
        s.append(vec![Message::system("sys")])
            .expect("system")
            .status
            .is_none()
    );
    let mut due = Vec::new();
    for turn in 1..=12 {
        let out = s
            .append(vec![
                Message::user(format!("request {turn}")),
                Message::assistant(format!("answer {turn}")),
            ])
            .expect("append");
        if let Some(status) = out.status {
            assert!(
                status.text().starts_with("--- STATUS UPDATE ---"),
                "{}",
                status.text()
            );
            due.push(turn);
        }
    }
    assert_eq!(due, [5, 10], "every 5 user turns");
    // An assistant message alone is not a turn; crossing 50% of the window is due at once.
    assert!(
        s.append(vec![Message::assistant("more")])
            .expect("append")
            .status
            .is_none()
    );
    let big = s
        .append(vec![Message::assistant("word ".repeat(4_500))])
        .expect("append");
    let status = big.status.expect("crossing 50% sends a status update");
    assert!(status.text().contains("/10000 ("), "{}", status.text());

    // Cost: estimated for calls without usage, exact for a reply that reports its usage.
    let before = s.usage().expect("usage");
    assert_eq!(before.calls, 14);
    assert_eq!(before.estimated_calls, 14);
    assert!(before.cost_usd > 0.0);
    let mut reply = Message::assistant("with usage");
    reply.extra_mut().insert(
        "usage".into(),
        json!({"prompt_tokens": 1_000, "completion_tokens": 100, "prompt_tokens_details": {"cached_tokens": 600}}),
    );
    s.append(vec![reply]).expect("append");
    let after = s.usage().expect("usage");
    assert_eq!(after.calls, 15);
    assert_eq!(after.estimated_calls, 14);
    assert_eq!(after.input_tokens - before.input_tokens, 1_000);
    assert_eq!(after.cached_tokens - before.cached_tokens, 600);
    let added = after.cost_usd - before.cost_usd;
    let expected = (400.0 * 1_000.0 + 600.0 * 100.0 + 100.0 * 2_000.0) / 1e6;
    assert!((added - expected).abs() < 1e-9, "{added} != {expected}");
    assert!(
        s.status()
            .expect("status")
            .to_message()
            .text()
            .contains(&format!("Cost So Far: ${:.4}", after.cost_usd))
    );

    // A history appended in bulk is over the window until the compaction that follows it: no
    // estimated call read more than the window.
    let mut bulk = Session::create(store, &new_session("bulk", 10_000)).expect("create");
    let turns: Vec<Message> = (0..40)
        .flat_map(|i| {
            [
                Message::user(format!("step {i}: {}", "word ".repeat(2_000))),
                Message::assistant(format!("done {i}")),
            ]
        })
        .collect();
    bulk.append(turns).expect("append");
    let usage = bulk.usage().expect("usage");
    assert_eq!(usage.estimated_calls, 40);
    assert!(
        usage.input_tokens <= 40 * 10_000,
        "{} input tokens for 40 calls in a 10,000-token window",
        usage.input_tokens
    );
}

fn export_and_import_round_trip(store: &dyn EngramStore, other: &dyn EngramStore) {
    let mut s = Session::create(store, &new_session("x", 2_500)).expect("create");
    s.append(vec![Message::system("sys")]).expect("append");
    for i in 0..5 {
        s.append(turn(i)).expect("append");
    }
    s.checkpoint("early").expect("checkpoint");
    for i in 5..25 {
        s.append(turn(i)).expect("append");
    }
    s.restore("early").expect("restore");
    for i in 5..20 {
        s.append(turn(i)).expect("append");
    }
    let dump = crate::session::export_session(store, "x").expect("export");
    assert!(
        dump.messages.iter().any(|m| m.abandoned),
        "abandoned rows are exported"
    );
    other.import_session(&dump).expect("import");
    let back = crate::session::export_session(other, "x").expect("export again");
    assert_eq!(back.info, dump.info);
    assert_eq!(back.messages, dump.messages);
    assert_eq!(back.compactions.len(), dump.compactions.len());
    assert_eq!(back.summaries.len(), dump.summaries.len());
    assert_eq!(back.checkpoints.len(), dump.checkpoints.len());
    // Compaction ids are assigned anew on import (a shared database numbers them across
    // sessions and tenants), so the views are compared without them.
    let view = |st: &dyn EngramStore| {
        let v = Session::open(st, "x").expect("open").view().expect("view");
        (v.messages, v.tokens, v.compaction_id.is_some())
    };
    assert_eq!(
        view(other),
        view(store),
        "the imported session has the same view"
    );
    assert!(matches!(
        other.import_session(&dump),
        Err(StoreError::Conflict(_))
    ));
}

fn create_get_list(store: &dyn EngramStore) {
    let a = store
        .create_session(&new_session("a", 4000))
        .expect("create a");
    assert_eq!(
        (a.id.as_str(), a.window, a.messages, a.epoch),
        ("a", 4000, 0, 0)
    );
    assert!(
        matches!(
            store.create_session(&new_session("a", 10)),
            Err(StoreError::Conflict(_))
        ),
        "a duplicate session id is a conflict"
    );
    store
        .create_session(&new_session("b", 4000))
        .expect("create b");
    let got = store.session("a").expect("get").expect("a exists");
    assert_eq!(got.metadata, json!({"team": "infra"}));
    assert_eq!(got.name.as_deref(), Some("a name"));
    assert_eq!(store.sessions().expect("list").len(), 2);
    assert!(store.session("nope").expect("get").is_none());
    assert!(
        matches!(
            Session::open(store, "nope"),
            Err(crate::session::SessionError::Store(
                StoreError::NotFound { .. }
            ))
        ),
        "opening an unknown session says so"
    );
}

fn append_is_atomic_and_ids_are_unique(store: &dyn EngramStore) {
    let mut s = Session::create(store, &new_session("s", 100_000)).expect("create");
    let out = s
        .append(vec![
            Message::system("You are a careful agent."),
            Message::user("hello").with_id("u1"),
        ])
        .expect("append");
    assert_eq!(out.ids, vec!["m0".to_owned(), "u1".to_owned()]);
    assert_eq!(out.seqs, vec![0, 1]);
    let err = s
        .append(vec![
            Message::user("new"),
            Message::user("again").with_id("u1"),
        ])
        .expect_err("u1 is taken");
    assert!(err.to_string().contains("u1"), "{err}");
    assert_eq!(
        s.log().expect("log").len(),
        2,
        "a refused append appends nothing"
    );
    let err = s
        .append(vec![
            Message::user("x").with_id("d"),
            Message::user("y").with_id("d"),
        ])
        .expect_err("twice in one append");
    assert!(err.to_string().contains("twice"), "{err}");
    let view = s.view().expect("view");
    assert_eq!(view.messages.len(), 2);
    let recount = s
        .counter()
        .count_messages(
            &view
                .messages
                .iter()
                .map(|v| v.message.clone())
                .collect::<Vec<_>>(),
        )
        .total();
    assert_eq!(
        view.tokens, recount,
        "stored counts add up to the view's count"
    );
    assert_eq!(store.session("s").expect("get").expect("s").messages, 2);
}

/// An append with a key is stored once: a retry (its answer lost between the store and the
/// caller, as when the server is killed there) gets what the first stored; the same key with
/// other messages is refused; keys are kept a day and a thousand per session, and go with the
/// session.
fn keyed_appends_are_stored_once(store: &dyn EngramStore) {
    use crate::session::store::{APPEND_KEY_TTL_MS, APPEND_KEYS_KEPT, AppendKey, KeyedAppend};
    store
        .create_session(&new_session("k", 100_000))
        .expect("create");
    let rows = |text: &str| {
        vec![crate::session::NewLogMessage {
            message: Message::user(text),
            tokens: 3,
            created_at: 2_000,
        }]
    };
    let key = |k: &str, fingerprint: &str, at: i64| AppendKey {
        key: k.into(),
        fingerprint: fingerprint.into(),
        at,
    };
    // The store part of an append whose answer never reached the caller.
    let now = crate::timestamp::now();
    let first = store
        .append_keyed(
            "k",
            &rows("deploy"),
            &key("a", &crate::session::fingerprint(&rows("deploy")), now),
        )
        .expect("stored");
    let KeyedAppend::Stored(positions) = first else {
        panic!("a new key stores: {first:?}")
    };
    // The caller retries through a session: nothing is stored again.
    let mut s = Session::open(store, "k").expect("open");
    let again = s
        .append_once(vec![Message::user("deploy")], Some("a"))
        .expect("retry");
    assert!(again.replayed, "{again:?}");
    assert_eq!(again.ids, vec![positions[0].1.clone()]);
    assert_eq!(s.log().expect("log").len(), 1, "stored once");
    // A whole append keeps its answer, and its retry gets it back.
    let answered = s
        .append_once(vec![Message::user("restart")], Some("b"))
        .expect("append");
    assert!(!answered.replayed);
    let replay = s
        .append_once(vec![Message::user("restart")], Some("b"))
        .expect("retry");
    assert_eq!(
        (replay.ids.clone(), replay.view_tokens, replay.replayed),
        (answered.ids.clone(), answered.view_tokens, true)
    );
    assert_eq!(s.log().expect("log").len(), 2);
    // The same key with other messages.
    let e = s
        .append_once(vec![Message::user("something else")], Some("b"))
        .expect_err("another body");
    assert!(
        matches!(&e, crate::session::SessionError::Store(StoreError::Conflict(m)) if m.contains("Idempotency-Key")),
        "{e}"
    );
    assert_eq!(s.log().expect("log").len(), 2, "nothing stored");
    // A day later the key is forgotten: the same append is a new one.
    let later = store
        .append_keyed(
            "k",
            &rows("deploy"),
            &key(
                "a",
                &crate::session::fingerprint(&rows("deploy")),
                now + APPEND_KEY_TTL_MS,
            ),
        )
        .expect("stored");
    assert!(matches!(later, KeyedAppend::Stored(_)), "{later:?}");
    // At most APPEND_KEYS_KEPT keys: the oldest go first.
    store
        .create_session(&new_session("many", 100_000))
        .expect("create");
    for i in 0..=APPEND_KEYS_KEPT {
        store
            .append_keyed(
                "many",
                &rows("x"),
                &key(&format!("n{i}"), "fx", 20_000 + i as i64),
            )
            .expect("stored");
    }
    let oldest = store
        .append_keyed("many", &rows("x"), &key("n0", "fx", 30_000))
        .expect("stored");
    assert!(
        matches!(oldest, KeyedAppend::Stored(_)),
        "the oldest key was let go"
    );
    let newest = store
        .append_keyed(
            "many",
            &rows("x"),
            &key(&format!("n{APPEND_KEYS_KEPT}"), "fx", 30_001),
        )
        .expect("replayed");
    assert!(matches!(newest, KeyedAppend::Replayed { .. }), "{newest:?}");
    // The keys go with their session.
    store.delete_session("k").expect("delete");
    store
        .create_session(&new_session("k", 100_000))
        .expect("create again");
    let fresh = store
        .append_keyed("k", &rows("restart"), &key("b", "f2", 40_000))
        .expect("stored");
    assert!(matches!(fresh, KeyedAppend::Stored(_)), "{fresh:?}");
}

fn threshold_compaction_keeps_the_log_and_the_invariants(store: &dyn EngramStore) {
    let window = 3_000;
    let mut s = Session::create(store, &new_session("t", window)).expect("create");
    s.append(vec![Message::system(
        "You are a coding agent. Never push to main.",
    )])
    .expect("system");
    let mut compactions = 0;
    let mut appended = 1;
    for i in 0..40 {
        let out = s.append(turn(i)).expect("append");
        appended += 4;
        if let Some(c) = &out.compaction {
            compactions += 1;
            assert_eq!(c.trigger, "threshold");
            assert!(c.tokens_after <= window, "{c:?}");
        }
        assert!(!out.breaker_open, "turn {i}");
        assert!(
            out.view_tokens as f64 <= 0.8 * window as f64,
            "turn {i}: {} tokens",
            out.view_tokens
        );
        let view = s.view().expect("view");
        assert_eq!(view.tokens, out.view_tokens, "turn {i}");
        assert_eq!(
            view.messages[0].message.text(),
            "You are a coding agent. Never push to main.",
            "the system prompt survives"
        );
        let last = view.messages.last().expect("non-empty");
        assert_eq!(
            last.message.text(),
            format!("Result: fixed module_{i} by handling the empty case."),
            "the newest message survives"
        );
        // Tool calls and results stay together.
        let msgs: Vec<&Message> = view.messages.iter().map(|v| &v.message).collect();
        for (k, m) in msgs.iter().enumerate() {
            for call in m.calls() {
                assert!(
                    msgs[k + 1..]
                        .iter()
                        .any(|r| r.tool_call_id() == Some(call.id.as_str())),
                    "turn {i}: call {} lost its result",
                    call.id
                );
            }
        }
        let recount = s
            .counter()
            .count_messages(&msgs.iter().map(|m| (*m).clone()).collect::<Vec<_>>())
            .total();
        assert_eq!(view.tokens, recount, "turn {i}: the stored count is exact");
    }
    assert!(compactions >= 3, "{compactions} compactions");
    assert_eq!(
        s.log().expect("log").len(),
        appended,
        "the log keeps everything"
    );
    let records = store.compactions("t", false).expect("records");
    assert_eq!(records.len(), compactions);
    let summaries = store.summaries("t").expect("summaries");
    assert!(!summaries.is_empty(), "compactions wrote summaries");
    assert!(
        summaries
            .iter()
            .any(|x| x.depth >= 2 && !x.covers_summaries.is_empty()),
        "a later summary supersedes an earlier one: {:?}",
        summaries
            .iter()
            .map(|x| (x.depth, x.covers.len(), x.covers_summaries.len()))
            .collect::<Vec<_>>()
    );
    for x in &summaries {
        assert!(x.from <= x.to && !x.covers.is_empty());
        for id in &x.covers {
            assert!(
                !store
                    .messages_by_id("t", std::slice::from_ref(id))
                    .expect("by id")
                    .is_empty(),
                "summary {} covers {id}, which is in the log",
                x.id
            );
        }
    }
    let view = s.view().expect("view");
    let summary = view
        .messages
        .iter()
        .find(|v| v.kind == Kind::Summary)
        .expect("the view has a summary");
    assert!(
        summary.message.text().starts_with("[Summary: depth "),
        "the summary header: {}",
        summary.message.text()
    );
    // Each summary is journalled as a context_synthesis entry.
    let journal = store
        .search(&SearchQuery {
            tiers: vec![Tier::Journal],
            session_id: Some("t".into()),
            ..SearchQuery::new("module", 1000)
        })
        .expect("search journal");
    assert_eq!(journal.len(), summaries.len());
    assert!(journal.iter().all(|h| h.entry.source == "context_synthesis"
        && h.entry.metadata["type"] == "context_synthesis"));
    // A manual compaction with a focus brings the focus back.
    let record = s
        .compact(Trigger::Manual, 1_500, Some("module_3 src/module_3.rs"))
        .expect("manual")
        .recorded()
        .expect("recorded");
    assert_eq!(record.trigger, "manual");
    let view = s.view().expect("view");
    assert!(view.tokens <= 1_500, "{}", view.tokens);
    assert!(
        view.messages
            .iter()
            .any(|v| v.message.text().contains("module_3")),
        "the focus is served"
    );
    // Long-term memory joins the context, within its share and the budget.
    let memory: Vec<crate::memory::MemoryEntry> = (0..30)
        .map(|i| crate::memory::MemoryEntry {
            id: format!("mem{i}"),
            tier: Tier::Episodic,
            content: format!("Earlier run {i}: module_{i} needed the empty-case fix too"),
            source: "agent".into(),
            session_id: None,
            created_at: 0,
            importance: 0.5,
            metadata: serde_json::Value::Null,
            summary_of: Vec::new(),
        })
        .collect();
    let learnings = vec![crate::memory::MemoryEntry {
        id: "lesson1".into(),
        tier: Tier::Learning,
        content: "Run the whole test suite before declaring a fix done.".into(),
        ..memory[0].clone()
    }];
    let with = s
        .context_with_memory(Some(2_000), Some("module_3"), &memory, &learnings)
        .expect("context with memory");
    assert!(
        with.report.tokens_after <= 2_000,
        "{}",
        with.report.tokens_after
    );
    let recount = s
        .counter()
        .count_messages(
            &with
                .messages
                .iter()
                .map(|v| v.message.clone())
                .collect::<Vec<_>>(),
        )
        .total();
    assert_eq!(
        recount, with.report.tokens_after,
        "the report's count is exact"
    );
    assert_eq!(
        with.messages[0].message.text(),
        "You are a coding agent. Never push to main."
    );
    let note = &with.messages[1];
    assert_eq!(note.kind, Kind::Recalled);
    let text = note.message.text();
    assert!(
        text.starts_with("## Relevant Memory\nEarlier run 0"),
        "{text}"
    );
    assert!(
        text.contains("## Past Learnings\n- Run the whole test suite"),
        "{text}"
    );
    assert!(
        s.counter().count_message(&note.message).total() <= 2_000 * 20 / 100,
        "memory and learnings stay within their shares"
    );
    assert!(note.source_ids.contains(&"lesson1".to_owned()));
    // A stateless context for a tighter budget changes nothing.
    let before = store.compactions("t", false).expect("records").len();
    let tight = s.context(Some(800), Some("module_7")).expect("context");
    assert!(tight.report.tokens_after <= 800);
    assert_eq!(
        store.compactions("t", false).expect("records").len(),
        before
    );
}

fn checkpoints_restore_without_deleting(store: &dyn EngramStore) {
    let mut s = Session::create(store, &new_session("c", 2_500)).expect("create");
    s.append(vec![Message::system("sys")]).expect("append");
    for i in 0..3 {
        s.append(turn(i)).expect("append");
    }
    let cp = s.checkpoint("before-refactor").expect("checkpoint");
    assert_eq!(cp.messages, 13);
    let view_at_cp = s.view().expect("view");
    assert!(
        matches!(
            s.checkpoint("before-refactor"),
            Err(crate::session::SessionError::Store(StoreError::Conflict(_)))
        ),
        "checkpoint names are unique"
    );
    for i in 3..30 {
        s.append(turn(i)).expect("append");
    }
    s.checkpoint("later").expect("later checkpoint");
    s.append(turn(30)).expect("append");
    assert!(!store.compactions("c", false).expect("records").is_empty());
    let restored = s.restore("before-refactor").expect("restore");
    assert_eq!(restored.messages_abandoned, 28 * 4);
    assert!(restored.compactions_abandoned >= 1);
    assert_eq!(restored.checkpoints_abandoned, 1);
    assert_eq!(
        s.view().expect("view"),
        view_at_cp,
        "the view is the checkpoint's"
    );
    assert_eq!(s.log().expect("log").len(), 13);
    assert_eq!(
        store.session_log("c", 0, true).expect("all").len(),
        13 + 28 * 4,
        "abandoned messages are kept"
    );
    assert!(store.summaries("c").expect("summaries").is_empty());
    // The abandoned branch's ids are free again; the abandoned checkpoint cannot be restored.
    s.append(turn(3)).expect("the same turn again");
    assert!(matches!(
        s.restore("later"),
        Err(crate::session::SessionError::Store(StoreError::Conflict(_)))
    ));
    assert!(matches!(
        s.restore("nope"),
        Err(crate::session::SessionError::Store(
            StoreError::NotFound { .. }
        ))
    ));
    assert_eq!(store.checkpoints("c").expect("list").len(), 2);
    // A page of the log holds the active messages from a sequence number on, at most `limit`
    // (a page once cost the rest of the log).
    let active = store.session_log("c", 0, false).expect("log");
    let seqs = |log: &[crate::session::store::LoggedMessage]| -> Vec<u64> {
        log.iter().map(|m| m.seq).collect()
    };
    for (from, limit) in [
        (0, 5),
        (active[12].seq, 3),
        (active[12].seq + 1, 2),
        (0, 1_000),
        (i64::MAX as u64, 3),
        (u64::MAX, 3),
    ] {
        let page = store.session_log_page("c", from, limit).expect("page");
        let expected: Vec<u64> = active
            .iter()
            .filter(|m| m.seq >= from)
            .take(limit)
            .map(|m| m.seq)
            .collect();
        assert_eq!(seqs(&page), expected, "from {from}, limit {limit}");
    }
}

fn a_compaction_from_before_a_restore_is_refused(store: &dyn EngramStore) {
    let mut s = Session::create(store, &new_session("e", 100_000)).expect("create");
    s.append(turn(0)).expect("append");
    s.checkpoint("start").expect("checkpoint");
    let stale_epoch = s.info().epoch;
    s.append(turn(1)).expect("append");
    s.restore("start").expect("restore");
    let err = store
        .record_compaction(&crate::session::NewCompaction {
            session_id: "e".into(),
            expected_epoch: stale_epoch,
            trigger: "manual".into(),
            strategy: "auto".into(),
            log_end: 8,
            tokens_before: 10,
            tokens_after: 5,
            view: json!([]),
            report: json!({}),
            summaries: Vec::new(),
            journal: vec![NewEntry {
                tier: Tier::Journal,
                ..NewEntry::working("stale", "context_synthesis")
            }],
            created_at: 0,
        })
        .expect_err("stale epoch");
    assert!(matches!(err, StoreError::Conflict(_)), "{err}");
    assert_eq!(
        store.stats().expect("stats").journal,
        0,
        "nothing was written"
    );
    assert!(store.compactions("e", true).expect("records").is_empty());
}

fn sleep_compaction_extracts_facts_first(store: &dyn EngramStore) {
    let window = 4_000;
    let mut s = Session::create(store, &new_session("z", window)).expect("create");
    s.append(vec![Message::system("sys")]).expect("append");
    let mut i = 0;
    while s.view_tokens().expect("tokens") as f64 <= 0.55 * window as f64 {
        s.append(turn(i)).expect("append");
        i += 1;
    }
    let quiet = Session::create(store, &new_session("quiet", 1_000_000)).expect("create");
    drop(quiet);
    let out = sleep_sessions(
        store,
        &SessionPolicy::default(),
        &CompactOptions::new(window),
    )
    .expect("sleep");
    assert_eq!(out.sessions, 2);
    assert_eq!(out.compacted.len(), 1, "{out:?}");
    let (id, done) = &out.compacted[0];
    assert_eq!((id.as_str(), done.trigger.as_str()), ("z", "sleep"));
    assert!(
        done.tokens_after as f64 <= 0.3 * window as f64,
        "down to the sleep target: {done:?}"
    );
    assert!(done.facts_extracted > 0, "{done:?}");
    let facts = store
        .search(&SearchQuery {
            session_id: Some("z".into()),
            ..SearchQuery::new("module_0 failed", 50)
        })
        .expect("search");
    assert!(
        facts.iter().any(|h| h.entry.tier == Tier::Working
            && h.entry.content.starts_with("[shell] error: test module_0")),
        "{facts:?}"
    );
    // Below the sleep threshold now: a second sleep does nothing.
    let again = sleep_sessions(
        store,
        &SessionPolicy::default(),
        &CompactOptions::new(window),
    )
    .expect("sleep");
    assert!(again.compacted.is_empty(), "{again:?}");
}

/// A session's timeline: none until built, built at sleep, kept until the history changes,
/// refused for an unknown session, and deleted with its session.
fn timelines_are_kept_per_session(store: &dyn EngramStore) {
    use crate::session::timeline::Timeline;
    let mut s = Session::create(store, &new_session("t", 100_000)).expect("create");
    assert_eq!(store.timeline("t").expect("timeline"), None);
    s.append(vec![
        Message::system("[Session 1 - 8 May, 2023]"),
        Message::user("I went to a pottery class and made a bowl."),
        Message::assistant("What glaze did you use on the pottery bowl?"),
        Message::system("[Session 2 - 25 May, 2023]"),
        Message::user("My sister is moving to Lisbon for a new job."),
    ])
    .expect("append");
    let out = sleep_sessions(
        store,
        &SessionPolicy::default(),
        &CompactOptions::new(100_000),
    )
    .expect("sleep");
    assert_eq!(out.timeline_lines, 2, "a line per part");
    let built = s.timeline().expect("timeline").expect("built at sleep");
    assert_eq!(built.parts.len(), 2);
    assert_eq!(
        built.parts[1].heading.as_deref(),
        Some("Session 2 - 25 May, 2023")
    );
    assert!(
        built.parts[1].line.contains("Lisbon"),
        "{}",
        built.parts[1].line
    );
    assert_eq!(store.timeline("t").expect("timeline"), Some(built.clone()));
    // The agent's search lists the parts that carried the topic, with the ids to read them.
    let reply = s
        .handle_tool_call("search_history", &json!({"query": "the pottery bowl"}))
        .expect("engram's tool")
        .expect("runs");
    let reply: serde_json::Value = serde_json::from_str(&reply.text).expect("json");
    assert_eq!(reply["timeline"][0]["part"], 0, "{reply}");
    assert_eq!(
        reply["timeline"][0]["from_id"],
        json!(built.parts[0].from_id)
    );
    assert_eq!(reply["timeline"][0]["date"], "Session 1 - 8 May, 2023");
    assert_eq!(
        reply["timeline"].as_array().map(Vec::len),
        Some(1),
        "{reply}"
    );
    // A context with memory shows the topic's parts, dated, standing for their sources.
    let context = s
        .context_recalling(Some(2_000), Some("Lisbon"))
        .expect("context");
    let note = context
        .messages
        .iter()
        .find(|m| m.kind == Kind::Recalled)
        .expect("a memory note");
    assert!(
        note.message.text().contains(&format!(
            "Session 2 - 25 May, 2023: {}",
            built.parts[1].line
        )),
        "{:?}",
        note.message
    );
    assert!(
        !note.message.text().contains("Session 1"),
        "{:?}",
        note.message
    );
    assert_eq!(note.source_ids, built.parts[1].sources);
    // Unchanged history: nothing is written again.
    assert_eq!(s.update_timeline().expect("update").written, 0);
    // A new message grows the last part only.
    s.append(vec![Message::assistant("Lisbon! Will you visit her?")])
        .expect("append");
    let grown = s.update_timeline().expect("update");
    assert_eq!((grown.parts, grown.written), (2, 1));
    let after = s.timeline().expect("timeline").expect("kept");
    assert_eq!(after.parts[0], built.parts[0]);
    assert_eq!(after.parts[1].to_seq, 5);
    // Replacing stores what was given.
    let empty = Timeline {
        built_to: 0,
        epoch: 0,
        parts: Vec::new(),
    };
    store.put_timeline("t", &empty).expect("put");
    assert_eq!(store.timeline("t").expect("timeline"), Some(empty.clone()));
    assert!(matches!(
        store.put_timeline("nope", &empty),
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.timeline("nope"),
        Err(StoreError::NotFound { .. })
    ));
    drop(s);
    store.delete_session("t").expect("delete");
    Session::create(store, &new_session("t", 100_000)).expect("create again");
    assert_eq!(
        store.timeline("t").expect("timeline"),
        None,
        "deleted with the session"
    );
}

fn deleting_a_session_removes_what_it_owns(store: &dyn EngramStore) {
    let mut s = Session::create(store, &new_session("d", 2_000)).expect("create");
    s.append(vec![Message::system("sys")]).expect("append");
    for i in 0..20 {
        s.append(turn(i)).expect("append");
    }
    s.checkpoint("x").expect("checkpoint");
    store
        .insert(&[
            NewEntry {
                session_id: Some("d".into()),
                ..NewEntry::working("a note about module_1", "agent")
            },
            NewEntry::working("unrelated note about module_1", "agent"),
        ])
        .expect("insert");
    let deleted = store.delete_session("d").expect("delete");
    assert_eq!(deleted.messages, 81);
    assert!(deleted.compactions >= 1 && deleted.summaries >= 1);
    assert_eq!(deleted.checkpoints, 1);
    assert!(deleted.memory_entries >= 2, "{deleted:?}");
    assert!(store.session("d").expect("get").is_none());
    let left = store
        .search(&SearchQuery {
            tiers: Tier::ALL.to_vec(),
            ..SearchQuery::new("module_1", 50)
        })
        .expect("search");
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(matches!(
        store.delete_session("d"),
        Err(StoreError::NotFound { .. })
    ));
}

/// Embeds as [`Topics`](crate::embed::Topics) does, and remembers the texts it embedded.
#[derive(Debug, Default)]
struct Seen(std::sync::Mutex<Vec<String>>);

impl crate::embed::Embedder for Seen {
    fn name(&self) -> &str {
        "seen"
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, crate::embed::EmbedError> {
        let mut seen = self.0.lock().expect("lock");
        seen.extend(texts.iter().map(|t| (*t).to_owned()));
        crate::embed::Topics.embed(texts)
    }
}

fn deleting_a_session_forgets_its_vectors(store: &dyn EngramStore) {
    use crate::embed::text_hash;
    let v = [0.6_f32, 0.8];
    let kept = |model: &str, hash| store.vectors(model, &[hash]).expect("read")[0].is_some();
    // Two sessions share a text; a third vector (a memory entry's) is no session's.
    for id in ["va", "vb"] {
        Session::create(store, &new_session(id, 2_000)).expect("create");
    }
    let (own, shared, memory) = (text_hash("own"), text_hash("shared"), text_hash("memory"));
    store
        .put_session_vectors("va", "m", &[(own, &v), (shared, &v)])
        .expect("put");
    store
        .put_session_vectors("vb", "m", &[(shared, &v)])
        .expect("put");
    store.put_vectors("m", &[(memory, &v)]).expect("put");
    assert!(matches!(
        store.put_session_vectors("nobody", "m", &[(own, &v)]),
        Err(StoreError::NotFound { .. })
    ));
    store.delete_session("va").expect("delete");
    assert!(
        !kept("m", own),
        "the deleted session's own vector is forgotten"
    );
    assert!(kept("m", shared), "a vector another session uses stays");
    assert!(kept("m", memory), "a vector no session owns stays");
    store.delete_session("vb").expect("delete");
    assert!(!kept("m", shared));
    assert!(kept("m", memory));

    // Through a session: what hybrid recall embeds for a context is the session's.
    let seen = std::sync::Arc::new(Seen::default());
    let mut options = CompactOptions::new(0);
    options.embedder = Some(seen.clone());
    let mut s = Session::create(store, &new_session("vc", 2_000))
        .expect("create")
        .with_options(options);
    s.append(vec![Message::system("sys")]).expect("append");
    for i in 0..20 {
        s.append(turn(i)).expect("append");
    }
    let query = "which module had the failing test";
    s.context(Some(600), Some(query)).expect("context");
    let hashes: Vec<_> = seen
        .0
        .lock()
        .expect("lock")
        .iter()
        .filter(|t| t.as_str() != query)
        .map(|t| text_hash(t))
        .collect();
    assert!(hashes.len() > 10, "{} texts embedded", hashes.len());
    assert!(
        hashes.iter().all(|h| kept("seen", *h)),
        "the vectors are kept"
    );
    store.delete_session("vc").expect("delete");
    assert!(
        hashes.iter().all(|h| !kept("seen", *h)),
        "deleting the session forgets them"
    );
}

fn the_agents_compact_history_tool(store: &dyn EngramStore) {
    use crate::tools::{CompactHistoryArgs, compact_history_tool_openai};
    let mut s = Session::create(store, &new_session("h", 50_000)).expect("create");
    s.append(vec![Message::system("You are a coding agent.")])
        .expect("append");
    s.append(turn(0)).expect("append");
    let args = CompactHistoryArgs::parse(&json!("{\"preserveRecentMessages\": 10}")).expect("args");
    assert_eq!(
        s.compact_history(&args).expect("too few"),
        "Not enough messages to compact. No changes made."
    );
    // The 2 messages asked for stay with the call their tool output answers, so everything is
    // what compaction keeps (the system prompt, the task, the newest turn): nothing changes,
    // and the answer says why of the target, in one number. (It used to summarise the call and
    // its output and keep 1 message of the 2, and to name a budget inside the target.)
    let keep_two = CompactHistoryArgs::parse(&json!({"preserveRecentMessages": 2})).expect("args");
    let text = s.compact_history(&keep_two).expect("nothing to do");
    assert!(
        text.starts_with("No changes made: the target of ")
            && text.contains("need ")
            && !text.contains("budget"),
        "{text}"
    );
    assert!(store.compactions("h", false).expect("records").is_empty());
    for i in 1..12 {
        s.append(turn(i)).expect("append");
    }
    let status = s.status().expect("status");
    assert_eq!(status.max_tokens, 50_000);
    assert!(status.to_message().text().contains("Token Usage: "));
    let before = s.view().expect("view");
    let text = s.compact_history(&args).expect("compacted");
    // 48 messages after the system prompt; at least the 10 newest stay (whole tool units).
    let compacted: usize = text
        .strip_prefix("Successfully compacted ")
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!((35..=38).contains(&compacted), "{text}");
    // At least the 10 asked for, as whole tool units; the answer says how many.
    let preserved: usize = text
        .split("preserving the ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!((10..=12).contains(&preserved), "{text}");
    assert!(
        text.contains(" most recent messages. Reduced message history size by approximately "),
        "{text}"
    );
    let after = s.view().expect("view");
    let tail = after
        .messages
        .iter()
        .rev()
        .take_while(|v| v.kind == crate::compact::Kind::Original)
        .count();
    assert_eq!(tail, preserved, "{text}");
    assert!(
        text.ends_with(&format!("({} -> {} tokens).", before.tokens, after.tokens)),
        "{text}"
    );
    assert!(after.tokens < before.tokens);
    let tail: Vec<&Message> = after
        .messages
        .iter()
        .rev()
        .take(10)
        .map(|v| &v.message)
        .collect();
    let expected: Vec<&Message> = before
        .messages
        .iter()
        .rev()
        .take(10)
        .map(|v| &v.message)
        .collect();
    assert_eq!(tail, expected, "the 10 most recent messages are unchanged");
    assert_eq!(after.messages[0].message.text(), "You are a coding agent.");
    assert_eq!(s.log().expect("log").len(), 49, "the log keeps everything");
    assert_eq!(
        compact_history_tool_openai()["function"]["name"],
        "compact_history"
    );

    // Recent messages to preserve that the window cannot hold: an answer that tells the agent
    // to ask for fewer (not a failed call), and nothing changes.
    let mut small = Session::create(store, &new_session("h-small", 1_000)).expect("create");
    small
        .append(vec![
            Message::system("You are a coding agent."),
            Message::user("Fix the failing test in src/lib.rs"),
        ])
        .expect("append");
    for i in 0..3 {
        let id = format!("call_{i}");
        small
            .append(vec![
                Message::assistant_tool_calls(vec![ToolCall::function(&id, "shell", "{}")]),
                Message::tool(&id, "log line ".repeat(200)),
            ])
            .expect("append");
    }
    let before = small.view().expect("view");
    let records = store.compactions("h-small", false).expect("records").len();
    let reply = small
        .handle_tool_call("compact_history", &json!({"preserveRecentMessages": 6}))
        .expect("one of engram's tools")
        .expect("an answer, not a failure");
    assert!(
        !reply.is_error
            && reply
                .text
                .starts_with("No changes made: the last 6 messages, ")
            && reply.text.contains("more than the window of 1000 tokens")
            && reply.text.ends_with("Preserve fewer recent messages."),
        "{}",
        reply.text
    );
    assert_eq!(small.view().expect("view"), before);
    assert_eq!(
        store.compactions("h-small", false).expect("records").len(),
        records
    );
}

/// `search_history` finds an evicted message by a word only it holds, `read_history` returns it
/// byte for byte, and every tool answers bad arguments with a tool error that names them.
fn the_agents_history_tools(store: &dyn EngramStore) {
    use crate::tools::{TOOL_NAMES, ToolReply};
    let mut s = Session::create(store, &new_session("t", 50_000)).expect("create");
    s.append(vec![Message::system("You are a coding agent.")])
        .expect("append");
    for i in 0..12 {
        s.append(turn(i)).expect("append");
    }
    // A tool output whose one rare word is the needle, then enough turns to push it out.
    let needle_output = "warning: zanzibarite deprecated in src/legacy.rs:7\n\tmore\tdetail \u{e9}";
    s.append(vec![
        Message::assistant_tool_calls(vec![ToolCall::function(
            "call_needle",
            "grep",
            "{\"pattern\": \"deprecated\"}",
        )]),
        Message::tool("call_needle", needle_output),
    ])
    .expect("append");
    for i in 12..16 {
        s.append(turn(i)).expect("append");
    }
    let log = s.log().expect("log");
    let needle = log
        .iter()
        .find(|m| m.message.text() == needle_output)
        .expect("stored")
        .clone();
    let mut call = |name: &str, args: serde_json::Value| -> ToolReply {
        s.handle_tool_call(name, &args)
            .unwrap_or_else(|| panic!("{name} is engram's"))
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let compacted = call("compact_history", json!({"preserveRecentMessages": 4}));
    assert!(!compacted.is_error, "{}", compacted.text);

    let found = call("search_history", json!({"query": "zanzibarite"}));
    assert!(!found.is_error, "{}", found.text);
    let found: serde_json::Value = serde_json::from_str(&found.text).expect("json");
    let hit = &found["hits"][0];
    assert_eq!(hit["id"], json!(needle.id), "{found}");
    assert_eq!(hit["tool"], "grep", "{found}");
    assert_eq!(hit["in_view"], false, "compacted out: {found}");
    assert_eq!(
        hit["exact"], true,
        "it holds the query word for word: {found}"
    );
    assert!(
        hit["snippet"]
            .as_str()
            .unwrap_or_default()
            .contains("zanzibarite"),
        "{found}"
    );
    // As OpenAI sends arguments: a JSON string.
    let read = call(
        "read_history",
        json!(format!(
            "{{\"ids\": [\"{}\", \"nope\"], \"max_tokens\": 10000}}",
            needle.id
        )),
    );
    assert!(!read.is_error, "{}", read.text);
    let read: serde_json::Value = serde_json::from_str(&read.text).expect("json");
    assert_eq!(read["messages"][0]["message"], needle.message.to_value());
    assert_eq!(
        read["messages"][0]["message"]["content"].as_str(),
        Some(needle_output),
        "byte for byte"
    );
    assert_eq!(read["not_found"], json!(["nope"]));
    // A range, cut by the budget with a note saying how to read the rest.
    let first = &log[1].id;
    let range = call("read_history", json!({"from": first, "max_tokens": 200}));
    let range: serde_json::Value = serde_json::from_str(&range.text).expect("json");
    assert!(range["messages"].as_array().is_some_and(|m| !m.is_empty()));
    assert!(
        range["note"]
            .as_str()
            .unwrap_or_default()
            .contains("read_history with from="),
        "a range, not an id each: {range}"
    );

    // The index the first search built follows later appends and restores.
    s.checkpoint("before-wombat").expect("checkpoint");
    s.append(vec![Message::user("the wombatword is new")])
        .expect("append");
    let s2 = Session::open(store, "t").expect("open");
    let hits = s2.search_history("wombatword", 5).expect("search");
    // The one message that holds the word first (the turn before it follows, as the turn a
    // reply answers does in recall).
    assert_eq!(
        hits.iter()
            .filter(|h| h.snippet.contains("wombatword"))
            .count(),
        1,
        "{hits:?}"
    );
    assert!(hits[0].snippet.contains("wombatword"), "{hits:?}");
    assert!(hits[0].in_view && !hits[0].abandoned, "{hits:?}");
    let mut s2 = s2;
    s2.restore("before-wombat").expect("restore");
    let s2 = Session::open(store, "t").expect("open");
    let hits = s2.search_history("wombatword", 5).expect("search");
    assert!(hits[0].snippet.contains("wombatword"), "{hits:?}");
    assert!(hits[0].abandoned && !hits[0].in_view, "{hits:?}");
    let mut s = Session::open(store, "t").expect("open");
    let mut call = |name: &str, args: serde_json::Value| -> ToolReply {
        s.handle_tool_call(name, &args)
            .unwrap_or_else(|| panic!("{name} is engram's"))
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let status = call("context_status", json!({}));
    let status: serde_json::Value = serde_json::from_str(&status.text).expect("json");
    assert_eq!(status["max_tokens"], 50_000);
    assert_eq!(status["compactions"], 1);
    assert!(
        status.get("ledger").is_none(),
        "no tool call recorded anything: {status}"
    );
    let added = call(
        "memory_add",
        json!({"content": "the legacy module is deprecated"}),
    );
    assert!(!added.is_error, "{}", added.text);
    let hits = call("memory_search", json!({"query": "legacy deprecated"}));
    let hits: serde_json::Value = serde_json::from_str(&hits.text).expect("json");
    assert_eq!(hits["results"][0]["session_id"], "t", "{hits}");

    // Bad arguments: a tool error naming the argument; nothing is written.
    let before = store.compactions("t", true).expect("records").len();
    for (name, args, says) in [
        ("search_history", json!({}), "`query`"),
        (
            "search_history",
            json!({"query": "x", "limit": 0}),
            "`limit`",
        ),
        (
            "search_history",
            json!({"query": "x", "limt": 3}),
            "`limt`: unknown field; expected one of `query`",
        ),
        ("read_history", json!({}), "`ids` or `from`"),
        (
            "read_history",
            json!({"ids": "m1", "from": "m2"}),
            "not both",
        ),
        ("read_history", json!({"ids": [1]}), "`ids"),
        (
            "compact_history",
            json!({"preserveRecentMessages": 0}),
            "preserveRecentMessages",
        ),
        ("memory_add", json!({"content": " "}), "`content`"),
        (
            "memory_search",
            json!({"query": "x", "tier": "dreams"}),
            "unknown tier",
        ),
        ("context_status", json!("not json"), "not JSON"),
        (
            "context_status",
            json!({"session": "other"}),
            "bound to session t",
        ),
    ] {
        let reply = call(name, args.clone());
        assert!(reply.is_error, "{name} {args}: {}", reply.text);
        assert!(reply.text.contains(says), "{name} {args}: {}", reply.text);
    }
    assert_eq!(store.compactions("t", true).expect("records").len(), before);
    assert!(s.handle_tool_call("shell", &json!({})).is_none());
    assert_eq!(
        crate::tools::schemas(crate::tools::SchemaFormat::Anthropic)
            .iter()
            .map(|t| t["name"].as_str().unwrap_or_default().to_owned())
            .collect::<Vec<_>>(),
        TOOL_NAMES
    );
}
