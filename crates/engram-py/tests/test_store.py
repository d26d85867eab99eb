"""Memory and sessions through the Python API, on the embedded SQLite store."""

from __future__ import annotations

import json
import subprocess

import pytest

import engram
from conftest import REPO, load_records


def test_memory_add_search_sleep_log(store):
    records = load_records("locomo.jsonl", 1)
    turns = [m["content"] for m in records[0]["messages"] if isinstance(m.get("content"), str)][:200]
    entries = [{"content": t, "source": "locomo", "session_id": "s1",
                "created_at": "2026-01-01T00:00:00Z", "id": f"e{i}"} for i, t in enumerate(turns)]
    assert store.add_many(entries) == {"inserted": len(entries), "skipped": 0}
    assert store.add_many(entries[:5]) == {"inserted": 0, "skipped": 5}, "re-adding is safe"
    one = store.add("decided: deploy with blue-green", "notes", importance=0.9, metadata={"k": 1},
                    created_at="2026-01-01T12:00:00Z")
    assert store.get(one)["metadata"] == {"k": 1}
    hits = store.search("blue-green deploy", limit=3)
    assert hits[0]["id"] == one and hits[0]["score"] > 0
    assert store.search("blue-green", source="locomo") == [] or all(
        h["source"] == "locomo" for h in store.search("blue-green", source="locomo"))
    assert store.stats()["working"] == len(entries) + 1

    report = store.sleep(now="2026-01-03T00:00:00Z")
    assert report["items_consolidated"] == len(entries) + 1
    stats = store.stats()
    assert stats["working"] == 0 and stats["archive"] == len(entries) + 1 and stats["episodic"] >= 2
    log = store.log()
    assert {r["source"] for r in log} == {"locomo", "notes"}
    assert all(r["summary_preview"] and r["items_consolidated"] > 0 for r in log)
    # Episodic summaries are found, and their lineage resolves to archived originals.
    summary = store.search(turns[0][:40], tiers=["episodic"], limit=1)[0]
    assert summary["summary_of"] and store.get(summary["summary_of"][0])["tier"] == "archive"
    assert store.forget(source="notes")["entries"] >= 1
    assert store.search("blue-green deploy", tiers=["working", "episodic", "archive"]) == [] or all(
        h["source"] != "notes" for h in store.search("blue-green deploy", tiers=["archive"]))


def test_bad_memory_input_is_refused_and_stores_nothing(store):
    with pytest.raises(engram.EngramError, match=r"`entries\[1\]\.content`"):
        store.add_many([{"content": "ok", "source": "a"}, {"source": "a"}])
    assert store.stats()["working"] == 0
    with pytest.raises(engram.EngramError, match="unknown tier"):
        store.search("x", tiers=["nowhere"])
    with pytest.raises(engram.EngramError, match="ttl_hours"):
        store.sleep(ttl_hours=-1)
    # A negative count is an EngramError naming it, not an OverflowError that names nothing.
    with pytest.raises(engram.EngramError, match="`limit` must be a non-negative integer"):
        store.log(limit=-2)
    with pytest.raises(engram.EngramError, match="`budget`"):
        store.new_session("gpt-4o").context(budget=-1)
    with pytest.raises(engram.EngramError, match="`max_tokens`"):
        engram.status_message(10, -1)


def test_a_session_of_a_model_the_registry_does_not_know_warns(store):
    with pytest.warns(RuntimeWarning, match='unknown model "nope-model": using the fallback'):
        session = store.new_session("nope-model")
    assert session.info["model"] == "nope-model"


def test_a_foreign_file_is_refused_unchanged(tmp_path):
    path = tmp_path / "notes.db"
    path.write_bytes(b"not a database at all" * 100)
    before = path.read_bytes()
    with pytest.raises(engram.EngramError):
        engram.Store(str(path))
    assert path.read_bytes() == before


def test_a_session_end_to_end(store, trajectory):
    session = store.new_session("gpt-4o", window=8_000, name="py")
    assert session.info["window"] == 8_000 and session.info["name"] == "py"
    statuses, compactions = [], 0
    for m in trajectory:
        r = session.append(m)
        compactions += r["compaction"] is not None
        if "status" in r:
            statuses.append(r["status"])
        assert r["view_tokens"] <= 8_000
    assert compactions >= 1, "the view passed 80% of the window"
    assert statuses and statuses[0]["content"].startswith("--- STATUS UPDATE ---")
    assert len(session.log()) == len(trajectory), "the log keeps every message"
    view = session.messages()
    assert view[0] == trajectory[0]
    assert engram.count_tokens(view, model="gpt-4o") <= 8_000

    session.checkpoint("before")
    session.append({"role": "user", "content": "try another approach"})
    result = session.compact(focus="the failing test")
    assert result["tokens_after"] <= result["tokens_before"]
    restored = session.restore("before")
    assert restored["messages_abandoned"] == 1
    assert len(session.log()) == len(trajectory)

    tight = session.context(budget=2_000, query="which file")
    assert tight.report["tokens_after"] <= 2_000
    status = session.status()
    assert status["message"]["role"] == "system" and status["max_tokens"] == 8_000

    text = session.compact_history(json.dumps({"preserveRecentMessages": 3}))
    assert "compact" in text.lower() or "messages" in text.lower()
    shown = session.show()
    assert shown["compactions"] and shown["summaries"] is not None and shown["checkpoints"]
    assert [s["id"] for s in store.sessions()] == [session.id]
    with pytest.raises(engram.EngramError):
        store.session("no-such-session")
    with pytest.raises(engram.EngramError, match="message 0, field `role`"):
        session.append({"role": "robot", "content": "x"})


def test_the_cli_reads_what_python_wrote(tmp_path, trajectory):
    import shutil

    exe = shutil.which("engram") or str(REPO / "target" / "release" / "engram")
    import os
    for candidate in (os.environ.get("ENGRAM_BIN"), exe,
                      os.path.join(os.environ.get("CARGO_TARGET_DIR", ""), "debug", "engram")):
        if candidate and os.path.isfile(candidate):
            exe = candidate
            break
    else:
        if os.environ.get("CI"):
            pytest.fail("CI must run the CLI interop test: set ENGRAM_BIN to a built engram")
        pytest.skip("engram-bin: no engram binary built (set ENGRAM_BIN)")
    db = tmp_path / "shared.db"
    store = engram.Store(str(db))
    store.add("python wrote this note about the migration", "py")
    session = store.new_session("gpt-4o", id="shared")
    session.append(trajectory[:3])
    out = subprocess.run([exe, "--db", str(db), "memory", "search", "migration", "--json"],
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["results"][0]["source"] == "py"
    out = subprocess.run([exe, "--db", str(db), "session", "show", "shared", "--json"],
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["session"]["messages"] == 3


def test_export_and_import_back(store, tmp_path):
    store.add_many([{"content": f"note {i} about the release", "source": "notes",
                     "created_at": "2026-01-01T00:00:00Z"} for i in range(20)])
    store.sleep(now="2026-01-03T00:00:00Z")
    exported = store.export()
    assert len(exported) == store.stats()["archive"] + store.stats()["episodic"]
    other = engram.Store(str(tmp_path / "other.db"))
    assert other.add_many(exported)["inserted"] == len(exported)
    assert other.stats() == store.stats()
    summary = next(e for e in other.export() if e["tier"] == "episodic")
    assert all(other.get(i)["tier"] == "archive" for i in summary["summary_of"])


def test_threads_share_a_store_without_errors(store):
    import threading

    sessions = [store.new_session("gpt-4o", window=4_000) for _ in range(4)]
    errors, ids = [], []

    def work(session, k):
        try:
            for i in range(40):
                session.append({"role": "user", "content": f"thread {k} turn {i} " + "words " * 60})
                ids.append(store.add(f"thread {k} fact {i}", f"t{k}"))
                store.search("fact", limit=3)
        except Exception as e:  # noqa: BLE001 - any error fails the test below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s, k)) for k, s in enumerate(sessions)]
    for t in threads:
        t.start()
    sleeper = threading.Thread(target=lambda: [store.sleep(ttl_hours=0.0001) for _ in range(5)])
    sleeper.start()
    for t in threads + [sleeper]:
        t.join()
    assert not errors, errors
    assert all(len(s.log()) == 40 for s in sessions)
    assert len(ids) == 160
    assert all(store.get(i)["tier"] in ("working", "archive") for i in ids), "each entry in one tier"


def test_omitted_importance_and_limit_take_the_cores_defaults(store):
    # The defaults live once, in the core: an entry added without an importance gets 0.5, and
    # a search without a limit returns at most 10 hits, as `engram memory add` and `search` do.
    ids = [store.add(f"the canary deploy step {i}", "notes") for i in range(12)]
    assert store.get(ids[0])["importance"] == 0.5
    assert len(store.search("canary deploy")) == 10
    assert len(store.search("canary deploy", limit=12)) == 12


def test_the_log_without_a_limit_takes_the_cores_default(store):
    # One consolidation record per source slept: 25 of them; a read without a limit returns
    # the newest 20, as `engram memory log` and `GET /v1/memory/log` do.
    store.add_many([{"content": f"note {i}", "source": f"notes-{i}",
                     "created_at": "2026-01-01T00:00:00Z"} for i in range(25)])
    store.sleep(now="2026-01-03T00:00:00Z")
    assert len(store.log()) == 20
    assert len(store.log(25)) == 25


def test_an_append_retried_with_its_idempotency_key_is_stored_once(store):
    session = store.new_session("gpt-4o", id="retry")
    first = session.append({"role": "user", "content": "deploy"}, idempotency_key="k1")
    again = session.append({"role": "user", "content": "deploy"}, idempotency_key="k1")
    assert again["ids"] == first["ids"] and again["replayed"] is True
    with pytest.raises(engram.EngramError, match="Idempotency-Key"):
        session.append({"role": "user", "content": "other"}, idempotency_key="k1")
    session.append({"role": "user", "content": "deploy"})
    assert len(session.log()) == 2


def test_a_sleep_builds_each_sessions_timeline(store):
    """A LoCoMo conversation, its sessions headed by their dates: sleep writes one dated line
    per session, each with the ids that read it whole, and a search finds the parts of a topic."""
    messages = load_records("locomo.jsonl", 1)[0]["messages"]
    headings = [m["content"] for m in messages if m["role"] == "system"]
    session = store.new_session("gpt-4o", window=1_000_000)
    assert session.timeline() == {"session_id": session.id, "built_to": None, "parts": []}
    session.append(messages)
    report = store.sleep()
    assert report["timeline_lines"] == len(headings) >= 10
    timeline = session.timeline()
    assert [f"[{p['date']}]" for p in timeline["parts"]] == headings
    log = {m["id"]: m for m in session.log()}
    for part in timeline["parts"]:
        assert part["written_by"] == "extractive" and part["line"]
        assert log[part["from_id"]]["content"] == f"[{part['date']}]"
        assert all(s in log for s in part["sources"])
    topic = timeline["parts"][3]["line"].split()[1]
    found = session.timeline(topic, limit=3)["parts"]
    assert 0 < len(found) <= 3 and all(topic.lower() in p["line"].lower() for p in found[:1])
    assert store.sleep()["timeline_lines"] == 0, "unchanged: nothing written again"
    with pytest.raises(engram.EngramError, match="limit"):
        session.timeline(topic, limit=0)


def _bash(call_id: str, command: str) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [{
        "id": call_id, "type": "function",
        "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]}


def _result(call_id: str, code: int, output: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id,
            "content": f"<returncode>{code}</returncode>\n<output>\n{output}\n</output>"}


def test_the_work_ledger_tracks_files_and_failures(store):
    session = store.new_session("gpt-4o-mini", window=8_000)
    assert session.ledger()["files"] == [], "a new session's ledger is empty"
    session.append([
        {"role": "user", "content": "Fix the parser."},
        _bash("c1", "cat src/parser.py"), _result("c1", 0, "def parse(): ..."),
        _bash("c2", "python -m pytest tests/test_parser.py"),
        _result("c2", 1, "FAILED tests/test_parser.py::test_x"),
        _bash("c3", "python reproduce.py"), _result("c3", 2, "Traceback"),
        _bash("c4", "sed -i 's/a/b/' src/parser.py"), _result("c4", 0, ""),
        _bash("c5", "python -m pytest tests/test_parser.py"), _result("c5", 0, "1 passed"),
    ])
    ledger = session.ledger()
    files = {f["path"]: f["action"] for f in ledger["files"]}
    assert files["src/parser.py"] == "edited" and files["reproduce.py"] == "ran"
    open_failures = [f["command"] for f in ledger["failures"] if f["resolved_at"] is None]
    resolved = [f["command"] for f in ledger["failures"] if f["resolved_at"] is not None]
    assert open_failures == ["python reproduce.py"]
    assert resolved == ["python -m pytest tests/test_parser.py"]
    assert ledger["text"].startswith("[Work ledger]") and "python reproduce.py" in ledger["text"]
