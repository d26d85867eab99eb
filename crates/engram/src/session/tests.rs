use crate::in_memory::InMemoryStore;

/// Session "s" of a 100,000-token window, counted at four characters a token.
fn chars4_session() -> super::NewSession {
    super::NewSession {
        id: Some("s".into()),
        name: None,
        model: "test-model".into(),
        tokenizer: "chars4".into(),
        token_factor: 1.0,
        window: 100_000,
        metadata: serde_json::Value::Null,
        created_at: 1_000,
    }
}

#[test]
fn the_context_sent_repairs_what_the_log_was_given() {
    use crate::Message;
    use crate::compact::Kind;
    use crate::compact::units::NO_RESULT;
    use crate::message::ToolCall;
    let store = InMemoryStore::new();
    let mut session = super::Session::create(&store, &chars4_session()).expect("creates");
    let call =
        |id: &str| Message::assistant_tool_calls(vec![ToolCall::function(id, "shell", "{}")]);
    let appended = vec![
        Message::user("Fix the build."),
        // A result whose call the log never got.
        Message::tool("lost", "exit 0"),
        // A call that no result answers before the next user turn.
        call("c1"),
        Message::user("Go on."),
        // The newest call: the agent is about to answer it.
        call("c2"),
    ];
    session.append(appended.clone()).expect("appends");

    let context = session.context(None, None).expect("context");
    let roles: Vec<&str> = context
        .messages
        .iter()
        .map(|v| v.message.role.as_str())
        .collect();
    assert_eq!(roles.join(" "), "user user assistant tool user assistant");
    let logged = session.log().expect("log");
    let orphan = &context.messages[1];
    assert!(orphan.message.text().contains("lost"), "{orphan:?}");
    assert!(orphan.message.text().contains("exit 0"), "{orphan:?}");
    assert_eq!(orphan.source_ids, [logged[1].id.clone()]);
    let note = &context.messages[3];
    assert_eq!(note.kind, Kind::Status);
    assert_eq!(note.message.tool_call_id(), Some("c1"));
    assert_eq!(note.message.text(), NO_RESULT);
    assert_eq!(context.report.repaired, 2);
    let counter = &session.counter;
    let exact = counter.accounting().per_conversation
        + context
            .messages
            .iter()
            .map(|v| counter.count_message(&v.message).total())
            .sum::<usize>();
    assert_eq!(context.report.tokens_after, exact);
    assert!(context.report.tokens_after > context.report.tokens_before);

    // The log and the stored view keep what they were given (the log names each message).
    let log: Vec<Message> = logged
        .into_iter()
        .map(|m| {
            let mut message = m.message;
            message.id = None;
            message
        })
        .collect();
    assert_eq!(log, appended);
    assert_eq!(session.view().expect("view").messages.len(), appended.len());

    // A well-formed view is sent as it is.
    let mut new = chars4_session();
    new.id = Some("t".into());
    let mut well_formed = super::Session::create(&store, &new).expect("creates");
    well_formed
        .append(vec![
            Message::user("Fix the build."),
            call("c3"),
            Message::tool("c3", "ok"),
        ])
        .expect("appends");
    let view = well_formed.view().expect("view");
    let context = well_formed.context(None, None).expect("context");
    assert_eq!(context.report.repaired, 0);
    assert_eq!(context.messages, view.messages);
    assert_eq!(context.report.tokens_after, view.tokens);
}

#[test]
fn search_history_ranks_by_compactions_recall() {
    use crate::Message;
    let store = InMemoryStore::new();
    let new = chars4_session();
    let mut session = super::Session::create(&store, &new).expect("creates");
    let named = |name: &str, text: &str| {
        let mut m = Message::user(text);
        m.set_name(Some(name.into()));
        m
    };
    let mut messages = vec![
        named("Caroline", "Hi Mel, long time no see!"),
        named("Caroline", "What did you take away from the book?"),
        named("Melanie", "It taught me self-acceptance, honestly."),
        named("Melanie", "We took a road trip to the coast."),
    ];
    for i in 0..20 {
        messages.push(named(
            "Caroline",
            &format!("the weather was fine on day {i}"),
        ));
        messages.push(named("Melanie", &format!("glad to hear it, day {i}")));
    }
    messages.push(named("Melanie", "I painted my old bike blue"));
    messages.push(named("Caroline", "I painted a sunset over the lake"));
    messages.insert(0, Message::system("You are a friendly chat companion."));
    session.append(messages).expect("appends");

    // The system prompt is in every view: a hit only when it holds the query's words, not
    // for the credit the matching first turn passes back to it.
    let hits = session.search_history("long time", 5).expect("searches");
    assert!(
        hits.first()
            .is_some_and(|h| h.snippet.contains("long time no see")),
        "{hits:?}"
    );
    assert!(hits.iter().all(|h| h.role != "system"), "{hits:?}");
    let hits = session
        .search_history("chat companion", 5)
        .expect("searches");
    assert_eq!(
        hits.first().map(|h| h.role.as_str()),
        Some("system"),
        "{hits:?}"
    );

    // The reply to a matching question shares no word with the query, and is found.
    let hits = session
        .search_history("take away from the book", 5)
        .expect("searches");
    assert!(
        hits.iter().any(|h| h.snippet.contains("self-acceptance")),
        "the answer after the question: {hits:?}"
    );
    // The speaker the query names comes first among equal matches (the newer one first
    // otherwise).
    let hits = session
        .search_history("what did Melanie paint", 5)
        .expect("searches");
    assert!(
        hits[0].snippet.contains("bike"),
        "Melanie's own turn first: {hits:?}"
    );
    assert_eq!(hits[0].tool, None, "a speaker is not a tool: {hits:?}");
    // A compound the query writes as one word finds it written as two, as in compaction.
    let hits = session.search_history("roadtrip", 1).expect("searches");
    assert!(
        hits.first()
            .is_some_and(|h| h.snippet.contains("road trip")),
        "the words joined: {hits:?}"
    );

    // Once compaction leaves the old book talk out of the view, a search finds it before
    // a newer, better match the view still holds.
    session
        .append(vec![named(
            "Caroline",
            "the book club reads a new book; bring the book on Friday",
        )])
        .expect("appends");
    let compaction = session
        .compact(super::Trigger::Manual, 200, None)
        .expect("compacts");
    assert!(
        matches!(compaction, super::Compaction::Recorded(_)),
        "{compaction:?}"
    );
    let hits = session.search_history("the book", 5).expect("searches");
    assert!(
        !hits[0].in_view && hits[0].snippet.contains("take away from the book"),
        "out of the view first: {hits:?}"
    );
    assert!(
        hits.iter()
            .any(|h| h.in_view && h.snippet.contains("book club")),
        "the view's match after it: {hits:?}"
    );
    // Unless the view's message holds the whole query word for word.
    let hits = session
        .search_history("bring the book on Friday", 5)
        .expect("searches");
    assert!(
        hits[0].in_view && hits[0].snippet.contains("book club"),
        "the exact match first: {hits:?}"
    );
    assert!(hits[0].exact && !hits[1].exact, "marked as exact: {hits:?}");
    assert!(!hits[1].in_view, "then what the view lost: {hits:?}");
}

/// `memory_search` ranks as memory search does everywhere (by meaning too when the session
/// has an embedder), and both memory tools run without a session, for a front serving several.
#[test]
fn the_memory_tools_search_by_meaning_and_need_no_session() {
    use crate::embed::Topics;
    use crate::request::tool_calls::run_memory_tool;
    use crate::tools::{MEMORY_ADD, MEMORY_SEARCH, SEARCH_HISTORY};
    use serde_json::{Value, json};
    use std::sync::Arc;
    let store = InMemoryStore::new();
    let session = super::Session::create(&store, &chars4_session()).expect("creates");
    let mut options = session.options().clone();
    options.embedder = Some(Arc::new(Topics));
    let mut session = session.with_options(options);
    let reply = |r: Option<Result<crate::tools::ToolReply, crate::Error>>| {
        let r = r.expect("a memory tool").expect("the store answers");
        (
            serde_json::from_str::<Value>(&r.text).unwrap_or(Value::Null),
            r,
        )
    };

    let (added, _) = reply(run_memory_tool(
        &store,
        None,
        None,
        true,
        MEMORY_ADD,
        &json!({"content": "Rex is our family dog", "source": "notes"}),
    ));
    assert_eq!(added["session_id"], Value::Null, "{added}");
    for i in 0..5 {
        let (_, r) = reply(run_memory_tool(
            &store,
            None,
            Some("elsewhere"),
            true,
            MEMORY_ADD,
            &json!({"content": format!("the meeting moved to room {i}")}),
        ));
        assert!(!r.is_error, "{r:?}");
    }
    let stored =
        crate::memory::MemoryStore::get(&store, added["id"].as_str().expect("id")).expect("reads");
    assert_eq!(stored.map(|e| e.session_id), Some(None));

    // Words alone do not connect "puppy" to Rex; the session's embedder does.
    let query = json!({"query": "my puppy"});
    let (words, _) = reply(run_memory_tool(
        &store,
        None,
        None,
        true,
        MEMORY_SEARCH,
        &query,
    ));
    assert!(!words.to_string().contains("Rex"), "{words}");
    let (_, r) = session
        .handle_tool_call(MEMORY_SEARCH, &query)
        .map(|r| reply(Some(r)))
        .expect("a tool");
    assert!(!r.is_error, "{r:?}");
    let found: Value = serde_json::from_str(&r.text).expect("json");
    assert_eq!(
        found["results"][0]["content"], "Rex is our family dog",
        "{found}"
    );

    // The other tools need a session; bad arguments are tool errors.
    assert!(run_memory_tool(&store, None, None, true, SEARCH_HISTORY, &json!({})).is_none());
    let (_, r) = reply(run_memory_tool(
        &store,
        None,
        None,
        true,
        MEMORY_SEARCH,
        &json!({"query": "x", "limit": 0}),
    ));
    assert!(r.is_error && r.text.contains("`limit`"), "{r:?}");
}

#[test]
fn hybrid_recall_embeds_each_message_once_and_keeps_it_in_the_store() {
    use crate::Message;
    use crate::embed::{Counting, VectorStore, text_hash};
    use std::sync::Arc;
    let store = InMemoryStore::new();
    let new = chars4_session();
    let embedder = Arc::new(Counting::default());
    let session = super::Session::create(&store, &new).expect("creates");
    let mut options = session.options().clone();
    options.embedder = Some(embedder.clone());
    let mut session = session.with_options(options);
    let mut messages = vec![Message::user("My dog Rex chases frisbees in the park")];
    for i in 0..40 {
        messages.push(Message::user(format!("the meeting moved to room {i}")));
        messages.push(Message::assistant(format!("noted, room {i}")));
    }
    session.append(messages).expect("appends");

    let hits = session
        .search_history("which pet do I have", 3)
        .expect("searches");
    assert!(
        hits.iter().any(|h| h.snippet.contains("Rex")),
        "found by meaning: {hits:?}"
    );
    let first = embedder.embedded();
    assert!(first > 80, "every message embedded once: {first}");
    session
        .search_history("which pet do I have", 3)
        .expect("searches");
    assert_eq!(embedder.embedded(), first + 1, "then only the query");
    let mut text = String::new();
    crate::retrieval::push_meaning_text(&session.log().expect("log")[0].message, &mut text);
    let kept = store
        .vectors("counting", &[text_hash(&text)])
        .expect("reads");
    assert!(
        kept[0].is_some(),
        "the message's vector is in the session's store"
    );
    // The query's is not.
    assert_eq!(
        store
            .vectors("counting", &[text_hash("which pet do I have")])
            .expect("reads"),
        [None]
    );

    // A compaction with a query embeds a message by the same text: it finds the vectors
    // search_history kept and embeds the query alone.
    let before = embedder.embedded();
    session
        .context(Some(200), Some("which pet do I have"))
        .expect("compacts");
    assert_eq!(embedder.embedded() - before, 1, "the query alone");
    session
        .context(Some(200), Some("which pet do I have"))
        .expect("compacts");
    assert_eq!(embedder.embedded() - before, 2, "again the query alone");
}
