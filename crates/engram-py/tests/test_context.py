"""Budgeted assembly natively and through the seed-compatible layer."""

from __future__ import annotations

import pytest

import engram
from engram.compat import ContextManager, TokenBudget


def history(n: int, size: int = 200) -> list[dict]:
    """`n` alternating messages of `size` characters of varied words."""
    def text(i: int) -> str:
        words = " ".join(f"w{(i * 7919 + j * 104729) % 100000}" for j in range(size))
        return (f"message {i} " + words)[:size]
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": text(i)} for i in range(n)]


def test_token_budget_has_the_seed_defaults():
    b = TokenBudget()
    assert (b.total, b.system_reserve, b.tool_definitions_reserve) == (30_000, 2_000, 2_000)
    assert (b.memory_fraction, b.learnings_fraction, b.fresh_tail_count) == (0.15, 0.05, 16)
    assert (b.available, b.memory_budget, b.learnings_budget, b.history_budget) == (26_000, 3_900, 1_300, 20_800)


def test_native_assembly_enriches_and_never_exceeds_the_budget():
    out = engram.build_context(
        "You are helpful.", "What next?", history(40),
        memory_results=["User previously asked about deploying to Kubernetes."],
        learnings=[f"lesson {i}" for i in range(7)],
        summaries=[{"depth": 2, "messages": 45, "from": "2024-01-15", "to": "2024-01-16",
                    "text": "The user worked on a Kubernetes deployment."}],
        budget={"total": 3_000, "system_reserve": 100, "tool_definitions_reserve": 100},
        model="gpt-4o",
    )
    system = out.messages[0]["content"]
    assert "## Relevant Memory\nUser previously asked about deploying to Kubernetes." in system
    assert "## Past Learnings\n- lesson 0" in system and "lesson 5" not in system
    assert out.messages[1]["content"].startswith("[Summary: depth 2, 45 messages, covers 2024-01-15 to 2024-01-16]")
    assert out.messages[-1] == {"role": "user", "content": "What next?"}
    assert out.report["tokens"] <= 3_000
    assert engram.count_tokens(out.messages, model="gpt-4o") == out.report["tokens"]
    # The tail gives way rather than the budget.
    tight = engram.build_context("s", "q", history(30, 400), budget=1_000, model="gpt-4o")
    assert tight.report["tokens"] <= 1_000 and tight.report["fresh_tail_dropped"] > 0


def test_the_seed_layer_reproduces_the_seeds_example():
    # The classic example: 30,000 tokens, 40 messages; the fresh tail (25-40) always, then the
    # evictable prefix newest first until the history budget is spent.
    mgr = ContextManager()
    msgs = history(40, 3_000)  # ~750 tokens each at 4 characters per token
    system, messages = mgr.build_messages("You are helpful.", "What next?", msgs)
    assert system == "You are helpful."
    assert messages[-1] == {"role": "user", "content": "What next?"}
    kept = messages[:-1]
    assert kept == msgs[-len(kept):], "a suffix of the history, newest kept"
    assert 16 < len(kept) < 40, len(kept)
    assert mgr.last_report["fresh_tail_dropped"] == 0


def test_the_seed_layer_keeps_the_fresh_tail_regardless_of_budget():
    mgr = ContextManager(TokenBudget(total=2_000, system_reserve=0, tool_definitions_reserve=0,
                                     fresh_tail_count=16))
    msgs = history(30, 1_000)  # the tail alone is ~4,000 tokens
    system, messages = mgr.build_messages("sys", None, msgs, memory_results=["a memory"],
                                          learnings=["a lesson"])
    assert messages == msgs[-16:], "the whole tail, nothing older"
    assert mgr.last_report["tokens"] > 2_000
    assert "## Relevant Memory\na memory" in system and "## Past Learnings\n- a lesson" in system
    # The native API refuses to exceed the same budget.
    native = engram.build_context("sys", None, msgs, budget={"total": 2_000, "system_reserve": 0,
                                                             "tool_definitions_reserve": 0})
    assert native.report["tokens"] <= 2_000


def test_assembly_errors_name_the_part():
    with pytest.raises(engram.EngramError, match="history: .*message 0, field `role`"):
        engram.build_context("s", "q", [{"role": "robot", "content": "x"}])
    with pytest.raises(engram.EngramError, match="need"):
        engram.build_context("s" * 10_000, "q", [], budget=100, model="gpt-4o")
