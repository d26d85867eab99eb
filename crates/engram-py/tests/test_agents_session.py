"""`EngramSession` under the real OpenAI Agents SDK (`openai-agents` from PyPI) against a fake
Responses upstream on 127.0.0.1: a long mini-SWE-agent history (the repository's Responses
fixture) stored through the session, then two runs; each run's input is the session's compacted
view (within the window, every call with its output, the items engram kept verbatim), and the
SDK's own items are stored and come back."""

from __future__ import annotations

import asyncio
import json
import pathlib

import pytest

import engram
from test_proxy import Upstream

FIXTURE = pathlib.Path(__file__).resolve().parents[3] / "testdata" / "responses" / "minisweagent_items.json"


def paired(items: list[dict]) -> None:
    called = set()
    for k, item in enumerate(items):
        if item.get("type") == "function_call":
            called.add(item["call_id"])
            assert any(o.get("type") == "function_call_output" and o["call_id"] == item["call_id"]
                       for o in items[k + 1:]), f"call {item['call_id']} without its output"
        elif item.get("type") == "function_call_output":
            assert item["call_id"] in called, f"output {item['call_id']} without its call"


def test_an_agents_sdk_run_starts_from_the_compacted_view(tmp_path, monkeypatch):
    agents = pytest.importorskip("agents")
    import openai

    from engram.integrations.agents import EngramSession

    fixture = json.loads(FIXTURE.read_text(encoding="utf-8"))
    history = fixture["input"]
    # Compacted to 0.6 of the window, so that the view keeps a tail of items to check (the
    # default depth keeps fewer).
    (tmp_path / "config.toml").write_text("[session]\ntarget = 0.6\n")
    monkeypatch.setenv("ENGRAM_CONFIG", str(tmp_path / "config.toml"))
    upstream = Upstream()
    agents.set_tracing_disabled(True)

    @agents.function_tool
    def lookup(topic: str) -> str:
        """Looks a topic up."""
        return f"notes on {topic}: the failing test is tests/test_table.py"

    client = openai.AsyncOpenAI(base_url=f"{upstream.root}/v1", api_key="sk-test", max_retries=0)
    agent = agents.Agent(name="fixer", instructions=fixture["instructions"], tools=[lookup],
                         model=agents.OpenAIResponsesModel(model="gpt-4o", openai_client=client))
    store = engram.Store(str(tmp_path / "agents.db"))
    session = EngramSession("run-1", store, model="gpt-4o", window=16_000)

    async def main() -> tuple:
        await session.add_items(history)
        view = await session.get_items()
        first = await agents.Runner.run(agent, "Look the failing test up, then say what next.", session=session)
        second = await agents.Runner.run(agent, "And after that?", session=session)
        return view, first, second

    try:
        view, first, second = asyncio.run(main())
    finally:
        upstream.close()
    # The stored history was compacted: fewer items than added, calls with their outputs, the
    # newest items as they were added.
    assert len(view) < len(history)
    paired(view)
    assert view[-1] == history[-1]
    kept = [item for item in view if item in history]
    assert len(kept) >= 10
    log = store.session("run-1").log()
    assert sum(len(m.get("responses_items", [])) for m in log) >= len(history), "the log keeps every item"
    # Each request of the first run started from that view plus the new input.
    requests = [r["body"] for r in upstream.requests if r["path"].endswith("/responses")]
    assert len(requests) == 4, "two runs, each a tool call and an answer"
    assert requests[0]["input"][:len(view)] == view
    assert requests[0]["input"][len(view)]["content"] == "Look the failing test up, then say what next."
    for body in requests:
        paired(body["input"])
        tokens = engram.count_tokens(
            json.loads(engram._engram.responses_items_to_messages_json(json.dumps(body["input"]))), model="gpt-4o")
        assert tokens <= 16_000, tokens
    assert first.final_output.startswith("saw ")
    # The second run starts from the session's view, which now holds the first run's items.
    assert requests[2]["input"][-1]["content"] == "And after that?"
    assert any(item.get("call_id") == "call_up" for item in requests[2]["input"])
    assert second.final_output == f"saw {len(requests[3]['input'])} items"


def test_pop_and_clear(tmp_path):
    from engram.integrations.agents import EngramSession

    store = engram.Store(str(tmp_path / "pop.db"))
    session = EngramSession("s", store)
    items = [{"role": "user", "content": "one"}, {"role": "user", "content": "two"},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "three", "annotations": []}]}]

    async def main() -> tuple:
        assert await session.get_items() == [] and await session.pop_item() is None
        await session.add_items(items[:2])
        await session.add_items(items[2:])
        popped = [await session.pop_item(), await session.pop_item()]
        left = await session.get_items()
        latest = await session.get_items(limit=1)
        await session.clear_session()
        return popped, left, latest, await session.get_items()

    popped, left, latest, cleared = asyncio.run(main())
    assert popped == [items[2], items[1]]
    assert left == items[:1] and latest == items[:1]
    assert cleared == []
    assert "s" not in [s["id"] for s in store.sessions()]


def test_the_readme_example_runs_as_written(tmp_path):
    """The README's Agents SDK example, against the fake upstream (the SDK's client reads
    OPENAI_BASE_URL), in a fresh home; importing engram imports no framework."""
    import subprocess
    import sys

    from test_proxy import run_readme_example

    pytest.importorskip("agents")
    out, _, env = run_readme_example("EngramSession", tmp_path, OPENAI_AGENTS_DISABLE_TRACING="1")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "saw 1 items"
    lean = subprocess.run([sys.executable, "-c", "import sys, engram, engram.integrations.agents; "
                           "print(sorted(m for m in ('agents', 'langchain_core', 'openai') if m in sys.modules))"],
                          capture_output=True, text=True, env=env)
    assert lean.stdout.strip() == "[]", lean.stdout + lean.stderr
