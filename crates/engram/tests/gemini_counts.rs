//! Gemini counted as Google's own SDK counts it: every message text of the dev fixtures
//! (`testdata/dev/`) against the count the `google-genai` Python SDK's `LocalTokenizer` gave for
//! it (`testdata/gemini/counts.jsonl`, made by `scripts/gemini_counts.py`). With
//! `ENGRAM_GEMINI_COUNTS=FILE` (the script's output for the full dev data) and `ENGRAM_DEV_DATA`,
//! every text of the full dev data too. Needs the `gemini-tokenizer` feature.

use std::collections::HashMap;
use std::path::Path;

use engram::Tokenizer;
use serde_json::Value;

/// Every (text, the SDK's count) of `counts` over the records in `data`.
#[cfg_attr(not(feature = "gemini-tokenizer"), allow(dead_code))]
fn expected(counts: &Path, data: &Path) -> Vec<(String, usize)> {
    let mut files: HashMap<String, Vec<Value>> = HashMap::new();
    let text = std::fs::read_to_string(counts).expect("the counts");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let row: Value = serde_json::from_str(line).expect("a count");
            let file = row["file"].as_str().expect("file").to_owned();
            let records = files.entry(file.clone()).or_insert_with(|| {
                std::fs::read_to_string(data.join(&file))
                    .unwrap_or_else(|e| panic!("{}: {e}", data.join(&file).display()))
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(|l| serde_json::from_str(l).expect("a record"))
                    .collect()
            });
            let record = row["record"].as_u64().expect("record") as usize;
            let message = row["message"].as_u64().expect("message") as usize;
            let text = records[record]["messages"][message]["content"]
                .as_str()
                .expect("a text")
                .to_owned();
            (text, row["tokens"].as_u64().expect("tokens") as usize)
        })
        .collect()
}

#[cfg(feature = "gemini-tokenizer")]
fn check(pairs: &[(String, usize)]) {
    let tokenizer = Tokenizer::gemini().expect("the Gemini tokenizer");
    assert!(tokenizer.is_exact());
    let wrong: Vec<_> = pairs
        .iter()
        .filter(|(text, n)| tokenizer.count(text) != *n)
        .map(|(text, n)| {
            (
                text.chars().take(60).collect::<String>(),
                *n,
                tokenizer.count(text),
            )
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {} texts counted otherwise than the SDK, e.g. {:?}",
        wrong.len(),
        pairs.len(),
        &wrong[..wrong.len().min(3)]
    );
    eprintln!("{} texts counted as the SDK counts them", pairs.len());
}

#[test]
fn gemini_counts_equal_the_google_genai_sdks() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    #[cfg(feature = "gemini-tokenizer")]
    {
        let pairs = expected(
            &root.join("testdata/gemini/counts.jsonl"),
            &root.join("testdata/dev"),
        );
        assert!(pairs.len() > 1_000, "{}", pairs.len());
        check(&pairs);
        assert_eq!(
            Tokenizer::from_name("gemini")
                .expect("gemini")
                .count("What is your name?"),
            5
        );
        match (
            std::env::var_os("ENGRAM_GEMINI_COUNTS"),
            engram_testkit::full_dev_data(),
        ) {
            (Some(counts), Some(data)) => check(&expected(Path::new(&counts), &data)),
            _ => eprintln!(
                "the full dev data is checked with ENGRAM_GEMINI_COUNTS=FILE (scripts/gemini_counts.py) and ENGRAM_DEV_DATA"
            ),
        }
    }
    #[cfg(not(feature = "gemini-tokenizer"))]
    {
        let _ = root;
        // Without its vocabulary Gemini is an estimate, and says so.
        let estimate = Tokenizer::gemini().expect("an estimate");
        assert!(!estimate.is_exact());
        assert_eq!(estimate.id(), "cl100k*1.1");
        engram_testkit::skip(
            "feature",
            "Gemini's exact counts need the `gemini-tokenizer` feature",
        );
    }
}
