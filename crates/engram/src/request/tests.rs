use super::*;
use serde_json::json;

#[test]
fn an_entry_with_a_key_it_does_not_have_is_refused() {
    let read = |value: Value| AddMemory::new(false).dated(0).entry(&value);
    let entry = read(json!({"content": "x", "source": "s", "importance": 0.9})).expect("an entry");
    assert_eq!(entry.importance, 0.9);
    assert!(entry.id.is_some(), "every entry gets an id");
    let e = read(json!({"content": "x", "source": "s", "importanse": 0.9}))
        .expect_err("a misspelt key");
    assert_eq!(e.field().unwrap_or_default(), "importanse");
    assert!(e.why().unwrap_or_default().contains("importance"), "{e}");
    // An export's line reads back, with or without the mark `engram export` gives it.
    let line = crate::session::export::memory_line(&crate::memory::MemoryEntry {
        id: "mem_1".into(),
        tier: Tier::Archive,
        content: "x".into(),
        source: "s".into(),
        session_id: None,
        created_at: 0,
        importance: 0.5,
        metadata: Value::Null,
        summary_of: vec!["mem_0".into()],
    });
    let back = read(line.clone()).expect("reads back");
    assert_eq!(
        (back.id.as_deref(), back.summary_of),
        (Some("mem_1"), vec!["mem_0".into()])
    );
    let mut other = line;
    other["type"] = "session".into();
    assert_eq!(
        read(other)
            .expect_err("not a memory line")
            .field()
            .unwrap_or_default(),
        "type"
    );
}

#[test]
fn added_memory_is_redacted_as_configured_on_every_path() {
    let key = "sk-proj-abcdefghijklmnopqrstuvwxyz0123";
    let entry = json!({"content": format!("the key is {key}"), "source": "chat"});
    let mut add = AddMemory::new(true);
    assert!(!add.entry(&entry).expect("one").content.contains(key));
    let body = json!({"entries": [entry.clone(), entry.clone()]});
    for e in add.body(&body).expect("a list") {
        assert!(!e.content.contains(key), "{}", e.content);
    }
    let tool = add
        .tool_call(Some(format!("save {key}")), None, Some("s1"))
        .expect("tool");
    assert!(!tool.content.contains(key));
    assert_eq!(
        (tool.source.as_str(), tool.session_id.as_deref()),
        ("agent", Some("s1"))
    );
    assert_eq!(add.redacted(), 4);
    // Off when the setting says so.
    let mut raw = AddMemory::new(false);
    assert!(raw.entry(&entry).expect("one").content.contains(key));
    assert_eq!(raw.redacted(), 0);
}

#[test]
fn a_bad_entry_in_a_list_is_named_by_its_place() {
    let mut add = AddMemory::new(true);
    let e = add
        .body(&json!({"entries": [{"content": "a", "source": "s"}, {"content": "b"}]}))
        .expect_err("the second has no source");
    assert_eq!(e.field().unwrap_or_default(), "entries[1].source");
    let e = add
        .body(&json!({"entries": [], "source": "s"}))
        .expect_err("a field beside the list");
    assert_eq!(e.field().unwrap_or_default(), "source");
    let e = add.list(&json!([1])).expect_err("not an object");
    assert_eq!(e.field().unwrap_or_default(), "entries[0]");
    assert!(e.why().unwrap_or_default().contains("not a number"), "{e}");
    let e = add
        .tool_call(Some(" ".into()), None, None)
        .expect_err("blank");
    assert_eq!(e.to_string(), "`content`: is required: the fact to save");
}

#[test]
fn a_session_id_is_bounded_and_printable() {
    let registry = ModelRegistry::builtin();
    let new = |id: &str| {
        NewSessionRequest {
            id: Some(id.to_owned()),
            ..NewSessionRequest::default()
        }
        .into_new_session(&registry, None, 0)
    };
    assert!(new("run-42/agent:x").is_ok());
    assert!(new(&"a".repeat(128)).is_ok());
    for (id, says) in [
        ("a".repeat(200_000), "has 200000 characters"),
        ("a\nb".to_owned(), "holds '\\n'"),
        ("a b".to_owned(), "holds ' '"),
        ("\u{7}".to_owned(), "holds '\\u{7}'"),
    ] {
        let e = new(&id).expect_err("refused");
        assert_eq!(e.field().unwrap_or_default(), "id");
        assert!(e.why().unwrap_or_default().starts_with(says), "{e}");
        assert!(
            e.why().unwrap_or_default().contains("1 to 128 characters"),
            "the rule is said: {e}"
        );
    }
    assert_eq!(
        new("").expect_err("empty").why().unwrap_or_default(),
        "is empty"
    );
    // The core refuses it too, whichever front made the session.
    let store = crate::in_memory::InMemoryStore::new();
    let mut session = crate::session::new_session(&registry, "gpt-4o", None, 0);
    session.id = Some("two\nlines".into());
    assert!(Session::create(&store, &session).is_err());
}

#[test]
fn a_field_of_the_wrong_type_is_named() {
    let e = from_json::<NewSessionRequest>(json!({"window": "big"})).unwrap_err();
    assert_eq!(e.field().unwrap_or_default(), "window");
    assert!(
        e.why()
            .unwrap_or_default()
            .contains("must be a whole number, not the text"),
        "{e}"
    );
    let e = from_json::<CompactRequest>(json!({"preserve_window": 1})).unwrap_err();
    assert_eq!(e.field().unwrap_or_default(), "preserve_window", "{e}");
    let e = from_json::<CompactRequest>(json!([1])).unwrap_err();
    assert!(e.why().unwrap_or_default().contains("a JSON object"), "{e}");
    let e = from_json::<CompactRequest>(json!({"budget": 10, "budegt": 5})).unwrap_err();
    assert_eq!(e.field().unwrap_or_default(), "budegt", "{e}");
    assert!(
        e.why()
            .unwrap_or_default()
            .starts_with("unknown field; expected one of `model`, `tokenizer`, `budget`"),
        "{e}"
    );
    // Aliases are fields too; a map takes any key.
    let q = from_json::<SearchRequest>(json!({"q": "x", "tier": "working"})).unwrap();
    assert_eq!(q.text.as_deref(), Some("x"));
    let e = from_json::<SearchRequest>(json!({"query": "x"})).unwrap_err();
    assert_eq!(e.field().unwrap_or_default(), "query", "{e}");
    assert!(
        e.why().unwrap_or_default().contains("`q`, `text`, `limit`"),
        "{e}"
    );
    let any = from_json::<std::collections::HashMap<String, u32>>(json!({"a": 1})).unwrap();
    assert_eq!(any["a"], 1);
    assert_eq!(
        from_json::<ContextRequest>(Value::Null).unwrap(),
        ContextRequest::default()
    );
}

#[test]
fn each_mistake_has_one_text() {
    let registry = ModelRegistry::builtin();
    let bad = |r: CompactRequest| r.resolve(&registry, None).unwrap_err();
    let e = bad(CompactRequest {
        strategy: Some("magic".into()),
        ..Default::default()
    });
    assert_eq!(e.field().unwrap_or_default(), "strategy");
    assert!(
        e.why().unwrap_or_default().contains("unknown strategy"),
        "{e}"
    );
    let e = bad(CompactRequest {
        budget: Some(0),
        ..Default::default()
    });
    assert_eq!(
        (e.field(), e.flag().as_deref()),
        (Some("budget"), Some("--budget"))
    );
    let e = bad(CompactRequest {
        digest_share: Some(2.0),
        ..Default::default()
    });
    assert_eq!(e.flag().as_deref(), Some("--digest-share"));
    assert_eq!(
        e.why().unwrap_or_default(),
        "must be between 0 and 1, not 2"
    );
    let e = SessionCompactRequest {
        target: Some(0.0),
        ..Default::default()
    }
    .resolve(1_000, 0, 0, &TriggerPolicy::default())
    .unwrap_err();
    assert_eq!(e.field().unwrap_or_default(), "target");
    let e = NewSessionRequest {
        id: Some(" ".into()),
        ..Default::default()
    }
    .into_new_session(&registry, None, 0)
    .unwrap_err();
    assert_eq!(e.to_string(), "`id`: is empty");
}

#[test]
fn a_search_takes_tiers_as_a_list_or_a_string() {
    let q = from_json::<SearchRequest>(json!({"q": "cargo", "tier": "working, learning"}))
        .unwrap()
        .into_query("q")
        .unwrap();
    assert_eq!(q.tiers, vec![Tier::Working, Tier::Learning]);
    assert_eq!(q.limit, 10);
    let q = from_json::<SearchRequest>(json!({"text": "x", "tiers": ["archive"], "limit": 3}))
        .unwrap()
        .into_query("text")
        .unwrap();
    assert_eq!((q.tiers, q.limit), (vec![Tier::Archive], 3));
    let e = SearchRequest::default().into_query("q").unwrap_err();
    assert_eq!(e.to_string(), "`q`: is required");
    let e = from_json::<SearchRequest>(json!({"text": "x", "tiers": "dreams"}))
        .unwrap()
        .into_query("text")
        .unwrap_err();
    assert_eq!(e.field().unwrap_or_default(), "tiers");
    let e = from_json::<SearchRequest>(json!({"text": "x", "since": "yesterday"}))
        .unwrap()
        .into_query("text")
        .unwrap_err();
    assert_eq!(e.field().unwrap_or_default(), "since");
}

#[test]
fn a_sleep_request_sets_this_sleep_only() {
    let mut settings = SleepSettings::default();
    let at = from_json::<SleepRequest>(
        json!({"now": "2026-11-21T07:00:00Z", "ttl_hours": 2, "max_working": 5}),
    )
    .unwrap()
    .apply(&mut settings)
    .unwrap();
    assert_eq!(at, parse_time("2026-11-21T07:00:00Z").unwrap());
    assert_eq!(
        (settings.policy.ttl_ms, settings.policy.max_working),
        (2 * 3600 * 1000, 5)
    );
    for (bad, field) in [
        (json!({"ttl_hours": 0}), "ttl_hours"),
        (json!({"max_working": 0}), "max_working"),
        (json!({"now": "dawn"}), "now"),
    ] {
        let e = from_json::<SleepRequest>(bad)
            .unwrap()
            .apply(&mut SleepSettings::default())
            .unwrap_err();
        assert_eq!(e.field().unwrap_or_default(), field, "{e}");
    }
}

#[test]
fn defaults_come_from_the_model_and_the_policy() {
    let registry = ModelRegistry::builtin();
    let c = CompactRequest::default()
        .resolve(&registry, Some("gpt-4o"))
        .unwrap();
    let spec = registry.resolve("gpt-4o").spec;
    assert_eq!(
        c.options.budget,
        policy::request_limit(spec.context_window, spec.max_output_tokens, None)
    );
    let m = SessionCompactRequest {
        focus: Some("  ".into()),
        ..Default::default()
    }
    .resolve(10_000, 2_000, 8_000, &TriggerPolicy::default())
    .unwrap();
    assert_eq!((m.target, m.focus), (4_000, None), "the policy's target");
    let args = ContextRequest {
        model: Some("gpt-4o".into()),
        query: Some("".into()),
        ..Default::default()
    }
    .resolve(&registry)
    .unwrap();
    assert_eq!(args.budget, Some(c.options.budget));
    assert_eq!(args.query, None);
    let new = NewSessionRequest::default()
        .into_new_session(&registry, Some("gpt-4o"), 0)
        .unwrap();
    assert_eq!(new.window, spec.context_window);
}
