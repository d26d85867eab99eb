//! Counts equal Python tiktoken's on the dev data's messages.
//!
//! The expected counts come from `scripts/gen_token_fixtures.py` (tiktoken 0.14,
//! `encode_ordinary`) for every message of the dev data. By default the test checks the
//! conversations of the repository's fixtures (`testdata/dev/`); with `ENGRAM_DEV_DATA` pointing
//! at the full dev data, a second test checks all 36,350 messages (and says SKIPPED without it).
#![cfg(feature = "openai-bpe")]

use std::path::{Path, PathBuf};

use engram::{Message, TokenCounter, Tokenizer};
use serde_json::Value;

#[test]
fn counts_equal_tiktoken_on_the_fixture_conversations() {
    let (messages, calls) = check(&engram_testkit::fixtures_dir());
    assert!(
        messages > 2 * 1_000,
        "the fixtures were checked ({messages})"
    );
    assert!(calls > 100, "tool calls were checked ({calls})");
}

#[test]
fn counts_equal_tiktoken_on_every_dev_message() {
    let Some(data) = engram_testkit::full_dev_data() else {
        engram_testkit::skip(
            "dev-data",
            "the check of all 36,350 dev messages needs ENGRAM_DEV_DATA (the fixtures' test ran)",
        );
        return;
    };
    let (messages, calls) = check(&data);
    assert_eq!(
        messages,
        2 * 36_350,
        "every dev message was checked with both encodings"
    );
    assert!(calls > 9_000, "tool calls were checked ({calls})");
}

/// Checks every conversation of the count fixtures that `data` holds; returns how many messages
/// (once per encoding) and tool calls were compared.
fn check(data: &Path) -> (usize, usize) {
    let fixtures = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiktoken_dev_counts.jsonl"),
    )
    .expect("fixtures");
    let cl = TokenCounter::new(Tokenizer::cl100k().expect("cl100k"));
    let o2 = TokenCounter::new(Tokenizer::o200k().expect("o200k"));
    let mut files: std::collections::HashMap<String, Vec<Value>> = Default::default();
    let (mut messages, mut calls) = (0usize, 0usize);
    for line in fixtures.lines() {
        let row: Value = serde_json::from_str(line).expect("fixture row");
        let file = row["file"].as_str().expect("file").to_owned();
        let conversations = files.entry(file.clone()).or_insert_with(|| {
            let path = data.join(&file);
            // The fixtures leave out some files whole (longmemeval_s_sample's records are large).
            if !path.exists() && data == engram_testkit::fixtures_dir() {
                return Vec::new();
            }
            std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
                .lines()
                .map(|l| serde_json::from_str(l).expect("conversation"))
                .collect()
        });
        // The fixtures hold a few conversations of each file; the full data holds them all.
        let Some(conversation) = conversations.iter().find(|c| c["id"] == row["id"]) else {
            continue;
        };
        let parsed: Vec<Message> = conversation["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .map(|m| Message::from_value(m.clone()).expect("dev messages are valid"))
            .collect();
        for (encoding, counter) in [("cl100k", &cl), ("o200k", &o2)] {
            let expected = row[encoding].as_array().expect("counts");
            assert_eq!(expected.len(), parsed.len());
            for (i, (message, want)) in parsed.iter().zip(expected).enumerate() {
                let place = format!("{file} {} message {i} ({encoding})", row["id"]);
                let want_content = want[0].as_u64().expect("content count") as usize;
                assert_eq!(
                    counter.count_text(&message.text()),
                    want_content,
                    "{place}: content"
                );
                let want_calls: Vec<usize> = want[1]
                    .as_array()
                    .expect("calls")
                    .iter()
                    .map(|v| v.as_u64().expect("call count") as usize)
                    .collect();
                for (call, want) in message.calls().iter().zip(&want_calls) {
                    let text = format!("{}{}", call.name, call.arguments);
                    assert_eq!(
                        counter.count_text(&text),
                        *want,
                        "{place}: call {}",
                        call.id
                    );
                }
                let count = counter.count_message(message);
                assert_eq!(count.content, want_content, "{place}: message content");
                assert_eq!(
                    count.tool_calls,
                    want_calls.iter().sum::<usize>(),
                    "{place}: message calls"
                );
                messages += 1;
                calls += want_calls.len();
            }
        }
    }
    (messages, calls)
}
