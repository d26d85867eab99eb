"""The agent's tools from Python: the definitions, and every call answered through one dispatcher
in the core, for OpenAI tool calls and Anthropic tool_use blocks alike."""

from __future__ import annotations

import json

import pytest

import engram


def turns(n: int) -> list[dict]:
    out = []
    for i in range(n):
        out += [
            {"role": "user", "content": f"step {i}: run the tests of module_{i}"},
            {"role": "assistant", "tool_calls": [{"id": f"c{i}", "type": "function", "function": {
                "name": "shell", "arguments": json.dumps({"cmd": f"pytest module_{i}"})}}]},
            {"role": "tool", "tool_call_id": f"c{i}",
             "content": f"FAILED module_{i}::test_it - AssertionError\n" + "frame\n" * 60},
        ]
    return out


def test_the_definitions_list_every_tool():
    names = [t["function"]["name"] for t in engram.tools("openai")]
    assert names == ["search_history", "read_history", "compact_history", "context_status",
                     "memory_search", "memory_add"]
    assert [t["name"] for t in engram.tools("anthropic")] == names
    with pytest.raises(engram.EngramError, match="openai or anthropic"):
        engram.tools("gemini")


def test_an_evicted_message_comes_back_through_openai_and_anthropic_calls(store):
    session = store.new_session("gpt-4o-mini", window=60_000)
    session.append({"role": "system", "content": "You are a coding agent."})
    session.append(*turns(6))
    session.append({"role": "user", "content": "remember: the flaky one is xylophonecase"})
    session.append(*turns(4))
    reply = session.handle_tool_call({"id": "t1", "type": "function", "function": {
        "name": "compact_history", "arguments": json.dumps({"preserveRecentMessages": 3})}})
    assert reply["role"] == "tool" and reply["content"].startswith("Successfully compacted"), reply

    found = session.handle_tool_call({"id": "t2", "type": "function", "function": {
        "name": "search_history", "arguments": json.dumps({"query": "xylophonecase"})}})
    hits = json.loads(found["content"])["hits"]
    assert hits[0]["in_view"] is False and "xylophonecase" in hits[0]["snippet"], hits

    block = session.handle_tool_call({"type": "tool_use", "id": "tu1", "name": "read_history",
                                      "input": {"ids": [hits[0]["id"], "missing"]}})
    assert block["type"] == "tool_result" and block["tool_use_id"] == "tu1"
    read = json.loads(block["content"])
    assert read["messages"][0]["message"]["content"] == "remember: the flaky one is xylophonecase"
    assert read["not_found"] == ["missing"]

    bad = session.handle_tool_call({"type": "tool_use", "id": "tu2", "name": "search_history",
                                    "input": {"query": "x", "limit": 0}})
    assert bad["is_error"] is True and "`limit`" in bad["content"], bad
    assert session.handle_tool_call({"id": "t3", "type": "function",
                                     "function": {"name": "shell", "arguments": "{}"}}) is None
    status = json.loads(session.tool("context_status")["content"])
    assert status["compactions"] == 1 and status["max_tokens"] == 60_000
    assert not session.tool("memory_add", {"content": "xylophonecase is flaky on CI"})["is_error"]
    results = json.loads(session.tool("memory_search", {"query": "xylophonecase"})["content"])
    assert results["results"][0]["content"] == "xylophonecase is flaky on CI"
