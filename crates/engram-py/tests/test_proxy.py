"""`engram serve` as a drop-in proxy, driven by the official `openai` and `anthropic` SDKs
pointed at its base URL: against a fake upstream that records what it receives (a long real
trajectory sent turn by turn arrives within the window, tool pairs intact; the SDKs parse every
reply, streamed or not), and against the real llama-server with SmolLM2."""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import engram
from test_compact import tool_pairs_intact
from test_real_model import llama  # noqa: F401  (the fixture)

WINDOW = 16_000
REPLY = 1_000


def engram_bin() -> str:
    path = os.environ.get("ENGRAM_BIN")
    if not path or not os.path.isfile(path):
        pytest.skip("engram-bin: needs the engram binary: set ENGRAM_BIN (scripts/test.sh does)")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Upstream:
    """A fake OpenAI and Anthropic API: records each request; answers JSON or SSE."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _send(self, content_type: str, data: bytes, length: bool = True) -> None:
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                if length:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                fake.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}})
                self._send("application/json",
                           b'{"object":"list","data":[{"id":"gpt-4o","object":"model","created":0,"owned_by":"x"}]}')

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append({"path": self.path, "body": body, "headers": {k.lower(): v for k, v in self.headers.items()}})
                n = len(body.get("messages", []))
                if self.path.endswith("/responses"):
                    self._responses(body)
                    return
                if self.path.endswith("/chat/completions"):
                    if body.get("stream"):
                        chunks = [
                            {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "gpt-4o",
                             "choices": [{"index": 0, "delta": {"role": "assistant", "content": "saw "}}]},
                            {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "gpt-4o",
                             "choices": [{"index": 0, "delta": {"content": f"{n} messages"},
                                          "finish_reason": "stop"}]},
                        ]
                        data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
                        self._send("text/event-stream", data.encode(), length=False)
                        return
                    reply = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "gpt-4o",
                             "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": f"saw {n} messages"}}],
                             "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
                    self._send("application/json", json.dumps(reply).encode())
                    return
                # Anthropic /v1/messages
                if body.get("stream"):
                    events = [
                        ("message_start", {"type": "message_start", "message": {
                            "id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
                            "content": [], "stop_reason": None, "stop_sequence": None,
                            "usage": {"input_tokens": 10, "output_tokens": 0}}}),
                        ("content_block_start", {"type": "content_block_start", "index": 0,
                                                 "content_block": {"type": "text", "text": ""}}),
                        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                 "delta": {"type": "text_delta", "text": f"saw {n} messages"}}),
                        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                        ("message_delta", {"type": "message_delta",
                                           "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                           "usage": {"output_tokens": 3}}),
                        ("message_stop", {"type": "message_stop"}),
                    ]
                    data = "".join(f"event: {e}\ndata: {json.dumps(d)}\n\n" for e, d in events)
                    self._send("text/event-stream", data.encode(), length=False)
                    return
                reply = {"id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
                         "content": [{"type": "text", "text": f"saw {n} messages"}],
                         "stop_reason": "end_turn", "stop_sequence": None,
                         "usage": {"input_tokens": 10, "output_tokens": 3}}
                self._send("application/json", json.dumps(reply).encode())

            def _responses(self, body: dict) -> None:
                items = body["input"] if isinstance(body["input"], list) else [body["input"]]
                last = items[-1] if items else {}
                tools = [t.get("name") for t in body.get("tools") or []]
                if "lookup" in tools and last.get("type") != "function_call_output":
                    output = [{"type": "function_call", "id": "fc_up", "call_id": "call_up", "name": "lookup",
                               "arguments": '{"topic": "the build"}', "status": "completed"}]
                else:
                    output = [{"type": "message", "id": "msg_up", "role": "assistant", "status": "completed",
                               "content": [{"type": "output_text", "text": f"saw {len(items)} items",
                                            "annotations": []}]}]
                response = {"id": "resp_up", "object": "response", "created_at": 0, "model": body["model"],
                            "status": "completed", "output": output, "parallel_tool_calls": True,
                            "tool_choice": "auto", "tools": [],
                            "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2,
                                      "input_tokens_details": {"cached_tokens": 0},
                                      "output_tokens_details": {"reasoning_tokens": 0}}}
                if not body.get("stream"):
                    self._send("application/json", json.dumps(response).encode())
                    return
                text = output[0]["content"][0]["text"]
                started = dict(response, status="in_progress", output=[])
                events = [
                    {"type": "response.created", "response": started},
                    {"type": "response.output_item.added", "output_index": 0,
                     "item": dict(output[0], status="in_progress", content=[])},
                    {"type": "response.output_text.delta", "item_id": "msg_up", "output_index": 0,
                     "content_index": 0, "delta": text[:4], "logprobs": []},
                    {"type": "response.output_text.delta", "item_id": "msg_up", "output_index": 0,
                     "content_index": 0, "delta": text[4:], "logprobs": []},
                    {"type": "response.output_item.done", "output_index": 0, "item": output[0]},
                    {"type": "response.completed", "response": response},
                ]
                data = "".join(f"event: {e['type']}\ndata: {json.dumps(dict(e, sequence_number=i))}\n\n"
                               for i, e in enumerate(events))
                self._send("text/event-stream", data.encode(), length=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def run_readme_example(marker: str, home: pathlib.Path, **env_extra: str) -> tuple:
    """Runs the README's Python block that contains `marker` as written, in a fresh `home`, its
    OpenAI client pointed (by OPENAI_BASE_URL) at a fake upstream. The finished process, what the
    upstream received, and the environment it ran in."""
    import re
    import sys

    from conftest import REPO

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if marker in b)
    upstream = Upstream()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENGRAM_", "OPENAI_"))}
    env.update(HOME=str(home), XDG_DATA_HOME=str(home / "data"), OPENAI_API_KEY="sk-test",
               OPENAI_BASE_URL=f"{upstream.root}/v1", **env_extra)
    try:
        out = subprocess.run([sys.executable, "-c", block], cwd=REPO, env=env, capture_output=True, text=True,
                             timeout=120)
    finally:
        upstream.close()
    return out, upstream.requests, env


def start_engram(*args: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    db = pathlib.Path(tempfile.mkdtemp()) / "engram.db"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ENGRAM_") or k in ("ENGRAM_DEV_DATA",)}
    env["XDG_CONFIG_HOME"] = str(db.parent / "no-config")
    proc = subprocess.Popen([engram_bin(), "--db", str(db), "serve", "--listen", f"127.0.0.1:{port}", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while True:
        try:
            with urllib.request.urlopen(f"{base}/healthz", timeout=2) as r:
                if r.status == 200:
                    return proc, base
        except OSError:
            pass
        if proc.poll() is not None:
            raise AssertionError(f"engram serve exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        assert time.time() < deadline, "engram serve did not start"
        time.sleep(0.1)


@pytest.fixture
def proxy():
    upstream = Upstream()
    proc, base = start_engram("--upstream", f"{upstream.root}/v1", "--anthropic-upstream", upstream.root,
                              "--model-window", f"gpt-4o={WINDOW}", "--model-window", f"claude-sonnet-4={WINDOW}")
    yield base, upstream
    proc.terminate()
    proc.wait(timeout=30)
    upstream.close()


def turn_ends(messages: list[dict]) -> list[int]:
    """Where an agent sends: after each user or tool message."""
    return [i + 1 for i, m in enumerate(messages) if i >= 1 and m["role"] in ("user", "tool")]


def test_the_openai_sdk_sends_a_long_trajectory_turn_by_turn(proxy, trajectory):
    import openai

    base, upstream = proxy
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-caller-own-key", max_retries=0)
    compacted = 0
    ends = turn_ends(trajectory)
    for k, end in enumerate(ends):
        history = trajectory[:end]
        if k % 2:
            stream = client.chat.completions.create(model="gpt-4o", messages=history, max_tokens=REPLY,
                                                    stream=True)
            text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        else:
            raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history,
                                                                   max_tokens=REPLY)
            if raw.headers.get("x-engram-steps", "none") != "none":
                compacted += 1
            text = raw.parse().choices[0].message.content
        got = upstream.requests[-1]
        assert got["headers"].get("authorization") == "Bearer sk-caller-own-key"
        sent = got["body"]["messages"]
        assert text == f"saw {len(sent)} messages", "the SDK parsed the reply"
        tokens = engram.count_tokens(sent, model="gpt-4o")
        assert tokens <= WINDOW - REPLY, f"turn {end}: {tokens} tokens upstream"
        assert sent[0] == trajectory[0], "the system prompt stays"
        assert sent[-1] == trajectory[end - 1], "the newest message stays"
        tool_pairs_intact(sent)
    assert compacted > 0, "the trajectory outgrew the window"
    assert len(upstream.requests) == len(ends)


def test_the_anthropic_sdk_gets_compacted_requests_and_parses_replies(proxy):
    import anthropic

    base, upstream = proxy
    client = anthropic.Anthropic(base_url=base, api_key="sk-ant-caller", max_retries=0)
    turns = []
    for i in range(60):
        turns.append({"role": "user" if i % 2 == 0 else "assistant",
                      "content": f"turn {i}: " + "details of the failing build in src/lib.rs " * 40})
    turns.append({"role": "user", "content": "Now fix the failing test in tests/api.rs"})
    reply = client.messages.create(model="claude-sonnet-4", max_tokens=REPLY, system="You are careful.",
                                   messages=turns)
    sent = upstream.requests[-1]
    # The caller's key reaches the upstream as the SDK sent it (x-api-key, or a bearer token).
    assert "sk-ant-caller" in (sent["headers"].get("x-api-key", "") + sent["headers"].get("authorization", ""))
    assert len(sent["body"]["messages"]) < len(turns), "compacted"
    assert reply.content[0].text == f"saw {len(sent['body']['messages'])} messages"
    with client.messages.stream(model="claude-sonnet-4", max_tokens=REPLY, system="You are careful.",
                                messages=turns) as stream:
        text = "".join(stream.text_stream)
    assert text == f"saw {len(upstream.requests[-1]['body']['messages'])} messages"
    # The newest message, with the prompt cache's last breakpoint (the caller marked none).
    assert upstream.requests[-1]["body"]["messages"][-1]["content"] == [
        {"type": "text", "text": "Now fix the failing test in tests/api.rs", "cache_control": {"type": "ephemeral"}}]
    assert upstream.requests[-1]["body"]["system"][0]["cache_control"] == {"type": "ephemeral"}


def as_items(messages: list[dict]) -> list[dict]:
    """A chat history after its system prompt as Responses items, as the Agents SDK and Codex send
    them (the conversion that made testdata/responses: each assistant turn a reasoning item, its
    text and its calls; each tool result an output)."""
    import sys

    from conftest import REPO

    sys.path.insert(0, str(REPO / "scripts"))
    from make_responses_fixture import items

    return items(messages)[1]


def calls_answered(items: list[dict]) -> None:
    """Every call has its output after it (but in the newest turn, which may still be waiting for
    them); every reasoning item is followed by an item of its turn."""
    called: set[str] = set()
    newest = max((k for k, item in enumerate(items)
                  if item.get("type") in ("function_call_output", None, "message") and item.get("role") != "assistant"),
                 default=-1)
    for k, item in enumerate(items):
        kind = item.get("type")
        if kind == "function_call":
            called.add(item["call_id"])
            assert k > newest or any(o.get("type") == "function_call_output" and o["call_id"] == item["call_id"]
                                     for o in items[k + 1:]), f"call {item['call_id']} lost its output"
        elif kind == "function_call_output":
            assert item["call_id"] in called, f"output {item['call_id']} lost its call"
        elif kind == "reasoning":
            assert k + 1 < len(items) and items[k + 1].get("type") in ("function_call", "message"), \
                "a reasoning item was split from its turn"


def test_the_openai_sdk_sends_responses_requests(proxy, trajectory):
    import openai

    base, upstream = proxy
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-caller-own-key", max_retries=0)
    items = as_items(trajectory)
    instructions = trajectory[0]["content"]
    raw = client.responses.with_raw_response.create(model="gpt-4o", instructions=instructions, input=items,
                                                    max_output_tokens=REPLY)
    assert raw.headers["x-engram-steps"] != "none", "the trajectory outgrew the window"
    sent = upstream.requests[-1]["body"]
    assert sent["instructions"] == instructions
    assert raw.parse().output_text == f"saw {len(sent['input'])} items", "the SDK parsed the reply"
    assert len(sent["input"]) < len(items)
    assert sent["input"][-1] == items[-1], "the newest item stays"
    calls_answered(sent["input"])
    kept = [item for item in sent["input"] if item in items]
    assert len(kept) >= 3, "items kept as the caller sent them"
    # Streamed: the events come back as the upstream sent them, and the SDK reads them.
    stream = client.responses.create(model="gpt-4o", instructions=instructions, input=items,
                                     max_output_tokens=REPLY, stream=True)
    text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
    assert text == f"saw {len(upstream.requests[-1]['body']['input'])} items"
    # A conversation the provider holds is left as it is.
    client.responses.create(model="gpt-4o", input=items, previous_response_id="resp_0")
    assert upstream.requests[-1]["body"]["input"] == items


def test_an_agents_sdk_agent_runs_through_the_proxy(proxy, trajectory):
    """An OpenAI Agents SDK agent with a function tool, resuming a long history: each of its
    requests reaches the upstream compacted with its calls answered, and the tool loop runs."""
    import asyncio

    import agents
    import openai

    base, upstream = proxy
    agents.set_tracing_disabled(True)

    @agents.function_tool
    def lookup(topic: str) -> str:
        """Looks a topic up."""
        return f"notes on {topic}: the build fails in src/lib.rs"

    client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="sk-caller-own-key", max_retries=0)
    agent = agents.Agent(name="fixer", instructions=trajectory[0]["content"], tools=[lookup],
                         model=agents.OpenAIResponsesModel(model="gpt-4o", openai_client=client))
    history = as_items(trajectory) + [{"role": "user", "content": "Look up the build, then say what next."}]
    result = asyncio.run(agents.Runner.run(agent, input=history))
    first, second = upstream.requests[-2]["body"], upstream.requests[-1]["body"]
    for sent in (first, second):
        assert len(sent["input"]) < len(history), "compacted"
        calls_answered(sent["input"])
        assert sent["instructions"] == trajectory[0]["content"]
    assert first["input"][-1] == history[-1]
    call, output = second["input"][-2:]
    assert (call["type"], call["call_id"]) == ("function_call", "call_up")
    assert output["type"] == "function_call_output" and "src/lib.rs" in output["output"]
    assert result.final_output == f"saw {len(second['input'])} items"


def test_each_proxied_request_can_be_logged_as_one_json_line(trajectory):
    """With `--log-proxy-requests`, each model request is one JSON line on standard error:
    route, model, status, tokens before and after, steps, summary cache, time."""
    import openai

    upstream = Upstream()
    proc, base = start_engram("--upstream", f"{upstream.root}/v1", "--model-window", f"gpt-4o={WINDOW}",
                              "--log-proxy-requests")
    try:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-caller-own-key", max_retries=0)
        client.chat.completions.create(model="gpt-4o", messages=trajectory, max_tokens=REPLY)
        client.responses.create(model="gpt-4o", input="hello")
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
        upstream.close()
    lines = [json.loads(line) for line in err.decode().splitlines() if line.startswith('{"event":"proxy"')]
    assert [(x["route"], x["model"], x["status"]) for x in lines] == [
        ("/v1/chat/completions", "gpt-4o", 200), ("/v1/responses", "gpt-4o", 200)]
    chat, plain = lines
    assert chat["tokens_after"] < chat["tokens_before"] and chat["steps"] != "none"
    assert plain["tokens_after"] == plain["tokens_before"] and plain["steps"] == "none"
    assert all(x["ms"] >= 0 and "cache" in x and "retried" in x for x in lines)
    assert "sk-caller-own-key" not in err.decode(), "the caller's key is never logged"


def test_other_routes_pass_through(proxy):
    import openai

    base, upstream = proxy
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-caller-own-key", max_retries=0)
    assert [m.id for m in client.models.list()] == ["gpt-4o"]
    assert upstream.requests[-1]["path"] == "/v1/models"


def test_a_real_model_behind_the_proxy(llama, trajectory):  # noqa: F811
    """SmolLM2 in llama-server (a 4,096-token context) behind engram: a long real trajectory, turn
    by turn, through the openai SDK, and a request through the anthropic SDK to llama-server's
    Anthropic endpoint. llama-server refuses any request longer than its context, so every
    answer is proof that engram kept the request within it."""
    import anthropic
    import openai

    root = llama.removesuffix("/v1")
    proc, base = start_engram("--upstream", llama, "--anthropic-upstream", root,
                              "--model-window", "smollm2=4096")
    try:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=300)
        # From the first tool result on: the task's 5,000-token demonstration (message 1) alone is
        # larger than SmolLM2's context, so a request that ends with it cannot fit at all (engram
        # forwards it and the upstream's 400 comes back); later, it is history to compact.
        ends = [e for e in turn_ends(trajectory) if e > 4]
        compacted = 0
        for k, end in enumerate(ends[::3][:4]):
            if k % 2:
                stream = client.chat.completions.create(model="smollm2", messages=trajectory[:end],
                                                        max_tokens=8, stream=True)
                text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
                assert isinstance(text, str)
            else:
                raw = client.chat.completions.with_raw_response.create(model="smollm2",
                                                                       messages=trajectory[:end], max_tokens=8)
                if raw.headers.get("x-engram-steps", "none") != "none":
                    compacted += 1
                reply = raw.parse()
                assert reply.choices[0].message is not None
                assert reply.usage is not None and reply.usage.prompt_tokens < 4096
        assert compacted > 0, "the trajectory outgrew SmolLM2's context"
        claude = anthropic.Anthropic(base_url=base, api_key="none", max_retries=0, timeout=300)
        reply = claude.messages.create(model="smollm2", max_tokens=8,
                                       messages=[m for m in trajectory[1:2]] + [
                                           {"role": "assistant", "content": "Looking."},
                                           {"role": "user", "content": "Go on."}])
        assert reply.type == "message"
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_a_real_model_writes_the_proxys_summary_once(llama, trajectory):  # noqa: F811
    """engram serve --summarizer openai with SmolLM2 itself writing the summaries, in front of
    SmolLM2: a request over the window is compacted (the model's summary, or the extractive
    digest when its reply is unusable); the same request sent again goes up as the view the first
    got, without summarising again, and still fits the 4,096-token context."""
    import openai

    proc, base = start_engram("--upstream", llama, "--model-window", "smollm2=4096",
                              "--summarizer", "openai", "--summarizer-model", "smollm2",
                              "--base-url", llama)
    try:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=600)
        end = [e for e in turn_ends(trajectory) if e > 4][1]
        first = client.chat.completions.with_raw_response.create(model="smollm2", messages=trajectory[:end],
                                                                 max_tokens=8)
        assert first.headers["x-engram-prefix"] == "rebuilt", dict(first.headers)
        assert first.parse().usage.prompt_tokens < 4096
        again = client.chat.completions.with_raw_response.create(model="smollm2", messages=trajectory[:end],
                                                                 max_tokens=8)
        assert again.headers["x-engram-prefix"] == "extended", dict(again.headers)
        assert again.headers["x-engram-steps"] == "extend"
        assert again.parse().usage.prompt_tokens < 4096
    finally:
        proc.terminate()
        proc.wait(timeout=60)
