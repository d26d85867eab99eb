"""Shared fixtures: the dev data, a scripted fake OpenAI-compatible server, a store.

The dev data is the repository's fixtures (testdata/dev/, a few records of each dev file) unless
ENGRAM_DEV_DATA points at the full dev data. A skipped test is appended to ENGRAM_SKIP_LOG (when
set, as scripts/test.sh does) so the suite's summary counts it; a skip reason starts with one word
and a colon that says what is missing ("llama: ...", "tiktoken: ...")."""

from __future__ import annotations

import json
import os
import pathlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]


FIXTURES = REPO / "testdata" / "dev"


def dev_data() -> pathlib.Path:
    path = pathlib.Path(os.environ.get("ENGRAM_DEV_DATA") or FIXTURES)
    if not path.is_dir():
        pytest.fail(f"the dev data is missing at {path} (ENGRAM_DEV_DATA)")
    return path


def pytest_runtest_logreport(report):
    """Counts skips for scripts/test.sh: one line per skipped test, "kind<TAB>python<TAB>test"."""
    log = os.environ.get("ENGRAM_SKIP_LOG")
    if not (log and report.skipped) or getattr(report, "wasxfail", None):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    reason = reason.removeprefix("Skipped: ")
    head = reason.split(":", 1)[0].strip()
    kind = head if head and " " not in head else "other"
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"{kind}\tpython\t{report.nodeid}\n")


def load_records(name: str, limit: Optional[int] = None) -> list[dict]:
    out = []
    with open(dev_data() / name, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                out.append(json.loads(line))
                if limit is not None and len(out) >= limit:
                    break
    return out


def openai_messages(record: dict) -> list[dict]:
    """A dev record's messages without engram's `id` fields."""
    return [{k: v for k, v in m.items() if k != "id"} for m in record["messages"]]


@pytest.fixture(scope="session")
def trajectory() -> list[dict]:
    """The longest SWE-agent demo trajectory: system prompt, task, tool calls with results."""
    records = load_records("sweagent_demos.jsonl")
    return openai_messages(max(records, key=lambda r: len(json.dumps(r["messages"]))))


class FakeOpenAI:
    """An OpenAI-compatible chat server on loopback. Each request is recorded; the reply comes
    from `respond(request) -> dict` (a chat.completion body) or a status code to fail with."""

    def __init__(self, respond: Callable[[dict], object]):
        self.requests: list[dict] = []
        self.respond = respond
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append({"path": self.path, "body": body,
                                      "authorization": self.headers.get("Authorization")})
                reply = fake.respond(body)
                if isinstance(reply, int):
                    self.send_response(reply)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(b'{"error": {"message": "scripted failure"}}')
                    return
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def completion(content: Optional[str] = None, tool_calls: Optional[list] = None,
               prompt_tokens: int = 100, completion_tokens: int = 20) -> dict:
    message: dict = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": "fake-model",
        "choices": [{"index": 0, "message": message,
                     "finish_reason": "tool_calls" if tool_calls else "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


@pytest.fixture
def fake_openai():
    servers: list[FakeOpenAI] = []

    def make(respond: Callable[[dict], object]) -> FakeOpenAI:
        s = FakeOpenAI(respond)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()


@pytest.fixture
def store(tmp_path):
    import engram

    return engram.Store(str(tmp_path / "engram.db"))
