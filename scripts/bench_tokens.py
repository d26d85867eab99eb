#!/usr/bin/env python3
"""Token-counting throughput: engram against Python tiktoken, side by side in one run.

Builds a text of about --mb megabytes from the dev data (every message's content and tool-call
arguments, in file order, repeated if needed), then measures, on that same text:
  - Python tiktoken `encode_ordinary` on one thread (best of --repeat),
  - tiktoken's own batch mode on 2 threads (`encode_ordinary_batch` over line-aligned chunks),
  - `engram bench count` (single thread and all cores, in process, best of --repeat),
checks that every count is equal, and prints MB/s and ratios against tiktoken's single thread.

    TIKTOKEN_CACHE_DIR=../shared/eval/tiktoken_cache \
    python3 scripts/bench_tokens.py --data ../shared/data/dev --engram-bin target/release/engram
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

import devpaths

HERE = os.path.dirname(os.path.abspath(__file__))
devpaths.tiktoken_cache()


def build_corpus(data_dir: str, target_bytes: int) -> str:
    texts = []
    for path in sorted(glob.glob(os.path.join(data_dir, "*.jsonl"))):
        with open(path, encoding="utf-8") as f:
            for line in f:
                conv = json.loads(line)
                for m in conv.get("messages", []):
                    c = m.get("content")
                    if isinstance(c, str) and c:
                        texts.append(c)
                    for tc in m.get("tool_calls") or []:
                        args = tc.get("function", {}).get("arguments")
                        if isinstance(args, str) and args:
                            texts.append(args)
    if not texts:
        sys.exit(f"no messages found under {data_dir}")
    out, size, i = [], 0, 0
    while size < target_bytes:
        t = texts[i % len(texts)]
        out.append(t)
        size += len(t.encode("utf-8")) + 1
        i += 1
    return "\n".join(out)


def best_of(repeat, fn):
    best, result = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return result, best


def line_chunks(text: str, parts: int) -> list[str]:
    """Cut after a newline followed by an ASCII letter or digit (never changes the count)."""
    size = len(text) // parts
    chunks, start = [], 0
    while start < len(text):
        cut = min(start + max(size, 1), len(text))
        while cut < len(text) and not (text[cut - 1] == "\n" and text[cut].isascii() and text[cut].isalnum()):
            cut += 1
        chunks.append(text[start:cut])
        start = cut
    return chunks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=devpaths.data_dir(), help="the dev data directory (default: $ENGRAM_DEV_DATA)")
    ap.add_argument("--engram-bin", default=os.path.join(HERE, "..", "target", "release", "engram"))
    ap.add_argument("--mb", type=float, default=20.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()
    args.data = devpaths.require(args.data, "--data", devpaths.DATA_ENV, "the dev data directory")

    import tiktoken

    text = build_corpus(args.data, int(args.mb * 1e6))
    nbytes = len(text.encode("utf-8"))
    mb = nbytes / 1e6
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt", delete=False) as f:
        f.write(text)
        corpus = f.name
    try:
        proc = subprocess.run(
            [args.engram_bin, "bench", "count", corpus, "--tokenizer", "cl100k,o200k",
             "--threads", str(args.threads), "--repeat", str(args.repeat), "--json"],
            check=True, capture_output=True, text=True,
        )
        engram = {r["tokenizer"]: r for r in json.loads(proc.stdout)["results"]}
    finally:
        os.unlink(corpus)

    rows = []
    for name, enc_name in (("cl100k", "cl100k_base"), ("o200k", "o200k_base")):
        enc = tiktoken.get_encoding(enc_name)
        enc.encode_ordinary("warm up")
        tk_tokens, tk_single = best_of(args.repeat, lambda: len(enc.encode_ordinary(text)))
        chunks = line_chunks(text, args.threads * 4)
        tk_batch_tokens, tk_batch = best_of(
            args.repeat,
            lambda: sum(len(t) for t in enc.encode_ordinary_batch(chunks, num_threads=args.threads)),
        )
        e = engram[name]
        if not (tk_tokens == tk_batch_tokens == e["tokens"]):
            sys.exit(f"{name}: counts differ: tiktoken {tk_tokens}, tiktoken batch {tk_batch_tokens}, engram {e['tokens']}")
        base = mb / tk_single
        rows.append({
            "tokenizer": name, "mb": round(mb, 2), "tokens": tk_tokens,
            "tiktoken_1t_mb_s": round(base, 1),
            "tiktoken_batch_mb_s": round(mb / tk_batch, 1),
            "engram_1t_cold_mb_s": round(e["single_cold_mb_s"], 1),
            "engram_1t_warm_mb_s": round(e["single_warm_mb_s"], 1),
            "engram_mt_mb_s": round(e["parallel_mb_s"], 1),
            "ratio_1t_cold": round(e["single_cold_mb_s"] / base, 2),
            "ratio_1t_warm": round(e["single_warm_mb_s"] / base, 2),
            "ratio_mt": round(e["parallel_mb_s"] / base, 2),
            "threads": args.threads,
        })

    print(f"corpus: {mb:.2f} MB from {args.data}; tiktoken {tiktoken.__version__}; best of {args.repeat}; counts equal")
    print("| tokenizer | tokens | tiktoken 1 thread | tiktoken batch, {t} threads | engram 1 thread, cold | engram 1 thread, warm | engram {t} threads (cold) | ratio 1 thread cold | ratio 1 thread warm | ratio {t} threads |".format(t=args.threads))
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['tokenizer']} | {r['tokens']:,} | {r['tiktoken_1t_mb_s']} MB/s | {r['tiktoken_batch_mb_s']} MB/s | "
              f"{r['engram_1t_cold_mb_s']} MB/s | {r['engram_1t_warm_mb_s']} MB/s | {r['engram_mt_mb_s']} MB/s | "
              f"{r['ratio_1t_cold']}x | {r['ratio_1t_warm']}x | {r['ratio_mt']}x |")
    print("ratios are against tiktoken on one thread, measured in this same run")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "tiktoken": tiktoken.__version__}, f, indent=2)


if __name__ == "__main__":
    main()
