#!/usr/bin/env python3
"""Writes the token-count fixtures the exactness test checks engram against.

For every message of every conversation in the dev data, Python tiktoken's count
(`encode_ordinary`, special-token strings as ordinary text) of
  - the content text (a string, or the text parts joined with nothing between them), and
  - each tool call's `name + arguments`,
for cl100k_base and o200k_base. One JSON line per conversation:
  {"file", "id", "cl100k": [[content, [call, ...]], ...], "o200k": [...]}

    TIKTOKEN_CACHE_DIR=../shared/eval/tiktoken_cache python3 scripts/gen_token_fixtures.py
"""
import glob
import json
import os
import sys

import devpaths

HERE = os.path.dirname(os.path.abspath(__file__))
devpaths.tiktoken_cache()
import tiktoken  # noqa: E402

DATA = devpaths.require(sys.argv[1] if len(sys.argv) > 1 else devpaths.data_dir(), "the first argument", devpaths.DATA_ENV, "the dev data directory")
OUT = os.path.join(HERE, "..", "crates", "engram", "tests", "fixtures", "tiktoken_dev_counts.jsonl")


def content_text(c):
    if c is None:
        return ""
    if isinstance(c, str):
        return c
    return "".join(p.get("text", "") for p in c if isinstance(p, dict) and p.get("type") == "text")


encs = {"cl100k": tiktoken.get_encoding("cl100k_base"), "o200k": tiktoken.get_encoding("o200k_base")}
n = 0
with open(OUT, "w") as out:
    for path in sorted(glob.glob(os.path.join(DATA, "*.jsonl"))):
        with open(path, encoding="utf-8") as f:
            for line in f:
                conv = json.loads(line)
                row = {"file": os.path.basename(path), "id": conv["id"]}
                for name, enc in encs.items():
                    row[name] = [
                        [len(enc.encode_ordinary(content_text(m.get("content")))),
                         [len(enc.encode_ordinary(tc["function"]["name"] + (tc["function"].get("arguments") or "")))
                          for tc in (m.get("tool_calls") or [])]]
                        for m in conv["messages"]
                    ]
                n += len(conv["messages"])
                out.write(json.dumps(row, separators=(",", ":")) + "\n")
print(f"wrote {OUT}: {n} messages, tiktoken {tiktoken.__version__}")
