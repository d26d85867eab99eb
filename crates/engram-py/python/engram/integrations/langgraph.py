"""engram for LangGraph's prebuilt agents and for ``RunnableWithMessageHistory``.

>>> from langgraph.prebuilt import create_react_agent
>>> from engram.integrations.langgraph import pre_model_hook
>>> agent = create_react_agent(model, tools, pre_model_hook=pre_model_hook(model="gpt-4o"))  # doctest: +SKIP

``pre_model_hook`` returns a hook that gives the model engram's view (``llm_input_messages``)
while the graph's state keeps every message. ``EngramChatMessageHistory`` is a LangChain chat
message history kept by an engram session: its ``messages`` are the session's view, compacted at
the threshold. Needs ``langchain_core`` (and ``langgraph`` for the prebuilt agents).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from langchain_core.chat_history import BaseChatMessageHistory

from .. import Store
from ._view import SessionView


def pre_model_hook(model: str = "gpt-4o", *, store: Optional[Store] = None, session_id: Optional[str] = None,
                   window: Optional[int] = None, system_prompt: Optional[str] = None) -> Callable[[dict], dict]:
    """A ``pre_model_hook`` for ``create_react_agent``: ``{"llm_input_messages": view}``, the state's
    messages appended to an engram session and its view returned (``system_prompt``, the agent's
    prompt, is counted and pinned in the session, and left to the agent to send)."""
    keeper = SessionView(model, store=store, session_id=session_id, window=window)

    def hook(state: Any) -> dict:
        messages = state["messages"] if isinstance(state, dict) else state.messages
        return {"llm_input_messages": keeper.view(list(messages), system_prompt)}

    hook.session_id = keeper.session_id  # type: ignore[attr-defined]
    hook.store = keeper.store  # type: ignore[attr-defined]
    return hook


class EngramChatMessageHistory(BaseChatMessageHistory):
    """A chat message history kept by an engram session (``session_id`` in ``store``, for
    ``model``): every message is stored in its log, and ``messages`` is its view."""

    def __init__(self, session_id: str, store: Optional[Store] = None, *, model: str = "gpt-4o",
                 window: Optional[int] = None) -> None:
        self._keeper = SessionView(model, store=store, session_id=session_id, window=window)

    @property
    def messages(self) -> list:  # type: ignore[override]
        session = self._keeper.open()
        return session.messages() if session.info["messages"] else []

    def add_messages(self, messages: Sequence[Any]) -> None:
        if messages:
            self._keeper.open().append(list(messages))

    def clear(self) -> None:
        self._keeper.reset()
