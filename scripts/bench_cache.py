#!/usr/bin/env python3
"""What an agent pays through the proxy when its provider caches prompt prefixes.

Real agent trajectories are replayed turn by turn through `engram serve` as a proxy, in front of a
local fake upstream that keeps every body it receives: request t is the trajectory up to its t-th
assistant message, as the agent would send it. Each upstream body is compared with the previous
one of the same trajectory, and with what the agent sent (the uncompacted request), and the script
reports:

- requests, and how many engram compacted (it rewrote the request instead of extending the last
  one it sent);
- extends: the share of requests whose messages start with the previous request's, byte for byte
  (what a prompt cache can reuse whole), of all requests and of those engram did not compact;
- prefix reuse: the tokens of each request that repeat the previous request's prefix, over all its
  tokens (for the uncompacted requests too);
- bytes: what went upstream, over what the agent sent;
- cost: the input bill at a cache price of 0.1x and 0.5x for a repeated prefix (and 0.1x with a
  1.25x price for writing the rest to the cache, as Anthropic bills it), over the same for the
  uncompacted requests. A request pays `reused * price + (tokens - reused) * write`;
- cost with breakpoints (chat and responses): the same bill (0.1x reads, 1.25x writes) as a provider
  that caches only at breakpoints bills it (OpenAI's GPT-5.6 and later): a request reads the longest
  prefix an earlier request wrote a cache entry at, and writes entries at its own breakpoints, the
  provider's near its newest user or tool message and those it marks (`prompt_cache_breakpoint`,
  which engram places on the instructions and the task for such models: compare a run with
  `--serve-arg=--cache-breakpoints --serve-arg=off`);
- with `--observe`: engram serve runs in observe mode against an upstream that reports usage as the
  prefix cache above would (0.1x reads, 1.25x writes), and engram's own estimate of the saving
  (`GET /v1/proxy/savings`) is printed beside this replay's measure of it;
- task whole: the share of requests that hold the first user message (the task) verbatim;
- next-step identifiers: of the identifiers the agent's next message uses (6+ characters with
  `_`, `.` or `/`; a tool call's arguments read as the JSON they encode, so that a name is not
  glued to an escaped newline) that the history holds, the share the upstream request still
  holds, its texts read the same way;
- files named: in the requests engram rewrote, of the file paths the agent had named in its
  commands so far (here-document bodies left out), the share the request still names; open
  failures named: of the commands whose latest run failed (`<returncode>` not 0; a search that
  found nothing aside), the share whose first line the request still holds.

    cargo build --release -p engram-cli
    python3 scripts/bench_cache.py --engram-bin target/release/engram --data ../shared/data/dev \\
        --dataset minisweagent_swebv_gemini3pro --runs 10 --window 16000
    python3 scripts/bench_cache.py ... --dataset taubench_gpt4o_airline --runs 30 --window 4096

`--route chat|responses|anthropic` picks the API (the trajectory is converted to it); tokens are
counted as the evaluation harness counts them (cl100k, from --eval-dir's offline cache).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

import devpaths
from bench_recover import load_harness  # the evaluation harness's token counting

CHAT_REPLY = {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
              "choices": [{"index": 0, "finish_reason": "stop",
                           "message": {"role": "assistant", "content": "ok"}}],
              "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
RESPONSES_REPLY = {"id": "r", "object": "response", "created_at": 0, "status": "completed", "model": "m",
                   "output": [{"type": "message", "id": "o", "status": "completed", "role": "assistant",
                               "content": [{"type": "output_text", "text": "ok", "annotations": []}]}],
                   "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}}
# The registry's estimate of Claude's tokens from cl100k's (its tokenizer is not public).
CLAUDE_PER_CL100K = 1.25
ANTHROPIC_REPLY = {"id": "msg", "type": "message", "role": "assistant", "model": "m",
                   "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                   "usage": {"input_tokens": 1, "output_tokens": 1}}

_SPLIT = re.compile(r"[\s()\[\]{}<>\"'`,;=|]+")


def identifiers(text: str) -> set[str]:
    """Paths and names: 6+ characters holding `_`, `.` or `/`."""
    out = set()
    for tok in _SPLIT.split(text):
        tok = tok.strip(".,:;!?")
        if len(tok) >= 6 and any(c in "_./" for c in tok):
            out.add(tok)
    return out


# ---------------------------------------------------------------------------------------------
# The trajectories in each API's shape
# ---------------------------------------------------------------------------------------------

PATH = re.compile(r"(?<![\w/.$-])((?:[\w.-]+/)*[\w-]+\.[A-Za-z]\w{0,7})(?![\w/(])")


def command_files(message: dict) -> set[str]:
    """The file paths (with an extension) in the commands of an assistant message's tool calls."""
    out: set[str] = set()
    for call in message.get("tool_calls") or []:
        try:
            arguments = json.loads(call["function"]["arguments"])
        except (KeyError, TypeError, ValueError):
            continue
        command = arguments.get("command") if isinstance(arguments, dict) else None
        if isinstance(command, list):
            command = " ".join(str(c) for c in command)
        if isinstance(command, str):
            # Here-document bodies are data, not what the command names.
            command = re.sub(r"<<-?\s*'?(\w+)'?.*?\n.*?\n\1\b", "", command, flags=re.S)
            out.update(PATH.findall(command))
    return out


RETURNCODE = re.compile(r"<returncode>(-?\d+)</returncode>")


def open_failures(messages: list[dict]) -> set[str]:
    """The commands whose latest run failed (a nonzero `<returncode>`, searches that found
    nothing aside), as the agent wrote them."""
    calls: dict[str, str] = {}
    latest: dict[str, bool] = {}
    for m in messages:
        for call in m.get("tool_calls") or []:
            try:
                command = json.loads(call["function"]["arguments"]).get("command")
            except (KeyError, TypeError, ValueError, AttributeError):
                continue
            if isinstance(command, str):
                calls[call.get("id", "")] = command.strip()
        if m.get("role") == "tool" and m.get("tool_call_id") in calls:
            code = RETURNCODE.search(message_text(m)[:300])
            command = calls[m["tool_call_id"]]
            if code is None:
                continue
            searched = re.match(r"^\s*(grep|rg|find|diff)\b", command.splitlines()[-1] if command else "")
            if code.group(1) != "0" and not (searched and code.group(1) == "1"):
                latest[command] = False
            elif code.group(1) == "0":
                latest[command] = True
    return {c for c, ok in latest.items() if not ok}


def strings(value: Any) -> list[str]:
    """Every string a JSON value holds, keys too, a string that is itself JSON (a tool call's
    arguments) read as the value it encodes: the text as its writer wrote it, without JSON's
    escapes."""
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [k, *strings(v)]]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    if isinstance(value, str):
        if value[:1] in ("{", "["):
            try:
                return strings(json.loads(value))
            except json.JSONDecodeError:
                pass
        return [value]
    return []


def message_text(m: dict) -> str:
    """A message's words: its text and its tool calls' arguments, decoded."""
    return "\n".join([text_of(m.get("content"))] + [s for c in m.get("tool_calls") or []
                                                     for s in strings(c["function"]["arguments"])])


def text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if isinstance(p, dict))


def to_anthropic(messages: list[dict]) -> dict:
    system = "\n\n".join(text_of(m["content"]) for m in messages if m["role"] in ("system", "developer"))
    out: list[dict] = []
    for m in messages:
        role = m["role"]
        if role in ("system", "developer"):
            continue
        if role == "tool":
            block = {"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": text_of(m["content"])}
            blocks, who = [block], "user"
        elif role == "assistant":
            blocks = [{"type": "text", "text": text_of(m["content"])}] if text_of(m.get("content")) else []
            for call in m.get("tool_calls") or []:
                try:
                    args = json.loads(call["function"]["arguments"] or "{}")
                except json.JSONDecodeError:
                    args = {"raw": call["function"]["arguments"]}
                blocks.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"], "input": args})
            who = "assistant"
        else:
            blocks, who = [{"type": "text", "text": text_of(m["content"])}], "user"
        if out and out[-1]["role"] == who:
            out[-1]["content"].extend(blocks)
        elif blocks:
            out.append({"role": who, "content": blocks})
    body: dict = {"model": "", "max_tokens": 1024, "messages": out}
    if system:
        body["system"] = system
    return body


def to_responses(messages: list[dict]) -> dict:
    items: list[dict] = []
    for m in messages:
        role = m["role"]
        if role == "tool":
            items.append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": text_of(m["content"])})
        elif role == "assistant":
            if text_of(m.get("content")):
                items.append({"type": "message", "role": "assistant",
                              "content": [{"type": "output_text", "text": text_of(m["content"])}]})
            for call in m.get("tool_calls") or []:
                items.append({"type": "function_call", "call_id": call["id"], "name": call["function"]["name"],
                              "arguments": call["function"]["arguments"]})
        else:
            items.append({"role": role, "content": text_of(m["content"])})
    return {"model": "", "input": items, "store": False}


def request_body(route: str, messages: list[dict], model: str) -> dict:
    if route == "anthropic":
        body = to_anthropic(messages)
    elif route == "responses":
        body = to_responses(messages)
    else:
        body = {"model": "", "messages": messages}
    body["model"] = model
    return body


def turns(body: dict, route: str) -> list:
    """The prompt a provider bills, as a list whose prefix is compared: the tool definitions
    first (providers cache them with the prompt, in front), then what grows turn by turn."""
    tools = [json.dumps(t, sort_keys=True) for t in body.get("tools") or []]
    return tools + _turns(body, route)


def _turns(body: dict, route: str) -> list:
    if route == "anthropic":
        # By content block, with its role: the prompt a cache sees is the blocks in order, so a
        # block appended to a message keeps the prefix before it. A cache_control mark says where
        # a cached prefix ends, and is not part of it: it is left out of the comparison.
        def block(b: Any) -> dict:
            b = {"type": "text", "text": b} if isinstance(b, str) else b
            return {k: v for k, v in b.items() if k != "cache_control"}

        system = body.get("system")
        out: list[str] = []
        if system is not None:
            out.extend(json.dumps(block(b), sort_keys=True) for b in (system if isinstance(system, list) else [system]))
        for m in body.get("messages", []):
            blocks = m["content"] if isinstance(m["content"], list) else [m["content"]]
            out.extend(json.dumps([m["role"], block(b)], sort_keys=True) for b in blocks)
        return out
    if route == "responses":
        return [json.dumps(i, sort_keys=True) for i in body.get("input", [])]
    return [json.dumps(m, sort_keys=True) for m in body.get("messages", [])]


# ---------------------------------------------------------------------------------------------
# The fake upstream and the proxy
# ---------------------------------------------------------------------------------------------

class Upstream(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        self.bodies: dict[str, dict] = {}
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), Handler)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        key = self.headers.get("x-bench-key", "")
        search = self.headers.get("x-bench-search")
        reply = ANTHROPIC_REPLY if self.path.endswith("/messages") else \
            RESPONSES_REPLY if self.path.endswith("/responses") else CHAT_REPLY
        count = getattr(self.server, "count", None)
        if reply is ANTHROPIC_REPLY and count is not None:
            # The proxy calibrates its Claude estimate from the usage it is sent: a fake model
            # that reported 1 input token would teach it that every request is tiny. This one
            # reports what the registry's estimate says (cl100k x 1.25), leaving it as it is.
            tokens = sum(count(t) for t in turns(body, "anthropic"))
            reply = dict(reply, usage={"input_tokens": round(tokens * CLAUDE_PER_CL100K), "output_tokens": 1})
        messages = body.get("messages") or []
        if search is not None and self.path.endswith("/chat/completions"):
            # A model looking the identifier up with engram's search when offered it (--recover):
            # the call first; then what the search answered, kept for the script.
            if messages and messages[-1].get("tool_call_id") == "call_bench":
                with self.server.lock:  # type: ignore[attr-defined]
                    self.server.bodies[key + "/found"] = messages[-1].get("content") or ""  # type: ignore[attr-defined]
            elif any((t.get("function") or {}).get("name") == "engram_search_history" for t in body.get("tools") or []):
                call = {"id": "call_bench", "type": "function", "function": {
                    "name": "engram_search_history", "arguments": json.dumps({"query": search})}}
                reply = dict(CHAT_REPLY, choices=[{"index": 0, "finish_reason": "tool_calls",
                                                   "message": {"role": "assistant", "content": None,
                                                               "tool_calls": [call]}}])
        else:
            with self.server.lock:  # type: ignore[attr-defined]
                self.server.bodies[key] = body  # type: ignore[attr-defined]
        cache = getattr(self.server, "prefix_cache", None)
        if cache is not None and count is not None and not self.path.endswith("/messages"):
            # Usage as a provider caching every prefix reports it: the elements this request
            # shares with the previous one of its trajectory read, the rest written.
            route = "responses" if self.path.endswith("/responses") else "chat"
            current = turns(body, route)
            tokens = [count(t) for t in current]
            trajectory = key.split(":")[0]
            with self.server.lock:  # type: ignore[attr-defined]
                previous = cache.get(trajectory, [])
                cache[trajectory] = current
            shared = 0
            for a, b in zip(previous, current):
                if a != b:
                    break
                shared += 1
            total, read = sum(tokens), sum(tokens[:shared])
            details = {"cached_tokens": read, "cache_write_tokens": total - read}
            usage = ({"input_tokens": total, "input_tokens_details": details, "output_tokens": 0}
                     if route == "responses" else
                     {"prompt_tokens": total, "prompt_tokens_details": details, "completion_tokens": 0})
            reply = dict(reply, usage=usage)
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_engram(binary: str, upstream: int, model: str, window: int, work: str, extra: list[str],
                 session: dict[str, float], models: Optional[str] = None):
    port = free_port()
    config = os.path.join(work, "config.toml")
    with open(config, "w", encoding="utf-8") as f:
        f.write("[session]\n" + "".join(f"{k} = {v}\n" for k, v in session.items()))
    registry = ["--models", models] if models else []
    cmd = [binary, "--db", os.path.join(work, "engram.db"), "--config", config, *registry, "serve", "--listen", f"127.0.0.1:{port}",
           "--upstream", f"http://127.0.0.1:{upstream}/v1",
           "--anthropic-upstream", f"http://127.0.0.1:{upstream}",
           "--model-window", f"{model}={window}", *extra]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env["XDG_CONFIG_HOME"] = os.path.join(work, "config")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).read()
            return proc, port
        except OSError:
            if proc.poll() is not None:
                sys.exit(f"engram serve exited: {proc.stderr.read().decode() if proc.stderr else ''}")
            time.sleep(0.1)
    proc.kill()
    sys.exit("engram serve did not start")


def post(port: int, route: str, body: dict, key: str, search: Optional[str] = None) -> dict:
    path = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages"}[route]
    headers = {"Content-Type": "application/json", "x-bench-key": key}
    if search is not None:
        headers["x-bench-search"] = search
    if route == "anthropic":
        headers["anthropic-version"] = "2023-06-01"
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers=headers, method="POST")
    with urllib.request.urlopen(req, timeout=600) as r:
        r.read()
        return {k.lower(): v for k, v in r.headers.items()}


def rest(port: int, method: str, path: str, body: Optional[dict] = None) -> Any:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


class SessionReplay:
    """The same trajectory kept as an engram session (REST): each turn's new messages appended,
    then the session's context taken as what goes to the model (chat messages)."""

    def __init__(self, port: int, sid: str, model: str, window: int):
        self.port, self.sid, self.sent = port, sid, 0
        rest(port, "POST", "/v1/sessions", {"id": sid, "model": model, "window": window})
        self.compactions = 0

    def request(self, messages: list[dict], model: str) -> tuple[dict, bool]:
        """The body the model gets for `messages`, and whether engram compacted to make it."""
        out = rest(self.port, "POST", f"/v1/sessions/{self.sid}/messages", {"messages": messages[self.sent:]})
        self.sent = len(messages)
        compacted = bool(out.get("compaction"))
        context = rest(self.port, "GET", f"/v1/sessions/{self.sid}/context")
        return {"model": model, "messages": context["messages"]}, compacted


# ---------------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------------

class BreakpointCache:
    """A provider that caches only at breakpoints: the prefixes earlier requests wrote, by hash."""

    def __init__(self):
        self.entries: set[int] = set()

    def read_and_write(self, current: list[str], breakpoints: list[int]) -> int:
        """How many leading elements of `current` a cache entry holds; then writes its own."""
        hashes, h = [], 0
        for element in current:
            h = hash((h, element))
            hashes.append(h)
        reused = max((n + 1 for n, x in enumerate(hashes) if x in self.entries), default=0)
        for at in breakpoints:
            if 0 <= at < len(hashes):
                self.entries.add(hashes[at])
        return reused


def breakpoints(body: dict, route: str, offset: int) -> list[int]:
    """Where a breakpoint-only cache writes for `body` (indexes of `turns`, after `offset` tool
    definitions): the provider's own at the newest user or tool message, and the marked ones."""
    items = body.get("input" if route == "responses" else "messages") or []
    out = [offset + i for i, m in enumerate(items) if "prompt_cache_breakpoint" in json.dumps(m)]
    newest = [i for i, m in enumerate(items) if isinstance(m, dict) and (
        m.get("role") in ("user", "tool") or str(m.get("type", "")).endswith("_output"))]
    if newest:
        out.append(offset + newest[-1])
    return out


class Tally:
    """Sums over one sequence of requests (engram's upstream bodies, or the agent's own)."""

    def __init__(self):
        self.requests = self.extends = 0
        self.tokens = self.reused = 0
        self.bytes = 0
        self.cost = {"0.1": 0.0, "0.5": 0.0, "0.1+write": 0.0, "breakpoints": 0.0}
        self.cache = BreakpointCache()

    def add_breakpoints(self, tokens: list[int], current: list[str], marks: list[int]) -> None:
        reused = sum(tokens[: self.cache.read_and_write(current, marks)])
        self.cost["breakpoints"] += reused * 0.1 + (sum(tokens) - reused) * 1.25

    def add(self, tokens: list[int], previous: Optional[list[str]], current: list[str], size: int) -> None:
        self.requests += 1
        total = sum(tokens)
        shared = 0
        if previous is not None:
            for a, b in zip(previous, current):
                if a != b:
                    break
                shared += 1
            self.extends += shared == len(previous)
        reused = sum(tokens[:shared])
        self.tokens += total
        self.reused += reused
        self.bytes += size
        new = total - reused
        self.cost["0.1"] += reused * 0.1 + new
        self.cost["0.5"] += reused * 0.5 + new
        self.cost["0.1+write"] += reused * 0.1 + new * 1.25


def part_tokens(harness, body: dict, route: str) -> list[int]:
    """Tokens of each element `turns` lists (as the harness counts text)."""
    return [harness.count_text(t) for t in turns(body, route)]


def observe_run(args, records: list[dict], model: str, harness) -> float:
    """The same requests through `engram serve --observe`, priced as the replay prices them
    (0.1x reads, 1.25x writes, through a registry file): the saving engram reports."""
    upstream = Upstream()
    upstream.count = harness.count_text  # type: ignore[attr-defined]
    upstream.prefix_cache = {}  # type: ignore[attr-defined]
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    work = tempfile.mkdtemp(prefix="engram-bench-observe-")
    models = os.path.join(work, "models.toml")
    with open(models, "w", encoding="utf-8") as f:
        f.write(f'[[model]]\nid = "{model}"\nprovider = "openai"\ncontext_window = {args.window}\n'
                'max_output_tokens = 4096\ntokenizer = "o200k"\nexact_tokenizer = true\n'
                'price = { input = 1.0, output = 0.0, cached_input = 0.1, cache_write = 1.25 }\n')
    session = {k: v for k, v in (("target", args.target), ("threshold", args.threshold)) if v is not None}
    proc, port = start_engram(args.engram_bin, upstream.server_address[1], model, args.window, work,
                              ["--observe", *args.serve_arg], session, models=models)
    try:
        for r, record in enumerate(records):
            messages = [{k: v for k, v in m.items() if k not in ("id", "meta")} for m in record["messages"]]
            for t, m in enumerate(messages):
                if m["role"] == "assistant" and t >= 2:
                    post(port, args.route, request_body(args.route, messages[:t], model), f"{r}:{t}")
        time.sleep(1.0)  # the last replies' usage is read after they end
        saved = rest(port, "GET", "/v1/proxy/savings")
        return saved["saved_share"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        upstream.shutdown()
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engram-bin", default="target/release/engram")
    ap.add_argument("--data", required=True, help="the dev data directory")
    ap.add_argument("--eval-dir", default=devpaths.eval_dir(), help="the evaluation harness's directory (default: $ENGRAM_EVAL_DIR)")
    ap.add_argument("--dataset", default="minisweagent_swebv_gemini3pro")
    ap.add_argument("--runs", type=int, default=10, help="trajectories (the first N)")
    ap.add_argument("--window", type=int, default=16_000, help="the model's window through the proxy")
    ap.add_argument("--route", choices=["chat", "responses", "anthropic"], default="chat")
    ap.add_argument("--via", choices=["proxy", "session"], default="proxy",
                    help="the proxy (default), or an engram session the agent appends to and takes its "
                    "context from (REST; chat messages; the window is the session's)")
    ap.add_argument("--model", help="the model named in the requests (default: gpt-4o, or claude-sonnet-4-5 on anthropic)")
    ap.add_argument("--serve-arg", action="append", default=[], help="an extra argument for engram serve")
    ap.add_argument("--target", type=float, help="the compaction target, as a share of the limit ([session] target)")
    ap.add_argument("--threshold", type=float, help="the compaction threshold ([session] threshold)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--recover", action="store_true",
                    help="for each identifier a request lost, send it again with an upstream that looks the "
                    "identifier up with engram's offered search (one call): recovered when the search's answer "
                    "holds it (chat route)")
    ap.add_argument("--observe", action="store_true",
                    help="also replay through engram serve --observe against an upstream reporting prefix-cache "
                    "usage, and print engram's own estimate of the saving beside the replay's (chat or responses)")
    ap.add_argument("--dump", help="write each request's lost identifiers to this JSONL file (with how many "
                    "messages before the request each was last seen)")
    args = ap.parse_args()
    args.eval_dir = devpaths.require(args.eval_dir, "--eval-dir", devpaths.EVAL_ENV, "the evaluation harness")
    harness = load_harness(os.path.abspath(args.eval_dir))
    model = args.model or ("claude-sonnet-4-5" if args.route == "anthropic" else "gpt-4o")

    records = [json.loads(l) for l in open(os.path.join(args.data, f"{args.dataset}.jsonl"), encoding="utf-8")
               if l.strip()][: args.runs]
    upstream = Upstream()
    upstream.count = harness.count_text  # type: ignore[attr-defined]
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    work = tempfile.mkdtemp(prefix="engram-bench-cache-")
    session = {k: v for k, v in (("target", args.target), ("threshold", args.threshold)) if v is not None}
    proc, port = start_engram(args.engram_bin, upstream.server_address[1], model, args.window, work, args.serve_arg,
                              session)
    engram, plain = Tally(), Tally()
    compactions = rebuilt = task_whole = quiet = quiet_extends = 0
    dump = open(args.dump, "w", encoding="utf-8") if args.dump else None
    ids_held = ids_kept = ids_recovered = 0
    files_held = files_named = 0
    failures_held = failures_named = 0
    started = time.time()
    try:
        for r, record in enumerate(records):
            messages = [{k: v for k, v in m.items() if k not in ("id", "meta")} for m in record["messages"]]
            task = next((text_of(m["content"]) for m in messages if m["role"] == "user"), "")
            previous_sent: Optional[list[str]] = None
            previous_plain: Optional[list[str]] = None
            named_files: set[str] = set()
            files_seen = 0
            replay = SessionReplay(port, f"bench-{r}", model, args.window) if args.via == "session" else None
            for t, m in enumerate(messages):
                if m["role"] != "assistant" or t < 2:
                    continue
                body = request_body(args.route, messages[:t], model)
                key = f"{r}:{t}"
                if replay is not None:
                    sent, compacted = replay.request(messages[:t], model)
                    prefix = "rebuilt" if compacted else None
                else:
                    headers = post(port, args.route, body, key)
                    sent = upstream.bodies.pop(key)
                    # A compaction rewrote the request (older engram: any step but the summary
                    # cache's).
                    prefix = headers.get("x-engram-prefix")
                    compacted = prefix in ("appended", "rebuilt") if prefix is not None else \
                        headers.get("x-engram-steps", "none") not in ("none", "summary-cache")
                compactions += compacted
                rebuilt += prefix == "rebuilt"
                sent_turns, plain_turns = turns(sent, args.route), turns(body, args.route)
                extended_before = engram.extends
                sent_tokens, plain_tokens = part_tokens(harness, sent, args.route), part_tokens(harness, body, args.route)
                engram.add(sent_tokens, previous_sent, sent_turns, len(json.dumps(sent)))
                if args.route != "anthropic":
                    engram.add_breakpoints(sent_tokens, sent_turns, breakpoints(sent, args.route, len(sent.get("tools") or [])))
                    plain.add_breakpoints(plain_tokens, plain_turns, breakpoints(body, args.route, len(body.get("tools") or [])))
                if previous_sent is not None and not compacted:
                    quiet += 1
                    quiet_extends += engram.extends - extended_before
                plain.add(plain_tokens, previous_plain, plain_turns, len(json.dumps(body)))
                previous_sent, previous_plain = sent_turns, plain_turns
                sent_text = json.dumps(sent, ensure_ascii=False)
                if task and json.dumps(task, ensure_ascii=False)[1:-1] in sent_text:
                    task_whole += 1
                # Identifiers as the agent wrote them (arguments decoded), looked for in every
                # text of the request, decoded the same way.
                sent_words = "\n".join(strings(sent))
                history = "\n".join(message_text(x) for x in messages[:t])
                nxt = identifiers(message_text(m))
                held = {i for i in nxt if i in history}
                ids_held += len(held)
                lost = [i for i in held if i not in sent_words]
                ids_kept += len(held) - len(lost)
                if args.recover and args.route == "chat":
                    for n, identifier in enumerate(sorted(lost)):
                        rkey = f"{key}:recover{n}"
                        post(port, args.route, body, rkey, search=identifier)
                        found = upstream.bodies.pop(rkey + "/found", "")
                        ids_recovered += identifier in found
                # The files the agent named in its commands so far, in a request engram rewrote.
                for j in range(files_seen, t):
                    if messages[j]["role"] == "assistant":
                        named_files.update(command_files(messages[j]))
                files_seen = t
                if sent_turns != plain_turns:
                    failing = open_failures(messages[:t])
                    failures_held += len(failing)
                    # Named: the command's first line (up to 60 characters) is in the request.
                    failures_named += sum(1 for c in failing if c.splitlines()[0][:60] in sent_words)
                    files_held += len(named_files)
                    files_named += sum(1 for f in named_files if f in sent_words)
                    if dump:
                        missed = sorted(f for f in named_files if f not in sent_words)
                        if missed:
                            dump.write(json.dumps({"key": key, "missed_files": missed}) + "\n")
                if dump and lost:
                    ago = {i: next(t - j for j in range(t - 1, -1, -1) if i in message_text(messages[j])) for i in lost}
                    dump.write(json.dumps({"key": key, "lost": ago, "held": len(held),
                                           "prefix": prefix}) + "\n")
            print(f"  trajectory {r + 1}/{len(records)}: {engram.requests} requests so far "
                  f"({time.time() - started:.0f} s)", file=sys.stderr)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        upstream.shutdown()
        shutil.rmtree(work, ignore_errors=True)

    figures = {
        "dataset": args.dataset, "route": args.route, "via": args.via, "model": model, "window": args.window, **session,
        "trajectories": len(records), "requests": engram.requests, "compactions": compactions,
        # Of those, the ones that rewrote the summaries too (merged them, or started anew).
        "rebuilt": rebuilt,
        "extends": round(engram.extends / max(1, engram.requests - len(records)), 3),
        "extends_uncompacted": round(plain.extends / max(1, plain.requests - len(records)), 3),
        "extends_when_not_compacting": round(quiet_extends / max(1, quiet), 3),
        "prefix_reuse": round(engram.reused / max(1, engram.tokens), 3),
        "prefix_reuse_uncompacted": round(plain.reused / max(1, plain.tokens), 3),
        "bytes": round(engram.bytes / max(1, plain.bytes), 3),
        "tokens": round(engram.tokens / max(1, plain.tokens), 3),
        "cost_0.1": round(engram.cost["0.1"] / plain.cost["0.1"], 3),
        # The 0.1x bill in parts, over the uncompacted bill: cached reads, and tokens billed new.
        "cost_0.1_reads": round(engram.reused * 0.1 / plain.cost["0.1"], 3),
        "cost_0.1_new": round((engram.tokens - engram.reused) / plain.cost["0.1"], 3),
        "uncompacted_0.1_new": round((plain.tokens - plain.reused) / plain.cost["0.1"], 3),
        "cost_0.5": round(engram.cost["0.5"] / plain.cost["0.5"], 3),
        "cost_0.1_write_1.25": round(engram.cost["0.1+write"] / plain.cost["0.1+write"], 3),
        **({"cost_breakpoints_write_1.25": round(engram.cost["breakpoints"] / plain.cost["breakpoints"], 3)}
           if args.route != "anthropic" else {}),
        "task_whole": round(task_whole / max(1, engram.requests), 3),
        "next_step_identifiers": round(ids_kept / max(1, ids_held), 3),
        # In the requests engram rewrote: the files the agent had named in its commands that
        # the request still names.
        "files_named": round(files_named / files_held, 3) if files_held else None,
        # And of the commands whose latest run failed, the share the request still names.
        "open_failures_named": round(failures_named / failures_held, 3) if failures_held else None,
        # With --recover: the identifiers in the request or brought back by one search call.
        **({"recoverable_identifiers": round((ids_kept + ids_recovered) / max(1, ids_held), 3)}
           if args.recover else {}),
    }
    if args.observe and args.route != "anthropic":
        figures["replay_saved_share"] = round(1 - engram.cost["0.1+write"] / plain.cost["0.1+write"], 3)
        figures["observe_saved_share"] = observe_run(args, records, model, harness)
    if args.json:
        print(json.dumps(figures))
    else:
        for k, v in figures.items():
            print(f"{k:>28}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
