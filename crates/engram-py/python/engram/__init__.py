"""engram: a context engine for LLM agents.

Exact token counts for the model in use, contexts assembled under a budget, compaction that keeps
what the agent needs (the task, the files, the errors; tool calls with their results; the system
prompt and the pending request), memory that consolidates while the agent sleeps, sessions with
checkpoints, and the agent's own status line and ``compact_history`` tool. The work is done by
engram's Rust core; this package needs no server.

Messages are OpenAI-format dicts (``{"role": ..., "content": ...}``); LangChain messages are
accepted too when ``langchain_core`` is installed, and come back as LangChain messages.

>>> import engram
>>> engram.count_tokens("Fix the failing test in src/lib.rs", model="gpt-4o")
8
>>> out = engram.compact(messages, budget=8000, model="gpt-4o")   # doctest: +SKIP
>>> out.messages, out.report["tokens_after"]                        # doctest: +SKIP

For code written against the classic context-manager APIs, ``engram.compat`` has ``TokenBudget``,
``ContextManager`` and ``MemoryConsolidator`` with their names, defaults and behaviour.
"""

from __future__ import annotations

import asyncio
import functools
import json
import warnings
from typing import Any, Iterable, Mapping, NamedTuple, Optional, Sequence, Union

from . import _engram
from ._engram import Embeddings, EngramError, LlmSummarizer

__version__: str = _engram.__version__

__all__ = [
    "EngramError",
    "Embeddings",
    "LlmSummarizer",
    "Counter",
    "Compacted",
    "Context",
    "Store",
    "Session",
    "count_tokens",
    "compact",
    "build_context",
    "summarize",
    "extract_key_facts",
    "compact_history_tool",
    "tools",
    "status_message",
    "models",
    "__version__",
]

Message = dict
Messages = Union[Sequence[Any], Mapping[str, Any]]


def _dumps(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise EngramError(f"not JSON-serialisable: {e}") from None


def _is_langchain(item: Any) -> bool:
    return not isinstance(item, Mapping) and hasattr(item, "type") and hasattr(item, "content")


def _as_openai(messages: Any) -> tuple[Any, bool]:
    """The messages (or request body) as OpenAI-format JSON-ready data, and whether they were
    LangChain messages."""
    if isinstance(messages, Mapping):
        return dict(messages), False
    if isinstance(messages, (str, bytes)):
        raise EngramError("expected a list of messages (or a request body with `messages`), not a string")
    items = list(messages)
    if any(_is_langchain(m) for m in items):
        from .langchain import to_openai

        return to_openai(items), True
    return items, False


def _back(messages: list, langchain: bool) -> list:
    if not langchain:
        return messages
    from .langchain import from_openai

    return from_openai(messages)


class Counter:
    """Counts tokens for one model (exactly, for models whose tokenizer engram has) or with a
    named tokenizer (``o200k_base``, ``cl100k_base``, ``chars/4``)."""

    def __init__(self, model: Optional[str] = None, tokenizer: Optional[str] = None) -> None:
        self._native = _engram.Counter(model, tokenizer)

    @property
    def model(self) -> str:
        """The model asked for (the registry's default when none was)."""
        return self._native.model

    @property
    def window(self) -> int:
        """The model's context window in tokens."""
        return self._native.window

    @property
    def max_output_tokens(self) -> int:
        """The model's output limit."""
        return self._native.max_output_tokens

    @property
    def tokenizer(self) -> str:
        """The tokenizer's id."""
        return self._native.tokenizer

    @property
    def exact(self) -> bool:
        """True when the counts are the model's own (not an estimate)."""
        return self._native.exact

    @property
    def warning(self) -> Optional[str]:
        """Why the window and counts are a guess, for a model the registry does not know."""
        return self._native.warning

    def count(self, text: str) -> int:
        """Tokens of a text."""
        return self._native.count(text)

    def count_batch(self, texts: Iterable[str]) -> list[int]:
        """Tokens of each text (one call; the interpreter is released while counting)."""
        return self._native.count_batch(list(texts))

    def count_messages(self, messages: Messages, tools: Optional[Sequence[Mapping]] = None) -> dict:
        """A conversation's count: ``total`` (what the request costs, with per-message and
        per-request overheads), ``messages`` (each message's tokens), ``tools`` and more. An
        Anthropic Messages request counts with its ``system`` prompt (the first of ``messages``)."""
        data, _ = _as_openai(messages)
        return json.loads(
            self._native.count_messages(_dumps(data), None if tools is None else _dumps(list(tools)))
        )

    def __repr__(self) -> str:
        return f"Counter(model={self.model!r}, tokenizer={self.tokenizer!r}, window={self.window})"


_counters: dict = {}


def _counter(model: Optional[str], tokenizer: Optional[str]) -> Counter:
    key = (model, tokenizer)
    c = _counters.get(key)
    if c is None:
        c = _counters[key] = Counter(model, tokenizer)
    return c


def count_tokens(
    value: Union[str, Messages],
    model: Optional[str] = None,
    tokenizer: Optional[str] = None,
    tools: Optional[Sequence[Mapping]] = None,
) -> int:
    """Tokens of a text, or of a whole request (a list of messages, ``{"messages": ...}`` or an
    Anthropic request with its ``system``) as the model will count it, overheads included."""
    c = _counter(model, tokenizer)
    if isinstance(value, str):
        return c.count(value)
    return c.count_messages(value, tools)["total"]


class _MessagesAndReport(NamedTuple):
    messages: list
    report: dict


class Compacted(_MessagesAndReport):
    """What :func:`compact` (and :meth:`Session.context`) return: the messages to send and a
    report of what was done (tokens before and after, steps, what was dropped, ...), a pair
    (``messages, report = engram.compact(...)``). ``request`` is the request to send when
    :func:`compact` was given one (a dict with ``messages``; the same keys, compacted; an
    Anthropic request stays one) or a context was asked for in Anthropic's format, else None."""

    request: Optional[dict]

    def __new__(cls, messages: list, report: dict, request: Optional[dict] = None) -> "Compacted":
        self = super().__new__(cls, messages, report)
        self.request = request
        return self


class Context(NamedTuple):
    """What :func:`build_context` returns."""

    messages: list
    report: dict


def compact(
    messages: Messages,
    budget: Optional[int] = None,
    *,
    model: Optional[str] = None,
    tokenizer: Optional[str] = None,
    strategy: str = "auto",
    query: Optional[str] = None,
    keep_recent: Optional[int] = None,
    keep_tool_outputs: Optional[int] = None,
    preserve_window: Optional[bool] = None,
    digest_share: Optional[float] = None,
    recall_share: Optional[float] = None,
    summarizer: Optional[LlmSummarizer] = None,
    summary_prompt: Optional[str] = None,
    tools: Optional[Sequence[Mapping]] = None,
    annotate: bool = False,
    embeddings: Optional[Embeddings] = None,
    recall: Optional[str] = None,
) -> Compacted:
    """Compacts a conversation to ``budget`` tokens (default: the model's window less its reply
    share). Strategies: ``auto`` (cheapest first: dedupe, mask, an extractive digest, recall
    for ``query``, newest-first fill), ``truncate``, ``dedupe``, ``mask``, ``extractive`` (the last
    messages verbatim and a digest of the rest) and ``summarize`` (the digest written by ``summarizer``, else the model-free
    summary). The system prompt and the pending request are kept; a
    tool call is never split from its result. ``annotate`` keeps engram's provenance fields
    (an ``engram`` object with ``kind`` and ``source_ids``) on each message. Recall for
    ``query`` finds older messages by their words and their meaning (engram's built-in model);
    with ``embeddings`` (an :class:`Embeddings`), all-MiniLM-L6-v2 gives the meaning instead;
    ``recall="lexical"`` recalls by words alone.

    ``messages`` is a list of messages (OpenAI dicts or LangChain messages, returned in the same
    form) or a request: an OpenAI body (``{"model", "messages", "tools", ...}``) or an Anthropic
    Messages request (``{"system", "messages", ...}``, found by its ``system`` or its
    ``tool_use`` blocks). For a request, ``request`` is the one to send, its other keys kept;
    an Anthropic request (or a list of Anthropic messages) comes back as one (the digest in
    ``system``) and ``messages`` are its messages, unless ``annotate`` asks for engram's own
    form."""
    data, lc = _as_openai(messages)
    if tools is not None:
        if not isinstance(data, dict):
            data = {"messages": data}
        data["tools"] = list(tools)
    options = {
        "budget": budget,
        "model": model,
        "tokenizer": tokenizer,
        "strategy": strategy,
        "query": query,
        "keep_recent": keep_recent,
        "keep_tool_outputs": keep_tool_outputs,
        "preserve_window": preserve_window,
        "digest_share": digest_share,
        "recall_share": recall_share,
        "summary_prompt": summary_prompt,
        "plain": not annotate,
        "recall": recall,
    }
    doc = json.loads(_engram.compact_json(_dumps(data), _dumps(options), summarizer, embeddings))
    return Compacted(_back(doc["messages"], lc), doc["report"], doc.get("request"))


def build_context(
    system: str,
    new_message: Union[str, Mapping, None] = None,
    history: Messages = (),
    memory_results: Sequence[Union[str, Mapping]] = (),
    learnings: Sequence[Union[str, Mapping]] = (),
    tool_definitions: Sequence[Mapping] = (),
    summaries: Sequence[Union[str, Mapping]] = (),
    *,
    budget: Union[int, Mapping, Any, None] = None,
    model: Optional[str] = None,
    tokenizer: Optional[str] = None,
) -> Context:
    """Budgeted context assembly, within the budget: the system prompt with "## Relevant Memory" and
    "## Past Learnings" (each within its share), summaries that fit, the older history newest
    first, the fresh tail (whole tool units) and the new message. ``budget`` is a total, a dict
    of ``TokenBudget`` fields, or a ``engram.compat.TokenBudget``; by default the model's window.
    Unlike ``engram.compat.ContextManager``, the budget is never exceeded: if the fresh tail alone does not fit, its
    oldest units give way (``report["fresh_tail_dropped"]``)."""
    return _build(system, new_message, history, memory_results, learnings, tool_definitions,
                  summaries, budget, model, tokenizer, seed=False)


def _budget_dict(budget: Any) -> dict:
    if budget is None:
        return {}
    if isinstance(budget, int):
        return {"total": budget}
    if isinstance(budget, Mapping):
        return dict(budget)
    fields = ("total", "system_reserve", "tool_definitions_reserve", "memory_fraction",
              "learnings_fraction", "fresh_tail_count", "reply_reserve")
    return {f: getattr(budget, f) for f in fields if hasattr(budget, f)}


def _build(system, new_message, history, memory_results, learnings, tool_definitions, summaries,
           budget, model, tokenizer, seed: bool) -> Context:
    hist, lc = _as_openai(history)
    if isinstance(hist, dict):
        hist = hist.get("messages", [])
    new, new_lc = (None, False)
    if new_message is not None and not isinstance(new_message, (str, Mapping)):
        converted, new_lc = _as_openai([new_message])
        new = converted[0]
    else:
        new = new_message
    parts = {
        "system": system or "",
        "new_message": new,
        "history": hist,
        "memory_results": list(memory_results or ()),
        "learnings": list(learnings or ()),
        "tool_definitions": list(tool_definitions or ()),
        "summaries": list(summaries or ()),
    }
    doc = json.loads(
        _engram.build_context_json(_dumps(parts), _dumps(_budget_dict(budget)), model, tokenizer, seed)
    )
    return Context(_back(doc["messages"], lc or new_lc), doc["report"])


def summarize(
    messages: Messages,
    *,
    focus: Optional[str] = None,
    max_tokens: int = 2000,
    prompt: Optional[str] = None,
    summarizer: Optional[LlmSummarizer] = None,
) -> dict:
    """A handoff summary of the messages after the system prompt (a structured handoff: task, state, files, errors, decisions, next steps). With a
    ``summarizer`` the model writes it; when its reply cannot be used, the model-free summary is
    returned with the reason in ``fallback``. Returns ``{"summary", "summarizer", "fallback"}``."""
    data, _ = _as_openai(messages)
    return json.loads(_engram.summarize_json(_dumps(data), focus, max_tokens, prompt, summarizer))


def extract_key_facts(messages: Messages) -> list[str]:
    """The key facts of messages: tool results (200 characters, with the tool's name), lines with fact
    keywords (``result:``, ``decided:``, ``error:``...), short user messages; each once."""
    data, _ = _as_openai(messages)
    return json.loads(_engram.extract_key_facts_json(_dumps(data)))


def compact_history_tool(format: str = "openai") -> dict:
    """The ``compact_history`` tool definition to offer the model (``"openai"`` or
    ``"anthropic"``); run its calls with :meth:`Session.compact_history`."""
    return json.loads(_engram.compact_history_tool_json(format))


def tools(format: str = "openai") -> list[dict]:
    """The agent's tools to offer the model, as ``"openai"`` or ``"anthropic"`` definitions:
    ``search_history`` and ``read_history`` (everything compaction took out of the context can be
    found and read back), ``compact_history``, ``context_status``, ``memory_search``,
    ``memory_add``. Run their calls with :meth:`Session.handle_tool_call`."""
    return json.loads(_engram.tool_schemas_json(format))


def status_message(
    total_tokens: int,
    max_tokens: int,
    cost_usd: float = 0.0,
    activities: Optional[Mapping[str, Sequence[Mapping[str, str]]]] = None,
) -> dict:
    """The status update (tokens used of the window, cost so far), a system message to insert before the next model call.
    ``activities`` maps a section (``"Sub-Agents"``, ``"Shell Processes"``...) to
    ``[{"id", "description"}]``."""
    return json.loads(
        _engram.status_message_json(
            total_tokens, max_tokens, cost_usd, None if activities is None else _dumps(dict(activities))
        )
    )


def models() -> list[dict]:
    """The model registry: ids, windows, output limits, tokenizers, prices (USD per million)."""
    return json.loads(_engram.models_json())


def _twin(method: Any) -> Any:
    """The async twin of a blocking method: the same call on a worker thread (the core lets go
    of the GIL while it works), so the event loop keeps running."""

    @functools.wraps(method)
    async def twin(self: Any, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(method, self, *args, **kwargs)

    twin.__name__ = twin.__qualname__ = "a" + method.__name__
    twin.__doc__ = f"Async twin of :meth:`{method.__name__}` (runs on a worker thread).\n\n{method.__doc__ or ''}"
    return twin


class Store:
    """engram's embedded store: a SQLite database (WAL, full-text search) holding memory tiers
    (working, episodic, archive, learnings, journal) and sessions. ``path`` defaults to
    ``$ENGRAM_DB``, else ``engram/engram.db`` in the user's data directory; ``":memory:"`` keeps
    everything in memory. The same database the ``engram`` CLI uses. With ``embeddings`` (an
    :class:`Embeddings`), memory search, a session's context for a query, its compactions and
    the agent's ``search_history`` are hybrid; the vectors are kept in the store."""

    def __init__(self, path: Optional[str] = None, *,
                 embeddings: Optional[Embeddings] = None) -> None:
        self._native = _engram.NativeStore(None if path is None else str(path), embeddings)

    @property
    def path(self) -> str:
        return self._native.path

    # Memory.
    def add(
        self,
        content: str,
        source: str = "agent",
        *,
        tier: str = "working",
        session_id: Optional[str] = None,
        importance: Optional[float] = None,
        metadata: Optional[Mapping] = None,
        created_at: Optional[str] = None,
        id: Optional[str] = None,
    ) -> str:
        """Adds one memory entry; returns its id. ``importance`` is 0 to 1 (0.5 when omitted)."""
        entry: dict[str, Any] = {"content": content, "source": source, "tier": tier}
        for key, value in (("session_id", session_id), ("importance", importance),
                           ("metadata", metadata), ("created_at", created_at), ("id", id)):
            if value is not None:
                entry[key] = value
        return self._native.add(_dumps(entry))

    def add_many(self, entries: Iterable[Mapping]) -> dict:
        """Adds entries (dicts with ``content``, ``source`` and optional fields) in one
        transaction; an entry whose id is stored already is skipped. ``{"inserted", "skipped"}``."""
        return json.loads(self._native.add_many(_dumps(list(entries))))

    def search(
        self,
        query: str,
        limit: Optional[int] = None,
        *,
        tiers: Union[str, Sequence[str], None] = None,
        session_id: Optional[str] = None,
        source: Optional[str] = None,
        since: Optional[str] = None,
        until: Optional[str] = None,
    ) -> list[dict]:
        """Full-text search (BM25, stemmed) over working and episodic memory (or ``tiers``),
        best first, each hit with its ``score``; at most ``limit`` hits (10 when omitted)."""
        options = {"limit": limit, "tiers": tiers, "session_id": session_id, "source": source,
                   "since": since, "until": until}
        return json.loads(self._native.search(query, _dumps(options)))

    def sleep(
        self,
        *,
        now: Optional[str] = None,
        ttl_hours: Optional[float] = None,
        max_working: Optional[int] = None,
        summarizer: Optional[LlmSummarizer] = None,
    ) -> dict:
        """Consolidates working memory older than TTL/2 into episodic summaries (originals to the
        archive, every step logged) and compacts sessions above half their window."""
        options = {"now": now, "ttl_hours": ttl_hours, "max_working": max_working}
        return json.loads(self._native.sleep(_dumps(options), summarizer))

    def log(self, limit: int | None = None) -> list[dict]:
        """The consolidation log, newest first: at most ``limit`` records (the core's default, 20,
        when None)."""
        return json.loads(self._native.log(limit))

    def stats(self) -> dict:
        """Entries per tier."""
        return json.loads(self._native.stats())

    def get(self, id: str) -> Optional[dict]:
        """One entry, or None."""
        found = self._native.get(id)
        return None if found is None else json.loads(found)

    def forget(self, *, id: Optional[str] = None, session_id: Optional[str] = None,
               source: Optional[str] = None) -> dict:
        """Deletes an entry, a session's entries or a source's, with their search rows."""
        return json.loads(self._native.forget(id, session_id, source))

    def export(self, session_id: Optional[str] = None) -> list[dict]:
        """Every memory entry (all tiers, with ``summary_of`` lineage), or a session's, as
        ``engram memory export`` writes them; :meth:`add_many` reads them back."""
        return json.loads(self._native.export_memory(session_id))

    # Sessions.
    def new_session(self, model: Optional[str] = None, *, window: Optional[int] = None,
                    id: Optional[str] = None, name: Optional[str] = None) -> "Session":
        """Starts a session for ``model`` (its window from the registry unless given). A model
        the registry does not know gets a fallback's window and tokenizer, and a
        ``RuntimeWarning`` that says so."""
        info = json.loads(self._native.session_new(
            _dumps({"model": model, "window": window, "id": id, "name": name})))
        if info.get("warning"):
            warnings.warn(f"engram: {info['warning']}", RuntimeWarning, stacklevel=2)
        return Session(self, info["id"])

    def session(self, id: str) -> "Session":
        """An existing session (raises :class:`EngramError` if there is none)."""
        s = Session(self, id)
        s.info  # noqa: B018 (checks that it exists)
        return s

    def sessions(self) -> list[dict]:
        """Every session, most recently updated first."""
        return json.loads(self._native.sessions())

    def __repr__(self) -> str:
        return f"Store({self.path!r})"

    aadd = _twin(add)
    aadd_many = _twin(add_many)
    asearch = _twin(search)
    asleep = _twin(sleep)
    alog = _twin(log)
    astats = _twin(stats)
    aget = _twin(get)
    aforget = _twin(forget)
    aexport = _twin(export)
    anew_session = _twin(new_session)
    asession = _twin(session)
    asessions = _twin(sessions)


class Session:
    """An agent session: an append-only log (compaction never deletes from it), the view to send
    with its compactions and summaries, and checkpoints. Appends compact automatically at 80% of
    the window (down to the policy's target: the instructions, the task and a quarter of the room
    they leave, or the room of the last six steps when that is less), and return a status update
    when one is due."""

    def __init__(self, store: Store, id: str) -> None:
        self.store = store
        self.id = id
        # Set once LangChain messages are appended: the view then comes back as LangChain messages.
        self.langchain = False

    @property
    def _n(self) -> Any:
        return self.store._native

    @property
    def info(self) -> dict:
        """Model, window, tokenizer, message count, times."""
        return self.show()["session"]

    def show(self) -> dict:
        """Info, the view, compactions, summaries (with lineage) and checkpoints."""
        return json.loads(self._n.session_show(self.id))

    def log(self) -> list:
        """Every active message, verbatim, oldest first."""
        return json.loads(self._n.session_log(self.id))

    def append(self, *messages: Any, idempotency_key: Optional[str] = None) -> dict:
        """Appends messages (OpenAI or Anthropic dicts, LangChain messages, or one list of them;
        Anthropic ``tool_use`` and ``tool_result`` blocks are read as the calls and results they
        are, so compaction keeps each call with its result). Returns ``ids``,
        ``view_tokens``, ``compaction`` (when the append triggered one) and ``status`` (the
        status update when one is due, to insert before the next model call).

        With ``idempotency_key``, a retry with the same key (after a timeout or a crash) stores
        nothing and returns the first append's answer with ``replayed: True``."""
        if len(messages) == 1 and not isinstance(messages[0], Mapping) and not _is_langchain(messages[0]):
            messages = tuple(messages[0])
        data, langchain = _as_openai(list(messages))
        self.langchain |= langchain
        return json.loads(self._n.session_append(self.id, _dumps(data), idempotency_key))

    def context(self, budget: Optional[int] = None, query: Optional[str] = None,
                memory: bool = False, *, format: Optional[str] = None) -> Compacted:
        """The messages to send now (the view); with a budget or a query, the log compacted for
        them; with ``memory``, relevant memory and learnings in a system section. With
        ``format="anthropic"``, ``request`` is ``{"system", "messages"}`` for the Messages API
        (the summaries in ``system``, tool calls as ``tool_use`` blocks, a user turn first) and
        ``messages`` are its messages: ``client.messages.create(model=..., max_tokens=...,
        **session.context(format="anthropic").request)``, your own system prompt first in it."""
        doc = json.loads(self._n.session_context(self.id, budget, query, memory, format))
        if "request" in doc:
            return Compacted(doc["messages"], doc["report"], doc["request"])
        return Compacted(_back(doc["messages"], self.langchain), doc["report"])

    def messages(self) -> list:
        """The view's messages, ready to send (LangChain messages when LangChain messages were
        appended through this object)."""
        return self.context().messages

    def compact(self, target: Optional[int] = None, *, focus: Optional[str] = None,
                strategy: str = "auto", summarizer: Optional[LlmSummarizer] = None,
                summary_prompt: Optional[str] = None) -> dict:
        """Compacts now (to ``target`` tokens, default the policy's target); recorded, reversible
        with :meth:`restore`, and the log keeps every message. Returns the record with
        ``"compacted": True``, or ``{"compacted": False, "tokens_before", "tokens_after",
        "reason"}`` when compacting would not make the view smaller (nothing is changed)."""
        options = {"target": target, "focus": focus, "strategy": strategy,
                   "summary_prompt": summary_prompt}
        return json.loads(self._n.session_compact(self.id, _dumps(options), summarizer))

    def status(self) -> dict:
        """The status update now: ``message`` (to insert), tokens, percent, cost."""
        return json.loads(self._n.session_status(self.id))

    def ledger(self) -> dict:
        """The work ledger, built from the session's tool calls and results: ``files`` (each
        path with the agent's latest action and its step), ``commands`` (with exit status),
        ``failures`` (``resolved_at`` is ``None`` while one is open), ``plan`` (the latest todo
        list) and ``text``, the ledger as every compaction's summary carries it."""
        return json.loads(self._n.session_ledger(self.id))

    def timeline(self, query: Optional[str] = None, limit: Optional[int] = None) -> dict:
        """The session's timeline as sleep built it: ``{"session_id", "built_to", "parts"}``,
        a dated ``line`` per part of the history with its ``from_id`` and ``to_id`` (what
        ``read_history`` takes) and its ``sources``. With ``query``, the parts that carry it,
        best first, each with its ``score``. ``built_to`` is ``None`` before the first sleep."""
        return json.loads(self._n.session_timeline(self.id, query, limit))

    def compact_history(self, arguments: Union[str, Mapping, None] = None,
                        summarizer: Optional[LlmSummarizer] = None) -> str:
        """Runs the agent's ``compact_history`` tool call; returns the tool result text."""
        if arguments is None:
            arguments = {}
        return self._n.session_compact_history(self.id, _dumps(arguments), summarizer)

    def tool(self, name: str, arguments: Union[str, Mapping, None] = None,
             summarizer: Optional[LlmSummarizer] = None) -> Optional[dict]:
        """Runs one of the agent's tools (see :func:`tools`) with the call's arguments (a JSON
        string or a mapping); returns ``{"content", "is_error"}``, or None when ``name`` is not
        one of engram's tools. Bad arguments are a tool error (``is_error``), not an exception."""
        if arguments is None:
            arguments = {}
        return json.loads(self._n.session_tool_call(self.id, name, _dumps(arguments), summarizer))

    def handle_tool_call(self, tool_call: Any, summarizer: Optional[LlmSummarizer] = None) -> Optional[dict]:
        """The answer to ``tool_call`` when it calls one of engram's tools, else None (the
        caller runs it). An OpenAI tool call (``{"id", "function": {"name", "arguments"}}``, dict
        or SDK object) gets a tool message (``{"role": "tool", "tool_call_id", "content"}``); an
        Anthropic ``tool_use`` block (``{"type": "tool_use", "id", "name", "input"}``) gets a
        ``tool_result`` block (with ``is_error`` when the arguments were wrong)."""
        if not isinstance(tool_call, Mapping) and hasattr(tool_call, "model_dump"):
            tool_call = tool_call.model_dump()
        return json.loads(self._n.session_handle_tool_call(self.id, _dumps(tool_call), summarizer))

    def checkpoint(self, name: str) -> dict:
        """Saves a named checkpoint."""
        return json.loads(self._n.session_checkpoint(self.id, name))

    def restore(self, name: str) -> dict:
        """Returns to a checkpoint; later messages and compactions are kept, set aside."""
        return json.loads(self._n.session_restore(self.id, name))

    def export(self) -> list[dict]:
        """The session as ``engram session export`` writes it (info, every message, compactions,
        summaries, checkpoints), one dict per JSON line."""
        return json.loads(self._n.export_session(self.id))

    def delete(self) -> dict:
        """Deletes the session with everything it owns."""
        return json.loads(self._n.session_delete(self.id))

    def __repr__(self) -> str:
        return f"Session({self.id!r})"

    ashow = _twin(show)
    alog = _twin(log)
    aappend = _twin(append)
    acontext = _twin(context)
    amessages = _twin(messages)
    acompact = _twin(compact)
    astatus = _twin(status)
    atimeline = _twin(timeline)
    aledger = _twin(ledger)
    acompact_history = _twin(compact_history)
    atool = _twin(tool)
    ahandle_tool_call = _twin(handle_tool_call)
    acheckpoint = _twin(checkpoint)
    arestore = _twin(restore)
    aexport = _twin(export)
    adelete = _twin(delete)
