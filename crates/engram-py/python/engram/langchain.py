"""Conversions between LangChain messages (``langchain_core``) and OpenAI-format dicts.

engram's functions call these for you when they are given LangChain messages, and give
LangChain messages back. ``langchain_core`` is needed only when they are used.
"""

from __future__ import annotations

from typing import Any, Sequence

from ._engram import EngramError


def _core() -> Any:
    try:
        import langchain_core.messages as messages
    except ImportError:  # pragma: no cover - exercised only without langchain_core
        raise EngramError(
            "LangChain messages need the langchain_core package: pip install langchain-core"
        ) from None
    return messages


def to_openai(messages: Sequence[Any]) -> list[dict]:
    """LangChain messages (or a mix with dicts) as OpenAI chat messages: tool calls become
    ``tool_calls`` with JSON arguments, ``ToolMessage`` becomes a ``tool`` message."""
    return list(_core().convert_to_openai_messages(list(messages)))


def from_openai(messages: Sequence[dict]) -> list[Any]:
    """OpenAI chat messages as LangChain messages (``SystemMessage``, ``HumanMessage``,
    ``AIMessage`` with ``tool_calls``, ``ToolMessage``)."""
    return list(_core().convert_to_messages(list(messages)))
