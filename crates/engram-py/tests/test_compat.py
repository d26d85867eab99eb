"""The classic APIs (MemoryConsolidator, ContextManager), as their reference implementation
behaves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engram.compat import ContextManager, MemoryConsolidator, TokenBudget


def test_defaults_and_the_trigger():
    mc = MemoryConsolidator()
    assert (mc.threshold_pct, mc.max_tokens) == (0.8, 30_000)
    assert mc.should_consolidate(current_tokens=25_000)
    assert mc.should_consolidate(24_000)
    assert not mc.should_consolidate(23_999)
    with pytest.raises(ValueError):
        MemoryConsolidator(threshold_pct=1.5)


def test_estimate_is_characters_over_four():
    msgs = [{"role": "user", "content": "x" * 40}, {"role": "assistant", "content": "y" * 41}]
    assert MemoryConsolidator.estimate_tokens(msgs) == 20


def conversation() -> list[dict]:
    return [
        {"role": "system", "content": "You deploy apps."},
        {"role": "user", "content": "Check the nginx config before restarting"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "shell_exec", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "Exit code 0. Deployed 47 files to /opt/app"},
        {"role": "assistant", "content": "Long prose. " * 30 + "\ndecided: use blue-green deployment strategy"},
        {"role": "assistant", "content": "created: backup at /tmp/app-backup-20260317.tar.gz"},
        {"role": "user", "content": "Check the nginx config before restarting"},
        {"role": "user", "content": "now restart"},
        {"role": "assistant", "content": "restarting"},
        {"role": "user", "content": "status?"},
        {"role": "assistant", "content": "all green"},
    ]


def test_key_facts_follow_the_seeds_rules():
    facts = MemoryConsolidator.extract_key_facts(conversation()[1:6])
    assert "Check the nginx config before restarting" in facts
    assert "[shell_exec] Exit code 0. Deployed 47 files to /opt/app" in facts
    assert "decided: use blue-green deployment strategy" in facts
    assert "created: backup at /tmp/app-backup-20260317.tar.gz" in facts
    assert not any(f.startswith("Long prose") for f in facts), "long assistant prose is skipped"
    long_result = [{"role": "tool", "tool_call_id": "x", "content": "z" * 500}]
    assert all(len(f) <= 220 for f in MemoryConsolidator.extract_key_facts(long_result))


def test_consolidate_keeps_the_last_four_and_one_summary():
    mc = MemoryConsolidator()
    msgs = conversation()
    out, summary = mc.consolidate(msgs, "You deploy apps.")
    assert summary.startswith("[Session context consolidated]\n\n- ")
    assert out[0] == msgs[0], "the system prompt stays in front"
    assert out[1]["content"] == summary
    assert out[2:] == msgs[-4:]
    assert summary.count("- Check the nginx config before restarting") == 1, "facts deduplicated"
    assert "- decided: use blue-green deployment strategy" in summary
    short = msgs[:4]
    assert mc.consolidate(short, "") == (short, "")


# Side by side with the classic reference implementation (Missy's ContextManager and
# MemoryConsolidator): scripts/seed_reference.py ran it on the inputs it builds and recorded
# what it returned; the same inputs must give the same contexts and facts here.
REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "scripts"))
import seed_reference  # noqa: E402

REFERENCE = json.loads((Path(__file__).parent / "fixtures" / "seed_reference.json").read_text())


@pytest.mark.parametrize("i", range(len(REFERENCE["contexts"])))
def test_context_manager_keeps_what_the_reference_keeps(i):
    case = seed_reference.context_cases()[i]
    expected = REFERENCE["contexts"][i]
    assert case["budget"] == expected["budget"], "the fixture was made from these inputs"
    manager = ContextManager(TokenBudget(**case["budget"]))
    system, messages = manager.build_messages(
        system=case["system"], new_message=case["new_message"], history=case["history"],
        memory_results=case["memory_results"], learnings=case["learnings"],
    )
    assert system == expected["system"]
    kept = [case["history"].index(m) for m in messages[:-1]]
    assert kept == expected["kept"], f"budget {case['budget']}"
    assert messages[-1] == {"role": "user", "content": case["new_message"]}


def test_the_reserves_stay_reserved_when_the_system_prompt_is_small():
    # 8,000 tokens: 4,000 reserved, 600 memory, 200 learnings leave the history 3,200 (the
    # 16-message tail is kept whatever it costs, the rest only within that).
    history = seed_reference.history(40, 1)
    _, messages = ContextManager(TokenBudget(total=8_000)).build_messages("s", "next", history)
    kept = messages[:-1]
    older = kept[:-16]
    tokens = sum(max(1, len(m["content"]) // 4) for m in kept) + 1
    assert tokens <= 3_200 or not older, tokens


def test_key_facts_match_the_reference_for_seed_shaped_tool_results():
    for messages, expected in zip(seed_reference.fact_cases(), REFERENCE["facts"]):
        assert MemoryConsolidator.extract_key_facts(messages) == expected
    seed_tool = {"role": "tool", "name": "shell_exec", "content": "Exit code 0"}
    assert MemoryConsolidator.extract_key_facts([seed_tool]) == ["[shell_exec] Exit code 0"]
    out, summary = MemoryConsolidator().consolidate([seed_tool] * 2 + conversation()[1:], "")
    assert "[shell_exec] Exit code 0" in summary


def test_the_reference_fixture_is_what_the_reference_returns_today():
    missy = os.environ.get("ENGRAM_MISSY")
    if not missy:
        pytest.skip("missy: set ENGRAM_MISSY to a checkout of MissyLabs/missy to check the fixture live")
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "seed_reference.py"), missy],
                         capture_output=True, text=True, check=True).stdout
    live = json.loads(out)
    assert (live["contexts"], live["facts"]) == (REFERENCE["contexts"], REFERENCE["facts"])
