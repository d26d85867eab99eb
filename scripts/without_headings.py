#!/usr/bin/env python3
"""A dataset as an agent's own history or a chat sent whole through the proxy would be: the same
conversations and questions with every system message taken out, so that no dated heading marks
where a session starts. Recall then has no sessions to read and must find the topic by other means.

    python3 scripts/without_headings.py ../shared/data/dev/locomo.jsonl /tmp/headless/locomo.jsonl
    python3 ../shared/eval/engram_eval.py --data /tmp/headless --systems engram --engram-bin ...

Evidence ids are kept: no question's evidence is a system message.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", help="a dataset file (JSONL, one conversation per line)")
    ap.add_argument("out", help="where to write it without its system messages")
    a = ap.parse_args()
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with out.open("w") as sink:
        # One record a line: split on newlines only, as str.splitlines would also split inside a
        # record's text at the Unicode line separators some chats hold.
        for line in Path(a.source).read_text().split("\n"):
            if not line.strip():
                continue
            record = json.loads(line)
            dropped = {m.get("id") for m in record["messages"] if m["role"] == "system"}
            record["messages"] = [m for m in record["messages"] if m["role"] != "system"]
            for q in record.get("questions", []):
                if dropped & set(q.get("evidence_ids", [])):
                    raise SystemExit(f"{a.source}: question {q.get('id')} cites a system message as evidence")
            sink.write(json.dumps(record) + "\n")
            count += 1
    print(f"{count} conversations without their system messages in {out}")


if __name__ == "__main__":
    main()
