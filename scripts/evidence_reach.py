#!/usr/bin/env python3
"""How far recall by words and by a conversation's structure could reach on LoCoMo.

Reads an evaluation dump (`engram_eval.py --dump`, which lists each question's found and missing
evidence messages) and sorts every missing evidence turn by what could bring it back without
knowing which words are related:

  shares    it has a word of its question (stemmed, stop words and the speakers' names left out)
  adjacent  it shares none, but sits next to found evidence of the same question
  session   it shares none, but its session holds found evidence of the same question
  none      none of these: only related words ("activities" for "pottery") lead to it

and prints each category's recall as measured and as it would be if every missing turn of the
first kinds were kept too. Those figures are upper bounds for rankings by words and structure:
they keep the missing turns and lose nothing for it.

    python3 scripts/evidence_reach.py --data ../shared/data/dev DUMP.jsonl [--budget 2048]
"""

import argparse
import collections
import json
import re
import sys
from pathlib import Path

try:
    import snowballstemmer
except ImportError:
    sys.exit("evidence_reach.py needs snowballstemmer: pip install snowballstemmer")

STOP = set(
    "a an the and or but if of to in on at for with by from is are was were be been being do "
    "does did have has had i you he she it we they me him her us them my your his its our their "
    "what when where who whom which why how that this these those as not no so than too very can "
    "will would should could may might shall just also about into over after before up down out "
    "there here then some any all each both more most other such only own same few again once "
    "further while during until against between through above below s t don now".split()
)
KINDS = ("shares", "adjacent", "session", "none")
STEM = snowballstemmer.stemmer("english")


def terms(text: str) -> set[str]:
    return {STEM.stemWord(w) for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOP}


def text_of(message: dict) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else json.dumps(content)


def place(message_id: str) -> tuple[str, int]:
    """LoCoMo's ids are "D<session>:<turn>"."""
    session, _, turn = message_id.partition(":")
    return session, int(turn) if turn.isdigit() else -1


def kind(question: set[str], missing: dict, found: list[str]) -> str:
    if question & terms(text_of(missing)):
        return "shares"
    session, turn = place(missing["id"])
    places = [place(f) for f in found]
    if any(s == session and abs(t - turn) == 1 for s, t in places):
        return "adjacent"
    if any(s == session for s, _ in places):
        return "session"
    return "none"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dump", help="an engram_eval.py --dump file")
    ap.add_argument("--data", required=True, help="the directory holding locomo.jsonl")
    ap.add_argument("--budget", type=int, default=2048)
    args = ap.parse_args()

    questions = {}
    with open(Path(args.data) / "locomo.jsonl", encoding="utf-8") as f:
        for line in f:
            conv = json.loads(line)
            names = {
                STEM.stemWord(w.lower())
                for key in ("speaker_a", "speaker_b")
                for w in conv["meta"][key].split()
            }
            messages = {m.get("id"): m for m in conv["messages"]}
            for q in conv["questions"]:
                questions[q["id"]] = (terms(q["question"]) - names, messages)

    recall = collections.defaultdict(list)  # category -> per question: found, missing kinds
    with open(args.dump, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            if r["dataset"] != "locomo" or r["budget"] != args.budget:
                continue
            question, messages = questions[r["item"]]
            found = r.get("found", [])
            kinds = [kind(question, messages[m], found) for m in r.get("missing", [])]
            recall[r["category"]].append((len(found), kinds))
    if not recall:
        sys.exit(f"no LoCoMo items at budget {args.budget} in {args.dump}")

    header = "category      questions  recall  missing  " + "  ".join(f"{k:>8}" for k in KINDS)
    print(header + "   +shares  +adjacent  +session")
    for category, rows in sorted(recall.items()):
        counts = collections.Counter(k for _, kinds in rows for k in kinds)
        line = f"{category:<13} {len(rows):>9}  {mean(rows, ()):>6.3f}  {sum(counts.values()):>7}  "
        line += "  ".join(f"{counts[k]:>8}" for k in KINDS)
        for upto in range(1, 4):
            line += f"  {mean(rows, KINDS[:upto]):>8.3f}"
        print(line)


def mean(rows: list, kept: tuple) -> float:
    """Mean recall if every missing turn of a kind in `kept` were found too."""
    scores = [
        (found + sum(k in kept for k in kinds)) / (found + len(kinds)) for found, kinds in rows
    ]
    return sum(scores) / len(scores)


if __name__ == "__main__":
    main()
