#!/usr/bin/env python3
"""Compaction speed on a ~2-million-token history, side by side with LangChain's trim_messages.

Builds the history the issue describes: the dev mini-swe-agent trajectories concatenated, the
first system message only, tool-call ids made unique. Then measures, in one run:
  - engram in process (`engram bench compact`: parsing excluded, best of --repeat),
  - one more turn appended and the context rebuilt (same process, warm caches),
  - the CLI end to end (process start and JSON parsing included, best of --repeat),
  - LangChain's trim_messages with tiktoken cl100k as its counter (if langchain_core is installed).

    python3 scripts/bench_compact.py --data ../shared/data/dev --engram-bin target/release/engram
"""
import argparse, json, os, subprocess, sys, tempfile, time

import devpaths

HERE = os.path.dirname(os.path.abspath(__file__))
devpaths.tiktoken_cache()


def build(data):
    messages = []
    with open(os.path.join(data, "minisweagent_swebv_gemini3pro.jsonl"), encoding="utf-8") as f:
        for n, line in enumerate(f):
            conv = json.loads(line)
            for m in conv["messages"]:
                m = {k: v for k, v in m.items() if k != "meta"}
                if m["role"] == "system":
                    if messages:
                        continue
                m["id"] = f"t{n}-{m['id']}"
                if m.get("tool_calls"):
                    m["tool_calls"] = [dict(tc, id=f"t{n}-{tc['id']}") for tc in m["tool_calls"]]
                if m.get("tool_call_id"):
                    m["tool_call_id"] = f"t{n}-{m['tool_call_id']}"
                messages.append(m)
    return messages


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=devpaths.data_dir(), help="the dev data directory (default: $ENGRAM_DEV_DATA)")
    ap.add_argument("--engram-bin", default=os.path.join(HERE, "..", "target", "release", "engram"))
    ap.add_argument("--budget", type=int, default=8192)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    args.data = devpaths.require(args.data, "--data", devpaths.DATA_ENV, "the dev data directory")
    messages = build(args.data)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"messages": messages}, f)
        path = f.name
    try:
        inproc = json.loads(subprocess.run(
            [args.engram_bin, "bench", "compact", path, "--budget", str(args.budget), "--tokenizer", "cl100k",
             "--repeat", str(args.repeat), "--json"], check=True, capture_output=True, text=True).stdout)
        best = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            out = subprocess.run([args.engram_bin, "compact", "--budget", str(args.budget), "--tokenizer", "cl100k", path],
                                 check=True, capture_output=True)
            best = min(best, time.perf_counter() - t0)
        report = json.loads(out.stdout)["report"]
    finally:
        os.unlink(path)
    rows = [("engram compact, in process (first run, cold caches)", inproc["first_compact_ms"], report["tokens_after"]),
            ("engram compact, in process (best)", inproc["compact_ms"], report["tokens_after"]),
            ("engram: one turn appended, context rebuilt", inproc["append_ms"], None),
            ("engram compact, CLI end to end", best * 1e3, report["tokens_after"])]
    try:
        import tiktoken
        from langchain_core.messages import convert_to_messages, trim_messages
        enc = tiktoken.get_encoding("cl100k_base")

        def counter(msgs):
            n = 3
            for m in msgs:
                c = m.content if isinstance(m.content, str) else "".join(p.get("text", "") for p in m.content if isinstance(p, dict))
                n += 4 + len(enc.encode_ordinary(c))
                for tc in getattr(m, "tool_calls", []) or []:
                    n += len(enc.encode_ordinary(tc["name"] + json.dumps(tc["args"])))
            return n

        lc = convert_to_messages(messages)
        t0 = time.perf_counter()
        kept = trim_messages(lc, strategy="last", include_system=True, start_on="human", max_tokens=args.budget, token_counter=counter)
        rows.append(("LangChain trim_messages (tiktoken counter)", (time.perf_counter() - t0) * 1e3, counter(kept)))
    except ImportError as e:
        print(f"note: LangChain skipped ({e})", file=sys.stderr)
    print(f"history: {len(messages)} messages, {report['tokens_before']:,} tokens"
          f"{' (partly estimated)' if report['tokens_before_estimated'] else ''}; budget {args.budget}")
    print("| what | ms | output tokens |\n|---|---:|---:|")
    for name, ms, tokens in rows:
        print(f"| {name} | {ms:.3f} | {tokens if tokens is not None else '-'} |")


if __name__ == "__main__":
    main()
