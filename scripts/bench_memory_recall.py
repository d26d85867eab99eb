#!/usr/bin/env python3
"""Memory search, lexical against hybrid: does `memory search` return a question's evidence?

Each turn of each LoCoMo conversation of the dev data becomes a memory entry (`Speaker: text`,
with the session's date), imported with `engram memory import` into a store per conversation.
Each question (every `--every`-th one) is then asked with `engram memory search --limit K`,
once lexically and once with `--recall hybrid`. A question's recall is the share of its evidence
turns among the K hits; the table gives the mean per category and the time per search (a whole
process each: the hybrid one loads the model, and its first search embeds every entry once,
after which they are read from the store beside the entries).

    python3 scripts/bench_memory_recall.py --engram-bin target/release/engram \
        --data ../shared/data/dev --embedding-model /path/to/all-MiniLM-L6-v2

`--before-bin OTHER` adds a column: the same hybrid searches by another build (an earlier
commit), in the same run and on the same stores, so a change to ranking is compared side by side.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path


def entries_of(conv: dict) -> list[dict]:
    out = []
    date = ""
    for m in conv["messages"]:
        meta = m.get("meta") or {}
        if meta.get("type") == "session_start":
            date = meta.get("date_time", "")
            continue
        if m["role"] == "system":
            continue
        speaker = m.get("name") or meta.get("speaker") or m["role"]
        out.append(
            {
                "id": f"{conv['id']}/{m['id']}",
                "content": f"{speaker}: {m['content']}" + (f" ({date})" if date else ""),
                "source": "locomo",
                "session_id": conv["id"],
            }
        )
    return out


def search(engram: str, db: Path, question: str, k: int, hybrid: list[str]) -> tuple[list[str], float]:
    started = time.monotonic()
    out = subprocess.run(
        [engram, "--db", str(db), "memory", "search", question, "--limit", str(k), "--json", *hybrid],
        check=True,
        capture_output=True,
        text=True,
    )
    elapsed = time.monotonic() - started
    return [r["id"] for r in json.loads(out.stdout)["results"]], elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engram-bin", default="target/release/engram")
    parser.add_argument("--data", default="../shared/data/dev")
    parser.add_argument("--embedding-model", required=True, help="the all-MiniLM-L6-v2 directory")
    parser.add_argument("--limit", type=int, default=10, help="hits per search (K)")
    parser.add_argument("--every", type=int, default=3, help="ask every n-th question")
    parser.add_argument("--before-bin", help="another build whose hybrid search is compared too")
    args = parser.parse_args()

    convs = [json.loads(line) for line in open(Path(args.data) / "locomo.jsonl")]
    hybrid = ["--recall", "hybrid", "--embedding-model", args.embedding_model]
    modes = {"lexical": (args.engram_bin, []), "hybrid": (args.engram_bin, hybrid)}
    if args.before_bin:
        modes["hybrid, before"] = (args.before_bin, hybrid)
    recall: dict[str, dict[str, list[float]]] = {m: defaultdict(list) for m in modes}
    seconds: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as work:
        for conv in convs:
            db = Path(work) / f"{conv['id']}.db"
            jsonl = Path(work) / f"{conv['id']}.jsonl"
            entries = entries_of(conv)
            jsonl.write_text("".join(json.dumps(e) + "\n" for e in entries))
            subprocess.run(
                [args.engram_bin, "--db", str(db), "memory", "import", str(jsonl)],
                check=True,
                capture_output=True,
            )
            for n, q in enumerate(conv["questions"]):
                if n % args.every or not q.get("evidence_ids"):
                    continue
                evidence = {f"{conv['id']}/{e}" for e in q["evidence_ids"]}
                for mode, (engram, extra) in modes.items():
                    ids, elapsed = search(engram, db, q["question"], args.limit, extra)
                    found = len(evidence & set(ids)) / len(evidence)
                    recall[mode][q["category"]].append(found)
                    recall[mode]["overall"].append(found)
                    seconds[mode].append(elapsed)
            print(f"{conv['id']}: {len(entries)} entries", file=sys.stderr, flush=True)

    categories = sorted({c for m in recall.values() for c in m}, key=lambda c: (c == "overall", c))
    print("| category | questions | " + " | ".join(f"{m} recall@{args.limit}" for m in modes) + " |")
    print("|---|---:|" + "---:|" * len(modes))
    for c in categories:
        n = len(recall["lexical"][c])
        cells = " | ".join(f"{sum(recall[m][c]) / n:.3f}" for m in modes)
        print(f"| {c} | {n} | {cells} |")
    for mode in modes:
        s = sorted(seconds[mode])
        print(f"{mode}: median {s[len(s) // 2] * 1000:.0f} ms per search (a whole process), max {s[-1] * 1000:.0f} ms")


if __name__ == "__main__":
    main()
