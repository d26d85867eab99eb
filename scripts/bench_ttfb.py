#!/usr/bin/env python3
"""Time to the first byte of a streamed reply: the upstream's own, through engram without its
history tools, and through engram with them offered (where the reply is relayed as it comes and
only a call to engram's tools is held back). A local fake upstream streams an Anthropic reply of
40 events, one every `--gap` ms; each figure is the median of `--runs` requests, measured side by
side in one run.

    cargo build --release -p engram-cli
    python3 scripts/bench_ttfb.py --engram-bin target/release/engram
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_upstream(gap: float) -> int:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            events = [("message_start", {"type": "message_start", "message": {
                "id": f"msg_{time.time_ns()}", "type": "message", "role": "assistant", "model": body["model"],
                "content": [], "stop_reason": None, "usage": {"input_tokens": 100, "output_tokens": 1}}}),
                ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})]
            events += [("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                 "delta": {"type": "text_delta", "text": f"word{i} "}}) for i in range(36)]
            events += [("content_block_stop", {"type": "content_block_stop", "index": 0}),
                       ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 40}}),
                       ("message_stop", {"type": "message_stop"})]
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            for name, data in events:
                time.sleep(gap)
                self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
            self.close_connection = True

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


def start_engram(binary: str, upstream: int, recall: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    work = tempfile.mkdtemp(prefix="engram-ttfb-")
    proc = subprocess.Popen([binary, "--db", os.path.join(work, "e.db"), "serve", "--listen", f"127.0.0.1:{port}",
                             "--anthropic-upstream", f"http://127.0.0.1:{upstream}", "--recall-tools", recall,
                             "--model-window", "claude-sonnet-4-5=8000"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**{k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")},
                                 "XDG_CONFIG_HOME": os.path.join(work, "config")})
    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).read()
            return proc, port
        except OSError:
            time.sleep(0.05)
    sys.exit("engram serve did not start")


def request() -> bytes:
    """A conversation past the 8,000-token window: engram compacts it, and with `always` offers
    its history tools."""
    messages = [{"role": "user", "content": "Review the release notes."}]
    for i in range(30):
        messages.append({"role": "assistant", "content": f"Section {i} read."})
        messages.append({"role": "user", "content": f"Section {i + 1}: " + "details of the change " * 40})
    return json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 1000, "stream": True, "messages": messages}).encode()


def timed(port: int, body: bytes) -> tuple[float, float]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/messages", data=body, method="POST",
                                 headers={"content-type": "application/json", "anthropic-version": "2023-06-01"})
    started = time.perf_counter()
    with urllib.request.urlopen(req, timeout=120) as r:
        first = None
        while True:
            chunk = r.read1(65536)
            if not chunk:
                break
            if first is None and b"text_delta" in chunk:
                first = time.perf_counter() - started
    return first or float("nan"), time.perf_counter() - started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engram-bin", default="target/release/engram")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--gap", type=float, default=0.02, help="seconds between two streamed events")
    args = ap.parse_args()
    upstream = serve_upstream(args.gap)
    body = request()
    off, off_port = start_engram(args.engram_bin, upstream, "off")
    on, on_port = start_engram(args.engram_bin, upstream, "always")
    try:
        figures: dict[str, list[tuple[float, float]]] = {"upstream": [], "engram": [], "engram_with_tools": []}
        for _ in range(args.runs):
            # Interleaved, so that the machine's noise falls on all three alike.
            figures["upstream"].append(timed(upstream, body))
            figures["engram"].append(timed(off_port, body))
            figures["engram_with_tools"].append(timed(on_port, body))
        base = statistics.median(f for f, _ in figures["upstream"])
        for name, runs in figures.items():
            first = statistics.median(f for f, _ in runs)
            whole = statistics.median(w for _, w in runs)
            print(f"{name:>18}: first text at {first * 1e3:7.1f} ms ({first / base:.2f}x the upstream's), "
                  f"reply ended at {whole * 1e3:7.1f} ms")
    finally:
        for p in (off, on):
            p.terminate()
            p.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
