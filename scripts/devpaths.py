"""Where the benchmark scripts find what lives outside the repository: the dev data, the
evaluation harness and tiktoken's offline cache.

Each comes from its flag, else from an environment variable: ENGRAM_DEV_DATA (the dev data
directory, as scripts/test.sh reads it), ENGRAM_EVAL_DIR (the evaluation harness's directory;
its tiktoken_cache also serves as TIKTOKEN_CACHE_DIR when that is unset). No path outside the
repository is assumed: a missing one is an error that says what to pass."""

from __future__ import annotations

import os
import sys

DATA_ENV = "ENGRAM_DEV_DATA"
EVAL_ENV = "ENGRAM_EVAL_DIR"


def data_dir() -> str | None:
    """The dev data directory from the environment, as the default of a --data flag."""
    return os.environ.get(DATA_ENV)


def eval_dir() -> str | None:
    """The evaluation harness's directory from the environment, as the default of --eval-dir."""
    return os.environ.get(EVAL_ENV)


def require(value: str | None, flag: str, env: str, what: str) -> str:
    """`value`, or an exit naming the flag and the variable that give it."""
    if not value:
        sys.exit(f"error: {what} is not known: pass {flag} DIR or set {env}")
    if not os.path.isdir(value):
        sys.exit(f"error: {what} {value!r} is not a directory ({flag} / {env})")
    return value


def tiktoken_cache() -> None:
    """TIKTOKEN_CACHE_DIR from the harness's directory when it is unset, so that tiktoken reads
    its encodings offline instead of downloading them."""
    harness = eval_dir()
    if harness and "TIKTOKEN_CACHE_DIR" not in os.environ:
        os.environ["TIKTOKEN_CACHE_DIR"] = os.path.join(harness, "tiktoken_cache")
