#!/usr/bin/env bash
# engram's test suite: formatting, lints, every test, and a bounded fuzz run of the parser.
# Self-contained on a fresh machine with a Rust toolchain: it installs what it lacks (cargo-fuzz,
# when a nightly toolchain is present). The dev data it checks counts against is expected in
# ../shared/data/dev beside the repository (ENGRAM_DEV_DATA overrides).
#
#   scripts/test.sh            # everything
#   FUZZ_SECONDS=0 scripts/test.sh   # skip the fuzz run
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZ_SECONDS=${FUZZ_SECONDS:-60}
step_start=$SECONDS
step() {
  echo
  echo "== $* ($(date -u +%H:%M:%S))"
  step_start=$SECONDS
}
done_step() { echo "   ... $((SECONDS - step_start)) s"; }

step "formatting"
cargo fmt --all --check
done_step

step "clippy (all targets, all features)"
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
done_step

step "the core builds without its default features (the fuzz build uses this)"
cargo check -p engram --no-default-features --locked
done_step

if [ -n "${CI:-}" ] || [ -n "${ENGRAM_REAL_LLM:-}" ]; then
  # CI never skips the real-model test; locally it is skipped (and says so) unless asked for.
  step "a real model for the end-to-end tests (llama-server + SmolLM2; built once, cached)"
  eval "$(bash scripts/llama_server.sh)"
  done_step
fi

step "tests (all features)"
cargo test --workspace --all-features --locked
done_step

step "the Python package: pip install ./crates/engram-py (maturin, abi3), then its pytest suite"
# The wheel builds in release mode into CARGO_TARGET_DIR (cached by CI like every other build).
python3 -m pip install --quiet --root-user-action=ignore "./crates/engram-py[test]"
ENGRAM_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/engram" \
  python3 -m pytest -q -p no:cacheprovider crates/engram-py/tests
done_step

if [ "$FUZZ_SECONDS" -gt 0 ]; then
  if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    step "fuzzing the input parser for ${FUZZ_SECONDS}s (cargo fuzz, nightly)"
    if ! command -v cargo-fuzz >/dev/null 2>&1; then
      cargo install cargo-fuzz --locked
    fi
    corpus=$(mktemp -d)
    cp fuzz/seeds/* "$corpus"/
    fuzz_target_dir="${CARGO_TARGET_DIR:-$PWD/target}/fuzz"
    env -u CARGO_TARGET_DIR cargo +nightly fuzz run --target-dir "$fuzz_target_dir" parse_input "$corpus" \
      -- -max_total_time="$FUZZ_SECONDS" -max_len=4096 > "$corpus.log" 2>&1 || { tail -n 40 "$corpus.log"; exit 1; }
    grep -E '^Done|^#[0-9]+.*DONE' "$corpus.log" | tail -n 2
    rm -rf "$corpus" "$corpus.log"
    rm -rf "$corpus"
    done_step
  else
    echo
    echo "== no nightly toolchain: the parser's fuzz properties ran as property tests (crates/engram/tests/properties.rs)"
  fi
fi
