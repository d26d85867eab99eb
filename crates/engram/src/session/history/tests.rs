use super::*;

/// A session holding `texts` as alternating user and assistant turns.
fn session_of<'s>(store: &'s crate::in_memory::InMemoryStore, texts: &[String]) -> Session<'s> {
    let registry = crate::registry::ModelRegistry::builtin();
    let new = super::super::new_session(&registry, "gpt-4o", Some(100_000), 0);
    let mut session = Session::create(store, &new).expect("session");
    let messages = texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            if i % 2 == 0 {
                Message::user(t.clone())
            } else {
                Message::assistant(t.clone())
            }
        })
        .collect();
    session.append(messages).expect("append");
    session
}

#[test]
fn the_words_of_a_question_are_searched_as_given() {
    let store = crate::in_memory::InMemoryStore::new();
    let session = session_of(
        &store,
        &[
            "We deployed the service on Monday.".into(),
            "You mentioned the cache was cold three days ago.".into(),
            "The build is green.".into(),
        ],
    );
    for query in ["mentioned", "days ago", "the"] {
        let hits = session.search_history(query, 5).expect("search");
        assert!(hits.first().is_some_and(|h| h.exact), "{query:?}: {hits:?}");
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(
        engram_testkit::proptest_cases(48)
    ))]

    /// Whatever word of the log the agent asks for, a message holding it comes first.
    #[test]
    fn search_history_finds_every_word_of_the_log(
        texts in proptest::collection::vec(
            proptest::collection::vec("[a-z]{1,8}|the|of|and|a|is", 1..12), 1..40),
        pick in (0usize..1000, 0usize..1000),
    ) {
        let texts: Vec<String> = texts.iter().map(|words| words.join(" ")).collect();
        let store = crate::in_memory::InMemoryStore::new();
        let session = session_of(&store, &texts);
        let words: Vec<&str> = texts[pick.0 % texts.len()].split(' ').collect();
        let word = words[pick.1 % words.len()];
        let hits = session.search_history(word, 3).expect("search");
        proptest::prop_assert!(
            hits.first().is_some_and(|h| h.exact),
            "{word:?} in {texts:?}: {hits:?}"
        );
    }
}

#[test]
fn a_snippet_shows_where_the_query_meets_not_its_first_common_word() {
    let text = format!(
        "test session starts\nplatform linux\n{}\nFAILED tests/test_mixin.py::test_ndarray_mixin - AssertionError: assert False\n{}",
        "collected 215 items, test passed\n".repeat(40),
        "tail line\n".repeat(40),
    );
    let needles = snippet_needles("test_ndarray_mixin AssertionError");
    assert!(
        needles.contains(&"test_ndarray_mixin".to_string()),
        "{needles:?}"
    );
    let cut = snippet(&text, &needles);
    assert!(cut.contains("test_ndarray_mixin - AssertionError"), "{cut}");
    assert!(cut.starts_with('…') && cut.ends_with('…'), "{cut}");
}

#[test]
fn a_snippet_starts_at_the_text_when_nothing_matches_and_keeps_places_past_wide_letters() {
    assert_eq!(
        snippet("nothing here", &snippet_needles("absent")),
        "nothing here"
    );
    // `İ` lowercases to three bytes from two, `ẞ` to two from three: places stay put.
    let text = format!(
        "{}ẞ {} the NEEDLE is here",
        "İ".repeat(10),
        "x ".repeat(200)
    );
    let cut = snippet(&text, &snippet_needles("needle"));
    assert!(cut.contains("the NEEDLE is here"), "{cut}");
    assert_eq!(fold_case("İẞÉa"), "İẞéa");
}
