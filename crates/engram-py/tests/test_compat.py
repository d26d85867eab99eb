"""Seed 000's MemoryConsolidator, as the seed describes it."""

from __future__ import annotations

import pytest

from engram.compat import MemoryConsolidator


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
