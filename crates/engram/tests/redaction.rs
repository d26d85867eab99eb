//! The redactor on real conversations: coding agents' trajectories (code, paths, hashes, shell
//! output), a support agent's, and long chats. It must replace only secrets there: the values
//! below are literal secrets in the code agents read (a test's `SECRET_KEY='abcd' * 20` and
//! `new_secret = 'abcdefghijkl'`, an `"X-Secret": "open sesami"` header, a call's
//! `connect(password='foo', passwd='bar')`). Anything else it replaces is a false positive to fix.
//! The fixtures' conversations by default; every dev message with `ENGRAM_DEV_DATA`
//! (`cargo run --example redaction_scan` prints the same report).

use std::collections::BTreeMap;
use std::path::Path;

use engram::Message;

/// What the redactor may replace in the dev data, by kind.
const EXPECTED: [(&str, &str); 5] = [
    ("password", "abcd"),
    ("password", "open sesami"),
    ("password", "abcdefghijkl"),
    ("password", "foo"),
    ("password", "bar"),
];

fn replaced(data: &Path) -> (usize, BTreeMap<(&'static str, String), usize>) {
    let mut found = BTreeMap::new();
    let mut messages = 0;
    for entry in std::fs::read_dir(data).expect("dev data") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "jsonl") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read");
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let record: serde_json::Value = serde_json::from_str(line).expect("record");
            for m in record["messages"].as_array().expect("messages") {
                let m = Message::from_value(m.clone()).expect("a dev message");
                messages += 1;
                let mut texts = vec![m.text().into_owned()];
                texts.extend(m.calls().iter().map(|c| c.arguments.clone()));
                for t in &texts {
                    for f in engram::redact::findings(t) {
                        *found.entry((f.kind, t[f.range].to_owned())).or_default() += 1;
                    }
                }
            }
        }
    }
    (messages, found)
}

fn check(data: &Path) -> usize {
    let (messages, found) = replaced(data);
    let unexpected: Vec<_> = found
        .keys()
        .filter(|(kind, value)| !EXPECTED.contains(&(*kind, value.as_str())))
        .collect();
    assert!(
        unexpected.is_empty(),
        "replaced in the dev data, and not secrets: {unexpected:?}"
    );
    messages
}

#[test]
fn the_redactor_replaces_no_code_path_or_hash_in_the_fixture_conversations() {
    assert_eq!(check(&engram_testkit::fixtures_dir()), 1_059);
}

#[test]
fn the_redactor_replaces_no_code_path_or_hash_in_any_dev_message() {
    let Some(data) = engram_testkit::full_dev_data() else {
        engram_testkit::skip(
            "dev-data",
            "the check of all 36,350 dev messages needs ENGRAM_DEV_DATA (the fixtures' test ran)",
        );
        return;
    };
    assert_eq!(check(&data), 36_350);
}
