"""Every blocking call of Store and Session has an async twin that runs on a worker thread, so
the event loop keeps running while the core works; and LangChain messages appended to a session
come back as LangChain messages."""

from __future__ import annotations

import asyncio
import inspect
import json
import time

import engram
from conftest import load_records, openai_messages


def long_run() -> list[dict]:
    return openai_messages(max(load_records("minisweagent_swebv_gemini3pro.jsonl"),
                               key=lambda r: len(json.dumps(r["messages"]))))


async def ticks_during(work) -> tuple[object, int, float]:
    """Runs `work` (a coroutine) while a ticker counts event-loop turns of ~1 ms."""
    ticks = 0
    done = False

    async def ticker() -> None:
        nonlocal ticks
        while not done:
            await asyncio.sleep(0.001)
            ticks += 1

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    started = time.perf_counter()
    result = await work
    elapsed = time.perf_counter() - started
    done = True
    await task
    return result, ticks, elapsed


def test_every_blocking_method_has_an_async_twin():
    for cls in (engram.Store, engram.Session):
        names = vars(cls)
        twins = {n for n in names if n.startswith("a") and n[1:] in names}
        public = [n for n, f in names.items() if inspect.isfunction(f) and not n.startswith("_") and n not in twins]
        for name in public:
            if name in ("path", "info"):
                continue
            twin = getattr(cls, "a" + name, None)
            assert twin is not None and inspect.iscoroutinefunction(twin), f"{cls.__name__}.a{name}"


def test_the_event_loop_keeps_running_while_a_session_compacts(tmp_path):
    messages = long_run()

    async def main() -> tuple:
        store = engram.Store(str(tmp_path / "a.db"))
        session = await store.anew_session("gpt-4o", window=8000)
        appended, ticks, elapsed = await ticks_during(session.aappend(messages))
        view = await session.amessages()
        return appended, ticks, elapsed, view

    appended, ticks, elapsed, view = asyncio.run(main())
    assert appended["compaction"] is not None, "the append compacted"
    assert elapsed > 0.02, f"long enough to tell ({elapsed:.3f} s)"
    # Most 1 ms ticks happen while the core works on its thread (at least a quarter of them).
    assert ticks >= elapsed * 1000 / 4, f"{ticks} ticks in {elapsed:.3f} s: the loop was blocked"
    assert len(view) < len(messages)

    # The blocking call, for contrast, stops the ticker.
    async def blocking() -> tuple:
        store = engram.Store(str(tmp_path / "b.db"))
        session = store.new_session("gpt-4o", window=8000)

        async def run() -> dict:
            return session.append(messages)

        return await ticks_during(run())

    _, blocked_ticks, blocked_elapsed = asyncio.run(blocking())
    assert blocked_ticks <= 2, f"{blocked_ticks} ticks in {blocked_elapsed:.3f} s while blocked"


def test_langchain_messages_come_back_as_langchain_messages(tmp_path):
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    store = engram.Store(str(tmp_path / "lc.db"))
    session = store.new_session("gpt-4o")
    session.append([
        SystemMessage("You fix bugs."),
        HumanMessage("The parser fails on [1,,2]"),
        AIMessage("", tool_calls=[{"id": "c1", "name": "shell", "args": {"cmd": "pytest"}}]),
        ToolMessage("1 failed", tool_call_id="c1"),
    ])
    view = session.messages()
    assert [type(m) for m in view] == [SystemMessage, HumanMessage, AIMessage, ToolMessage]
    assert view[2].tool_calls[0]["args"] == {"cmd": "pytest"}
    assert view[3].tool_call_id == "c1"
    again = asyncio.run(session.acontext())
    assert isinstance(again.messages[1], HumanMessage)
    # Dicts in, dicts out.
    plain = store.new_session("gpt-4o")
    plain.append({"role": "user", "content": "hi"})
    assert plain.messages() == [{"role": "user", "content": "hi"}]
