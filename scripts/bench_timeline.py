#!/usr/bin/env python3
"""How well a session's timeline finds the sessions a question about the whole history needs.

For each LoCoMo conversation: a session of its messages, `engram memory sleep` (which builds the
timeline), then for each question of `make_timeline_questions.py` (summaries and orderings, with the
turns that carry their evidence): the sessions reached by the timeline's best K parts
(`engram session timeline --query`) and by `search_history`'s best K hits, as a share of the
sessions holding the evidence. Also the sleep's time and the tokens of the K lines and hits.

    python3 scripts/bench_timeline.py --engram-bin target/release/engram \
        --questions DIR/locomo_timeline.jsonl [--k 5]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
import time
from pathlib import Path


def run(engram: str, db: Path, *args: str, stdin: bytes | None = None) -> str:
    out = subprocess.run([engram, "--db", str(db), *args], input=stdin, capture_output=True, check=True)
    return out.stdout.decode()


def session_of(dialog_id: str) -> int:
    """LoCoMo's `D3:5` is the fifth turn of session 3."""
    return int(dialog_id.split(":")[0][1:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engram-bin", required=True)
    ap.add_argument("--questions", required=True, help="the output of make_timeline_questions.py")
    ap.add_argument("--k", type=int, default=5, help="parts and hits read per question")
    a = ap.parse_args()
    try:
        import tiktoken
        enc = tiktoken.get_encoding("cl100k_base")
        count = lambda s: len(enc.encode(s))  # noqa: E731
    except Exception:  # noqa: BLE001
        count = lambda s: len(s) // 4  # noqa: E731
    rows = {"timeline": [], "search_history": []}
    categories: list[str] = []
    tokens = {"timeline": [], "search_history": []}
    sleep_ms, messages = 0.0, 0
    for line in Path(a.questions).read_text().splitlines():
        record = json.loads(line)
        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "engram.db"
            run(a.engram_bin, db, "session", "new", "--id", "c", "--model", "gpt-4o", "--window", "1000000")
            body = json.dumps({"messages": record["messages"]}).encode()
            run(a.engram_bin, db, "session", "append", "c", "-", stdin=body)
            messages += len(record["messages"])
            started = time.perf_counter()
            run(a.engram_bin, db, "memory", "sleep", "--json")
            sleep_ms += (time.perf_counter() - started) * 1000
            # Each message id of the log is the dialog id (`D3:5`); a heading has none of LoCoMo's.
            for q in record["questions"]:
                wanted = {session_of(e) for e in q["evidence_ids"]}
                categories.append(q["category"])
                doc = json.loads(run(a.engram_bin, db, "session", "timeline", "c", "--query", q["question"],
                                     "--limit", str(a.k), "--json"))
                reached = set()
                for p in doc["parts"]:
                    m = re.match(r"Session (\d+)", p.get("heading") or "")
                    if m:
                        reached.add(int(m.group(1)))
                rows["timeline"].append(len(reached & wanted) / len(wanted))
                tokens["timeline"].append(sum(count(f"{p['date']}: {p['line']}") for p in doc["parts"]))
                found = json.loads(run(a.engram_bin, db, "session", "tool", "c", "search_history",
                                       json.dumps({"query": q["question"], "limit": a.k})))
                found = json.loads(found["content"]) if "content" in found else found
                hits = found["hits"]
                reached = {session_of(h["id"]) for h in hits if re.match(r"D\d+:", h["id"])}
                rows["search_history"].append(len(reached & wanted) / len(wanted))
                tokens["search_history"].append(sum(count(h["snippet"]) for h in hits))
    n = len(rows["timeline"])
    print(f"{n} questions, {messages} messages; sleep {sleep_ms / max(1, messages) * 1000:.0f} ms per 1,000 messages")
    kinds = sorted(set(categories))
    print(f"| read (best {a.k}) | evidence sessions reached | " + " | ".join(kinds) + " | tokens read |")
    print("|---|---:|" + "---:|" * len(kinds) + "---:|")
    for name in rows:
        by_kind = []
        for kind in kinds:
            got = [r for r, c in zip(rows[name], categories) if c == kind]
            by_kind.append(f"{sum(got) / len(got):.3f}")
        print(f"| {name} | {sum(rows[name]) / n:.3f} | " + " | ".join(by_kind) + f" | {sum(tokens[name]) / n:.0f} |")


if __name__ == "__main__":
    main()
