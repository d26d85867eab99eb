#!/usr/bin/env bash
# engram's test suite: formatting, lints, every test, and a bounded fuzz run of the parser.
# Self-contained on a fresh clone with a Rust toolchain (and cmake), Python 3.9+ and Node.js 18+: the tests run on the
# fixtures in testdata/dev/ and the Python package's extras come from PyPI. Every step runs even
# when an earlier one failed; the last lines count what passed, failed and was skipped, and why:
#
#   summary: 612 passed, 0 failed, 5 skipped
#   skipped: postgres (3), llama (2)
#
#   scripts/test.sh                              # everything
#   FUZZ_SECONDS=0 scripts/test.sh               # no fuzz run
#   ENGRAM_DEV_DATA=../shared/data/dev scripts/test.sh   # also the tests that want the full dev data
set -uo pipefail
cd "$(dirname "$0")/.."

FUZZ_SECONDS=${FUZZ_SECONDS:-60}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export ENGRAM_SKIP_LOG="$work/skipped.tsv"
: >"$ENGRAM_SKIP_LOG"
failed_steps=()
step_start=$SECONDS
step() {
  echo
  echo "== $* ($(date -u +%H:%M:%S))"
  step_start=$SECONDS
}
# Ends a step: its time, and its name among the failures when its status is not 0.
end_step() {
  local status=$1 name=$2
  echo "   ... $((SECONDS - step_start)) s"
  if [ "$status" -ne 0 ]; then
    echo "   FAILED: $name (exit $status)"
    failed_steps+=("$name")
  fi
}
# A skip that is not a test's own (a step that cannot run here), counted like the tests' skips.
skip_step() { printf '%s\tstep\t%s\n' "$1" "$2" >>"$ENGRAM_SKIP_LOG"; echo "SKIPPED ($1): $2"; }

if [ -n "${ENGRAM_DEV_DATA:-}" ]; then
  echo "the full dev data: $ENGRAM_DEV_DATA (the tests that want every record run too)"
else
  echo "the dev data fixtures in testdata/dev/ (ENGRAM_DEV_DATA=DIR also runs the tests that want every record)"
fi

step "formatting"
cargo fmt --all --check
end_step $? formatting

step "the core builds without its default features (the fuzz build uses this)"
cargo check -p engram --no-default-features --locked
end_step $? "core without default features"

if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  step "the Python and Node builds reuse the tests' compiled dependencies (cargo's unit graphs)"
  python3 scripts/feature_unification.py
  end_step $? "feature unification"
else
  echo
  skip_step nightly "the check that the builds share their dependencies reads cargo's unit graphs, which need a nightly toolchain"
fi

# Clippy lints inside the build rather than in a check build of its own: with clippy-driver as
# the workspace's compiler wrapper, cargo compiles each workspace crate through clippy (its
# lints, then its code) and each dependency with rustc, once for every step below; a separate
# `cargo clippy` compiled every dependency a second time, in check mode. The Python wheel and
# the Node module are built here too, with the features their steps ask for, so that clippy
# lints them and their steps find them built (crates/engram-workspace-hack makes them share
# the tests' dependencies). Every warning of a workspace crate fails this step, as
# `cargo clippy -- -D warnings` did; the build goes on, so the tests still run.
# Every feature of every crate, but on a machine without cmake: Gemini's exact tokenizer
# (gemini-tokenizer) builds Google's SentencePiece with it, so there the rest is built and
# tested without that feature, and the step says so.
if command -v cmake >/dev/null 2>&1; then
  FEATURES=(--all-features)
else
  features=$(cargo metadata --no-deps --format-version 1 --locked | python3 -c '
import json, sys
packages = json.load(sys.stdin)["packages"]
print(",".join(f"{p[\"name\"]}/{f}" for p in packages for f in p["features"] if f not in ("default", "gemini-tokenizer")))')
  FEATURES=(--features "$features")
  echo
  skip_step cmake "the gemini-tokenizer feature builds Google's SentencePiece with cmake, which is not installed: everything else is built and tested (apt install cmake, or .ci/run, for all of it)"
fi
PY_FEATURES=embeddings,workspace-hack
NODE_FEATURES=embeddings,workspace-hack
step "clippy, and the build of every target (all features) and of the Python and Node modules"
# Prints the rendered diagnostics of the workspace's crates from cargo's JSON messages on
# standard input and fails when there is any (cargo replays a built crate's warnings).
lints() {
  python3 -c '
import json, sys
count = 0
for line in sys.stdin:
    if not line.startswith("{"):
        continue
    message = json.loads(line)
    if message.get("reason") == "compiler-message" and message["package_id"].startswith("path+"):
        if message["message"]["level"] in ("warning", "error"):
            count += 1
            sys.stderr.write(message["message"]["rendered"])
if count:
    print(f"   {count} warnings or errors from clippy or rustc in the workspace (above)")
sys.exit(1 if count else 0)'
}
if clippy_driver=$(command -v clippy-driver); then
  export RUSTC_WORKSPACE_WRAPPER=$clippy_driver
  (
    status=0
    cargo test --workspace "${FEATURES[@]}" --locked --no-run --message-format=json || status=1
    cargo build -p engram-py --features "$PY_FEATURES" --locked --message-format=json || status=1
    # napi-derive writes the module's type definitions while compiling it, where the Node step
    # reads them (this variable reruns the module's build when it changes).
    mkdir -p "$work/typedefs"
    NAPI_TYPE_DEF_TMP_FOLDER="$work/typedefs" \
      cargo build -p engram-node --features "$NODE_FEATURES" --locked --message-format=json || status=1
    exit $status
  ) | lints
  end_step $? "clippy and the build"
else
  skip_step clippy "clippy-driver is not installed (rustup component add clippy)"
fi

if [ -n "${CI:-}" ] || [ -n "${ENGRAM_REAL_LLM:-}" ]; then
  # CI never skips the real-model tests; locally they are skipped (and counted) unless asked for.
  step "a real model for the end-to-end tests (llama-server + SmolLM2; built once, cached)"
  llama_env=$(bash scripts/llama_server.sh)
  status=$?
  [ "$status" -eq 0 ] && eval "$llama_env"
  end_step $status "llama-server"
fi

step "each compaction policy rule is written once, in crates/engram/src/compact/policy.rs"
# The trigger (threshold, target shares of the window) and the default budget (the window less
# the reply's room) are computed there; a second formula elsewhere is a rule written twice. The
# breaker is consulted only by the one loop (`TriggerPolicy::run`): a caller that asks it itself
# has composed a loop of its own.
if grep -rnE '(threshold|target) \* [a-z_.]*window|max_output(_tokens)?\.min\(|\.breaker_open\(' crates --include='*.rs' |
  grep -v '^crates/engram/src/compact/policy.rs:'; then
  echo "   a policy rule is computed outside compact/policy.rs (above): call the policy instead"
  end_step 1 "policy rules written once"
else
  end_step 0 "policy rules written once"
fi

step "tests (all features)"
cargo test --workspace "${FEATURES[@]}" --locked --no-fail-fast 2>&1 | tee "$work/cargo.log"
end_step "${PIPESTATUS[0]}" "cargo test"

step "the Python package: pip install ./crates/engram-py[test] (maturin, abi3, with embeddings), then its pytest suite"
# The wheel builds with the dev profile into CARGO_TARGET_DIR, with the features the build step
# gave it (`embeddings`, so that hybrid recall's tests run), so maturin finds it built. A user's
# `pip install` builds in release.
MATURIN_PEP517_ARGS="--profile dev --features $PY_FEATURES" \
  python3 -m pip install --quiet --root-user-action=ignore "./crates/engram-py[test]"
status=$?
if [ "$status" -eq 0 ]; then
  ENGRAM_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/engram" \
    python3 -m pytest -q -rs -p no:cacheprovider --junitxml="$work/pytest.xml" crates/engram-py/tests
  status=$?
fi
end_step $status "Python package"

step "the Node package: npm ci in crates/engram-node (builds the native module with embeddings), then its node --test suites"
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  (
    set -e
    cd crates/engram-node
    # A debug build for the tests (npm install builds release), found built by the build step;
    # the lockfile is held to. types.test.js checks native.d.ts against the type definitions
    # that build wrote.
    mkdir -p "$work/typedefs"
    NAPI_TYPE_DEF_TMP_FOLDER="$work/typedefs" ENGRAM_NODE_PROFILE=debug ENGRAM_NODE_LOCKED=1 \
      ENGRAM_NODE_FEATURES=$NODE_FEATURES npm ci --no-audit --no-fund --loglevel=error
    ENGRAM_NODE_TYPEDEFS="$work/typedefs" ENGRAM_BIN="${CARGO_TARGET_DIR:-$PWD/../../target}/debug/engram" \
      node --test --test-reporter=spec --test-reporter-destination=stdout \
      --test-reporter=junit --test-reporter-destination="$work/node.xml" test/*.test.js
  )
  end_step $? "Node package"
else
  echo
  skip_step node "the Node package's suites need Node.js 18+ and npm"
fi

if [ "$FUZZ_SECONDS" -gt 0 ]; then
  if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    step "fuzzing the input parser for ${FUZZ_SECONDS}s (cargo fuzz, nightly)"
    (
      set -e
      command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
      corpus="$work/corpus"
      mkdir -p "$corpus"
      cp fuzz/seeds/* "$corpus"/
      fuzz_target_dir="${CARGO_TARGET_DIR:-$PWD/target}/fuzz"
      env -u CARGO_TARGET_DIR -u RUSTC_WORKSPACE_WRAPPER cargo +nightly fuzz run --target-dir "$fuzz_target_dir" parse_input "$corpus" \
        -- -max_total_time="$FUZZ_SECONDS" -max_len=4096 >"$work/fuzz.log" 2>&1 || { tail -n 40 "$work/fuzz.log"; exit 1; }
      grep -E '^Done|^#[0-9]+.*DONE' "$work/fuzz.log" | tail -n 2
    )
    end_step $? fuzzing
  else
    echo
    skip_step nightly "the fuzz run needs a nightly toolchain; the parser's fuzz properties ran as property tests (crates/engram/tests/properties.rs)"
  fi
fi

echo
echo "== summary"
python3 - "$work/cargo.log" "$work/pytest.xml" "$work/node.xml" "$ENGRAM_SKIP_LOG" "${failed_steps[@]}" <<'EOF'
import collections, re, sys, xml.etree.ElementTree as ET
cargo_log, junit, node_junit, skip_log, *failed_steps = sys.argv[1:]
passed = failed = 0
try:
    for m in re.finditer(r"test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored", open(cargo_log).read()):
        passed += int(m[1]); failed += int(m[2])
except FileNotFoundError:
    pass
py_skipped = 0
try:
    for suite in ET.parse(junit).getroot().iter("testsuite"):
        tests, fails, errors, skips = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
        passed += tests - fails - errors - skips
        failed += fails + errors
        py_skipped += skips
except (FileNotFoundError, ET.ParseError):
    pass
# node --test's JUnit report: one testcase per test, with <failure> or <skipped> in it.
node_skipped = 0
try:
    for case in ET.parse(node_junit).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.find("skipped") is not None:
            node_skipped += 1
        else:
            passed += 1
except (FileNotFoundError, ET.ParseError):
    pass
# A Rust test that skips returns early and counts as passed in cargo's line: count it as skipped.
skips = {tuple(l.rstrip("\n").split("\t")[1:]): l.split("\t")[0] for l in open(skip_log) if l.strip()}
rust_skips = sum(1 for (lang, _) in skips if lang == "rust")
passed -= rust_skips
python_logged = sum(1 for (lang, _) in skips if lang == "python")
by_kind = collections.Counter(skips.values())
if py_skipped > python_logged:
    by_kind["other"] += py_skipped - python_logged
node_logged = sum(1 for (lang, _) in skips if lang == "node")
if node_skipped > node_logged:
    by_kind["other"] += node_skipped - node_logged
skipped = sum(by_kind.values())
print(f"summary: {passed} passed, {failed} failed, {skipped} skipped")
if skipped:
    print("skipped: " + ", ".join(f"{k} ({n})" for k, n in by_kind.most_common()))
if failed_steps:
    print("failed steps: " + ", ".join(failed_steps))
EOF
[ "${#failed_steps[@]}" -eq 0 ]
