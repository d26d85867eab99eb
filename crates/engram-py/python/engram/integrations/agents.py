"""The OpenAI Agents SDK's ``Session`` on an engram session.

>>> from engram.integrations.agents import EngramSession
>>> session = EngramSession("user-42", model="gpt-4o")            # doctest: +SKIP
>>> await Runner.run(agent, "Fix the failing test", session=session)  # doctest: +SKIP

The SDK stores each run's Responses items with ``add_items`` and starts the next run from
``get_items``. Here the items go into an engram session (its log keeps every one, verbatim), and
``get_items`` returns the session's view: once the history passes the threshold of the model's
window it is compacted (tool calls stay with their outputs, a reasoning item with its turn, the
newest items verbatim), so the next run's input fits. Items engram kept come back exactly as they
were added; a summary comes back as a message item. The mapping between items and messages is
the core's (the proxy's ``/v1/responses`` route uses the same one).
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Optional

from .. import EngramError, Store, _dumps, _engram

_CHECKPOINT = "agents-items-"


def _items_of(messages: list) -> list:
    return json.loads(_engram.responses_messages_to_items_json(_dumps(messages)))


class EngramSession:
    """An Agents SDK session kept by engram: ``session_id`` names the engram session (created on
    first use for ``model``, with its window unless ``window`` is given), in ``store`` (default:
    the CLI's database). Blocking work runs on a worker thread."""

    def __init__(self, session_id: str, store: Optional[Store] = None, *, model: str = "gpt-4o",
                 window: Optional[int] = None) -> None:
        self.session_id = session_id
        self.session_settings = None
        self.store = store if store is not None else Store()
        self.model = model
        self.window = window

    async def _open(self, create: bool = False) -> Any:
        """The engram session, or None when there is none yet (a new one with ``create``)."""
        try:
            return await self.store.asession(self.session_id)
        except EngramError:
            if not create:
                return None
            return await self.store.anew_session(self.model, window=self.window, id=self.session_id)

    async def get_items(self, limit: Optional[int] = None) -> list:
        """The session's view as Responses items (the latest ``limit`` of them when given)."""
        session = await self._open()
        if session is None:
            return []
        items = _items_of(await session.amessages())
        if limit is None:
            return items
        return items[-limit:] if limit > 0 else []

    async def add_items(self, items: list) -> None:
        """Appends the items to the session's log (compacting the view when it passes the
        threshold). A checkpoint before each call lets :meth:`pop_item` take items back."""
        if not items:
            return
        messages = json.loads(_engram.responses_items_to_messages_json(_dumps(list(items))))
        session = await self._open(create=True)
        await session.acheckpoint(_CHECKPOINT + uuid.uuid4().hex)
        await session.aappend(messages)

    async def pop_item(self) -> Optional[dict]:
        """Takes back the newest item: the session returns to the checkpoint before the call
        that added it (what was set aside stays in the log, as engram keeps everything) and the
        other items of that call are added again."""
        session = await self._open()
        if session is None:
            return None
        log = await session.alog()
        before = _items_of(log)
        if not before:
            return None
        # The newest checkpoint that comes before the newest message.
        marks = [c for c in (await session.ashow())["checkpoints"]
                 if c["name"].startswith(_CHECKPOINT) and not c.get("abandoned") and c["messages"] < len(log)]
        if not marks:
            raise EngramError(f"session {self.session_id}: no checkpoint to take an item back to")
        latest = max(marks, key=lambda c: (c["log_end"], c["created_at"]))
        await session.arestore(latest["name"])
        after = _items_of(await session.alog())
        await self.add_items(before[len(after):-1])
        return before[-1]

    async def clear_session(self) -> None:
        """Deletes the session with everything it holds; the next call starts a new one."""
        session = await self._open()
        if session is not None:
            await session.adelete()
