#!/usr/bin/env python3
"""Builds testdata/claude/requests.jsonl: Anthropic Messages requests paired with the
`input_tokens` Anthropic billed for them, from the VCR cassettes of a pydantic-ai checkout
(MIT; https://github.com/pydantic/pydantic-ai, tests/**/cassettes). Claude's tokenizer is not
public; these recorded exchanges are the real figures the estimate is measured against.

    python3 scripts/claude_counts_fixture.py GIT_DIR > testdata/claude/requests.jsonl

GIT_DIR is a clone (or bare repository) of pydantic-ai; its HEAD is read. Kept: requests to
/v1/messages (and /v1/messages/count_tokens) whose reply holds `usage.input_tokens`, without
server-side or deferred tools (web search, code execution, MCP servers, tool search: Anthropic
adds their hidden prompts), turns of roles other than user and assistant, images or documents,
of at most 16 KB; each distinct request once. The billed total is input_tokens
plus the cache's reads and writes.
"""

from __future__ import annotations

import json
import subprocess
import sys

import yaml  # PyYAML

MAX_BYTES = 16_000  # a small fixture: the larger requests are left out
SERVER_TOOLS = ("web_search", "code_execution", "web_fetch", "mcp", "memory", "bash_", "text_editor",
                "computer", "advisor", "tool_search")


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=True).stdout


def main() -> int:
    repo = sys.argv[1]
    commit = git(repo, "rev-parse", "HEAD").strip()
    seen: set[str] = set()
    rows = []
    for path in git(repo, "ls-tree", "-r", "--name-only", "HEAD").splitlines():
        if "cassettes" not in path or not path.endswith(".yaml"):
            continue
        try:
            text = git(repo, "show", f"HEAD:{path}")
        except subprocess.CalledProcessError:
            continue  # a file the snapshot does not hold (a large one)
        if "api.anthropic.com" not in text:
            continue
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError:
            continue
        for it in (doc or {}).get("interactions", []):
            req, resp = it.get("request", {}), it.get("response", {})
            uri = req.get("uri", "")
            body, reply = req.get("parsed_body"), resp.get("parsed_body")
            if "api.anthropic.com/v1/messages" not in uri or not isinstance(body, dict) or not isinstance(reply, dict):
                continue
            # A count_tokens reply is {"input_tokens": N}; a message's is in its usage.
            usage = reply if "/count_tokens" in uri else reply.get("usage") or {}
            if not isinstance(usage.get("input_tokens"), int):
                continue
            tools = body.get("tools") or []
            dumped = json.dumps(body, sort_keys=True)
            if body.get("mcp_servers") or any(any(s in str(t.get("type", "")) for s in SERVER_TOOLS) for t in tools):
                continue
            if '"image"' in dumped or '"document"' in dumped or dumped in seen or len(dumped) > MAX_BYTES:
                continue
            # Deferred tools (tool search) and turns of other roles are features whose hidden
            # parts Anthropic bills too.
            if '"defer_loading"' in dumped or any(m.get("role") not in ("user", "assistant")
                                                  for m in body.get("messages") or []):
                continue
            seen.add(dumped)
            billed = usage["input_tokens"] + (usage.get("cache_creation_input_tokens") or 0) + \
                (usage.get("cache_read_input_tokens") or 0)
            request = {k: body[k] for k in ("model", "system", "messages", "tools", "tool_choice", "thinking")
                       if k in body}
            rows.append({"source": f"pydantic/pydantic-ai@{commit[:12]}:{path}",
                         "count_tokens": "/count_tokens" in uri, "input_tokens": billed, "request": request})
    for row in rows:
        print(json.dumps(row, ensure_ascii=False))
    print(f"{len(rows)} requests", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
