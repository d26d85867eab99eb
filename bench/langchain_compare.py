"""engram's LangChain middleware against LangChain's own SummarizationMiddleware, side by side on
one real mini-SWE-agent run (the longest of testdata/dev, 286 messages), turn by turn as an agent
grows its state: what the model would get before each assistant turn, in a 16,000-token window.

    python3 bench/langchain_compare.py [--window 16000]

- engram: ``EngramMiddleware.view`` (the state's new messages appended to a session; its view,
  compacted at 80% of the window down to 60%, model-free).
- LangChain: ``SummarizationMiddleware.before_model`` applied to the state as the agent would (its
  update replaces the state's messages), triggered at the same 80% of the window by LangChain's
  approximate count, keeping its default 20 messages, with LangChain's fake chat model as the
  summarizer (it answers one fixed summary, so the kept messages are all that the summary adds).

Context recall: of the identifiers the next assistant turn uses (file paths, dotted and
snake_case names, CamelCase words) that appeared earlier in the run, the share present in the
context. Averaged over the turns after the history first outgrew the window. Time: per turn.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import statistics
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:[./][A-Za-z0-9_]+)+|[a-z]+_[a-z0-9_]+|[A-Z][a-z]+[A-Z][A-Za-z]+")


def text_of(message) -> str:
    parts = [message.content if isinstance(message.content, str) else json.dumps(message.content)]
    for call in getattr(message, "tool_calls", None) or []:
        parts.append(json.dumps(call.get("args")))
    return "\n".join(parts)


def main() -> None:
    import engram
    from engram.integrations.langchain import EngramMiddleware
    from engram.langchain import from_openai
    from langchain.agents.middleware import SummarizationMiddleware
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, RemoveMessage

    ap = argparse.ArgumentParser()
    ap.add_argument("--window", type=int, default=16_000)
    args = ap.parse_args()
    records = [json.loads(l) for l in open(ROOT / "testdata/dev/minisweagent_swebv_gemini3pro.jsonl") if l.strip()]
    run = max(records, key=lambda r: len(r["messages"]))["messages"]
    run = [{k: v for k, v in m.items() if k not in ("id", "meta")} for m in run]
    system, history = run[0]["content"], from_openai(run[1:])

    ours = EngramMiddleware(model="gpt-4o", store=engram.Store(str(pathlib.Path(tempfile.mkdtemp()) / "b.db")),
                            window=args.window)
    summary = iter(lambda: AIMessage("Summary: the agent is fixing a bug in the repository."), None)
    theirs = SummarizationMiddleware(GenericFakeChatModel(messages=summary),
                                     trigger=("tokens", int(args.window * 0.8)))
    state: list = []
    rows = []
    outgrown = False
    for k in range(1, len(history)):
        if history[k].type != "ai":
            continue
        # The agent's state now: everything before the next assistant turn.
        state = state + list(history[rows[-1]["end"] if rows else 0:k])
        started = time.perf_counter()
        view = ours.view(history[:k], system)
        t_ours = time.perf_counter() - started
        started = time.perf_counter()
        update = theirs.before_model({"messages": state}, None)
        if update:
            kept = [m for m in update["messages"] if not isinstance(m, RemoveMessage)]
            state = kept
        t_theirs = time.perf_counter() - started
        outgrown |= engram.count_tokens(history[:k], model="gpt-4o") > args.window
        seen = "\n".join(text_of(m) for m in history[:k])
        wanted = {w for w in IDENT.findall(text_of(history[k])) if w in seen}
        recall = lambda ctx: sum(w in ctx for w in wanted) / len(wanted) if wanted else None  # noqa: E731
        rows.append({"end": k, "outgrown": outgrown,
                     "ours": recall(system + "\n" + "\n".join(text_of(m) for m in view)),
                     "theirs": recall(system + "\n" + "\n".join(text_of(m) for m in state)),
                     "t_ours": t_ours, "t_theirs": t_theirs,
                     "tok_ours": engram.count_tokens(view, model="gpt-4o"),
                     "tok_theirs": engram.count_tokens(state, model="gpt-4o")})
    late = [r for r in rows if r["outgrown"] and r["ours"] is not None]
    print(f"{len(rows)} assistant turns, {len(late)} after the history outgrew the {args.window:,}-token window "
          f"(with identifiers to recall)")
    print("| | context recall of the next turn's identifiers | median time per turn | largest context |")
    print("|---|---:|---:|---:|")
    for name, key in (("engram (EngramMiddleware)", "ours"), ("LangChain SummarizationMiddleware", "theirs")):
        print(f"| {name} | {statistics.mean(r[key] for r in late):.3f} | "
              f"{statistics.median(r['t_' + key] for r in rows) * 1e3:.2f} ms | "
              f"{max(r['tok_' + key] for r in rows):,} tokens |")


if __name__ == "__main__":
    main()
