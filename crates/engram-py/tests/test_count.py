"""Token counts: exact against tiktoken on the dev data, per message and per request.

The default check compares with counts tiktoken made once for every dev message
(crates/engram/tests/fixtures/tiktoken_dev_counts.jsonl, scripts/gen_token_fixtures.py), so it needs
no vocabulary download; a second check runs tiktoken itself when its vocabularies are at hand offline
(TIKTOKEN_CACHE_DIR, or the eval harness's cache beside the repository)."""

from __future__ import annotations

import json
import os
import pathlib

import pytest

import engram
from conftest import REPO, load_records, openai_messages


COUNTS = REPO / "crates" / "engram" / "tests" / "fixtures" / "tiktoken_dev_counts.jsonl"


def tiktoken_encoding(name: str):
    tiktoken = pytest.importorskip("tiktoken")
    cache = os.environ.get("TIKTOKEN_CACHE_DIR") or str(REPO.parent / "shared" / "eval" / "tiktoken_cache")
    if not pathlib.Path(cache).is_dir():
        pytest.skip(f"tiktoken: no offline vocabulary cache at {cache} (set TIKTOKEN_CACHE_DIR); "
                    "the fixture counts were checked")
    os.environ["TIKTOKEN_CACHE_DIR"] = cache
    try:
        return tiktoken.get_encoding(name)
    except Exception as e:  # the cache is there but lacks this vocabulary
        pytest.fail(f"tiktoken's {name} vocabulary is not in {cache}: {e}")


def fixture_counts() -> dict:
    """(file, id) -> {"cl100k": [[content, [calls]], ...], "o200k": ...}, made by tiktoken."""
    out = {}
    with open(COUNTS, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            out[(row["file"], row["id"])] = row
    return out


def dev_texts(limit_records: int = 3) -> list[str]:
    texts = []
    for name in ("sweagent_demos.jsonl", "taubench_gpt4o_airline.jsonl", "locomo.jsonl"):
        for record in load_records(name, limit_records):
            for m in record["messages"]:
                if isinstance(m.get("content"), str):
                    texts.append(m["content"])
    assert len(texts) > 100
    return texts


@pytest.mark.parametrize("tokenizer", ["cl100k", "o200k"])
def test_text_counts_equal_tiktokens_fixture_counts(tokenizer):
    counts = fixture_counts()
    counter = engram.Counter(tokenizer=tokenizer)
    texts, expected = [], []
    for name in ("sweagent_demos.jsonl", "taubench_gpt4o_airline.jsonl", "locomo.jsonl"):
        for record in load_records(name, 3):
            row = counts[(name, record["id"])][tokenizer]
            assert len(row) == len(record["messages"])
            for m, (content, _calls) in zip(record["messages"], row):
                if isinstance(m.get("content"), str):
                    texts.append(m["content"])
                    expected.append(content)
    assert len(texts) > 100
    ours = counter.count_batch(texts)
    mismatches = [(i, a, b) for i, (a, b) in enumerate(zip(ours, expected)) if a != b]
    assert not mismatches, f"{len(mismatches)} texts differ, first: {mismatches[:3]}"
    assert [counter.count(t) for t in texts[:50]] == expected[:50]


@pytest.mark.parametrize("encoding,tokenizer", [("cl100k_base", "cl100k"), ("o200k_base", "o200k")])
def test_text_counts_equal_tiktoken_on_the_dev_data(encoding, tokenizer):
    enc = tiktoken_encoding(encoding)
    texts = dev_texts()
    counter = engram.Counter(tokenizer=tokenizer)
    ours = counter.count_batch(texts)
    theirs = [len(enc.encode(t, disallowed_special=())) for t in texts]
    mismatches = [(i, a, b) for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    assert not mismatches, f"{len(mismatches)} texts differ, first: {mismatches[:3]}"
    assert [counter.count(t) for t in texts[:50]] == theirs[:50]


def test_a_request_costs_its_messages_plus_overheads(trajectory):
    counter = engram.Counter("gpt-4o")
    assert counter.exact and counter.window == 128_000 and counter.tokenizer == "o200k"
    report = counter.count_messages(trajectory)
    assert len(report["messages"]) == len(trajectory)
    assert report["total"] == sum(report["messages"]) + 3
    assert engram.count_tokens(trajectory, model="gpt-4o") == report["total"]
    # A request body counts the same, and tool definitions add to it.
    assert engram.count_tokens({"messages": trajectory}, model="gpt-4o") == report["total"]
    tools = [engram.compact_history_tool()]
    with_tools = counter.count_messages(trajectory, tools=tools)
    assert with_tools["tools"] > 0
    assert with_tools["total"] == report["total"] + with_tools["tools"]


def test_unknown_models_say_their_numbers_are_a_guess():
    c = engram.Counter("my-local-model-7b")
    assert c.warning and "my-local-model-7b" in c.warning
    assert c.count("hello world") > 0
    assert engram.Counter(tokenizer="chars/4").count("x" * 40) == 10


def test_models_lists_the_registry():
    models = engram.models()
    ids = {m["id"] for m in models}
    assert {"gpt-4o", "claude-sonnet-4-5"} <= ids
    gpt = next(m for m in models if m["id"] == "gpt-4o")
    assert gpt["context_window"] == 128_000 and gpt["price"]["input_per_mtok"] > 0


def test_bad_input_names_the_message_and_field():
    with pytest.raises(engram.EngramError, match=r"message 1, field `role`"):
        engram.count_tokens([{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}])
    with pytest.raises(engram.EngramError, match="unknown tokenizer|tokenizer"):
        engram.Counter(tokenizer="no-such-tokenizer")
    with pytest.raises(engram.EngramError, match="not a string"):
        engram.compact("just a string")  # type: ignore[arg-type]
