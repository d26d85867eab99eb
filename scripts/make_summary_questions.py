#!/usr/bin/env python3
"""Questions that ask for everything one person said, from LoCoMo's own annotations: the kind of
question a long-lived agent is asked to summarise a whole history ("what has X been up to?"),
whose evidence is spread over every session and whose words locate nothing.

For each conversation and each of its two speakers, one question per wording; its evidence is
every turn that LoCoMo's `observation_generated` (kept in each record's meta by the converter)
cites for a fact of that speaker. Three wordings, each written to a directory of its own, so that
a change is measured on all of them:

    python3 scripts/make_summary_questions.py --out /tmp/summary ../shared/data/dev/locomo.jsonl
    # -> /tmp/summary/w0/locomo_summary.jsonl, w1/..., w2/...
    python3 ../shared/eval/engram_eval.py --data /tmp/summary/w0 --systems bm25,engram \
        --engram-bin target/release/engram --budgets 2048,4096

About 120 evidence turns per question: a 2,048-token budget holds about half of them at best (the
harness reports that bound as `evidence_fit_upper_bound`). Deterministic.
"""

from __future__ import annotations

import argparse
import json
import os
import re

WORDINGS = [
    "Summarize what {who} has been up to across all our conversations.",
    "Give me an overview of everything going on in {who}'s life, start to finish.",
    "How have things developed for {who} over our whole history? Recap it.",
]


def evidence(conv: dict, speaker: str) -> list[str]:
    """The turns the annotations cite for `speaker`'s facts, in the log's order."""
    ids = [m["id"] for m in conv["messages"] if m.get("id")]
    known = set(ids)
    cited: set[str] = set()
    for per in (conv.get("meta", {}).get("observation_generated") or {}).values():
        for _text, turns in per.get(speaker, []):
            for turn in re.split(r"[,; ]+", turns) if isinstance(turns, str) else turns:
                if turn in known:
                    cited.add(turn)
    return [i for i in ids if i in cited]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for w0/, w1/, w2/")
    ap.add_argument("locomo", help="the harness's locomo.jsonl")
    args = ap.parse_args()
    convs = [json.loads(line) for line in open(args.locomo, encoding="utf-8") if line.strip()]
    for n, wording in enumerate(WORDINGS):
        folder = os.path.join(args.out, f"w{n}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "locomo_summary.jsonl"), "w", encoding="utf-8") as out:
            for conv in convs:
                meta = conv.get("meta", {})
                questions = []
                for speaker in (meta.get("speaker_a"), meta.get("speaker_b")):
                    ev = evidence(conv, speaker) if speaker else []
                    if ev:
                        questions.append({
                            "id": f"{conv['id']}-summary-{speaker}",
                            "question": wording.format(who=speaker),
                            "evidence_ids": ev,
                            "category": "summary",
                        })
                out.write(json.dumps({**conv, "questions": questions}, ensure_ascii=False) + "\n")
    print(f"{len(WORDINGS)} wordings of {len(convs)} conversations in {args.out}")


if __name__ == "__main__":
    main()
