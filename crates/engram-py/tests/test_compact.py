"""Compaction from Python: every strategy on a real trajectory, with the invariants; LangChain
messages in and out; a model summarizer against a fake server, and its fallback."""

from __future__ import annotations

import json

import pytest

import engram
from conftest import completion

STRATEGIES = ["auto", "truncate", "dedupe", "mask", "extractive", "summarize"]

GOOD_SUMMARY = (
    "## Completed work\n- reproduced the bug in the test repo\n## Current state\n- the fix is"
    " being written\n## In-progress tasks\n- editing the failing file\n## Next steps\n- run the"
    " tests\n## Constraints\n- do not change the tests\n## Critical context\n- the error message"
    " from the last run"
)


def tool_pairs_intact(messages: list[dict]) -> None:
    calls = {}
    for i, m in enumerate(messages):
        for c in m.get("tool_calls") or []:
            calls[c["id"]] = i
    answered = set()
    for i, m in enumerate(messages):
        if m["role"] == "tool":
            assert m["tool_call_id"] in calls, f"message {i}: a result without its call"
            assert calls[m["tool_call_id"]] < i
            answered.add(m["tool_call_id"])
    # The newest message may be the agent's pending call: its result has not happened yet.
    pending = {c["id"] for c in messages[-1].get("tool_calls") or []}
    assert set(calls) - pending == answered - pending, "a call without its result"


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_keeps_the_invariants_on_a_real_trajectory(trajectory, strategy):
    total = engram.count_tokens(trajectory, model="gpt-4o")
    budget = total // 3
    out = engram.compact(trajectory, budget, model="gpt-4o", strategy=strategy)
    after = engram.count_tokens(out.messages, model="gpt-4o")
    assert after <= budget, f"{strategy}: {after} > {budget}"
    assert out.report["tokens_after"] == after
    assert out.messages[0] == trajectory[0], "the system prompt is kept verbatim"
    assert out.messages[-1] == trajectory[-1], "the newest message is kept verbatim"
    tool_pairs_intact(out.messages)
    assert all("engram" not in m for m in out.messages), "plain OpenAI messages"
    if strategy != "truncate":
        assert out.report["messages_removed"] > 0


def test_annotate_keeps_provenance_and_a_query_is_served(trajectory):
    out = engram.compact(trajectory, 3000, model="gpt-4o", annotate=True, query="which file fails?")
    assert all(m["engram"]["kind"] for m in out.messages), "each message says where it came from"
    assert out.report["budget"] == 3000


def test_langchain_messages_in_and_out(trajectory):
    lc = pytest.importorskip("langchain_core.messages")
    from engram.langchain import from_openai, to_openai

    messages = from_openai(trajectory)
    assert isinstance(messages[0], lc.SystemMessage)
    assert to_openai(messages)[0]["content"] == trajectory[0]["content"]
    budget = engram.count_tokens(trajectory, model="gpt-4o") // 2
    out = engram.compact(messages, budget, model="gpt-4o")
    assert all(isinstance(m, lc.BaseMessage) for m in out.messages)
    assert isinstance(out.messages[0], lc.SystemMessage)
    assert engram.count_tokens(out.messages, model="gpt-4o") <= budget
    # Tool calls survive the round trip with their ids.
    for m in out.messages:
        if isinstance(m, lc.ToolMessage):
            assert any(isinstance(a, lc.AIMessage) and any(c["id"] == m.tool_call_id for c in a.tool_calls)
                       for a in out.messages)


def test_a_request_body_passes_through_with_its_other_keys(trajectory):
    body = {"model": "gpt-4o", "temperature": 0.2, "messages": trajectory,
            "tools": [engram.compact_history_tool()]}
    out = engram.compact(body, 4000)
    assert out.report["budget"] == 4000
    assert engram.count_tokens(out.messages, model="gpt-4o", tools=body["tools"]) <= 4000
    # The request to send: the body's keys, its messages compacted.
    assert out.request == {**body, "messages": out.messages}
    assert engram.compact(trajectory, 4000).request is None, "a list gives messages alone"
    messages, report = out  # still a pair
    assert (messages, report) == (out.messages, out.report)


def anthropic_request() -> dict:
    """An Anthropic Messages request of a coding agent: twelve files read with a tool."""
    messages: list[dict] = [{"role": "user", "content": "Find why the build of crates/parser fails."}]
    for i in range(12):
        messages.append({"role": "assistant", "content": [
            {"type": "text", "text": f"Reading file {i}."},
            {"type": "tool_use", "id": f"toolu_{i}", "name": "read_file", "input": {"path": f"src/f{i}.rs"}}]})
        output = "".join(f"line {n} of src/f{i}.rs: let x{n} = {n};\n" for n in range(40))
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": output}]})
    messages.append({"role": "assistant", "content": "The error is in src/f3.rs."})
    messages.append({"role": "user", "content": [
        {"type": "text", "text": "Fix it.", "cache_control": {"type": "ephemeral"}}]})
    return {
        "model": "claude-haiku-4-5",
        "max_tokens": 1024,
        "metadata": {"user_id": "u-42"},
        "system": [{"type": "text", "text": "You are a coding agent. " * 20,
                    "cache_control": {"type": "ephemeral"}}],
        "tools": [{"name": "read_file", "description": "Read a file", "input_schema": {"type": "object"}}],
        "messages": messages,
    }


def anthropic_turns_ok(messages: list[dict]) -> int:
    """Checks Anthropic messages: a user turn first, the roles alternating, every tool_use with
    its tool_result. Returns how many calls they hold."""
    roles = [m["role"] for m in messages]
    assert roles[0] == "user" and all(a != b for a, b in zip(roles, roles[1:])), roles
    blocks = [b for m in messages if isinstance(m["content"], list) for b in m["content"]]
    calls = [b["id"] for b in blocks if b["type"] == "tool_use"]
    assert calls == [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"], \
        "every tool_use has its result"
    return len(calls)


def anthropic_client(fake_openai):
    """The official Anthropic client, against a server that records each request and answers
    "Fixed."."""
    import anthropic

    reply = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
             "content": [{"type": "text", "text": "Fixed."}], "stop_reason": "end_turn",
             "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}
    server = fake_openai(lambda body: reply)
    client = anthropic.Anthropic(base_url=server.base_url.removesuffix("/v1"), api_key="none",
                                 max_retries=0)
    return client, server


def test_an_anthropic_request_counts_its_system_prompt():
    request = anthropic_request()
    without_system = {k: v for k, v in request.items() if k != "system"}
    system = engram.count_tokens(request["system"][0]["text"], model="claude-haiku-4-5")
    assert engram.count_tokens(request, model="claude-haiku-4-5") >= (
        engram.count_tokens(without_system, model="claude-haiku-4-5") + system)
    counted = engram.Counter("claude-haiku-4-5").count_messages(request)
    assert len(counted["messages"]) == 1 + len(request["messages"]), "the system prompt is the first"


def test_an_anthropic_request_comes_back_as_one_the_anthropic_sdk_sends(fake_openai):
    request = anthropic_request()
    out = engram.compact(request, 1500)
    sent = out.request
    assert sent is not None and out.messages == sent["messages"]
    # The request's own keys as sent; the system prompt as sent, then the digest of what went.
    for key in ["model", "max_tokens", "metadata", "tools"]:
        assert sent[key] == request[key], key
    assert sent["system"][0] == request["system"][0]
    assert len(sent["system"]) == 2 and "src/f" in sent["system"][1]["text"], sent["system"]
    assert len(sent["messages"]) < len(request["messages"]), "compacted"
    anthropic_turns_ok(sent["messages"])
    assert sent["messages"][-1] == request["messages"][-1], "the newest turn as written"
    assert engram.count_tokens(sent, model="claude-haiku-4-5") <= 1500

    # The official SDK takes it as it is and sends it as it is.
    client, server = anthropic_client(fake_openai)
    assert client.messages.create(**sent).content[0].text == "Fixed."
    assert server.requests[-1]["path"] == "/v1/messages"
    assert server.requests[-1]["body"] == sent

    # With annotate, engram's own form: OpenAI messages with their provenance, no request.
    annotated = engram.compact(request, 1500, annotate=True)
    assert annotated.messages[0]["role"] == "system" and "engram" in annotated.messages[0]
    assert annotated.request is None


def test_an_llm_summarizer_writes_the_summary(trajectory, fake_openai):
    server = fake_openai(lambda req: completion(GOOD_SUMMARY))
    model = engram.LlmSummarizer("openai", "fake-model", base_url=server.base_url,
                                 api_key_env="ENGRAM_TEST_NO_KEY")
    assert model.name == "openai:fake-model"
    budget = engram.count_tokens(trajectory, model="gpt-4o") // 4
    out = engram.compact(trajectory, budget, model="gpt-4o", strategy="summarize", summarizer=model)
    assert server.requests, "the model was called"
    sent = server.requests[0]["body"]
    assert sent["model"] == "fake-model"
    assert "<history>" in json.dumps(sent["messages"])
    assert out.report["summarizer"] == "openai:fake-model", out.report
    assert any("## Completed work" in (m.get("content") or "") for m in out.messages)
    assert engram.count_tokens(out.messages, model="gpt-4o") <= budget
    usage = json.loads(model.usage_json())
    assert usage["calls"] >= 1 and usage["input_tokens"] >= 100
    s = engram.summarize(trajectory, summarizer=model, focus="the failing test")
    assert s["summarizer"] == "openai:fake-model" and s["fallback"] is None
    assert s["summary"].startswith("## Completed work")


def test_a_failing_model_falls_back_with_the_reason(trajectory, fake_openai):
    server = fake_openai(lambda req: completion("I cannot summarise this."))
    model = engram.LlmSummarizer("openai", "fake-model", base_url=server.base_url, max_retries=0)
    s = engram.summarize(trajectory, summarizer=model)
    assert s["fallback"] and s["summarizer"] != "openai:fake-model"
    assert "## Completed work" in s["summary"]
    dead = engram.LlmSummarizer("openai", "m", base_url="http://127.0.0.1:9/v1", max_retries=0,
                                timeout_seconds=2)
    budget = engram.count_tokens(trajectory, model="gpt-4o") // 4
    out = engram.compact(trajectory, budget, model="gpt-4o", strategy="summarize", summarizer=dead)
    assert engram.count_tokens(out.messages, model="gpt-4o") <= budget
    assert out.report["summary_fallback"], out.report


def test_bad_options_are_clear_errors(trajectory):
    with pytest.raises(engram.EngramError, match="unknown strategy"):
        engram.compact(trajectory, 1000, strategy="magic")
    with pytest.raises(engram.EngramError, match="budget"):
        engram.compact(trajectory, 0)
    with pytest.raises(engram.EngramError, match="digest_share"):
        engram.compact(trajectory, 1000, digest_share=2.0)
    with pytest.raises(engram.EngramError, match="base_url"):
        engram.LlmSummarizer("openai", "m", base_url="localhost:8080")
    with pytest.raises(engram.EngramError, match="unknown summarizer API"):
        engram.LlmSummarizer("gemini", "m")


def test_a_session_of_anthropic_messages_gives_an_anthropic_context(store, fake_openai, tmp_path, monkeypatch):
    # Compacted to 0.6 of the window, so that tool calls stay in view to be written back as
    # Anthropic blocks (the default depth keeps fewer of them).
    (tmp_path / "config.toml").write_text("[session]\ntarget = 0.6\n")
    monkeypatch.setenv("ENGRAM_CONFIG", str(tmp_path / "config.toml"))
    request = anthropic_request()
    session = store.new_session("claude-haiku-4-5", window=4000)
    appended = session.append(request["messages"])
    assert appended.get("compaction"), "the threshold was crossed"
    # Each tool_use was read as a call and each tool_result as its result.
    roles = [m["role"] for m in session.log()]
    assert roles.count("tool") == 12 and roles.count("assistant") == 13, roles

    context = session.context(format="anthropic")
    sent = context.request
    assert sent is not None and context.messages == sent["messages"]
    assert "src/f" in json.dumps(sent["system"]), "the summary goes into system"
    assert anthropic_turns_ok(sent["messages"]), "the newest calls stay"
    assert "Fix it." in json.dumps(sent["messages"][-1])

    client, server = anthropic_client(fake_openai)
    client.messages.create(model="claude-haiku-4-5", max_tokens=1024, **sent)
    assert server.requests[-1]["body"]["messages"] == sent["messages"]

    # The default is OpenAI's form; a format engram does not write is an error.
    assert session.context().request is None
    assert any(m["role"] == "tool" for m in session.context().messages)
    with pytest.raises(engram.EngramError, match="format"):
        session.context(format="gemini")
