//! A HuggingFace `tokenizer.json` loaded from a path (the `hf-tokenizer` feature).
#![cfg(feature = "hf-tokenizer")]

use engram::{Message, TokenCounter, Tokenizer};

/// A small WordLevel tokenizer with whitespace pre-tokenization, written as a tokenizer.json.
const TOKENIZER_JSON: &str = r#"{
  "version": "1.0",
  "truncation": null,
  "padding": null,
  "added_tokens": [],
  "normalizer": {"type": "Lowercase"},
  "pre_tokenizer": {"type": "Whitespace"},
  "post_processor": null,
  "decoder": null,
  "model": {
    "type": "WordLevel",
    "vocab": {"[UNK]": 0, "fix": 1, "the": 2, "failing": 3, "test": 4, "in": 5, "src": 6, "/": 7, "lib": 8, ".": 9, "rs": 10},
    "unk_token": "[UNK]"
  }
}"#;

#[test]
fn counts_with_a_tokenizer_file() {
    let dir = std::env::temp_dir().join(format!("engram-hf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, TOKENIZER_JSON).expect("write");
    let path = path.to_str().expect("utf8");

    for name in [format!("hf:{path}"), path.to_owned()] {
        let tokenizer = Tokenizer::from_name(&name).expect("loads");
        assert!(tokenizer.is_exact());
        // "fix" "the" "failing" "test" "in" "src" "/" "lib" "." "rs"
        assert_eq!(tokenizer.count("Fix the failing test in src/lib.rs"), 10);
        assert_eq!(tokenizer.count("unknown words still count"), 4);
        let counter = TokenCounter::new(tokenizer);
        assert_eq!(
            counter
                .count_message(&Message::user("fix the test"))
                .total(),
            4 + 3
        );
    }

    let missing = Tokenizer::from_name("hf:/nonexistent/tokenizer.json").expect_err("missing file");
    assert!(
        missing.to_string().contains("/nonexistent/tokenizer.json"),
        "{missing}"
    );
    std::fs::write(dir.join("bad.json"), "{not json").expect("write");
    assert!(Tokenizer::from_name(dir.join("bad.json").to_str().expect("utf8")).is_err());
    std::fs::remove_dir_all(&dir).ok();
}
