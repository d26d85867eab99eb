//! Compactions of every kind on a stored session: threshold, manual, incremental summaries,
//! sleep, status updates, and checkpoints with the restores they allow.

use super::support::*;

use crate::Error;

/// Records what each summary request carried, and answers as the deterministic summarizer.
#[derive(Debug, Default)]
pub(super) struct Recording {
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
    ) -> Result<String, Error> {
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

pub(super) fn summaries_are_incremental(store: &dyn EngramStore) {
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

pub(super) fn status_updates_come_on_schedule_with_the_cost(store: &dyn EngramStore) {
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

pub(super) fn threshold_compaction_keeps_the_log_and_the_invariants(store: &dyn EngramStore) {
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
    // A manual compaction with a focus brings the focus back. Turns enough after the last
    // automatic compaction (which keeps little more than the last steps) that one to 1,500
    // tokens has something to do.
    let mut i = 40;
    while s.view_tokens().expect("view tokens") <= 1_600 {
        s.append(turn(i)).expect("append");
        i += 1;
    }
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

pub(super) fn checkpoints_restore_without_deleting(store: &dyn EngramStore) {
    let mut s = Session::create(store, &new_session("c", 2_500)).expect("create");
    s.append(vec![Message::system("sys")]).expect("append");
    for i in 0..3 {
        s.append(turn(i)).expect("append");
    }
    let cp = s.checkpoint("before-refactor").expect("checkpoint");
    assert_eq!(cp.messages, 13);
    let view_at_cp = s.view().expect("view");
    assert!(
        matches!(s.checkpoint("before-refactor"), Err(Error::Conflict(_))),
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
    assert!(matches!(s.restore("later"), Err(Error::Conflict(_))));
    assert!(matches!(s.restore("nope"), Err(Error::NotFound { .. })));
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

pub(super) fn a_compaction_from_before_a_restore_is_refused(store: &dyn EngramStore) {
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
    assert!(matches!(err, Error::Conflict(_)), "{err}");
    assert_eq!(
        store.stats().expect("stats").journal,
        0,
        "nothing was written"
    );
    assert!(store.compactions("e", true).expect("records").is_empty());
}

pub(super) fn sleep_compaction_extracts_facts_first(store: &dyn EngramStore) {
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
