"""`engram mcp` driven by the official MCP client (the `mcp` package from PyPI) over stdio: the
tools are listed and each is called; a session driven past compaction gives back an evicted message
found by a word only it holds, byte for byte; bad arguments are tool errors, never protocol errors."""

from __future__ import annotations

import json
import os
import shutil

import anyio
import pytest

import engram
from conftest import REPO

mcp = pytest.importorskip("mcp")
from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

NEEDLE = "warning: the quasimodular cache is stale\n\tsee src/cache.rs:42 \u00e9"


def engram_bin() -> str:
    for candidate in (os.environ.get("ENGRAM_BIN"), shutil.which("engram"),
                      str(REPO / "target" / "release" / "engram")):
        if candidate and os.path.isfile(candidate):
            return candidate
    if os.environ.get("CI"):
        pytest.fail("CI must run the MCP test: set ENGRAM_BIN to a built engram")
    pytest.skip("engram-bin: needs the engram binary: set ENGRAM_BIN (scripts/test.sh does)")


def make_session(db) -> str:
    store = engram.Store(str(db))
    session = store.new_session("gpt-4o-mini", window=60_000, id="agent")
    session.append({"role": "system", "content": "You are a coding agent."})
    for i in range(8):
        session.append(
            {"role": "user", "content": f"step {i}: fix module_{i}"},
            {"role": "assistant", "tool_calls": [{"id": f"c{i}", "type": "function", "function": {
                "name": "shell", "arguments": json.dumps({"cmd": f"pytest module_{i}"})}}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"FAILED module_{i}\n" + "frame\n" * 50},
        )
        if i == 2:
            session.append({"role": "assistant", "tool_calls": [{"id": "cn", "type": "function",
                            "function": {"name": "grep", "arguments": "{}"}}]},
                           {"role": "tool", "tool_call_id": "cn", "content": NEEDLE})
    return session.id


async def drive(args: list[str]) -> dict:
    params = StdioServerParameters(command=engram_bin(), args=args)
    out: dict = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as client:
            await client.initialize()
            out["tools"] = [t.name for t in (await client.list_tools()).tools]
            session_arg = {} if "--session" in args else {"session": "agent"}

            async def call(name: str, arguments: dict):
                result = await client.call_tool(name, {**arguments, **session_arg})
                return result.content[0].text, result.is_error

            out["compact"] = await call("compact_history", {"preserveRecentMessages": 3})
            found, err = await call("search_history", {"query": "quasimodular"})
            out["found"] = (json.loads(found) if not err else found, err)
            hit = out["found"][0]["hits"][0] if not err else None
            if hit:
                text, err = await call("read_history", {"ids": [hit["id"], "nope"],
                                                         "max_tokens": 10_000})
                out["read"] = (json.loads(text), err)
            out["bad"] = await call("search_history", {"query": "x", "limit": "lots"})
            out["status"] = await call("context_status", {})
            out["add"] = await call("memory_add", {"content": "the quasimodular cache needs a flush"})
            out["memory"] = await call("memory_search", {"query": "quasimodular"})
            if "--session" not in args:
                out["sessions"] = (await client.call_tool("sessions_list", {})).content[0].text
                missing = await client.call_tool("context_status", {"session": "ghost"})
                out["missing"] = (missing.content[0].text, missing.is_error)
                unbound = await client.call_tool("context_status", {})
                out["unbound"] = (unbound.content[0].text, unbound.is_error)
    return out


@pytest.mark.parametrize("bound", [False, True])
def test_an_mcp_client_gets_back_what_compaction_took(tmp_path, bound):
    db = tmp_path / "mcp.db"
    make_session(db)
    args = ["--db", str(db), "mcp"] + (["--session", "agent"] if bound else [])
    out = anyio.run(drive, args)
    expected = ["search_history", "read_history", "compact_history", "context_status",
                "memory_search", "memory_add"]
    assert out["tools"] == expected + ([] if bound else ["sessions_list"])
    assert out["compact"][0].startswith("Successfully compacted"), out["compact"]
    found, err = out["found"]
    assert not err, found
    assert found["hits"][0]["in_view"] is False
    read, err = out["read"]
    assert not err and read["messages"][0]["message"]["content"] == NEEDLE, read
    assert read["not_found"] == ["nope"]
    text, err = out["bad"]
    assert err and "`limit`" in text, text
    status = json.loads(out["status"][0])
    assert status["session_id"] == "agent" and status["compactions"] == 1
    assert not out["add"][1]
    assert "quasimodular cache needs a flush" in out["memory"][0]
    if not bound:
        assert json.loads(out["sessions"])["sessions"][0]["id"] == "agent"
        text, err = out["missing"]
        assert err and "sessions_list" in text, text
        text, err = out["unbound"]
        assert err and "`session` is required" in text, text
    # The reads wrote nothing: the one compaction is compact_history's.
    store = engram.Store(str(db))
    assert len(store.session("agent").show()["compactions"]) == 1
