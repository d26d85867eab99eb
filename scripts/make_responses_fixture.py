"""Writes testdata/responses/minisweagent_items.json: the first mini-SWE-agent trajectory of the
test fixtures as an OpenAI Responses request, the way Codex and the Agents SDK send one.

    python3 scripts/make_responses_fixture.py

The system prompt becomes `instructions`; each user turn an input message; each assistant turn a
reasoning item (its reasoning text, when the record kept it, as the summary; a stand-in for the
encrypted content), its text as an output message and its tool calls as `function_call`s; each
tool result a `function_call_output`. Same licence as its source (testdata/dev/licenses).
"""

from __future__ import annotations

import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOURCE = ROOT / "testdata" / "dev" / "minisweagent_swebv_gemini3pro.jsonl"
OUT = ROOT / "testdata" / "responses" / "minisweagent_items.json"


def items(messages: list[dict]) -> tuple[str, list[dict]]:
    instructions = messages[0]["content"]
    out: list[dict] = []
    for m in messages[1:]:
        text = m.get("content") or ""
        if m["role"] == "assistant":
            i = len(out)
            meta = m.get("meta") if isinstance(m.get("meta"), dict) else {}
            reasoning = meta.get("reasoning") if isinstance(meta.get("reasoning"), str) else ""
            out.append({"type": "reasoning", "id": f"rs_{i}",
                        "summary": [{"type": "summary_text", "text": reasoning[:400]}] if reasoning else [],
                        "encrypted_content": f"gAAAAB{i:08d}" + "A" * 64})
            if text:
                out.append({"type": "message", "id": f"msg_{i}", "role": "assistant", "status": "completed",
                            "content": [{"type": "output_text", "text": text, "annotations": []}]})
            for call in m.get("tool_calls") or []:
                out.append({"type": "function_call", "id": f"fc_{call['id']}", "call_id": call["id"],
                            "name": call["function"]["name"], "arguments": call["function"]["arguments"],
                            "status": "completed"})
        elif m["role"] == "tool":
            out.append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": text})
        else:
            out.append({"type": "message", "role": m["role"], "content": [{"type": "input_text", "text": text}]})
    return instructions, out


def main() -> None:
    record = json.loads(SOURCE.read_text(encoding="utf-8").splitlines()[0])
    instructions, input_items = items(record["messages"])
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"model": "gpt-4o", "instructions": instructions, "input": input_items},
                              indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{OUT.relative_to(ROOT)}: {len(input_items)} items from {len(record['messages'])} messages")


if __name__ == "__main__":
    main()
