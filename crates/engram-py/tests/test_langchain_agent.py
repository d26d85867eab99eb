"""`EngramMiddleware` in a real LangChain 1.x agent (`langchain.agents.create_agent` from PyPI)
with LangChain's fake chat model: resuming a long mini-SWE-agent run, the model receives engram's
view (within the window, tool calls with their results, the newest messages as they were) while
the graph's state keeps every message; with `tools=True` the agent can read back what left the
window."""

from __future__ import annotations

import json

import pytest

import engram
from conftest import load_records, openai_messages

WINDOW = 16_000


def tool_pairs_intact(messages: list) -> None:
    open_calls: set = set()
    for m in messages:
        if getattr(m, "type", None) == "ai":
            open_calls = {c["id"] for c in m.tool_calls}
        elif getattr(m, "type", None) == "tool":
            assert m.tool_call_id in open_calls, f"orphan tool result {m.tool_call_id}"


def recording_model(answers, seen: list):  # noqa: ANN001, ANN201
    """LangChain's fake chat model answering `answers` in turn, each call's messages appended to
    `seen` (tools bound as given)."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    class Model(GenericFakeChatModel):
        def bind_tools(self, tools, **kwargs):  # noqa: ANN001
            return self

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):  # noqa: ANN001
            seen.append(list(messages))
            return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)

    return Model(messages=iter(answers))


def longest_run() -> tuple[str, list]:
    """The longest mini-SWE-agent run: its system prompt, and the rest as LangChain messages."""
    from engram.langchain import from_openai

    run = openai_messages(max(load_records("minisweagent_swebv_gemini3pro.jsonl"),
                              key=lambda r: len(json.dumps(r["messages"]))))
    return run[0]["content"], from_openai(run[1:])


def test_a_create_agent_agent_sees_engrams_view_while_its_state_keeps_everything(tmp_path):
    pytest.importorskip("langchain.agents")
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, HumanMessage

    from engram.integrations.langchain import EngramMiddleware

    seen: list[list] = []
    system, history = longest_run()
    # The history ends on a tool result: the model answers, first calling engram's own tool.
    answers = [
        AIMessage("", tool_calls=[{"id": "h1", "name": "search_history", "args": {"query": "NdarrayMixin"}}]),
        AIMessage("Done: the fix is in place."),
    ]
    middleware = EngramMiddleware(model="gpt-4o", store=engram.Store(str(tmp_path / "lc.db")), window=WINDOW,
                                  tools=True)
    agent = create_agent(recording_model(answers, seen), tools=[], system_prompt=system, middleware=[middleware])
    state = agent.invoke({"messages": history + [HumanMessage("Check the history, then finish.")]})

    # The state holds every message: the history, the new turn, the tool call, its result, the answer.
    assert len(state["messages"]) == len(history) + 4
    assert state["messages"][-1].content == "Done: the fix is in place."
    found = state["messages"][-2]
    assert found.type == "tool" and found.name == "search_history" and "NdarrayMixin" in found.content
    # Each model call got engram's view: the system prompt, then fewer messages, within the window.
    assert len(seen) == 2
    for call in seen:
        assert call[0].type == "system" and call[0].content == system
        assert len(call) < len(history)
        tool_pairs_intact(call[1:])
        tokens = engram.count_tokens(call, model="gpt-4o")
        assert tokens <= WINDOW, tokens
    # The newest messages as they were; engram's status update after them when one is due.
    status = "--- STATUS UPDATE ---"
    first = [m for m in seen[0] if not str(m.content).startswith(status)]
    second = [m for m in seen[1] if not str(m.content).startswith(status)]
    assert first[-1].content == "Check the history, then finish."
    assert second[-1].type == "tool" and second[-1].tool_call_id == "h1"
    assert any(str(m.content).startswith(status) for m in seen[0]), "the compaction made a status update due"
    session = middleware.store.session(middleware.session_id)
    assert session.info["messages"] == len(history) + 4, "the session's log has them all too (with the system prompt)"


@pytest.mark.parametrize("marker", ["EngramMiddleware", "pre_model_hook"])
def test_the_readme_examples_run_as_written(tmp_path, marker):
    """The README's LangChain and LangGraph examples against a fake OpenAI server (ChatOpenAI
    reads OPENAI_BASE_URL), in a fresh home."""
    from test_proxy import run_readme_example

    pytest.importorskip("langchain.agents")
    pytest.importorskip("langchain_openai")
    out, requests, _ = run_readme_example(marker, tmp_path, PYTHONWARNINGS="ignore")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "saw 1 messages"
    if marker == "EngramMiddleware":
        sent = requests[-1]["body"]
        assert [t["function"]["name"] for t in sent["tools"]] == ["search_history", "read_history", "compact_history"]


def test_a_langgraph_prebuilt_agent_gets_the_view_from_its_pre_model_hook(tmp_path):
    pytest.importorskip("langgraph.prebuilt")
    import warnings

    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.prebuilt import create_react_agent

    from engram.integrations.langgraph import pre_model_hook

    seen: list[list] = []
    system, history = longest_run()
    hook = pre_model_hook(model="gpt-4o", store=engram.Store(str(tmp_path / "lg.db")), window=WINDOW,
                          system_prompt=system)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent's move to langchain.agents
        agent = create_react_agent(recording_model([AIMessage("Done.")], seen), tools=[], prompt=system,
                                   pre_model_hook=hook)
    state = agent.invoke({"messages": history + [HumanMessage("Finish.")]})
    assert len(state["messages"]) == len(history) + 2, "the state keeps every message"
    [call] = seen
    assert call[0].type == "system" and call[0].content == system
    assert len(call) < len(history)
    tool_pairs_intact(call[1:])
    assert engram.count_tokens(call, model="gpt-4o") <= WINDOW
    assert [m for m in call if not str(m.content).startswith("--- STATUS")][-1].content == "Finish."


def test_a_chat_message_history_kept_by_engram(tmp_path):
    from langchain_core.messages import AIMessage, HumanMessage

    from engram.integrations.langgraph import EngramChatMessageHistory

    history = EngramChatMessageHistory("chat-1", engram.Store(str(tmp_path / "h.db")), window=2_000)
    assert history.messages == []
    turns = []
    for i in range(30):
        turns += [HumanMessage(f"question {i}: " + "about the deploy pipeline " * 12), AIMessage(f"answer {i}")]
    history.add_messages(turns)
    view = history.messages
    assert all(isinstance(m, (HumanMessage, AIMessage)) or m.type == "system" for m in view)
    assert len(view) < len(turns) and view[-1].content == "answer 29"
    assert engram.count_tokens(view, model="gpt-4o") <= 2_000
    history.clear()
    assert history.messages == []
