"""The coding agents people run, installed as a user installs them, through `engram serve` in
front of a scripted model that records every body it receives (scripted_model.py): Claude Code
(npm @anthropic-ai/claude-code, its default model), Codex CLI (npm @openai/codex, its built-in
OpenAI provider pointed at engram) and mini-swe-agent (PyPI, Chat Completions through litellm).

Each runs a shell task whose outputs outgrow the window, with the model calling engram's
history search at some steps. Asserted: the agent finishes; requests were compacted; every
upstream request is one its API takes (tool calls with their results); a request engram said
extends the previous one does, byte for byte; no request over the window; no engram tool and no
sum of rounds reaches the agent.

The agents come from ENGRAM_AGENTS_DIR (.ci/run installs them there: `npm install --prefix DIR
@anthropic-ai/claude-code @openai/codex` and `pip install --target DIR/py mini-swe-agent`).
Without them each test says SKIPPED (agents: ...) and is counted; in CI a missing agent fails."""

from __future__ import annotations

import glob
import json
import os
import pathlib
import re
import subprocess
import tempfile
import urllib.request

import pytest

from scripted_model import Model, Script
from test_proxy import start_engram

WINDOW = 60_000


def agents_dir() -> pathlib.Path | None:
    path = os.environ.get("ENGRAM_AGENTS_DIR")
    return pathlib.Path(path) if path and pathlib.Path(path).is_dir() else None


def need(what: str, pattern: str) -> str:
    """The path of an installed agent's file, or SKIPPED (a failure in CI)."""
    base = agents_dir()
    found = sorted(glob.glob(str(base / pattern))) if base else []
    if not found:
        message = f"agents: {what} is not installed (ENGRAM_AGENTS_DIR; .ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found[-1]


def version(path: str, *args: str) -> str:
    out = subprocess.run([path, *args, "--version"], capture_output=True, text=True, timeout=60)
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else "?"


def proxied(base: str) -> list[dict]:
    """engram's record of the requests it proxied, oldest first."""
    with urllib.request.urlopen(f"{base}/v1/proxy/requests", timeout=30) as r:
        return list(reversed(json.loads(r.read())["requests"]))


class Run:
    """A scripted model and engram in front of it, for one agent's run."""

    def __init__(self, route_flag: str, model: str, script: Script):
        self.model = Model(0, script)
        upstream = self.model.root + ("" if route_flag == "--anthropic-upstream" else "/v1")
        self.proc, self.base = start_engram(route_flag, upstream, "--model-window", f"{model}={WINDOW}",
                                            "--recall-tools", "always", "--inspect-proxy-bodies", "0")
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="engram-agent-"))
        (self.dir / "home").mkdir()
        (self.dir / "work").mkdir()

    def env(self, **extra: str) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "CODEX_"))}
        env.update(HOME=str(self.dir / "home"), **extra)
        return env

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.model.close()


def is_follow_up(body: dict) -> bool:
    """A request engram sent in a recall round: the model's call of engram's tool answered."""
    return "engram_search_" in json.dumps(body.get("messages") or body.get("input") or [])[-4000:] and any(
        "engram_search_history" in json.dumps(t) for t in body.get("tools") or [])


def without_marks(value):
    """A value without its cache breakpoints: an agent moves its breakpoint to the newest
    message each request, which the provider's cache does not read as a change of the prefix."""
    if isinstance(value, dict):
        return {k: without_marks(v) for k, v in value.items() if k not in ("cache_control", "prompt_cache_breakpoint")}
    if isinstance(value, list):
        return [without_marks(v) for v in value]
    return value


def conversation_of(body: dict) -> list:
    return without_marks(body.get("messages") or body.get("input") or [])


def check_run(run: Run, valid) -> list[dict]:
    """What every agent's run must show; the requests engram proxied."""
    received = [r["body"] for r in run.model.received if r["path"].split("?")[0].endswith(("/messages", "/responses", "/chat/completions"))]
    assert received, "the model was asked"
    for body in received:
        valid(body)
    requests = proxied(run.base)
    compacted = [r for r in requests if r["steps"] not in ("none", "extend", "")]
    assert compacted, f"no request was compacted: {[(r['tokens_before'], r['steps']) for r in requests]}"
    for r in requests:
        assert r["tokens_after"] <= WINDOW, f"sent over the window: {r}"
        assert not r.get("note", "").startswith("refused"), r
        assert r["note"] == "" or "forwarded unchanged" not in r["note"], f"uncompacted: {r['note']}"
    # Each request engram extended starts with the one sent before it, byte for byte.
    base = [b for b in received if not is_follow_up(b)]
    assert len(base) == len(requests), (len(base), len(requests))
    for i, (entry, body) in enumerate(zip(requests, base)):
        if entry["cache"] == "extended":
            a, b = conversation_of(base[i - 1]), conversation_of(body)
            assert len(b) > len(a) and b[: len(a)] == a, f"request {i} does not extend request {i - 1}"
    assert any(r["cache"] == "extended" for r in requests[requests.index(compacted[0]):]), "extended after a compaction"
    return requests


def anthropic_valid(body: dict) -> None:
    messages = body.get("messages") or []
    assert messages and messages[0]["role"] == "user", "starts with a user turn"
    marks = json.dumps(body).count('"cache_control"')
    assert marks <= 4, f"{marks} cache breakpoints"
    for i, m in enumerate(messages):
        if m["role"] == "system":
            assert i > 0 and messages[i - 1]["role"] != "assistant", f"message {i}: a system message after an assistant turn"
        blocks = m["content"] if isinstance(m["content"], list) else []
        calls = [b["id"] for b in blocks if b.get("type") == "tool_use"]
        if calls:
            after = messages[i + 1]["content"] if i + 1 < len(messages) else []
            answered = {b.get("tool_use_id") for b in after if isinstance(b, dict) and b.get("type") == "tool_result"}
            assert set(calls) <= answered, f"message {i}: calls {calls} without their results"


def test_claude_code_with_its_default_model_is_compacted():
    claude = need("Claude Code", "node_modules/@anthropic-ai/claude-code-*/claude")
    run = Run("--anthropic-upstream", "claude-opus-5-5", Script(steps=14, recall_at=(8, 12)))
    try:
        out = subprocess.run(
            [claude, "-p", "Read the build log step by step.", "--allowedTools", "Bash",
             "--output-format", "stream-json", "--verbose"],
            cwd=run.dir / "work", env=run.env(ANTHROPIC_BASE_URL=run.base, ANTHROPIC_API_KEY="sk-ant-test"),
            capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        events = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
        result = next(e for e in events if e.get("type") == "result")
        assert result["result"].startswith("DONE"), result
        # The agent never saw engram's tools, nor a usage summed over engram's rounds.
        seen = json.dumps([e for e in events if e.get("type") == "assistant"])
        assert "engram_" not in seen, "an engram tool reached Claude Code"
        for e in events:
            usage = (e.get("message") or {}).get("usage") if e.get("type") == "assistant" else None
            if usage:
                assert usage.get("input_tokens", 0) <= WINDOW, usage
        requests = check_run(run, anthropic_valid)
        models = {r["model"] for r in requests}
        assert "claude-opus-5-5" in models, models
        print(f"Claude Code {version(claude)}: {len(requests)} requests, "
              f"{sum(1 for r in requests if r['steps'] not in ('none', 'extend'))} compacted")
    finally:
        run.close()


def responses_valid(body: dict) -> None:
    items = [i for i in body.get("input") or [] if isinstance(i, dict)]
    calls = {i["call_id"] for i in items if i.get("type") in ("function_call", "custom_tool_call")}
    outputs = {i["call_id"] for i in items if i.get("type") in ("function_call_output", "custom_tool_call_output")}
    assert outputs <= calls, f"outputs without their calls: {outputs - calls}"
    assert calls <= outputs, f"calls without their outputs: {calls - outputs}"


def run_codex(codex: str, run: Run, config: str = "") -> subprocess.CompletedProcess:
    """Codex's `exec` on the task, its built-in provider pointed at engram (`config`: more lines
    of its config.toml)."""
    codex_home = run.dir / "home" / ".codex"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(f'openai_base_url = "{run.base}/v1"\n{config}')
    out = subprocess.run(
        [codex, "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
         "Read the build log step by step."],
        cwd=run.dir / "work", env=run.env(OPENAI_API_KEY="sk-test"),
        capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return out


def test_codex_with_its_built_in_provider_is_compacted():
    codex = need("Codex CLI", "node_modules/@openai/codex-linux-*/vendor/*/bin/codex")
    run = Run("--upstream", "gpt-6.2-sol", Script(steps=14, recall_at=(12,)))
    try:
        out = run_codex(codex, run)
        assert "DONE" in out.stdout, out.stdout[-2000:]
        # Codex opens the Responses API's WebSocket first. engram's 426 makes it fall back to HTTP
        # at once: one failed attempt in its log and no reconnecting. An upstream that answers
        # 404 or 405 instead costs seven attempts and four reconnects, about 6 s (measured with
        # Codex 0.171.0 pointed straight at the scripted model).
        attempts = out.stderr.count("failed to connect to Responses WebSocket")
        reconnects = len(re.findall(r"(?i)reconnecting", out.stderr))
        assert (attempts, reconnects) == (1, 0), (attempts, reconnects, out.stderr[-2000:])
        assert "engram_" not in out.stdout, "an engram tool reached Codex"
        requests = check_run(run, responses_valid)
        print(f"Codex {version(codex)}: {len(requests)} requests")
    finally:
        run.close()


def test_codex_compacting_on_its_own_through_an_upstream_without_compaction():
    """Codex compacts by itself at its own limit (`model_auto_compact_token_limit`), below the
    window engram compacts at: its built-in provider asks with a trigger item at the end of a
    request, which an upstream that is not OpenAI (here the scripted model) answers as a turn.
    engram answers it with one compaction item, and Codex goes on to the end."""
    codex = need("Codex CLI", "node_modules/@openai/codex-linux-*/vendor/*/bin/codex")
    run = Run("--upstream", "gpt-6.2-sol", Script(steps=14, recall_at=()))
    try:
        out = run_codex(codex, run, "model_auto_compact_token_limit = 30000\n")
        assert "DONE" in out.stdout, out.stdout[-2000:]
        bodies = [r["body"] for r in run.model.received if r["path"].split("?")[0].endswith("/responses")]
        asked = [b for b in bodies if (b.get("input") or [{}])[-1].get("type") == "compaction_trigger"]
        assert asked, "Codex never asked for a compaction (was its limit reached?)"
        answered = [r for r in proxied(run.base) if "engram compacted" in r["note"]]
        assert len(answered) == len(asked), (len(answered), len(asked))
        for r in answered:
            assert r["tokens_after"] < r["tokens_before"], r
        after = bodies[bodies.index(asked[0]) + 1:]
        assert after, "Codex went on after its compaction"
        for body in bodies:
            responses_valid(body)
            assert "engram-compaction-v1:" not in json.dumps(body), "the upstream got engram's item"
        # What the item stands for reaches the model: the newest step it ran before compacting.
        steps = [int(n) for n in re.findall(r"call_step(\d+)", json.dumps(asked[0]))]
        assert f"call_step{max(steps)}" in json.dumps(after[0]), "the newest step, kept through the item"
        print(f"Codex {version(codex)}: {len(asked)} compactions of its own answered by engram")
    finally:
        run.close()


def test_codex_compacting_on_its_own_with_an_upstream_that_compacts():
    """Codex's own compaction through engram in front of an upstream that compacts as OpenAI does
    (one opaque compaction item): the trigger reaches the upstream, its item reaches Codex, and
    every later request carries the item back to the upstream as it came."""
    codex = need("Codex CLI", "node_modules/@openai/codex-linux-*/vendor/*/bin/codex")
    run = Run("--upstream", "gpt-6.2-sol", Script(steps=20, recall_at=(), compacts=True))
    try:
        out = run_codex(codex, run, "model_auto_compact_token_limit = 35000\n")
        assert "DONE" in out.stdout, out.stdout[-2000:]
        bodies = [r["body"] for r in run.model.received if r["path"].split("?")[0].endswith("/responses")]
        asked = [i for i, b in enumerate(bodies) if (b.get("input") or [{}])[-1].get("type") == "compaction_trigger"]
        assert asked, "Codex never asked for a compaction (was its limit reached?)"
        assert not [r for r in proxied(run.base) if "engram compacted" in r["note"]], "the upstream answered"
        for body in bodies:
            responses_valid(body)
        # Each request after a compaction carries the upstream's item, as it came.
        after = bodies[asked[0] + 1]
        items = [i for i in after["input"] if i.get("type") == "compaction"]
        assert len(items) == 1 and items[0]["encrypted_content"].startswith("gAAAA-scripted"), items
        print(f"Codex {version(codex)}: {len(asked)} compactions by the upstream, through engram")
    finally:
        run.close()


def chat_valid(body: dict) -> None:
    messages = body.get("messages") or []
    for i, m in enumerate(messages):
        for call in m.get("tool_calls") or []:
            answered = any(n.get("role") == "tool" and n.get("tool_call_id") == call["id"] for n in messages[i + 1:])
            assert answered, f"message {i}: call {call['id']} without its result"


def test_mini_swe_agent_over_chat_completions_is_compacted():
    need("mini-swe-agent", "py/minisweagent/__init__.py")
    run = Run("--upstream", "gpt-4o", Script(steps=14, recall_at=(8, 12)))
    try:
        trajectory = run.dir / "trajectory.json"
        env = run.env(OPENAI_API_KEY="sk-test", OPENAI_BASE_URL=f"{run.base}/v1", MSWEA_CONFIGURED="true",
                      PYTHONPATH=str(agents_dir() / "py"))
        out = subprocess.run(
            ["python3", "-m", "minisweagent.run.mini", "-m", "openai/gpt-4o", "-t", "Read the build log step by step.",
             "--yolo", "--exit-immediately", "-l", "0", "-o", str(trajectory)],
            cwd=run.dir / "work", env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        saved = json.loads(trajectory.read_text())
        assert saved["info"]["exit_status"] == "Submitted", saved["info"]
        assert "engram_" not in json.dumps(saved["messages"]), "an engram tool reached mini-swe-agent"
        check_run(run, chat_valid)
    finally:
        run.close()
