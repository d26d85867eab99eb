//! The agent's own history tools over a stored session.

use super::support::*;

pub(super) fn the_agents_compact_history_tool(store: &dyn EngramStore) {
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
pub(super) fn the_agents_history_tools(store: &dyn EngramStore) {
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
