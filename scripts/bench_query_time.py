#!/usr/bin/env python3
"""Time per `engram compact --query`, two builds side by side on LoCoMo questions.

The first `--questions` questions of the first `--conversations` dev LoCoMo conversations are each
compacted to `--budget` tokens with the question in focus, `--rounds` times by each build in turn
(which build goes first alternates by round, so a machine's drift falls on both). Each call is a
whole process, as the eval harness makes it. Extra flags for both builds follow `--`, e.g. hybrid
recall (run it once before timing, so that the embedding cache is warm for both):

    python3 scripts/bench_query_time.py --before-bin OLD --engram-bin NEW \
        --data ../shared/data/dev -- --recall hybrid --embedding-model DIR

Prints each build's median in milliseconds and the ratio after / before.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import devpaths


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--engram-bin", default="target/release/engram", help="the build after")
    parser.add_argument("--before-bin", required=True, help="the build before")
    parser.add_argument("--data", default=devpaths.data_dir(), help="the dev data directory (default: $ENGRAM_DEV_DATA)")
    parser.add_argument("--budget", type=int, default=2048)
    parser.add_argument("--conversations", type=int, default=5)
    parser.add_argument("--questions", type=int, default=4, help="questions per conversation")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("extra", nargs="*", help="flags for both builds, after --")
    args = parser.parse_args()
    args.data = devpaths.require(args.data, "--data", devpaths.DATA_ENV, "the dev data directory")

    path = Path(args.data) / "locomo.jsonl"
    if not path.exists():
        print(f"error: {path} not found; --data names the directory holding locomo.jsonl",
              file=sys.stderr)
        return 2
    items = []
    with path.open() as f:
        for line, _ in zip(f, range(args.conversations)):
            conv = json.loads(line)
            messages = [{k: v for k, v in m.items() if k in ("role", "content", "name")}
                        for m in conv["messages"]]
            for q in conv["questions"][: args.questions]:
                body = {"messages": messages + [{"role": "user", "content": q["question"]}]}
                items.append((json.dumps(body).encode(), q["question"]))

    builds = [("before", args.before_bin), ("after", args.engram_bin)]
    times: dict[str, list[float]] = {name: [] for name, _ in builds}
    for round_ in range(args.rounds):
        order = builds if round_ % 2 == 0 else builds[::-1]
        for done, (payload, question) in enumerate(items, 1):
            for name, binary in order:
                cmd = [binary, "compact", "--budget", str(args.budget), "--tokenizer", "cl100k",
                       "--query", question, *args.extra]
                start = time.perf_counter()
                p = subprocess.run(cmd, input=payload, capture_output=True)
                times[name].append((time.perf_counter() - start) * 1000)
                if p.returncode != 0:
                    print(f"error: {name} build failed: {p.stderr.decode()[:300]}", file=sys.stderr)
                    return 1
            print(f"\rround {round_ + 1}/{args.rounds}: {done}/{len(items)}", end="",
                  file=sys.stderr, flush=True)
    print(file=sys.stderr)
    medians = {name: statistics.median(t) for name, t in times.items()}
    for name, median in medians.items():
        print(f"{name}: median {median:.1f} ms over {len(times[name])} calls")
    print(f"ratio after / before: {medians['after'] / medians['before']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
