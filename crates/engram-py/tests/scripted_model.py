"""A scripted model on a local socket that records every body it receives, for running real
agents (Claude Code, Codex CLI, mini-swe-agent) through `engram serve` without a real model.

It speaks Anthropic Messages, the Responses API and Chat Completions, streamed (slowly, an event
at a time) or whole. Its script is a shell task whose outputs outgrow the window: at step N it
runs a command printing a few thousand tokens; at the steps in `recall_at`, when engram offers its
history tools, it first searches the history; after `steps` steps it answers DONE. The step
number is read from the newest tool call the request carries (`..._step<N>`), which compaction
always keeps. A request without the agent's shell tool (a title, a summary) gets a short answer.

    python3 scripted_model.py PORT LOG.jsonl     # serves until killed, one JSON line per request
"""

from __future__ import annotations

import itertools
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STEP = re.compile(r"_step(\d+)")

# Every reply has an id of its own: agents group a reply's blocks by it.
IDS = itertools.count(1)


def command(step: int) -> str:
    """A command whose output is a few thousand tokens: each step's own, so that the history
    grows past the window in a few steps."""
    return f"seq 1 300 | sed 's/^/step {step}: build log line /'"


class Script:
    def __init__(self, steps: int = 12, recall_at: tuple[int, ...] = (6, 10), pause: float = 0.01,
                 compacts: bool = False):
        self.steps = steps
        self.recall_at = recall_at
        self.pause = pause
        # Answer a Responses request that ends with Codex's compaction trigger as OpenAI does: one
        # opaque compaction item (which names the newest step, so that the script goes on).
        self.compacts = compacts

    def decide(self, text: str, offered: set[str], shell: str | None) -> dict:
        """What to say to a request whose JSON text is `text`: {"text"} or {"call": (name, args)}."""
        if shell is None:
            return {"text": "Build log review"}
        steps = [int(n) for n in STEP.findall(text)]
        step = max(steps) + 1 if steps else 1
        searched = f"engram_search_{step}" in text
        if step in self.recall_at and "engram_search_history" in offered and not searched:
            return {"call": ("engram_search_history", {"query": "step 2 build log line 7"}), "id": f"engram_search_{step}"}
        if step > self.steps:
            return {"text": "DONE: every step's build log was read."}
        return {"call": (shell, None), "step": step}


def anthropic_reply(script: Script, request: dict) -> dict:
    tools = {t.get("name") for t in request.get("tools") or []}
    shell = "Bash" if "Bash" in tools else None
    said = script.decide(json.dumps(request), tools, shell)
    content = []
    if "text" in said:
        content.append({"type": "text", "text": said["text"]})
        stop = "end_turn"
    else:
        name, args = said["call"]
        if args is None:
            args = {"command": command(said["step"]), "description": f"step {said['step']}"}
            call_id = f"toolu_step{said['step']}"
        else:
            call_id = f"toolu_{said['id']}"
        content.append({"type": "text", "text": "Running the next check."})
        content.append({"type": "tool_use", "id": call_id, "name": name, "input": args})
        stop = "tool_use"
    return {"id": f"msg_{next(IDS):06d}", "type": "message", "role": "assistant", "model": request.get("model"),
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": len(json.dumps(request)) // 4, "output_tokens": 20}}


def anthropic_events(reply: dict) -> list[tuple[str, dict]]:
    start = dict(reply, content=[], stop_reason=None)
    events = [("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(reply["content"]):
        if block["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}))
            for piece in re.findall(r"\S+\s*", block["text"]):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": piece}}))
        else:
            events.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": dict(block, input={})}))
            events.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": reply["stop_reason"], "stop_sequence": None},
                                     "usage": dict(reply["usage"])}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def chat_reply(script: Script, request: dict) -> dict:
    tools = {(t.get("function") or {}).get("name") for t in request.get("tools") or []}
    text = json.dumps(request)
    shell = "bash" if "bash" in tools else None
    said = script.decide(text, tools, shell)
    if shell is None and "tools" not in request:
        # mini-swe-agent calls no tools: its actions are in the text, one bash block a turn.
        steps = [int(n) for n in STEP.findall(text)]
        step = max(steps) + 1 if steps else 1
        if step > script.steps:
            body = "THOUGHT: done.\n\n```mswea_bash_command\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"
        else:
            body = f"THOUGHT: step {step}, the next check (_step{step}).\n\n```mswea_bash_command\n{command(step)}\n```"
        message = {"role": "assistant", "content": body}
    elif "text" in said and shell == "bash":
        # mini-swe-agent finishes by running its submit command.
        message = {"role": "assistant", "content": "THOUGHT: every step is read.",
                   "tool_calls": [{"id": "call_submit", "type": "function", "function": {
                       "name": "bash", "arguments": json.dumps({"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"})}}]}
    elif "text" in said:
        message = {"role": "assistant", "content": said["text"]}
    else:
        name, args = said["call"]
        if args is None:
            args, call_id = {"command": command(said["step"])}, f"call_step{said['step']}"
        else:
            call_id = f"call_{said['id']}"
        message = {"role": "assistant", "content": None,
                   "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return {"id": f"chatcmpl-{next(IDS):06d}", "object": "chat.completion", "created": int(time.time()), "model": request.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": len(text) // 4, "completion_tokens": 20, "total_tokens": len(text) // 4 + 20}}


def responses_tools(request: dict) -> set[str]:
    names = set()

    def walk(tool: dict) -> None:
        if tool.get("name"):
            names.add(tool["name"])
        for inner in tool.get("tools") or []:
            walk(inner)

    for tool in request.get("tools") or []:
        walk(tool)
    for item in request.get("input") or []:
        if isinstance(item, dict) and item.get("type") == "additional_tools":
            for tool in item.get("tools") or []:
                walk(tool)
    return names


def responses_reply(script: Script, request: dict) -> dict:
    items = request.get("input") if isinstance(request.get("input"), list) else []
    if script.compacts and items and items[-1].get("type") == "compaction_trigger":
        steps = [int(n) for n in STEP.findall(json.dumps(request))]
        item = {"type": "compaction", "id": f"cmp_{next(IDS):06d}",
                "encrypted_content": f"gAAAA-scripted_step{max(steps, default=0)}"}
        return {"id": f"resp_{next(IDS):06d}", "object": "response", "created_at": int(time.time()),
                "status": "completed", "model": request.get("model"), "output": [item],
                "usage": {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0},
                          "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 0},
                          "total_tokens": 120}}
    tools = responses_tools(request)
    shell = "exec_command" if "exec_command" in tools else ("exec" if "exec" in tools else ("shell" if "shell" in tools else None))
    said = script.decide(json.dumps(request), tools, shell)
    output = []
    if "text" in said:
        output.append({"type": "message", "id": f"msg_{next(IDS):06d}", "role": "assistant", "status": "completed",
                       "content": [{"type": "output_text", "text": said["text"], "annotations": []}]})
    else:
        name, args = said["call"]
        if args is None:
            step = said["step"]
            call_id = f"call_step{step}"
            if name == "exec":
                # Codex's code mode: the shell through JavaScript.
                code = f"const r = await tools.exec_command({{cmd: {json.dumps(command(step))}}}); text(r);"
                output.append({"type": "custom_tool_call", "id": f"ctc_step{step}", "call_id": call_id, "name": "exec",
                               "input": code, "status": "completed"})
            else:
                args = {"cmd": command(step)} if name == "exec_command" else {"command": ["bash", "-lc", command(step)]}
                output.append({"type": "function_call", "id": f"fc_step{step}", "call_id": call_id, "name": name,
                               "arguments": json.dumps(args), "status": "completed"})
        else:
            output.append({"type": "function_call", "id": f"fc_{said['id']}", "call_id": f"call_{said['id']}", "name": name,
                           "arguments": json.dumps(args), "status": "completed"})
    size = len(json.dumps(request)) // 4
    return {"id": f"resp_{next(IDS):06d}", "object": "response", "created_at": int(time.time()), "status": "completed",
            "model": request.get("model"), "output": output,
            "usage": {"input_tokens": size, "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": size + 20}}


def responses_events(reply: dict) -> list[tuple[str, dict]]:
    events = [("response.created", {"type": "response.created", "response": dict(reply, output=[], status="in_progress")})]
    for i, item in enumerate(reply["output"]):
        events.append(("response.output_item.added", {"type": "response.output_item.added", "output_index": i,
                                                      "item": dict(item, status="in_progress")}))
        if item["type"] == "message":
            text = item["content"][0]["text"]
            events.append(("response.content_part.added", {"type": "response.content_part.added", "output_index": i, "item_id": item["id"],
                                                           "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}))
            for piece in re.findall(r"\S+\s*", text):
                events.append(("response.output_text.delta", {"type": "response.output_text.delta", "output_index": i,
                                                              "item_id": item["id"], "content_index": 0, "delta": piece}))
        events.append(("response.output_item.done", {"type": "response.output_item.done", "output_index": i, "item": item}))
    events.append(("response.completed", {"type": "response.completed", "response": reply}))
    for n, (_, data) in enumerate(events):
        data["sequence_number"] = n
    return events


class Model:
    """The server: `received` holds every request, in order."""

    def __init__(self, port: int, script: Script, log: str | None = None):
        self.script = script
        self.received: list[dict] = []
        self.lock = threading.Lock()
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802
                body = b'{"object": "list", "data": []}'
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    request = json.loads(raw or b"{}")
                except ValueError:
                    request = {"unparsed": raw[:200].decode(errors="replace")}
                entry = {"path": self.path, "body": request, "t": time.time()}
                with model.lock:
                    model.received.append(entry)
                    if log:
                        with open(log, "a") as f:
                            f.write(json.dumps(entry) + "\n")
                path = self.path.split("?")[0]
                if path.endswith("/count_tokens"):
                    return self.json({"input_tokens": len(raw) // 4})
                if path.endswith("/messages"):
                    reply = anthropic_reply(model.script, request)
                    if request.get("stream"):
                        return self.sse([(e, d) for e, d in anthropic_events(reply)])
                    return self.json(reply)
                if path.endswith("/responses"):
                    reply = responses_reply(model.script, request)
                    if request.get("stream"):
                        return self.sse(responses_events(reply))
                    return self.json(reply)
                if path.endswith("/chat/completions"):
                    reply = chat_reply(model.script, request)
                    if request.get("stream"):
                        chunk = dict(reply, object="chat.completion.chunk",
                                     choices=[{"index": 0, "delta": reply["choices"][0]["message"],
                                               "finish_reason": reply["choices"][0]["finish_reason"]}])
                        return self.sse([(None, chunk)], done=True)
                    return self.json(reply)
                self.json({"error": {"message": f"no route {path}"}}, status=404)

            def json(self, value: dict, status: int = 200) -> None:
                data = json.dumps(value).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def sse(self, events, done: bool = False) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.end_headers()
                for name, data in events:
                    head = f"event: {name}\n" if name else ""
                    self.wfile.write(f"{head}data: {json.dumps(data)}\n\n".encode())
                    self.wfile.flush()
                    time.sleep(model.script.pause)
                if done:
                    self.wfile.write(b"data: [DONE]\n\n")
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.root = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()


if __name__ == "__main__":
    Model(int(sys.argv[1]), Script(), sys.argv[2] if len(sys.argv) > 2 else None).thread.join()
