"""Recall through the proxy: once `engram serve` sets part of a conversation aside, it offers the
model engram's history search, answers the model's calls to it from the history the request
carried and asks the upstream again; the caller, through the official `openai` and `anthropic`
SDKs and the Agents SDK, gets only the final answer. The fake upstream plays a model that,
offered the search, looks up when the meeting moved to before it answers; on every route,
streamed and not."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from test_proxy import start_engram

DETAIL = "the meeting moved to Tuesday afternoon"
SEARCH = "engram_search_history"


def notes() -> str:
    return ("Here are my notes from the call, in no order.\n"
            + "we talked about many things and nothing much came of it\n" * 6
            + DETAIL + "\n" + "then we chatted about the weather for a while\n" * 6)


def chat_history() -> list[dict]:
    messages = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "Plan the release with me."},
                {"role": "assistant", "content": "Sure. What changed?"},
                {"role": "user", "content": notes()}]
    for i in range(40):
        messages.append({"role": "assistant",
                         "content": f"Step {i}: checked build_{i}.log, lint_{i}.txt and report_{i}.md; all fine."})
        messages.append({"role": "user", "content": f"Next {i}: " + "more details about packaging and docs " * 8})
    messages.append({"role": "user", "content": "When is the meeting now?"})
    return messages


class Model:
    """A fake OpenAI and Anthropic API whose model searches engram's history when offered it."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, content_type: str, data: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append({"path": self.path, "body": body})
                stream = bool(body.get("stream"))
                if self.path.endswith("/chat/completions"):
                    data, kind = fake.chat(body, stream)
                elif self.path.endswith("/responses"):
                    data, kind = fake.responses(body, stream)
                else:
                    data, kind = fake.anthropic(body, stream)
                self._send(kind, data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    @staticmethod
    def offered(tools: list, key: str) -> bool:
        return any((t.get("function") or t).get("name") == SEARCH for t in tools or [] if isinstance(t, dict)) \
            if key == "chat" else any(t.get("name") == SEARCH for t in tools or [])

    @staticmethod
    def answer(found: str) -> str:
        return f"recalled: {DETAIL in found}"

    def chat(self, body: dict, stream: bool) -> tuple[bytes, str]:
        last = body["messages"][-1]
        if self.offered(body.get("tools"), "chat") and last["role"] != "tool":
            call = {"id": "call_r", "type": "function",
                    "function": {"name": SEARCH, "arguments": json.dumps({"query": "meeting moved"})}}
            message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": self.answer(last.get("content") or "")}, "stop"
        usage = {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105}
        if not stream:
            reply = {"id": "c", "object": "chat.completion", "created": 0, "model": "gpt-4o",
                     "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}
            return json.dumps(reply).encode(), "application/json"
        chunk = lambda delta, f=None: {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "gpt-4o",  # noqa: E731
                                       "choices": [{"index": 0, "delta": delta, "finish_reason": f}]}
        if message.get("tool_calls"):
            c = message["tool_calls"][0]
            chunks = [chunk({"role": "assistant", "tool_calls": [{"index": 0, "id": c["id"], "type": "function",
                                                                  "function": {"name": SEARCH, "arguments": ""}}]}),
                      chunk({"tool_calls": [{"index": 0, "function": {"arguments": c["function"]["arguments"]}}]}),
                      chunk({}, "tool_calls")]
        else:
            text = message["content"]
            chunks = [chunk({"role": "assistant", "content": text[:5]}), chunk({"content": text[5:]}), chunk({}, "stop")]
        chunks.append({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "gpt-4o", "choices": [],
                       "usage": usage})
        return ("".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n").encode(), \
            "text/event-stream"

    def responses(self, body: dict, stream: bool) -> tuple[bytes, str]:
        items = body["input"] if isinstance(body["input"], list) else [{"role": "user", "content": body["input"]}]
        last = items[-1]
        if self.offered(body.get("tools"), "responses") and last.get("type") != "function_call_output":
            output = [{"type": "function_call", "id": "fc_r", "call_id": "call_r", "name": SEARCH,
                       "arguments": json.dumps({"query": "meeting moved"}), "status": "completed"}]
        else:
            output = [{"type": "message", "id": "msg_r", "role": "assistant", "status": "completed",
                       "content": [{"type": "output_text", "text": self.answer(last.get("output") or ""),
                                    "annotations": []}]}]
        response = {"id": "resp_r", "object": "response", "created_at": 0, "model": body["model"],
                    "status": "completed", "output": output, "parallel_tool_calls": True, "tool_choice": "auto",
                    "tools": [], "usage": {"input_tokens": 100, "output_tokens": 5, "total_tokens": 105,
                                           "input_tokens_details": {"cached_tokens": 0},
                                           "output_tokens_details": {"reasoning_tokens": 0}}}
        if not stream:
            return json.dumps(response).encode(), "application/json"
        events = [{"type": "response.created", "response": dict(response, status="in_progress", output=[])},
                  {"type": "response.output_item.added", "output_index": 0, "item": output[0]},
                  {"type": "response.output_item.done", "output_index": 0, "item": output[0]}]
        if output[0]["type"] == "message":
            text = output[0]["content"][0]["text"]
            events.insert(2, {"type": "response.output_text.delta", "item_id": "msg_r", "output_index": 0,
                              "content_index": 0, "delta": text, "logprobs": []})
        events.append({"type": "response.completed", "response": response})
        return "".join(f"event: {e['type']}\ndata: {json.dumps(dict(e, sequence_number=i))}\n\n"
                       for i, e in enumerate(events)).encode(), "text/event-stream"

    def anthropic(self, body: dict, stream: bool) -> tuple[bytes, str]:
        last = body["messages"][-1]
        results = [b for b in last["content"] if isinstance(b, dict) and b.get("type") == "tool_result"] \
            if isinstance(last["content"], list) else []
        if self.offered(body.get("tools"), "anthropic") and not results:
            content = [{"type": "tool_use", "id": "toolu_r", "name": SEARCH, "input": {"query": "meeting moved"}}]
            stop = "tool_use"
        else:
            found = results[-1]["content"] if results else ""
            content = [{"type": "text", "text": self.answer(found if isinstance(found, str) else json.dumps(found))}]
            stop = "end_turn"
        if not stream:
            reply = {"id": "msg_r", "type": "message", "role": "assistant", "model": body["model"], "content": content,
                     "stop_reason": stop, "stop_sequence": None, "usage": {"input_tokens": 100, "output_tokens": 5}}
            return json.dumps(reply).encode(), "application/json"
        block = content[0]
        events = [("message_start", {"type": "message_start", "message": {
            "id": "msg_r", "type": "message", "role": "assistant", "model": body["model"], "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 100, "output_tokens": 1}}})]
        if block["type"] == "tool_use":
            events += [("content_block_start", {"type": "content_block_start", "index": 0,
                                                "content_block": dict(block, input={})}),
                       ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
                           "type": "input_json_delta", "partial_json": json.dumps(block["input"])}})]
        else:
            events += [("content_block_start", {"type": "content_block_start", "index": 0,
                                                "content_block": {"type": "text", "text": ""}}),
                       ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                "delta": {"type": "text_delta", "text": block["text"]}})]
        events += [("content_block_stop", {"type": "content_block_stop", "index": 0}),
                   ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                      "usage": {"output_tokens": 5}}),
                   ("message_stop", {"type": "message_stop"})]
        return "".join(f"event: {e}\ndata: {json.dumps(d)}\n\n" for e, d in events).encode(), "text/event-stream"


@pytest.fixture
def served():
    model = Model()
    proc, base = start_engram("--upstream", f"{model.root}/v1", "--anthropic-upstream", model.root,
                              "--model-window", "gpt-4o=3000", "--model-window", "claude-sonnet-4=3000")
    yield base, model
    proc.terminate()
    proc.wait(timeout=30)
    model.close()


def check_rounds(model: Model, key: str) -> None:
    """The first request lost the detail, the second carried the search's answer holding it."""
    first, second = (r["body"] for r in model.requests[-2:])
    assert DETAIL not in json.dumps(first[key]), "compaction took the detail out of the request"
    assert DETAIL in json.dumps(second[key]), "the search's answer brought it back"
    assert first["tools"] == second["tools"], "the tools stay as they were"


@pytest.mark.parametrize("stream", [False, True])
def test_chat_completions_get_back_what_was_compacted(served, stream):
    import openai

    base, model = served
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-test", max_retries=0)
    if stream:
        chunks = list(client.chat.completions.create(model="gpt-4o", messages=chat_history(), stream=True,
                                                     stream_options={"include_usage": True}))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks), "no call reaches the caller"
        usage = [c.usage for c in chunks if c.usage]
        assert usage and usage[-1].prompt_tokens == 100, "the last round's usage, never a sum of rounds"
    else:
        raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=chat_history())
        assert raw.headers["x-engram-recall-calls"] == "1"
        reply = raw.parse()
        text = reply.choices[0].message.content
        assert not reply.choices[0].message.tool_calls
        assert reply.usage.prompt_tokens == 100, "the last round's usage, never a sum of rounds"
    assert text == "recalled: True"
    check_rounds(model, "messages")


def responses_items() -> list[dict]:
    return [{"role": m["role"], "content": m["content"]} for m in chat_history()[1:]]


@pytest.mark.parametrize("stream", [False, True])
def test_responses_requests_get_back_what_was_compacted(served, stream):
    import openai

    base, model = served
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-test", max_retries=0)
    args = dict(model="gpt-4o", instructions="You are a helpful assistant.", input=responses_items())
    if stream:
        events = list(client.responses.create(stream=True, **args))
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        done = [e for e in events if e.type == "response.completed"][-1].response
        assert not any(o.type == "function_call" for o in done.output)
        assert done.usage.input_tokens == 100
    else:
        reply = client.responses.create(**args)
        text = reply.output_text
        assert reply.usage.input_tokens == 100
    assert text == "recalled: True"
    check_rounds(model, "input")


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_requests_get_back_what_was_compacted(served, stream):
    import anthropic

    base, model = served
    client = anthropic.Anthropic(base_url=base, api_key="sk-test", max_retries=0)
    history = chat_history()
    args = dict(model="claude-sonnet-4", max_tokens=256, system=history[0]["content"], messages=history[1:])
    if stream:
        with client.messages.stream(**args) as s:
            text = "".join(s.text_stream)
            final = s.get_final_message()
    else:
        final = client.messages.create(**args)
        text = "".join(b.text for b in final.content if b.type == "text")
    assert text == "recalled: True"
    assert not any(b.type == "tool_use" for b in final.content), "no call reaches the caller"
    assert final.usage.input_tokens == 100 and final.usage.output_tokens == 5, "one round's usage, never a sum"
    check_rounds(model, "messages")


def test_an_agents_sdk_agent_gets_back_what_was_compacted(served):
    import asyncio

    import agents
    import openai

    base, model = served
    agents.set_tracing_disabled(True)
    client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="sk-test", max_retries=0)
    agent = agents.Agent(name="planner", instructions="You are a helpful assistant.",
                         model=agents.OpenAIResponsesModel(model="gpt-4o", openai_client=client))
    result = asyncio.run(agents.Runner.run(agent, input=responses_items()))
    assert result.final_output == "recalled: True"
    check_rounds(model, "input")
