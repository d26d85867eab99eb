#!/usr/bin/env python3
"""Long chats of another kind for the evaluation harness: BEAM's conversations (Tavakoli et al.,
"Beyond a Million Tokens", github.com/mohammadtavakoli78/BEAM) and their probing questions, as
`../shared/eval/engram_eval.py` reads them. Each BEAM chat is one user working with an assistant
on one project (a budget tracker in Flask, a résumé, geometry homework) for 100K or 500K tokens:
the shape of an agent's own long history, unlike LoCoMo's two friends or LongMemEval's many
unrelated sessions. Nothing here is tuned on; it is a place to measure.

A question's evidence is its `source_chat_ids` (the message ids BEAM's authors cite), so every
ability but abstention (which cites none) is kept, under its own category: summarization, event
ordering, multi-session reasoning, information extraction, and so on. Messages keep BEAM's ids and
text as they are; by default no heading marks BEAM's batches, as an agent's history sent through
the proxy carries none (`--headings` adds a system message at the start of each batch, with its
first time anchor).

    git clone https://github.com/mohammadtavakoli78/BEAM /tmp/BEAM-src   # or any checkout of it
    python3 scripts/beam_questions.py /tmp/BEAM-src --size 100K --out /tmp/beam/beam100k.jsonl
    python3 ../shared/eval/engram_eval.py --data /tmp/beam --systems bm25,engram \
        --engram-bin target/release/engram --budgets 2048,4096

The data stays in its checkout (no licence file ships with it); only this script is ours.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def cited(value) -> list[int]:
    """Every message id in a question's `source_chat_ids`: a list, or a mapping of lists (the
    first and second statement of a contradiction, the original and updated fact)."""
    if isinstance(value, dict):
        return [i for v in value.values() for i in cited(v)]
    if isinstance(value, list):
        return [i for v in value for i in cited(v)]
    if isinstance(value, int):
        return [value]
    if isinstance(value, str) and value.strip().isdigit():
        return [int(value)]
    return []


def convert(chat_dir: Path, size: str, number: str, headings: bool) -> dict:
    chat = json.loads((chat_dir / "chat.json").read_text())
    probes = json.loads((chat_dir / "probing_questions" / "probing_questions.json").read_text())
    messages = []
    for batch in chat:
        turns = [m for turn in batch["turns"] for m in turn]
        if headings:
            anchor = next((m["time_anchor"] for m in turns if m.get("time_anchor")), None)
            title = f"Session {batch['batch_number']}" + (f" ({anchor})" if anchor else "")
            messages.append({"id": f"batch-{batch['batch_number']}", "role": "system", "content": title})
        for m in turns:
            messages.append({"id": str(m["id"]), "role": m["role"], "content": m["content"]})
    known = {m["id"] for m in messages}
    questions = []
    for category, items in probes.items():
        for i, q in enumerate(items):
            evidence = sorted({str(x) for x in cited(q.get("source_chat_ids"))} & known, key=int)
            if not evidence:
                continue
            answer = q.get("answer") or q.get("ideal_answer") or q.get("ideal_response") or ""
            questions.append({
                "id": f"beam-{size}-{number}-{category}-{i}",
                "question": q["question"],
                "answer": str(answer),
                "evidence_ids": evidence,
                "category": category,
                "meta": {},
            })
    return {"id": f"beam-{size}-{number}", "source": "beam", "meta": {"origin": "github.com/mohammadtavakoli78/BEAM"},
            "messages": messages, "questions": questions}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("beam", help="a checkout of github.com/mohammadtavakoli78/BEAM (its chats/ directory is read)")
    ap.add_argument("--size", default="100K", help="which chats: 100K, 500K, 1M (default 100K)")
    ap.add_argument("--out", required=True, help="the JSONL file to write, one conversation per line")
    ap.add_argument("--headings", action="store_true", help="start each of BEAM's batches with a system message")
    a = ap.parse_args()
    root = Path(a.beam) / "chats" / a.size
    if not root.is_dir():
        raise SystemExit(f"{root}: no such directory; give a BEAM checkout and one of its sizes (100K, 500K, 1M)")
    dirs = sorted((d for d in root.iterdir() if (d / "chat.json").is_file()
                   and (d / "probing_questions" / "probing_questions.json").is_file()), key=lambda d: int(d.name))
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    count = questions = 0
    with out.open("w") as sink:
        for d in dirs:
            record = convert(d, a.size, d.name, a.headings)
            sink.write(json.dumps(record) + "\n")
            count += 1
            questions += len(record["questions"])
    print(f"{out}: {count} conversations, {questions} questions")


if __name__ == "__main__":
    main()
