#!/usr/bin/env python3
"""Questions asked in other words, with the same evidence: recall must hold on wordings it was
not tuned on.

For each dataset file (records with `questions`), writes one copy per wording with every question
reworded and its evidence, category and id kept. The whole-history questions of
`../shared/eval/make_timeline_questions.py` (its two fixed templates, "Summarize everything X has
told me about W ..." and "In what order did these come up ...: a; b; c?") get wordings of their
own that vary the verb, the order of the parts and how a list is given (numbered, bulleted, a
sentence with commas, one thing per line). Any other question gets a generic rewording that keeps
its content words: as a request ("I'd like to know ..."), with its topic moved to the front, or
with common verbs and question words exchanged for synonyms.

    python3 scripts/reword_questions.py --out /tmp/reworded ../shared/data/dev/locomo.jsonl locomo_timeline.jsonl
    # -> /tmp/reworded/w1/locomo.jsonl, /tmp/reworded/w1/locomo_timeline.jsonl, w2/..., w3/...
    python3 ../shared/eval/engram_eval.py --data /tmp/reworded/w1 --systems bm25,engram --engram-bin ...

Deterministic: the same input gives the same wordings.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

TIMELINE = re.compile(
    r"^Summarize everything (?P<who>.+?) has told me about (?P<what>.+?) over all our conversations, "
    r"from the first time to the last\.$")
ORDER = re.compile(r"^In what order did these come up in our conversations: (?P<items>.+)\?$")

TIMELINE_WORDINGS = [
    "What has {who} shared with me on {what}, across everything we've talked about?",
    "Walk me through each time {who} brought up {what}, earliest to latest.",
    "Pull together all of {who}'s remarks about {what} from our whole history.",
    "{who} and {what}: recap every bit of it for me.",
]


def order_wording(n: int, items: list[str]) -> str:
    """The order question with its list given another way."""
    if n == 0:
        return "Put these in chronological sequence: " + " ".join(f"({i + 1}) {t}" for i, t in enumerate(items)) + "."
    if n == 1:
        return "Which of these happened earliest and which latest?\n" + "\n".join(f"- {t}" for t in items)
    if n == 2:
        return ", ".join(items[:-1]) + " and " + items[-1] + ": sort them by when we discussed each."
    return "Tell me the sequence in which we talked about the following.\n" + "\n".join(items)


SYNONYMS = [
    (r"\bWhat\b", "Which thing"), (r"\bwhat\b", "which thing"),
    (r"\bWhen\b", "At what time"), (r"\bwhen\b", "at what time"),
    (r"\bsay\b", "mention"), (r"\bsaid\b", "mentioned"),
    (r"\btell\b", "inform"), (r"\btold\b", "informed"),
    (r"\bgo\b", "head"), (r"\bwent\b", "headed"),
    (r"\bbuy\b", "purchase"), (r"\bbought\b", "purchased"),
    (r"\bstart\b", "begin"), (r"\bstarted\b", "began"),
    (r"\blike\b", "enjoy"), (r"\blikes\b", "enjoys"),
    (r"\bmake\b", "create"), (r"\bmade\b", "created"),
    (r"\bget\b", "obtain"), (r"\bgot\b", "obtained"),
    (r"\bthink\b", "believe"), (r"\bthinks\b", "believes"),
    (r"\bfavorite\b", "preferred"), (r"\bkids\b", "children"),
]


def generic(n: int, question: str) -> str:
    q = question.strip()
    body = q.rstrip("?").strip()
    if n == 0:
        return f"I'd like to know this: {body[:1].lower() + body[1:]}."
    if n == 1:
        # The topic first: the question's last few words, then the question.
        words = body.split()
        topic = " ".join(words[-3:]) if len(words) > 4 else body
        return f"About {topic}. {q}"
    out = q
    for pattern, replacement in SYNONYMS:
        out = re.sub(pattern, replacement, out)
    return f"Quick question: {out}" if out == q else out


def reword(question: str, n: int) -> str:
    m = TIMELINE.match(question)
    if m:
        return TIMELINE_WORDINGS[n % len(TIMELINE_WORDINGS)].format(**m.groupdict())
    m = ORDER.match(question)
    if m:
        items = [t.strip() for t in m.group("items").split(";") if t.strip()]
        # The things in another order too: the question asks for their order.
        items = items[n % len(items):] + items[: n % len(items)]
        return order_wording(n, items)
    return generic(n, question)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="dataset files (JSONL records with questions)")
    ap.add_argument("--out", required=True, help="a directory: one subdirectory per wording")
    ap.add_argument("--wordings", type=int, default=3)
    args = ap.parse_args()
    for n in range(args.wordings):
        out_dir = os.path.join(args.out, f"w{n + 1}")
        os.makedirs(out_dir, exist_ok=True)
        for path in args.files:
            with open(path, encoding="utf-8") as src, open(os.path.join(out_dir, os.path.basename(path)), "w",
                                                           encoding="utf-8") as dst:
                for line in src:
                    if not line.strip():
                        continue
                    record = json.loads(line)
                    for q in record.get("questions") or []:
                        q["question"] = reword(q["question"], n)
                    dst.write(json.dumps(record) + "\n")
    print(f"{args.wordings} wordings of {len(args.files)} files in {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
