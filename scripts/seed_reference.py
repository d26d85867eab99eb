#!/usr/bin/env python3
"""Runs the seeds' reference implementation (Missy's ContextManager and MemoryConsolidator) on
deterministic inputs and prints what it returned, as the fixture that engram's seed-compatible
Python API is checked against (crates/engram-py/tests/fixtures/seed_reference.json).

Missy is not on PyPI; bring its repository here and point this script at a checkout of it:

    git clone https://github.com/MissyLabs/missy /tmp/missy        # or the tool library's fetch
    python3 scripts/seed_reference.py /tmp/missy > crates/engram-py/tests/fixtures/seed_reference.json

Only Missy's outputs are written (the enriched system prompt, the indices of the history messages
it kept, the facts), in the order of `context_cases()` and `fact_cases()`, which the test imports
from here to build the same inputs; none of Missy's code.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

WORDS = ("deploy", "the", "service", "config", "error", "fixed", "we", "nginx", "restart",
         "checked", "logs", "and", "then", "a", "path", "/etc/app.yaml", "ok", "retry", "done")


def history(n: int, seed: int) -> list[dict[str, Any]]:
    """`n` alternating user/assistant turns of varying lengths (a linear congruential sequence,
    so that the same arguments give the same history on every machine)."""
    state = seed
    out = []
    for i in range(n):
        state = (state * 1103515245 + 12345) % (1 << 31)
        length = 8 + state % 160
        words = []
        for j in range(length):
            state = (state * 1103515245 + 12345) % (1 << 31)
            words.append(WORDS[state % len(WORDS)])
        role = "user" if i % 2 == 0 else "assistant"
        out.append({"role": role, "content": f"turn {i}: " + " ".join(words)})
    return out


def context_cases() -> list[dict[str, Any]]:
    cases = []
    for total in (4_500, 6_000, 8_000, 12_000, 30_000):
        for tail in (16, 4):
            for n, seed in ((40, 7), (24, 11)):
                cases.append({
                    "budget": {"total": total, "fresh_tail_count": tail},
                    "system": "You are a careful deploy agent.",
                    "new_message": "What should we do next?",
                    "history": history(n, seed + total + tail),
                    "memory_results": ["User prefers blue-green deploys.", "The app lives in /opt/app."],
                    "learnings": ["Run the smoke tests after a restart.", "Keep configs in YAML."],
                })
    # Memory over its share (cut to it) and learnings over theirs (left out).
    cases.append({
        "budget": {"total": 3_000, "system_reserve": 500, "tool_definitions_reserve": 500},
        "system": "s",
        "new_message": "next",
        "history": history(30, 3),
        "memory_results": ["memory " * 200, "more " * 200],
        "learnings": ["lesson " * 60] * 5,
    })
    return cases


def fact_cases() -> list[list[dict[str, Any]]]:
    return [
        [
            {"role": "user", "content": "Check the nginx config before restarting"},
            {"role": "tool", "name": "shell_exec", "content": "Exit code 0. Deployed 47 files to /opt/app"},
            {"role": "assistant", "content": "Long prose. " * 30 + "\ndecided: use blue-green deployment strategy"},
            {"role": "tool", "name": "read_file", "content": "z" * 500},
            {"role": "assistant", "content": "created: backup at /tmp/app-backup.tar.gz\nresult: ok"},
            {"role": "user", "content": "Check the nginx config before restarting"},
        ],
    ]


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    checkout = Path(sys.argv[1])
    if not (checkout / "missy" / "agent" / "context.py").exists():
        sys.exit(f"{checkout} holds no missy/agent/context.py: give a checkout of MissyLabs/missy")
    # Only the two modules, so that Missy's other dependencies need not be installed.
    sys.path.insert(0, str(checkout))
    import importlib.util

    def load(name: str, path: Path) -> Any:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    context = load("missy_context", checkout / "missy" / "agent" / "context.py")
    consolidation = load("missy_consolidation", checkout / "missy" / "agent" / "consolidation.py")
    commit = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    out: dict[str, Any] = {
        "source": f"github.com/MissyLabs/missy at {commit} (MIT), missy/agent/context.py and consolidation.py",
        "generated_by": "scripts/seed_reference.py",
        "contexts": [],
        "facts": [],
    }
    for case in context_cases():
        manager = context.ContextManager(context.TokenBudget(**case["budget"]))
        system, messages = manager.build_messages(
            system=case["system"], new_message=case["new_message"], history=case["history"],
            memory_results=case["memory_results"], learnings=case["learnings"],
        )
        kept = [case["history"].index(m) for m in messages[:-1]]
        out["contexts"].append({"budget": case["budget"], "system": system, "kept": kept})
    for messages in fact_cases():
        out["facts"].append(consolidation.MemoryConsolidator().extract_key_facts(messages))
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
