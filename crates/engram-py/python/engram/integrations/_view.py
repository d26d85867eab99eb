"""The view an agent framework's model call receives, from an engram session that keeps the
framework's messages: shared by the LangChain middleware, the LangGraph hook and the chat
message history. Needs ``langchain_core``."""

from __future__ import annotations

import uuid
from typing import Optional

from langchain_core.messages import SystemMessage

from .. import Session, Store


class SessionView:
    """An engram session fed with a framework's growing list of LangChain messages."""

    def __init__(self, model: str = "gpt-4o", *, store: Optional[Store] = None,
                 session_id: Optional[str] = None, window: Optional[int] = None) -> None:
        self.model = model
        self.window = window
        self.store = store if store is not None else Store()
        self.session_id = session_id or f"langchain-{uuid.uuid4().hex[:12]}"
        self._session: Optional[Session] = None
        self._offset = 0

    # The session, opened or created once; whether its first message is the system prompt.
    def open(self) -> Session:
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
        """engram's view of ``messages`` (the framework's, oldest first) for a call with ``system``
        as its system prompt: the messages the session has not seen are appended first. The
        system prompt is counted and pinned in the session but left out of the view (LangChain
        sends it)."""
        session = self.open()
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

    def reset(self) -> None:
        """Deletes the session; the next call starts a new one."""
        self.open().delete()
        self._session = None
        self._offset = 0
