#!/usr/bin/env python3
"""Hybrid recall from Python: what one compaction costs when the model is loaded once per process.

The CLI loads all-MiniLM-L6-v2 in every `engram compact --recall hybrid` process; the Python
package loads it once (`engram.Embeddings`) and every call shares it. For the first `--convs`
LoCoMo conversations of the dev data, every `--every`-th question is compacted to `--budget`
tokens with the question as the query, lexically and with the model, in one process, side by
side. The first hybrid pass embeds every message (kept in the cache file under a temporary
XDG_CACHE_HOME); the table's hybrid times are from the second pass, with the vectors cached.

    MATURIN_PEP517_ARGS="--features embeddings" pip install ./crates/engram-py
    python3 scripts/bench_python_hybrid.py --data ../shared/data/dev --embedding-model DIR
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, type=Path, help="the dev data folder (locomo.jsonl)")
    ap.add_argument("--embedding-model", required=True, help="all-MiniLM-L6-v2's directory")
    ap.add_argument("--convs", type=int, default=3, help="LoCoMo conversations (default 3)")
    ap.add_argument("--every", type=int, default=5, help="every N-th question (default 5)")
    ap.add_argument("--budget", type=int, default=2048)
    args = ap.parse_args()

    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="engram-bench-cache-")
    import engram

    t = time.perf_counter()
    model = engram.Embeddings(args.embedding_model)
    load_s = time.perf_counter() - t

    cases = []  # (messages with the question last, the question)
    convs = 0
    with open(args.data / "locomo.jsonl", encoding="utf-8") as f:
        for line in f:
            if convs == args.convs:
                break
            convs += 1
            record = json.loads(line)
            messages = [{"role": m["role"], "content": m["content"]} for m in record["messages"]]
            for q in record["questions"][:: args.every]:
                cases.append((messages + [{"role": "user", "content": q["question"]}], q["question"]))

    def run(embeddings):
        times = []
        for messages, question in cases:
            t = time.perf_counter()
            engram.compact(messages, args.budget, tokenizer="cl100k", query=question, embeddings=embeddings)
            times.append((time.perf_counter() - t) * 1000)
        return times

    t = time.perf_counter()
    run(model)  # embeds every message once; later calls read the cache
    cold_s = time.perf_counter() - t
    lexical = run(None)
    hybrid = run(model)
    lexical2 = run(None)
    print(f"{len(cases)} compactions of {convs} LoCoMo conversations at {args.budget} tokens")
    print(f"model load: {load_s:.2f} s once; first hybrid pass (embeds each message once): {cold_s:.1f} s")
    print("| recall | median ms per compaction | p90 ms |")
    print("|---|---:|---:|")
    both = lexical + lexical2
    for name, times in (("lexical", both), ("hybrid, vectors cached", hybrid)):
        p90 = statistics.quantiles(times, n=10)[-1]
        print(f"| {name} | {statistics.median(times):.1f} | {p90:.1f} |")
    print(f"ratio hybrid / lexical (medians): {statistics.median(hybrid) / statistics.median(both):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
