"""An agent loop with the official `openai` SDK and engram managing its context.

engram keeps the session (every message, forever), hands the model a view that fits its window
(compacting at 80% of it, tool calls never split from their results), inserts seed 004's status
update when one is due, and runs the model's own `compact_history` tool calls.

    python examples/agent_loop.py --base-url http://127.0.0.1:8080/v1 --model gpt-4o "Fix the bug"

Any OpenAI-compatible server works (OpenAI, llama.cpp's llama-server, vLLM, Ollama's /v1).
"""

from __future__ import annotations

import argparse
import json
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
            # Seed 004: the status update goes in before the next model call (not stored).
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
    parser.add_argument("--base-url", default=None, help="the server's base URL, /v1 included")
    parser.add_argument("--model", default="gpt-4o")
    parser.add_argument("--window", type=int, default=None, help="override the model's window")
    parser.add_argument("--db", default=None, help="engram's database (default: the user's data dir)")
    args = parser.parse_args()
    import openai

    client = openai.OpenAI(base_url=args.base_url)
    answer, session = run(client, engram.Store(args.db), args.task, model=args.model, window=args.window)
    print(answer)
    print(session.status()["message"]["content"])


if __name__ == "__main__":
    main()
