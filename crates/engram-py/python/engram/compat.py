"""The classic context-manager Python APIs, by name and default, on engram's core.

Code written against those designs switches by changing an import::

    from engram.compat import ContextManager, MemoryConsolidator, TokenBudget

They behave as those APIs always did, including where they are looser than engram:

- ``ContextManager.build_messages`` keeps the fresh tail (16 messages) *regardless of budget*, so
  its result can exceed ``TokenBudget.total``; tokens are estimated at 4 characters per token (the
  classic heuristic) unless a ``model`` is given. ``engram.build_context`` never exceeds the budget.
- ``MemoryConsolidator.consolidate`` replaces everything but the last 4 messages with one bullet
  list of key facts; it can cut a tool call from its result and it keeps no lineage. engram's
  ``compact`` and ``Session`` never split a call from its result, keep the originals, and
  summarise with a model when one is configured.

Prefer the native API (``engram.compact``, ``engram.build_context``, ``engram.Store``) in new code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence, Union

from . import _build, _as_openai, extract_key_facts as _extract_key_facts

__all__ = ["TokenBudget", "ContextManager", "MemoryConsolidator"]


@dataclass
class TokenBudget:
    """The classic budget: the window, two reserves, the memory and learnings shares of what
    remains, and the protected fresh tail."""

    total: int = 30_000
    system_reserve: int = 2_000
    tool_definitions_reserve: int = 2_000
    memory_fraction: float = 0.15
    learnings_fraction: float = 0.05
    fresh_tail_count: int = 16

    @property
    def available(self) -> int:
        """``total - system_reserve - tool_definitions_reserve`` (26,000 by default)."""
        return max(0, self.total - self.system_reserve - self.tool_definitions_reserve)

    @property
    def memory_budget(self) -> int:
        """Tokens for memory snippets (3,900 by default)."""
        return int(self.available * self.memory_fraction)

    @property
    def learnings_budget(self) -> int:
        """Tokens for learnings (1,300 by default)."""
        return int(self.available * self.learnings_fraction)

    @property
    def history_budget(self) -> int:
        """What remains for the conversation (20,800 by default)."""
        return self.available - self.memory_budget - self.learnings_budget


class ContextManager:
    """The classic ``ContextManager``: enriches the system prompt with "## Relevant Memory" and
    "## Past Learnings" (at most 5), inserts summaries that fit, always keeps the fresh tail and
    fills the rest of the history newest first, stopping at the first message that does not fit.
    Tool calls and their results are kept together (a unit is kept or dropped whole)."""

    def __init__(self, budget: Optional[TokenBudget] = None, *, model: Optional[str] = None) -> None:
        self.budget = budget if budget is not None else TokenBudget()
        self.model = model

    def build_messages(
        self,
        system: str,
        new_message: Union[str, Mapping, None],
        history: Sequence[Any],
        memory_results: Optional[Sequence[Union[str, Mapping]]] = None,
        learnings: Optional[Sequence[Union[str, Mapping]]] = None,
        tool_definitions: Optional[Sequence[Mapping]] = None,
        summaries: Optional[Sequence[Union[str, Mapping]]] = None,
    ) -> tuple[str, list]:
        """Returns ``(enriched_system, messages)``: the system prompt with its sections, and the
        summaries, the kept history and the new message (a string becomes a user message)."""
        out = _build(
            system, new_message, history, memory_results or (), learnings or (),
            tool_definitions or (), summaries or (), self.budget, self.model, None, seed=True,
        )
        messages = list(out.messages)
        enriched = system or ""
        r = out.report
        sectioned = bool(system) or r.get("memory_used", 0) > 0 or r.get("learnings_used", 0) > 0
        if sectioned and messages and _role(messages[0]) == "system":
            first = messages.pop(0)
            enriched = first["content"] if isinstance(first, Mapping) else first.content
        self.last_report = out.report
        return enriched, messages


def _seed_shaped(messages: Sequence[Any]) -> list:
    """The messages with each classic-shaped tool result (``{"role": "tool", "name": ..., "content":
    ...}``, which answers no call by id) given an id of its own, as OpenAI's format wants."""
    out = []
    for i, m in enumerate(messages):
        if isinstance(m, Mapping) and m.get("role") == "tool" and not m.get("tool_call_id"):
            m = {**m, "tool_call_id": f"seed_result_{i}"}
        out.append(m)
    return out


def _role(m: Any) -> str:
    if isinstance(m, Mapping):
        return m.get("role", "")
    return {"system": "system", "human": "user", "ai": "assistant", "tool": "tool"}.get(
        getattr(m, "type", ""), "")


def _text(m: Any) -> str:
    content = m.get("content") if isinstance(m, Mapping) else getattr(m, "content", "")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for p in content:
        if isinstance(p, Mapping) and isinstance(p.get("text"), str):
            parts.append(p["text"])
        elif isinstance(p, str):
            parts.append(p)
    return " ".join(parts)


class MemoryConsolidator:
    """The classic ``MemoryConsolidator``: at ``threshold_pct`` of ``max_tokens`` the history
    older than the last 4 messages is replaced by one message of key facts."""

    KEEP_RECENT = 4
    HEADER = "[Session context consolidated]"

    def __init__(self, threshold_pct: float = 0.8, max_tokens: int = 30_000) -> None:
        if not 0.0 < threshold_pct <= 1.0:
            raise ValueError(f"threshold_pct must be in (0, 1], not {threshold_pct}")
        if max_tokens <= 0:
            raise ValueError(f"max_tokens must be positive, not {max_tokens}")
        self.threshold_pct = threshold_pct
        self.max_tokens = max_tokens

    def should_consolidate(self, current_tokens: int) -> bool:
        """True when ``current_tokens`` reaches ``threshold_pct`` of ``max_tokens``."""
        return current_tokens >= self.threshold_pct * self.max_tokens

    @staticmethod
    def estimate_tokens(messages: Sequence[Any]) -> int:
        """The classic estimate: all the messages' characters divided by 4."""
        return sum(len(_text(m)) for m in messages) // 4

    @staticmethod
    def extract_key_facts(messages: Sequence[Any]) -> list[str]:
        """Tool results (200 characters, prefixed with the tool's name), lines with the fact
        keywords (``result:``, ``decided:``, ``found:``, ``error:``, ``success:``, ``created:``,
        ``updated:``, ``deleted:``, ``confirmed:``, ``output:``), user messages under 120
        characters; long assistant prose is skipped; each fact once. A tool result may be
        classic-shaped, named by ``name`` without the ``tool_call_id`` of OpenAI's format."""
        return _extract_key_facts(_seed_shaped(messages))

    def consolidate(self, messages: Sequence[Any], system_prompt: str = "") -> tuple[list, str]:
        """Returns ``(messages, summary)``: with more than 4 messages, one message
        ``[Session context consolidated]`` with the older messages' facts as bullets, then the
        last 4; otherwise the messages unchanged and an empty summary. Leading system messages
        (the system prompt) stay in front, unsummarised; ``system_prompt`` is accepted for the
        classic signature (the caller sends it separately, as the classic runtime does)."""
        items = list(messages)
        head = []
        while items and _role(items[0]) == "system":
            head.append(items.pop(0))
        if len(items) <= self.KEEP_RECENT:
            return list(messages), ""
        older, recent = items[: -self.KEEP_RECENT], items[-self.KEEP_RECENT:]
        data, langchain = _as_openai(_seed_shaped(older))
        facts = _extract_key_facts(data)
        summary = self.HEADER + "\n\n" + "\n".join(f"- {f}" for f in facts)
        message: Any = {"role": "system", "content": summary}
        if langchain or any(not isinstance(m, Mapping) for m in recent):
            from .langchain import from_openai

            message = from_openai([message])[0]
        return head + [message] + recent, summary
