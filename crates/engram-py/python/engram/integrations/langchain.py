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

from typing import Any, Callable, Optional

from langchain.agents.middleware import AgentMiddleware
from langchain_core.tools import StructuredTool

from .. import Store, tools as engram_tools
from ._view import SessionView

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
        self._keeper = SessionView(model, store=store, session_id=session_id, window=window)
        self.store = self._keeper.store
        self.session_id = self._keeper.session_id
        self.tools = [self._tool(name) for name in _HISTORY_TOOLS] if tools else []

    def view(self, messages: list, system: Optional[str] = None) -> list:
        """engram's view of the state's ``messages`` for a call with ``system`` as its system
        prompt (see :class:`engram.integrations._view.SessionView`)."""
        return self._keeper.view(messages, system)

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return handler(request.override(messages=self.view(list(request.messages), request.system_prompt)))

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        import asyncio

        messages = await asyncio.to_thread(self.view, list(request.messages), request.system_prompt)
        return await handler(request.override(messages=messages))

    def _tool(self, name: str) -> Any:
        schema = next(t for t in engram_tools("openai") if t["function"]["name"] == name)["function"]

        def run(**arguments: Any) -> str:
            reply = self._keeper.open().tool(name, arguments)
            return reply["content"] if reply else f"unknown tool {name}"

        return StructuredTool.from_function(func=run, name=name, description=schema["description"],
                                            args_schema=schema["parameters"])
