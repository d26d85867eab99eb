#!/usr/bin/env python3
"""Recoverable recall: what compaction keeps in context, plus what the agent gets back with one
`search_history` call.

Conversations with questions (LoCoMo, LongMemEval) are measured the same way: each conversation is
stored as an engram session, and a question whose compacted context lost evidence makes one
`search_history` call with the question as the query; an evidence message among the hits counts as
recovered. `--recall hybrid --embedding-model DIR` searches by meaning too.

The evaluation harness's trajectory task (../shared/eval/engram_eval.py) asks, at points of a real
agent trajectory compacted to a budget, which identifiers of the next action are still in the context
("recall"). Here each probe is also stored as an engram session, and every identifier the context
lost is looked up with one `search_history` call with that identifier as the query: it counts as
recovered when one of the hits is a message that holds it. "Recoverable recall" is the share of
identifiers in the context or recovered.

    cargo build --release -p engram-cli; pip install ./crates/engram-py tiktoken
    python3 scripts/bench_recover.py --data ../shared/data/dev --engram-bin target/release/engram

The probes, budgets and identifier rules are the harness's own (imported from --eval-dir).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time

import devpaths


def load_harness(path: str):
    spec = importlib.util.spec_from_file_location("engram_eval", os.path.join(path, "engram_eval.py"))
    if spec is None or spec.loader is None:
        sys.exit(f"cannot load the harness from {path}: pass --eval-dir")
    module = importlib.util.module_from_spec(spec)
    sys.modules["engram_eval"] = module
    spec.loader.exec_module(module)
    return module


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="the dev data directory")
    ap.add_argument("--eval-dir", default=devpaths.eval_dir(), help="the evaluation harness's directory (default: $ENGRAM_EVAL_DIR)")
    ap.add_argument("--datasets", default="minisweagent_swebv_gemini3pro,sweagent_demos,taubench_gpt4o_airline")
    ap.add_argument("--max-probes", type=int, default=6, help="probes per trajectory (the harness's default)")
    ap.add_argument("--limit", type=int, default=5, help="hits per search_history call")
    ap.add_argument("--engram-bin", default="target/release/engram",
                    help="the engram binary that compacts, as the harness runs it")
    ap.add_argument("--budgets", default="2048,4096", help="conversations' budgets (the harness's)")
    ap.add_argument("--recall", choices=["lexical", "hybrid"], default="lexical",
                    help="how compaction and search_history find older messages")
    ap.add_argument("--embedding-model", help="the sentence-embedding model's directory (hybrid)")
    args = ap.parse_args()
    if args.recall == "hybrid" and not args.embedding_model:
        ap.error("--recall hybrid needs --embedding-model DIR")
    args.eval_dir = devpaths.require(args.eval_dir, "--eval-dir", devpaths.EVAL_ENV, "the evaluation harness")

    harness = load_harness(os.path.abspath(args.eval_dir))
    import engram

    extra = (["--recall", "hybrid", "--embedding-model", args.embedding_model]
             if args.recall == "hybrid" else [])
    compact = harness.ExternalSystem(args.engram_bin, extra, 120.0)
    embeddings = engram.Embeddings(args.embedding_model) if args.recall == "hybrid" else None

    rows = []
    conversation_rows = []
    for name in args.datasets.split(","):
        convs = harness.load_jsonl(os.path.join(args.data, f"{name}.jsonl"), None)
        stats: dict = {}
        if any(c.get("questions") for c in convs):
            conversation_rows.extend(conversations(harness, engram, compact, embeddings, name, convs, args))
            continue
        budgets = harness.traj_budgets_for(name, {})
        items = harness.build_trajectory_items(name, convs, budgets, args.max_probes, stats)
        store = engram.Store(":memory:")
        targets = in_context = recovered = searches = 0
        per_probe: list[tuple[float, float]] = []
        search_ms: list[float] = []
        started = time.perf_counter()
        for n, it in enumerate(items):
            out, _ = compact([dict(m) for m in it.messages], it.budget, it.query, it.task)
            kept = set()
            for m in out:
                kept |= harness.salient_tokens(harness.msg_text(m))
            present = it.targets & kept
            targets += len(it.targets)
            in_context += len(present)
            missing = it.targets - present
            if not missing:
                per_probe.append((1.0, 1.0))
                continue
            found_before = recovered
            session = store.new_session("gpt-4o", window=10_000_000, id=f"p{n}")
            session.append(*[{k: v for k, v in m.items() if k != "id"} for m in it.messages])
            log = {m["id"]: m for m in session.log()}
            for target in sorted(missing):
                t0 = time.perf_counter()
                reply = session.tool("search_history", {"query": target, "limit": args.limit})
                search_ms.append((time.perf_counter() - t0) * 1000)
                searches += 1
                if reply is None or reply["is_error"]:
                    continue
                for hit in json.loads(reply["content"])["hits"]:
                    message = log.get(hit["id"])
                    if message and target in harness.salient_tokens(harness.msg_text(message)):
                        recovered += 1
                        break
            back = recovered - found_before
            per_probe.append((len(present) / len(it.targets), (len(present) + back) / len(it.targets)))
        search_ms.sort()
        rows.append({
            "dataset": name, "budget": budgets[0], "probes": len(items), "targets": targets,
            "recall": round(sum(p[0] for p in per_probe) / len(per_probe), 3) if per_probe else None,
            "recoverable_recall": (round(sum(p[1] for p in per_probe) / len(per_probe), 3)
                                   if per_probe else None),
            "identifiers_recall": round(in_context / targets, 3) if targets else None,
            "identifiers_recoverable": round((in_context + recovered) / targets, 3) if targets else None,
            "searches": searches,
            "search_median_ms": round(search_ms[len(search_ms) // 2], 2) if search_ms else None,
            "seconds": round(time.perf_counter() - started, 1),
        })
        print(json.dumps(rows[-1]), flush=True)
    if conversation_rows:
        print()
        print("Per question, as the harness averages (evidence messages found verbatim).")
        print("| dataset | budget | category | questions | recall | recoverable recall | hits out of the view first |")
        print("|---|---:|---|---:|---:|---:|---:|")
        for r in conversation_rows:
            print(f"| {r['dataset']} | {r['budget']} | {r['category']} | {r['questions']} | "
                  f"{r['recall']} | {r['recoverable_recall']} | {r['recoverable_unseen_first']} |")
    if not rows:
        return 0
    print()
    print("Per probe, as the harness averages; then over all identifiers.")
    print("| dataset | budget | probes | identifiers | recall | recoverable recall | recall (identifiers) | recoverable (identifiers) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['dataset']} | {r['budget']} | {r['probes']} | {r['targets']} | {r['recall']} | "
              f"{r['recoverable_recall']} | {r['identifiers_recall']} | {r['identifiers_recoverable']} |")
    return 0


def conversations(harness, engram, compact, embeddings, name, convs, args) -> list[dict]:
    """Recall and recoverable recall per budget and question category for one dataset of
    conversations with questions. Each question's conversation (the question its newest turn) is
    an engram session compacted to the budget with the question in focus, as an agent's
    `compact_history` does; the evidence in its view is what the context holds, and one
    `search_history` call with the question brings back what it can of the rest."""
    budgets = [int(b) for b in args.budgets.split(",") if b.strip()]
    items = harness.build_recall_items(name, convs, budgets, None, {})
    store = engram.Store(":memory:", embeddings=embeddings)
    scores: dict[tuple[int, str], list[tuple[float, float, float]]] = {}
    started = time.perf_counter()
    for n, it in enumerate(items):
        session = store.new_session("gpt-4", window=100_000_000, id=f"q{n}")
        session.append(*[{k: v for k, v in m.items() if k != "id"} for m in it.messages])
        texts = {m["id"]: harness.norm(harness.content_text(m.get("content"))) for m in session.log()}
        session.compact(it.budget, focus=it.query)
        view = harness.output_norm_text(session.context().messages)
        missing = [eid for eid, t in it.evidence.items() if t not in view]
        found = (len(it.evidence) - len(missing)) / len(it.evidence)
        back = {"first": 0, "unseen": 0}
        if missing:
            reply = session.tool("search_history", {"query": it.query, "limit": 50})
            hits = [] if reply is None or reply["is_error"] else json.loads(reply["content"])["hits"]
            ranked = {
                # The hits as search_history returns them.
                "first": hits[:args.limit],
                # The hits out of the view first (what the agent cannot see).
                "unseen": ([h for h in hits if not h["in_view"]] + [h for h in hits if h["in_view"]])[:args.limit],
            }
            for way, chosen in ranked.items():
                got = [texts.get(h["id"], "") for h in chosen]
                back[way] = sum(1 for eid in missing if any(it.evidence[eid] in t for t in got))
        row = (found, found + back["first"] / len(it.evidence), found + back["unseen"] / len(it.evidence))
        for category in ("all", it.category or "-"):
            scores.setdefault((it.budget, category), []).append(row)
    rows = []
    for (budget, category), triples in sorted(scores.items(), key=lambda kv: (kv[0][0], kv[0][1] != "all", kv[0][1])):
        mean = lambda i: round(sum(t[i] for t in triples) / len(triples), 3)  # noqa: E731
        rows.append({
            "dataset": name, "budget": budget, "category": category, "questions": len(triples),
            "recall": mean(0), "recoverable_recall": mean(1), "recoverable_unseen_first": mean(2),
        })
        print(json.dumps(rows[-1]), flush=True)
    print(json.dumps({"dataset": name, "seconds": round(time.perf_counter() - started, 1)}), flush=True)
    return rows


if __name__ == "__main__":
    sys.exit(main())
