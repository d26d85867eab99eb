//! Test support for engram's own integration tests (a dev-dependency only).
//!
//! - **Dev data.** The default suite runs on the small fixtures in `testdata/dev/` (a few whole
//!   records of each public dev file, under the same names). `ENGRAM_DEV_DATA` pointing at the
//!   full dev data makes the same tests read it instead, and lets the tests that want every record
//!   ([`full_dev_data`]) run.
//! - **Skips.** A test that cannot run here calls [`skip`]: it prints `SKIPPED (kind): why` and,
//!   when `ENGRAM_SKIP_LOG` names a file (as `scripts/test.sh` does), appends a line there so the
//!   suite's summary counts it. [`skip_or_fail_in_ci`] fails instead when `CI` is set, for what CI
//!   always provides (PostgreSQL, llama-server).
//! - **Property cases.** Each property test names how many cases it runs by default;
//!   [`proptest_cases`] lets `PROPTEST_CASES` raise or lower that for one run (a soak, a quick
//!   look), as proptest's own default would.

pub mod layers;

use std::io::Write;
use std::path::PathBuf;

/// The folder of the fixtures cut from the dev data, in the repository.
pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/dev")
}

/// The dev data folder the tests read: `ENGRAM_DEV_DATA` when set, else the fixtures.
pub fn dev_data() -> PathBuf {
    full_dev_data().unwrap_or_else(fixtures_dir)
}

/// The path of the dev data file `name` (see [`dev_data`]).
pub fn dev_file(name: &str) -> PathBuf {
    dev_data().join(name)
}

/// Hybrid recall's fixture (`testdata/pets.json`, shared with the Python and Node suites): small
/// talk about a meeting room with one turn about a dog early on, and a question that shares no
/// word with that turn. Words alone do not find the dog; meaning does.
#[derive(Debug, Clone)]
pub struct Pets {
    /// OpenAI-format messages: a system prompt, then 121 turns; not the question.
    pub messages: Vec<serde_json::Value>,
    /// "What pet do I have?"
    pub question: String,
    /// A word only the dog's turn holds ("Rex").
    pub answer: String,
}

/// The fixture [`Pets`] describes.
///
/// # Panics
/// When `testdata/pets.json` is missing or malformed.
pub fn pets() -> Pets {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/pets.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let doc: serde_json::Value = serde_json::from_str(&text).expect("pets.json is JSON");
    let text_of = |key: &str| doc[key].as_str().expect("pets.json's strings").to_owned();
    Pets {
        messages: doc["messages"].as_array().expect("messages").clone(),
        question: text_of("question"),
        answer: text_of("answer_contains"),
    }
}

/// The full dev data, when `ENGRAM_DEV_DATA` points at it; `None` otherwise.
pub fn full_dev_data() -> Option<PathBuf> {
    std::env::var_os("ENGRAM_DEV_DATA")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The records (one JSON document a line) of the dev data file `name`, as text lines.
///
/// # Panics
/// When the file cannot be read, naming it.
pub fn dev_lines(name: &str) -> Vec<String> {
    let path = dev_file(name);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

/// Records that the calling test cannot run here, and why. `kind` is one short word that the
/// suite's summary groups skips by (`postgres`, `llama`, `dev-data`, `feature`).
pub fn skip(kind: &str, why: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("unnamed test")
        .to_owned();
    eprintln!("SKIPPED ({kind}): {test}: {why}");
    if let Some(log) = std::env::var_os("ENGRAM_SKIP_LOG").filter(|v| !v.is_empty()) {
        let line = format!("{kind}\trust\t{test}\n");
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            eprintln!(
                "could not record the skip in {}: {e}",
                log.to_string_lossy()
            );
        }
    }
}

/// [`skip`], except under CI (`CI` set), where what is missing is a failure: CI installs it.
///
/// # Panics
/// When `CI` is set.
pub fn skip_or_fail_in_ci(kind: &str, why: &str) {
    if std::env::var_os("CI").is_some_and(|v| !v.is_empty()) {
        panic!("CI must run this test ({kind}): {why}");
    }
    skip(kind, why);
}

/// The cases a property test runs: `PROPTEST_CASES` when it is set to a number, else `default`
/// (the test's own count, which `ProptestConfig::with_cases` would otherwise fix).
pub fn proptest_cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}
