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

`--before-bin OTHER` adds two columns: the same searches, lexical and hybrid, by another build (an
earlier commit), in the same run and over the same entries, so a change to ranking is compared side
by side. (A build whose search index differs rebuilds the index on open: each build searches its
own copy of the store.)

`--postgres URL` runs the lexical searches again on PostgreSQL: `engram serve --store URL` holds
every conversation's entries (each conversation a session), and each question is asked through
`GET /v1/memory/search` with its conversation's `session_id`. With `--before-bin`,
`--before-postgres URL` names the other build's database (each build keeps its own schema).
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections import defaultdict
from pathlib import Path

import devpaths


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


class Served:
    """`engram serve --store URL` on a free loopback port, for the PostgreSQL searches."""

    def __init__(self, engram: str, store: str) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.base = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [engram, "serve", "--store", store, "--listen", f"127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(self.base + "/healthz", timeout=2).read()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"engram serve --store {store} did not start: {self.proc.stderr.read()}")
                time.sleep(0.2)

    def add(self, entries: list[dict]) -> None:
        for start in range(0, len(entries), 500):
            body = json.dumps({"entries": entries[start : start + 500]}).encode()
            request = urllib.request.Request(
                self.base + "/v1/memory", data=body, headers={"content-type": "application/json"}
            )
            urllib.request.urlopen(request, timeout=120).read()

    def search(self, question: str, k: int, session: str) -> tuple[list[str], float]:
        started = time.monotonic()
        query = urllib.parse.urlencode({"q": question, "limit": k, "session_id": session})
        with urllib.request.urlopen(f"{self.base}/v1/memory/search?{query}", timeout=120) as r:
            results = json.loads(r.read())["results"]
        return [h["id"] for h in results], time.monotonic() - started

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engram-bin", default="target/release/engram")
    parser.add_argument("--data", default=devpaths.data_dir(), help="the dev data directory (default: $ENGRAM_DEV_DATA)")
    parser.add_argument("--embedding-model", required=True, help="the all-MiniLM-L6-v2 directory")
    parser.add_argument("--limit", type=int, default=10, help="hits per search (K)")
    parser.add_argument("--every", type=int, default=3, help="ask every n-th question")
    parser.add_argument("--before-bin", help="another build whose searches are compared too")
    parser.add_argument("--postgres", metavar="URL", help="also search on PostgreSQL (lexical)")
    parser.add_argument("--before-postgres", metavar="URL", help="the --before-bin build's database")
    args = parser.parse_args()
    args.data = devpaths.require(args.data, "--data", devpaths.DATA_ENV, "the dev data directory")
    if args.before_bin and args.postgres and not args.before_postgres:
        parser.error("--postgres with --before-bin needs --before-postgres (a database of its own)")

    convs = [json.loads(line) for line in open(Path(args.data) / "locomo.jsonl")]
    hybrid = ["--recall", "hybrid", "--embedding-model", args.embedding_model]
    modes = {"lexical": (args.engram_bin, []), "hybrid": (args.engram_bin, hybrid)}
    if args.before_bin:
        modes["lexical, before"] = (args.before_bin, [])
        modes["hybrid, before"] = (args.before_bin, hybrid)
    served: dict[str, Served] = {}
    if args.postgres:
        served["lexical, PostgreSQL"] = Served(args.engram_bin, args.postgres)
        if args.before_bin:
            served["lexical, PostgreSQL, before"] = Served(args.before_bin, args.before_postgres)
    recall: dict[str, dict[str, list[float]]] = {m: defaultdict(list) for m in [*modes, *served]}
    seconds: dict[str, list[float]] = {m: [] for m in [*modes, *served]}
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
            # Each build searches its own copy: an index of another tokenizer is rebuilt on open,
            # and the two builds would rebuild it in turn.
            dbs = {args.engram_bin: db}
            if args.before_bin:
                dbs[args.before_bin] = Path(work) / f"{conv['id']}-before.db"
                subprocess.run(
                    [args.before_bin, "--db", str(dbs[args.before_bin]), "memory", "import", str(jsonl)],
                    check=True,
                    capture_output=True,
                )
            for server in served.values():
                server.add(entries)
            for n, q in enumerate(conv["questions"]):
                if n % args.every or not q.get("evidence_ids"):
                    continue
                evidence = {f"{conv['id']}/{e}" for e in q["evidence_ids"]}
                asked = [
                    (mode, lambda engram=engram, extra=extra: search(engram, dbs[engram], q["question"], args.limit, extra))
                    for mode, (engram, extra) in modes.items()
                ] + [
                    (mode, lambda server=server: server.search(q["question"], args.limit, conv["id"]))
                    for mode, server in served.items()
                ]
                for mode, ask in asked:
                    ids, elapsed = ask()
                    found = len(evidence & set(ids)) / len(evidence)
                    recall[mode][q["category"]].append(found)
                    recall[mode]["overall"].append(found)
                    seconds[mode].append(elapsed)
            print(f"{conv['id']}: {len(entries)} entries", file=sys.stderr, flush=True)

    for server in served.values():
        server.close()
    modes = [*modes, *served]
    categories = sorted({c for m in recall.values() for c in m}, key=lambda c: (c == "overall", c))
    print("| category | questions | " + " | ".join(f"{m} recall@{args.limit}" for m in modes) + " |")
    print("|---|---:|" + "---:|" * len(modes))
    for c in categories:
        n = len(recall["lexical"][c])
        cells = " | ".join(f"{sum(recall[m][c]) / n:.3f}" for m in modes)
        print(f"| {c} | {n} | {cells} |")
    for mode in modes:
        s = sorted(seconds[mode])
        each = "an HTTP request" if mode in served else "a whole process"
        print(f"{mode}: median {s[len(s) // 2] * 1000:.0f} ms per search ({each}), max {s[-1] * 1000:.0f} ms")


if __name__ == "__main__":
    main()
