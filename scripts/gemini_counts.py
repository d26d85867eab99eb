#!/usr/bin/env python3
"""Gemini token counts of conversation texts, by the `google-genai` Python SDK's LocalTokenizer:
what engram's `gemini` tokenizer (feature `gemini-tokenizer`) is checked against
(crates/engram/tests/gemini_counts.rs).

    pip install google-genai sentencepiece protobuf
    python3 scripts/gemini_counts.py testdata/dev/*.jsonl > testdata/gemini/counts.jsonl

Each line: {"file", "record", "message", "tokens"}: the record's index in the file, the message's
index in its `messages`, and the SDK's count of the message's text (messages whose content is a
plain string). The SDK fetches its SentencePiece model from GitHub on first use; nothing may be
fetched here, so its cache is filled first from the same model file the `gemini-tokenizer` crate
embeds (`--model`, default: the crate's copy in cargo's registry), which the SDK checks against
its own hash.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import sys
import tempfile


def seed_cache(model: str) -> None:
    from google.genai import _local_tokenizer_loader as loader  # type: ignore[import-untyped]

    config = loader._TOKENIZERS["gemma3"]
    data = open(model, "rb").read()
    if hashlib.sha256(data).hexdigest() != config.model_hash:
        sys.exit(f"{model} is not the model the SDK expects (sha256 {config.model_hash})")
    directory = os.path.join(tempfile.gettempdir(), "vertexai_tokenizer_model")
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, hashlib.sha1(config.model_url.encode()).hexdigest()), "wb") as f:
        f.write(data)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--model", help="gemma3_cleaned_262144_v2.spiece.model")
    args = ap.parse_args()
    model = args.model or next(iter(sorted(glob.glob(os.path.expanduser(
        "~/.cargo/registry/src/*/gemini-tokenizer-*/resources/gemma3_cleaned_262144_v2.spiece.model")))), None)
    if not model:
        sys.exit("no model file: build engram with --features gemini-tokenizer once, or give --model")
    seed_cache(model)
    from google.genai.local_tokenizer import LocalTokenizer  # type: ignore[import-untyped]

    tokenizer = LocalTokenizer(model_name="gemini-2.5-pro")
    n = 0
    for path in args.files:
        for r, line in enumerate(open(path, encoding="utf-8")):
            if not line.strip():
                continue
            for m, message in enumerate(json.loads(line).get("messages", [])):
                text = message.get("content")
                if not isinstance(text, str) or not text:
                    continue
                tokens = tokenizer.count_tokens(text).total_tokens
                print(json.dumps({"file": os.path.basename(path), "record": r, "message": m, "tokens": tokens}))
                n += 1
    print(f"{n} texts", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
