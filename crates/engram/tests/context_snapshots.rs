//! Snapshots of what the model sees after compaction, for real dev trajectories: a review of a
//! change to the pipeline starts here (`cargo insta review`). Each snapshot is the rendered view
//! (one line per message) followed by the report's steps and token counts.
#![cfg(feature = "openai-bpe")]

use engram::compact::{CompactOptions, compact, render};
use engram::{Conversation, Message, TokenCounter, Tokenizer};
use serde_json::Value;

/// The first `upto` messages of conversation `id` in `file`, without the harness's `meta`.
fn load(file: &str, id: &str, upto: usize) -> Vec<Message> {
    let conversation: Value = engram_testkit::dev_lines(file)
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).expect("json"))
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("{id} not in {file}"));
    conversation["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .take(upto)
        .map(|m| {
            let mut m = m.clone();
            m.as_object_mut().expect("object").remove("meta");
            Message::from_value(m).expect("valid")
        })
        .collect()
}

fn snapshot(messages: Vec<Message>, budget: usize, query: Option<&str>) -> String {
    let counter = TokenCounter::new(Tokenizer::cl100k().expect("cl100k"));
    let mut options = CompactOptions::new(budget);
    options.query = query.map(str::to_owned);
    let out = compact(&Conversation::new(messages), &counter, &options).expect("compacts");
    let r = &out.report;
    format!(
        "{}\nsteps {:?}; tokens {} -> {} (budget {}); removed {}; masked {}; recalled {}; summary {} tokens for {} messages\n",
        render(&out.messages, 110),
        r.steps,
        r.tokens_before,
        r.tokens_after,
        r.budget,
        r.messages_removed,
        r.masked,
        r.recalled,
        r.summary_tokens,
        r.summarized
    )
}

#[test]
fn coding_agent_trajectory() {
    let messages = load(
        "minisweagent_swebv_gemini3pro.jsonl",
        "astropy__astropy-13236",
        40,
    );
    insta::assert_snapshot!(snapshot(messages, 8192, None));
}

#[test]
fn support_agent_trajectory() {
    let messages = load("taubench_gpt4o_airline.jsonl", "airline-task10-trial0", 38);
    insta::assert_snapshot!(snapshot(messages, 2048, None));
}

#[test]
fn long_conversation_with_a_question() {
    let mut messages = load("locomo.jsonl", "conv-26", 400);
    let question = "What did Caroline take away from the book \"Becoming Nicole\"?";
    messages.push(Message::user(question));
    insta::assert_snapshot!(snapshot(messages, 2048, Some(question)));
}
