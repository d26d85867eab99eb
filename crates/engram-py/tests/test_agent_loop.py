"""The example agent loop, with the official `openai` SDK against a fake server that plays a
model: it reads big files, calls `compact_history` once, then answers. Every request it gets
must fit the window with its tool pairs intact."""

from __future__ import annotations

import importlib.util
import json
import pathlib

import pytest

import engram
from conftest import completion
from test_compact import tool_pairs_intact

openai = pytest.importorskip("openai")

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "agent_loop.py"


def load_example():
    spec = importlib.util.spec_from_file_location("agent_loop", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def call(i: int, name: str, arguments: dict) -> dict:
    return {"id": f"call_{i}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


def test_the_example_loop_stays_in_the_window(store, trajectory, tmp_path):
    example = load_example()
    # Files the agent reads: real tool outputs from a dev trajectory, a few thousand tokens each.
    outputs = [m["content"] for m in trajectory if m["role"] == "tool" and len(m["content"]) > 500]
    files = []
    for i in range(12):
        path = tmp_path / f"file{i}.py"
        path.write_text((outputs[i % len(outputs)] + "\n") * 3)
        files.append(str(path))
    window = 6_000
    state = {"turn": 0}
    received: list[list[dict]] = []

    def model(request: dict):
        received.append(request["messages"])
        state["turn"] += 1
        t = state["turn"]
        if t <= 6:
            return completion(f"Reading file {t}.", [call(t, "read_file", {"path": files[t - 1]})])
        if t == 7:
            return completion(None, [call(t, "compact_history", {"preserveRecentMessages": 2})])
        if t <= 12:
            return completion(None, [call(t, "read_file", {"path": files[t - 1]})])
        return completion("The bug is in file3.py: fixed.")

    from conftest import FakeOpenAI

    server = FakeOpenAI(model)
    try:
        client = openai.OpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        sent = []
        answer, session = example.run(client, store, "Find the bug in these files.", model="gpt-4o",
                                      window=window, on_request=sent.append)
    finally:
        server.close()
    assert answer == "The bug is in file3.py: fixed."
    assert len(received) == 13
    assert server.requests[0]["authorization"] == "Bearer test-key"
    assert server.requests[0]["body"]["tools"][-1]["function"]["name"] == "compact_history"
    tools = server.requests[0]["body"]["tools"]
    for i, messages in enumerate(received):
        tokens = engram.count_tokens(messages, model="gpt-4o", tools=tools)
        assert tokens <= window, f"request {i}: {tokens} tokens > {window}"
        assert messages[0]["role"] == "system" and messages[0]["content"].startswith("You are a careful")
        assert any(m["role"] == "user" and m["content"] == "Find the bug in these files." for m in messages) \
            or "[Session context consolidated]" in json.dumps(messages)
        tool_pairs_intact(messages)
    # The compact_history call ran and its result reached the model.
    results = [m for m in received[7] if m["role"] == "tool" and m["tool_call_id"] == "call_7"]
    assert results and "compact" in results[0]["content"].lower()
    # Status updates were sent when due.
    assert any(m["role"] == "system" and m["content"].startswith("--- STATUS UPDATE ---")
               for messages in received for m in messages)
    # The log keeps every message; compactions happened.
    shown = session.show()
    assert len(session.log()) == 2 + 13 + 12
    assert len(shown["compactions"]) >= 2


def test_the_example_runs_as_a_script_against_a_local_server_without_a_key(tmp_path, fake_openai):
    import os
    import subprocess
    import sys

    server = fake_openai(lambda request: completion("Nothing to fix."))
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), "--base-url", server.base_url, "--model", "gpt-4o",
         "--db", str(tmp_path / "loop.db"), "Is anything broken?"],
        capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("Nothing to fix.\n"), out.stdout
    assert "--- STATUS UPDATE ---" in out.stdout
    assert len(server.requests) == 1
    # Without --base-url, OpenAI needs a key, and the example says so instead of failing later.
    out = subprocess.run([sys.executable, str(EXAMPLE), "--db", str(tmp_path / "x.db"), "task"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 2 and "--api-key" in out.stderr, out.stderr
