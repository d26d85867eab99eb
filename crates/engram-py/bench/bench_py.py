"""engram from Python, side by side with what Python agents use today, in one run.

- token counting: engram's `Counter` vs Python `tiktoken` (o200k_base), on every message text
  of the dev data, one call per text and batched;
- a request's count: engram vs the OpenAI cookbook's `num_tokens_from_messages` over tiktoken;
- trimming to a budget: LangChain's `trim_messages` (strategy "last", tiktoken counter) vs
  `engram.compact` (truncate and auto), half of each conversation's tokens as the budget.

    TIKTOKEN_CACHE_DIR=DIR python3 crates/engram-py/bench/bench_py.py   # DIR: a tiktoken cache

Prints a Markdown table of medians and ratios (docs/benchmarks-history.md records it).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import time

import engram

ROOT = pathlib.Path(__file__).resolve().parents[3]
DATA = pathlib.Path(os.environ.get("ENGRAM_DEV_DATA", ROOT.parent / "shared" / "data" / "dev"))
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(ROOT.parent / "shared" / "eval" / "tiktoken_cache"))

FILES = ["sweagent_demos.jsonl", "minisweagent_swebv_gemini3pro.jsonl", "taubench_gpt4o_airline.jsonl"]


def conversations(limit: int) -> list[list[dict]]:
    out = []
    for name in FILES:
        with open(DATA / name, encoding="utf-8") as f:
            for i, line in enumerate(f):
                if i >= limit:
                    break
                record = json.loads(line)
                out.append([{k: v for k, v in m.items() if k not in ("id", "meta")}
                            for m in record["messages"]])
    return out


def timed(fn, repeat: int) -> float:
    """Median seconds of `repeat` runs (after one warm-up)."""
    fn()
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t)
    return statistics.median(runs)


def num_tokens_from_messages(enc, messages: list[dict]) -> int:
    """The OpenAI cookbook's count for gpt-4o-class models (3 per message, 1 per name, 3 to
    prime the reply), extended to tool calls as engram counts them."""
    total = 3
    for m in messages:
        total += 3
        for key, value in m.items():
            if key == "content" and isinstance(value, str):
                total += len(enc.encode(value, disallowed_special=()))
            elif key == "tool_calls":
                for c in value:
                    total += len(enc.encode(c["function"]["name"] + c["function"]["arguments"],
                                            disallowed_special=()))
            elif key == "name":
                total += 1 + len(enc.encode(value, disallowed_special=()))
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=20, help="per dev file")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    import tiktoken
    from langchain_core.messages import convert_to_messages, trim_messages

    enc = tiktoken.get_encoding("o200k_base")
    convs = conversations(args.conversations)
    texts = [m["content"] for c in convs for m in c if isinstance(m.get("content"), str)]
    chars = sum(map(len, texts))
    counter = engram.Counter("gpt-4o")
    assert counter.count_batch(texts) == [len(enc.encode(t, disallowed_special=())) for t in texts]

    rows = []

    def row(task, theirs_name, theirs, ours_name, ours):
        rows.append((task, theirs_name, theirs, ours_name, ours, theirs / ours))

    t_tk = timed(lambda: [len(enc.encode(t, disallowed_special=())) for t in texts], args.repeat)
    t_tk_batch = timed(lambda: enc.encode_ordinary_batch(texts), args.repeat)
    t_en = timed(lambda: [counter.count(t) for t in texts], args.repeat)
    t_en_batch = timed(lambda: counter.count_batch(texts), args.repeat)
    row(f"count {len(texts)} texts ({chars / 1e6:.1f} MB), one call each", "tiktoken encode", t_tk,
        "engram Counter.count", t_en)
    row("the same, batched", "tiktoken encode_ordinary_batch", t_tk_batch, "engram Counter.count_batch",
        t_en_batch)

    # engram keeps a per-thread cache of word pieces' counts: the rows above are warm (an agent
    # recounting its texts). A first pass, in a new thread whose cache is empty:
    import threading

    def cold() -> float:
        out = []

        def run():
            t = time.perf_counter()
            counter.count_batch(texts)
            out.append(time.perf_counter() - t)

        th = threading.Thread(target=run)
        th.start()
        th.join()
        return out[0]

    t_en_cold = statistics.median(cold() for _ in range(args.repeat))
    row("the same, engram's first pass (a new thread: no cached pieces)", "tiktoken encode", t_tk,
        "engram Counter.count_batch, cold", t_en_cold)

    t_tk_req = timed(lambda: [num_tokens_from_messages(enc, c) for c in convs], args.repeat)
    t_en_req = timed(lambda: [counter.count_messages(c)["total"] for c in convs], args.repeat)
    row(f"count {len(convs)} whole requests", "cookbook num_tokens_from_messages", t_tk_req,
        "engram count_messages", t_en_req)

    lc_convs = [convert_to_messages(c) for c in convs]
    # Half of each conversation, but never less than its system prompt and newest message (which
    # both tools keep) plus a little.
    budgets = [max(counter.count_messages(c)["total"] // 2,
                   counter.count_messages([c[0], c[-1]])["total"] + 256) for c in convs]

    def lc_counter(messages) -> int:
        from langchain_core.messages import convert_to_openai_messages

        return num_tokens_from_messages(enc, convert_to_openai_messages(messages))

    def lc_trim():
        for c, b in zip(lc_convs, budgets):
            trim_messages(c, max_tokens=b, token_counter=lc_counter, strategy="last",
                          include_system=True, allow_partial=False)

    t_lc = timed(lc_trim, max(1, args.repeat // 2))
    t_en_trunc = timed(lambda: [engram.compact(c, b, model="gpt-4o", strategy="truncate")
                                for c, b in zip(convs, budgets)], args.repeat)
    t_en_auto = timed(lambda: [engram.compact(c, b, model="gpt-4o") for c, b in zip(convs, budgets)],
                      args.repeat)
    t_en_lc = timed(lambda: [engram.compact(c, b, model="gpt-4o", strategy="truncate")
                             for c, b in zip(lc_convs, budgets)], args.repeat)
    name = f"trim {len(convs)} conversations to half their tokens"
    row(name, "LangChain trim_messages (tiktoken)", t_lc, "engram.compact truncate", t_en_trunc)
    row(name, "LangChain trim_messages (tiktoken)", t_lc, "engram.compact auto (mask, digest, ...)", t_en_auto)
    row(name + ", LangChain messages in and out", "LangChain trim_messages (tiktoken)", t_lc,
        "engram.compact truncate", t_en_lc)

    print(f"Python {sys.version.split()[0]}, tiktoken {tiktoken.__version__}, engram {engram.__version__}; "
          f"medians of {args.repeat} runs\n")
    print("| task | Python tool | time | engram | time | engram faster |")
    print("|---|---|---:|---|---:|---:|")
    for task, tn, tt, en, et, ratio in rows:
        print(f"| {task} | {tn} | {tt * 1e3:.1f} ms | {en} | {et * 1e3:.1f} ms | {ratio:.1f}x |")


if __name__ == "__main__":
    main()
