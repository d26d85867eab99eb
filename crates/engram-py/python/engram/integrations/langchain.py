"""engram as LangChain 1.x agent middleware.

>>> from langchain.agents import create_agent
>>> from engram.integrations.langchain import EngramMiddleware
>>> agent = create_agent("openai:gpt-4o", tools=[...],
...                      middleware=[EngramMiddleware(model="gpt-4o", session_id="user-42")])  # doctest: +SKIP

The graph's state keeps every message (it is the log); each model call receives engram's view
instead: the state's new messages are appended to an engram session, which compacts its view when
it passes the threshold of the model's window (tool calls stay with their results, the system
prompt and the newest messages stay), and the model gets that view, with engram's status update
when one is due. With ``tools=True`` the agent also gets engram's history tools
(``search_history``, ``read_history``, ``compact_history``), so it can read back what left the
window. Needs ``langchain`` (``pip install "engram[langchain]"``).
"""

from __future__ import annotations

import uuid
from typing import Any, Callable, Optional

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import SystemMessage
from langchain_core.tools import StructuredTool

from .. import Session, Store, tools as engram_tools

_HISTORY_TOOLS = ("search_history", "read_history", "compact_history")


class EngramMiddleware(AgentMiddleware):
    """Sends the model engram's view of the conversation while the state keeps it all.

    ``model`` names the model whose window and tokenizer apply (``window`` overrides its window);
    ``store`` is where the session lives (default: engram's database); ``session_id`` names the
    session (default: a new one per middleware). ``tools=True`` registers the history tools."""

    def __init__(self, model: str = "gpt-4o", *, store: Optional[Store] = None,
                 session_id: Optional[str] = None, window: Optional[int] = None,
                 tools: bool = False) -> None:
        super().__init__()
        self.model = model
        self.window = window
        self.store = store if store is not None else Store()
        self.session_id = session_id or f"langchain-{uuid.uuid4().hex[:12]}"
        self._session: Optional[Session] = None
        self._offset = 0
        self.tools = [self._tool(name) for name in _HISTORY_TOOLS] if tools else []

    # The session, opened or created once; whether its first message is the system prompt.
    def _open(self) -> Session:
        if self._session is None:
            try:
                session = self.store.session(self.session_id)
                log = session.log() if session.info["messages"] else []
                self._offset = 1 if log and log[0].get("role") == "system" else 0
            except Exception:  # noqa: BLE001 (EngramError: no such session yet)
                session = self.store.new_session(self.model, window=self.window, id=self.session_id)
                self._offset = 0
            session.langchain = True
            self._session = session
        return self._session

    def view(self, messages: list, system: Optional[str] = None) -> list:
        """engram's view of ``messages`` (the state's, oldest first) for a call with ``system``
        as its system prompt: the messages the session has not seen are appended first. The
        system prompt is counted and pinned in the session but left out of the view (LangChain
        sends it)."""
        session = self._open()
        logged = session.info["messages"]
        if logged == 0 and system:
            session.append(SystemMessage(system))
            self._offset, logged = 1, 1
        new = messages[logged - self._offset:]
        status = session.append(list(new)).get("status") if new else None
        view = session.messages()
        if self._offset and view and getattr(view[0], "type", None) == "system":
            view = view[1:]
        if status:
            view = view + [SystemMessage(status["content"] if isinstance(status, dict) else str(status))]
        return view

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return handler(request.override(messages=self.view(list(request.messages), request.system_prompt)))

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        import asyncio

        messages = await asyncio.to_thread(self.view, list(request.messages), request.system_prompt)
        return await handler(request.override(messages=messages))

    def _tool(self, name: str) -> Any:
        schema = next(t for t in engram_tools("openai") if t["function"]["name"] == name)["function"]

        def run(**arguments: Any) -> str:
            reply = self._open().tool(name, arguments)
            return reply["content"] if reply else f"unknown tool {name}"

        return StructuredTool.from_function(func=run, name=name, description=schema["description"],
                                            args_schema=schema["parameters"])
