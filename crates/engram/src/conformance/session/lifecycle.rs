//! A session's life in a store: created, appended to (atomically, once per key), exported and
//! imported, its timeline kept, and deleted with everything it owns.

use super::support::*;

use crate::Error;

pub(super) fn export_and_import_round_trip(store: &dyn EngramStore, other: &dyn EngramStore) {
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
        Err(Error::Conflict(_))
    ));
}

pub(super) fn create_get_list(store: &dyn EngramStore) {
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
            Err(Error::Conflict(_))
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
        matches!(Session::open(store, "nope"), Err(Error::NotFound { .. })),
        "opening an unknown session says so"
    );
}

pub(super) fn append_is_atomic_and_ids_are_unique(store: &dyn EngramStore) {
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
pub(super) fn keyed_appends_are_stored_once(store: &dyn EngramStore) {
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
        matches!(&e, Error::Conflict(m) if m.contains("Idempotency-Key")),
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

/// A session's timeline: none until built, built at sleep, kept until the history changes,
/// refused for an unknown session, and deleted with its session.
pub(super) fn timelines_are_kept_per_session(store: &dyn EngramStore) {
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
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        store.timeline("nope"),
        Err(Error::NotFound { .. })
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

pub(super) fn deleting_a_session_removes_what_it_owns(store: &dyn EngramStore) {
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
        Err(Error::NotFound { .. })
    ));
}

/// Embeds as [`Topics`](crate::embed::Topics) does, and remembers the texts it embedded.
#[derive(Debug, Default)]
pub(super) struct Seen(std::sync::Mutex<Vec<String>>);

impl crate::embed::Embedder for Seen {
    fn name(&self) -> &str {
        "seen"
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, Error> {
        let mut seen = self.0.lock().expect("lock");
        seen.extend(texts.iter().map(|t| (*t).to_owned()));
        crate::embed::Topics.embed(texts)
    }
}

pub(super) fn deleting_a_session_forgets_its_vectors(store: &dyn EngramStore) {
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
        Err(Error::NotFound { .. })
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
