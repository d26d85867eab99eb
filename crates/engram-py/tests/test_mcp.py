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
            out["resources"] = sorted(str(r.uri) for r in (await client.list_resources()).resources)

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
            view = await client.read_resource("engram://sessions/agent/view")
            out["view"] = json.loads(view.contents[0].text)
            records = await client.read_resource("engram://sessions/agent/compactions")
            out["records"] = json.loads(records.contents[0].text)
            try:
                await client.read_resource("engram://sessions/ghost/view")
                out["ghost"] = "read"
            except Exception as e:  # noqa: BLE001 - the SDK raises its McpError
                out["ghost"] = str(e)
            out["status"] = await call("context_status", {})
            out["add"] = await call("memory_add", {"content": "the quasimodular cache needs a flush"})
            out["memory"] = await call("memory_search", {"query": "quasimodular"})
            if "--session" not in args:
                out["sessions"] = (await client.call_tool("sessions_list", {})).content[0].text
                missing = await client.call_tool("context_status", {"session": "ghost"})
                out["missing"] = (missing.content[0].text, missing.is_error)
                unbound = await client.call_tool("context_status", {})
                out["unbound"] = (unbound.content[0].text, unbound.is_error)
                # Memory is the store's: its tools need no session.
                free = await client.call_tool("memory_add", {"content": "the zyxwave note"})
                out["free_add"] = (free.content[0].text, free.is_error)
                free = await client.call_tool("memory_search", {"query": "zyxwave"})
                out["free_search"] = (free.content[0].text, free.is_error)
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
    assert out["resources"] == ["engram://sessions/agent/compactions", "engram://sessions/agent/view"]
    assert out["view"]["session_id"] == "agent" and out["view"]["messages"][0]["content"] == (
        "You are a coding agent.")
    assert any(m.get("engram", {}).get("kind") == "summary" for m in out["view"]["messages"]), out["view"]
    assert len(out["records"]["compactions"]) == 1
    assert "no resource" in out["ghost"], out["ghost"]
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
        text, err = out["free_add"]
        assert not err and json.loads(text)["session_id"] is None, text
        text, err = out["free_search"]
        assert not err and "the zyxwave note" in text, text
    # The reads wrote nothing: the one compaction is compact_history's.
    store = engram.Store(str(db))
    assert len(store.session("agent").show()["compactions"]) == 1


async def drive_http(base: str, key: str | None, session_id: str) -> dict:
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    out: dict = {}
    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(f"{base}/mcp", http_client=http) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as client:
                await client.initialize()
                out["tools"] = [t.name for t in (await client.list_tools()).tools]
                found = await client.call_tool("search_history",
                                               {"query": "zebracorn", "session": session_id})
                out["found"] = (found.content[0].text, found.is_error)
                listed = await client.call_tool("sessions_list", {})
                out["sessions"] = json.loads(listed.content[0].text)["sessions"]
                out["resources"] = [str(r.uri) for r in (await client.list_resources()).resources]
    return out


def test_mcp_over_http_answers_each_tenant_for_its_own_sessions(tmp_path):
    import urllib.error
    import urllib.request

    from test_proxy import start_engram

    keys = tmp_path / "keys.txt"
    keys.write_text("alpha:key-alpha-0123456789\nbeta:key-beta-0123456789\n")
    proc, base = start_engram("--api-keys", str(keys))
    try:
        def rest(method: str, path: str, body: dict, key: str) -> dict:
            req = urllib.request.Request(f"{base}{path}", method=method, data=json.dumps(body).encode(),
                                         headers={"Authorization": f"Bearer {key}",
                                                  "Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.loads(r.read())

        created = rest("POST", "/v1/sessions", {"id": "shared-name"}, "key-alpha-0123456789")
        rest("POST", f"/v1/sessions/{created['id']}/messages",
             {"messages": [{"role": "user", "content": "the zebracorn bug is back"}]},
             "key-alpha-0123456789")
        alpha = anyio.run(drive_http, base, "key-alpha-0123456789", "shared-name")
        assert "search_history" in alpha["tools"] and "sessions_list" in alpha["tools"]
        text, err = alpha["found"]
        assert not err and "zebracorn" in text, text
        assert [s["id"] for s in alpha["sessions"]] == ["shared-name"]
        assert len(alpha["resources"]) == 2

        # Another tenant does not see it: no such session, and an empty list.
        beta = anyio.run(drive_http, base, "key-beta-0123456789", "shared-name")
        text, err = beta["found"]
        assert err and "no session" in text, text
        assert beta["sessions"] == [] and beta["resources"] == []

        # No key, or a wrong one: refused before MCP, as REST is.
        for key in (None, "key-wrong"):
            req = urllib.request.Request(f"{base}/mcp", method="POST", data=b"{}",
                                         headers={"Content-Type": "application/json",
                                                  "Accept": "application/json, text/event-stream",
                                                  **({"Authorization": f"Bearer {key}"} if key else {})})
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(req, timeout=30)
            assert e.value.code == 401
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def drive_validating(args: list[str]) -> dict:
    """A host that checks every call's arguments against the tool's input schema, and every
    answer's data against its output schema, before it believes them."""
    import jsonschema

    params = StdioServerParameters(command=engram_bin(), args=args)
    out: dict = {"calls": {}}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as client:
            out["version"] = (await client.initialize()).protocol_version
            listed = (await client.list_tools()).tools
            out["listed"] = {t.name: (t.input_schema, t.output_schema, t.annotations) for t in listed}
            session = {} if "--session" in args else {"session": "agent"}
            calls = {
                "compact_history": {"preserveRecentMessages": 3},
                "search_history": {"query": "quasimodular"},
                "read_history": {"from": "m0", "to": "m3"},
                "context_status": {},
                "memory_search": {"query": "quasimodular"},
                "memory_add": {"content": "the quasimodular cache needs a flush"},
            }
            for name, arguments in calls.items():
                arguments = {**arguments, **session}
                input_schema, output_schema, _ = out["listed"][name]
                jsonschema.validate(arguments, input_schema)
                result = await client.call_tool(name, arguments)
                assert not result.is_error, (name, result.content[0].text)
                assert result.structured_content is not None, name
                jsonschema.validate(result.structured_content, output_schema)
                out["calls"][name] = result.structured_content
            wrong = await client.call_tool("read_history", {"ids": 3, **session})
            out["wrong"] = (wrong.content[0].text, wrong.is_error)
    return out


@pytest.mark.parametrize("bound", [False, True])
def test_a_host_that_validates_schemas_can_call_every_tool(tmp_path, bound):
    db = tmp_path / "mcp.db"
    make_session(db)
    args = ["--db", str(db), "mcp"] + (["--session", "agent"] if bound else [])
    out = anyio.run(drive_validating, args)
    # The newest revision with an initialize handshake, which the SDK asks for.
    assert out["version"] == "2025-11-25", out["version"]
    for name, (input_schema, output_schema, annotations) in out["listed"].items():
        assert output_schema and output_schema["type"] == "object", name
        properties = input_schema.get("properties", {})
        if bound:
            assert "session" not in properties, name
        elif name != "sessions_list":
            assert "session" in properties, name
        read_only = name in ("search_history", "read_history", "context_status", "memory_search", "sessions_list")
        assert annotations.read_only_hint is read_only, name
    if not bound:
        assert "session" in out["listed"]["compact_history"][0]["required"]
    assert out["calls"]["search_history"]["hits"][0]["in_view"] is False
    assert out["calls"]["compact_history"]["text"].startswith("Successfully compacted")
    text, err = out["wrong"]
    assert err and "`ids`" in text and "must be a string or a list of strings" in text, text
    assert "untagged" not in text and "enum" not in text, text


def test_stdio_answers_every_line(tmp_path):
    """A line that is not JSON gets a parse error, one over the limit an error naming it; the
    server goes on and ends when its input does."""
    import subprocess

    db = tmp_path / "mcp.db"
    make_session(db)
    proc = subprocess.Popen([engram_bin(), "--db", str(db), "mcp"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdin and proc.stdout
        proc.stdin.write(b"this is not json\n")
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())
        assert answer["error"]["code"] == -32700 and answer["id"] is None, answer
        proc.stdin.write(b'{"jsonrpc": "2.0", "id": 7, "method": "ping", "params": {"x": "'
                         + b"a" * (9 << 20) + b'"}}\n')
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())
        assert "8 MiB" in answer["error"]["message"], answer
        proc.stdin.write(b'[1, 2]\n')
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())
        assert answer["error"]["code"] == -32600, answer
        # An older host gets the revision it asks for.
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2024-11-05", "capabilities": {},
            "clientInfo": {"name": "old-host", "version": "0"}}}).encode() + b"\n")
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())
        assert answer["result"]["protocolVersion"] == "2024-11-05", answer
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()


def test_mcp_over_http_ends_its_session_and_says_what_is_wrong_in_json(tmp_path, caplog):
    import logging
    import urllib.error
    import urllib.request

    from test_proxy import start_engram

    proc, base = start_engram()
    try:
        async def session_and_end() -> None:
            from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

            async with create_mcp_http_client() as http:
                async with streamable_http_client(f"{base}/mcp", http_client=http) as streams:
                    async with ClientSession(streams[0], streams[1]) as client:
                        await client.initialize()
                        await client.list_tools()

        with caplog.at_level(logging.WARNING):
            anyio.run(session_and_end)
        assert not [r for r in caplog.records if "termination failed" in r.getMessage().lower()], caplog.text
        # A request MCP cannot take gets the REST API's JSON error.
        req = urllib.request.Request(f"{base}/mcp", method="POST", data=b"{}",
                                     headers={"Content-Type": "application/json", "Accept": "text/html"})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=30)
        body = json.loads(e.value.read())
        assert body["error"]["message"], body
    finally:
        proc.terminate()
        proc.wait(timeout=30)
