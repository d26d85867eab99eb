"""An agent loop with the official `openai` SDK and engram managing its context.

engram keeps the session (every message, forever), hands the model a view that fits its window
(compacting at 80% of it, tool calls never split from their results), inserts a status update (tokens
used of the window, cost so far) when one is due, and runs the model's own `compact_history` tool calls.

    python examples/agent_loop.py --base-url http://127.0.0.1:8080/v1 --model smollm2 "Fix the bug"
    python examples/agent_loop.py --model gpt-4o "Fix the bug"     # OpenAI, with OPENAI_API_KEY

Any OpenAI-compatible server works (OpenAI, llama.cpp's llama-server, vLLM, Ollama's /v1). A local
server needs no key: without --api-key or OPENAI_API_KEY none is sent.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
from typing import Callable, Optional

import engram

READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a text file.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
}


def read_file(arguments: dict) -> str:
    try:
        return pathlib.Path(arguments["path"]).read_text(errors="replace")[:20_000]
    except (OSError, KeyError) as e:
        return f"error: {e}"


def run(
    client,
    store: engram.Store,
    task: str,
    *,
    model: str,
    window: Optional[int] = None,
    system: str = "You are a careful coding agent. Use the tools; answer when done.",
    tools: Optional[dict[str, tuple[dict, Callable[[dict], str]]]] = None,
    max_turns: int = 30,
    on_request: Optional[Callable[[list], None]] = None,
) -> tuple[str, engram.Session]:
    """Runs the loop until the model answers without a tool call; returns the answer and the
    session."""
    tools = tools if tools is not None else {"read_file": (READ_FILE, read_file)}
    definitions = [d for d, _ in tools.values()] + [engram.compact_history_tool()]
    session = store.new_session(model, window=window)
    session.append({"role": "system", "content": system}, {"role": "user", "content": task})
    status: Optional[dict] = None
    for _ in range(max_turns):
        messages = session.messages()
        if status is not None:
            # The status update goes in before the next model call (it is not stored).
            messages.append(status)
            status = None
        if on_request is not None:
            on_request(messages)
        reply = client.chat.completions.create(model=model, messages=messages, tools=definitions)
        message = reply.choices[0].message
        appended = session.append(message.model_dump(exclude_none=True, exclude={"refusal", "annotations", "audio", "function_call"}))
        status = appended.get("status", status)
        if not message.tool_calls:
            return message.content or "", session
        results = []
        for call in message.tool_calls:
            answer = session.handle_tool_call(call)
            if answer is None:
                spec = tools.get(call.function.name)
                content = (spec[1](json.loads(call.function.arguments or "{}")) if spec
                           else f"error: no tool named {call.function.name}")
                answer = {"role": "tool", "tool_call_id": call.id, "content": content}
            results.append(answer)
        appended = session.append(results)
        status = appended.get("status", status)
    raise RuntimeError(f"no answer after {max_turns} turns")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task")
    parser.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL"),
                        help="the server's base URL, /v1 included (default: OPENAI_BASE_URL, else OpenAI)")
    parser.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"),
                        help="the server's API key (default: OPENAI_API_KEY; a local server needs none)")
    parser.add_argument("--model", default="gpt-4o")
    parser.add_argument("--window", type=int, default=None, help="override the model's window")
    parser.add_argument("--db", default=None, help="engram's database (default: the user's data dir)")
    args = parser.parse_args()
    import openai

    if not args.api_key and not args.base_url:
        parser.error("OpenAI needs an API key: --api-key or OPENAI_API_KEY (or --base-url for a local server)")
    # The SDK insists on a key; a local server ignores it, so none of the user's is invented.
    client = openai.OpenAI(base_url=args.base_url, api_key=args.api_key or "no-key")
    answer, session = run(client, engram.Store(args.db), args.task, model=args.model, window=args.window)
    print(answer)
    print(session.status()["message"]["content"])


if __name__ == "__main__":
    main()
