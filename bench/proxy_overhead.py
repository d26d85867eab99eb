"""The proxy's added latency on loopback: the same requests sent straight to a fake upstream and
through `engram serve --upstream`, side by side in one run; p50 and p99 of each and the difference.

    python3 bench/proxy_overhead.py --engram-bin target/release/engram [--n 400]

Cases: a short request that needs no compaction (forwarded byte for byte); a long real
trajectory prefix (SWE-agent, the dev data) over the threshold of a 16,000-token window, which
engram compacts (masking and extractive steps) before forwarding, each time as a new agent's
(so no earlier view applies); and that same long request resent, which goes up as the view the
first one got (`x-engram-prefix: extended`). Then the same on `/v1/responses`: a short Responses request, and the mini-SWE-agent run
of testdata/responses (reasoning items, calls and outputs) over the threshold, compacted afresh.
And on `/v1/messages`: the long trajectory as an Anthropic request (tool_use and tool_result
blocks, converted as the replay benchmark converts it), compacted afresh, and resent.

The dev data comes from --data, else ENGRAM_DEV_DATA.
"""

from __future__ import annotations

import argparse
import http.client
import json
import pathlib
import socket
import statistics
import threading
import time
import sys
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import serve

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "scripts"))
import devpaths  # noqa: E402
from bench_cache import to_anthropic  # noqa: E402  (the replay's conversion of a trajectory)

REPLY = b'{"id":"c","object":"chat.completion","created":0,"model":"gpt-4o","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}'


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        # Headers and body go out in two writes: without this, Nagle and delayed ACKs add 40 ms.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(REPLY)))
        self.end_headers()
        self.wfile.write(REPLY)


def trajectory(data: pathlib.Path) -> list[dict]:
    records = [json.loads(l) for l in open(data / "sweagent_demos.jsonl", encoding="utf-8") if l.strip()]
    longest = max(records, key=lambda r: len(json.dumps(r["messages"])))
    return [{k: v for k, v in m.items() if k != "id"} for m in longest["messages"]]


def timed(port: int, bodies, n: int, path: str = "/v1/chat/completions") -> list[float]:
    """`bodies(i)`: the i-th request's body."""
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = []
    for i in range(n + 20):
        body = bodies(i)
        start = time.perf_counter()
        headers = {"Content-Type": "application/json"}
        if path == "/v1/messages":
            headers["anthropic-version"] = "2023-06-01"
        conn.request("POST", path, body, headers)
        r = conn.getresponse()
        r.read()
        assert r.status == 200, r.status
        if i >= 20:  # warm-up
            out.append((time.perf_counter() - start) * 1e3)
    conn.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engram-bin", default="target/release/engram")
    ap.add_argument("--data", default=devpaths.data_dir(), help="the dev data directory (default: $ENGRAM_DEV_DATA)")
    ap.add_argument("--n", type=int, default=400)
    args = ap.parse_args()
    args.data = devpaths.require(args.data, "--data", devpaths.DATA_ENV, "the dev data directory")

    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    up_port = upstream.server_address[1]
    proc, port = serve.start(args.engram_bin, "--upstream", f"http://127.0.0.1:{up_port}/v1",
                             "--anthropic-upstream", f"http://127.0.0.1:{up_port}",
                             "--model-window", "gpt-4o=16000", "--model-window", "claude-sonnet-4-5=16000")
    try:
        messages = trajectory(pathlib.Path(args.data))
        small = json.dumps({"model": "gpt-4o", "max_tokens": 1000, "messages": messages[:3]}).encode()
        # The longest prefix under ~1.2x the window: over the threshold, compacted.
        end = next(e for e in range(len(messages), 2, -1)
                   if len(json.dumps({"model": "gpt-4o", "max_tokens": 1000, "messages": messages[:e]})) < 16000 * 4 * 1.2)

        def long_body(i: int | None) -> bytes:
            # A new system prompt each time (`i`) is a new agent: its history shares no prefix
            # with an earlier request's, so no cached summary applies and it is compacted afresh.
            msgs = [dict(m) for m in messages[:end]]
            if i is not None:
                msgs[0]["content"] = f"{msgs[0]['content']}\n(agent {i})"
            return json.dumps({"model": "gpt-4o", "max_tokens": 1000, "messages": msgs}).encode()

        def anthropic_body(i: int | None) -> bytes:
            body = to_anthropic([dict(m) for m in messages[:end]])
            body["model"] = "claude-sonnet-4-5"
            if i is not None:
                body["system"] = f"{body.get('system', '')}\n(agent {i})"
            return json.dumps(body).encode()

        def probe(body: bytes, path: str = "/v1/chat/completions") -> str:
            headers = {"Content-Type": "application/json", "anthropic-version": "2023-06-01"}
            req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", body, headers)
            with urllib.request.urlopen(req) as r:
                h = r.headers
                return (f"{h.get('x-engram-tokens-before')} -> {h.get('x-engram-tokens-after')} tokens, "
                        f"steps {h.get('x-engram-steps')}, prefix {h.get('x-engram-prefix')}")

        resent = long_body(None)
        print(f"long request: {len(resent)} bytes; first time: {probe(resent)}; resent: {probe(resent)}")
        fixture = json.loads((pathlib.Path(__file__).resolve().parents[1] / "testdata" / "responses"
                              / "minisweagent_items.json").read_text(encoding="utf-8"))
        items = fixture["input"]
        # The longest prefix ending on a tool output under ~1.2x the window: compacted.
        cut = next(e for e in range(len(items), 2, -1) if items[e - 1]["type"] == "function_call_output"
                   and len(json.dumps(items[:e])) < 16000 * 4 * 1.2)
        small_items = json.dumps({"model": "gpt-4o", "instructions": fixture["instructions"][:400],
                                  "input": items[:2], "max_output_tokens": 1000}).encode()

        def long_items(i: int) -> bytes:
            return json.dumps({"model": "gpt-4o", "instructions": f"{fixture['instructions']}\n(agent {i})",
                               "input": items[:cut], "max_output_tokens": 1000}).encode()

        print(f"long Responses request: {probe(long_items(-1), '/v1/responses')}")
        anthropic_resent = anthropic_body(None)
        print(f"long Anthropic request: first time: {probe(anthropic_resent, '/v1/messages')}; "
              f"resent: {probe(anthropic_resent, '/v1/messages')}")
        print("| case | direct p50 | via engram p50 | added p50 | direct p99 | via engram p99 |")
        print("|---|---:|---:|---:|---:|---:|")
        cases = [
            ("no compaction (byte for byte)", lambda i: small, "/v1/chat/completions"),
            ("compacted afresh (a new history each time)", lambda i: long_body(i), "/v1/chat/completions"),
            ("the same history resent (the view extended)", lambda i: resent, "/v1/chat/completions"),
            ("Responses, no compaction (byte for byte)", lambda i: small_items, "/v1/responses"),
            ("Responses, compacted afresh", long_items, "/v1/responses"),
            ("Anthropic, compacted afresh", anthropic_body, "/v1/messages"),
            ("Anthropic, the same history resent (the view extended)", lambda i: anthropic_resent,
             "/v1/messages"),
        ]
        for name, bodies, path in cases:
            direct = timed(up_port, bodies, args.n, path)
            proxied = timed(port, bodies, args.n, path)
            q = lambda xs, p: statistics.quantiles(xs, n=100)[p - 1]
            print(f"| {name} | {statistics.median(direct):.2f} ms | {statistics.median(proxied):.2f} ms | "
                  f"{statistics.median(proxied) - statistics.median(direct):.2f} ms | {q(direct, 99):.2f} ms | "
                  f"{q(proxied, 99):.2f} ms |")
    finally:
        proc.terminate()
        proc.wait()
        upstream.shutdown()


if __name__ == "__main__":
    main()
