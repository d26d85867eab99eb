#!/usr/bin/env python3
"""Peak memory against input size: `count`, `compact`, `memory import` and REST appends.

Each step runs as a user runs it (a whole `engram` process, or a running `engram serve`), on
generated inputs of two shapes:

- tiny: short chat turns (`{"role": "user", "content": "step 1234: ok"}`, 40-50 bytes each);
- large: 16 KiB tool outputs.

Peak memory is the process's maximum resident set (`ru_maxrss` of the child; for the server,
`VmHWM` after the appends less `VmRSS` before them, once a small append has loaded the
tokenizer). The ratio is peak / input bytes.

    python3 scripts/bench_peak.py --engram-bin target/release/engram --mb 200
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

MIB = 1 << 20


def tiny_messages(target: int):
    """Yields short chat turns until `target` bytes of JSON have been produced."""
    rng = random.Random(7)
    words = ["ok", "done", "step", "next", "fine", "retry", "yes", "no", "ran", "passed"]
    size = 0
    i = 0
    while size < target:
        role = "user" if i % 2 == 0 else "assistant"
        text = f"{rng.choice(words)} {i}: {rng.choice(words)}"
        line = json.dumps({"role": role, "content": text})
        size += len(line) + 2
        i += 1
        yield line


def large_messages(target: int):
    rng = random.Random(7)
    size = 0
    i = 0
    while size < target:
        role = "user" if i % 2 == 0 else "assistant"
        text = " ".join(f"line{rng.randrange(10**6)}" for _ in range(16 * 1024 // 11))
        line = json.dumps({"role": role, "content": text})
        size += len(line) + 2
        i += 1
        yield line


def write_conversation(path: Path, lines) -> int:
    with path.open("w") as f:
        f.write("[")
        for n, line in enumerate(lines):
            if n:
                f.write(",\n")
            f.write(line)
        f.write("]\n")
    return path.stat().st_size


def run_peak(cmd: list[str], stdin_path: Path | None = None) -> tuple[int, float]:
    """Runs `cmd`, returning (peak RSS in bytes, seconds); output is discarded.

    The peak is read by GNU time, which forks the command from its own small process: a child
    forked from this Python process would report at least this process's resident set (the
    kernel carries the high-water mark of the image it replaced across `exec`), which hid
    small peaks behind the generator's own memory.
    """
    timer = shutil.which("time", path="/usr/bin:/bin") or sys.exit(
        "needs GNU time (/usr/bin/time; apt install time) to read a child's peak memory"
    )
    with tempfile.NamedTemporaryFile("r", suffix=".maxrss") as out:
        started = time.monotonic()
        stdin = stdin_path.open("rb") if stdin_path else subprocess.DEVNULL
        proc = subprocess.run(
            [timer, "-f", "%M", "-o", out.name, *cmd],
            stdin=stdin,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        elapsed = time.monotonic() - started
        if proc.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed: {proc.stderr.decode(errors='replace')}")
        return int(out.read().split()[-1]) * 1024, elapsed


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_status(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def rest_appends(engram: str, work: Path, lines_of, body_mb: float, clients: int) -> tuple[int, int]:
    """`clients` concurrent appends of `body_mb` MiB each; returns (input bytes, server peak growth)."""
    port = free_port()
    db = work / "serve.db"
    server = subprocess.Popen(
        [engram, "--db", str(db), "serve", "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        def request(method: str, path: str, body: bytes | None = None) -> dict:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            conn.request(method, path, body=body, headers={"content-type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
            if resp.status >= 300:
                sys.exit(f"{method} {path}: {resp.status} {data[:300]!r}")
            return json.loads(data) if data else {}

        ids = [
            request("POST", "/v1/sessions", json.dumps({"model": "gpt-4o-mini"}).encode())["id"]
            for _ in range(clients)
        ]
        body_lines = []
        for line in lines_of(int(body_mb * MIB) - 64):
            body_lines.append(line)
        body = ('{"messages": [' + ",".join(body_lines) + "]}").encode()
        # Warm: one small append loads what any append needs once (the tokenizer's vocabulary),
        # so that the growth measured is the appends' own.
        warm = request("POST", "/v1/sessions", json.dumps({"model": "gpt-4o-mini"}).encode())["id"]
        request("POST", f"/v1/sessions/{warm}/messages", b'{"messages": [{"role": "user", "content": "hi"}]}')
        baseline = proc_status(server.pid, "VmRSS")
        threads = [
            threading.Thread(target=request, args=("POST", f"/v1/sessions/{sid}/messages", body))
            for sid in ids
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        peak = proc_status(server.pid, "VmHWM")
        return len(body) * clients, max(peak - baseline, 0)
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engram-bin", default="target/release/engram")
    parser.add_argument("--mb", type=float, default=200, help="input size for count and compact")
    parser.add_argument("--import-mb", type=float, default=100, help="size of the one memory-import line")
    parser.add_argument("--append-mb", type=float, default=8, help="size of each REST append body")
    parser.add_argument("--clients", type=int, default=8, help="concurrent REST appends")
    args = parser.parse_args()
    engram = str(Path(args.engram_bin).resolve())
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for shape, gen in (("tiny", tiny_messages), ("large", large_messages)):
            conv = work / f"{shape}.json"
            size = write_conversation(conv, gen(int(args.mb * MIB)))
            for step, cmd in (
                ("count", [engram, "count", "--summary", str(conv)]),
                ("compact", [engram, "compact", str(conv)]),
            ):
                peak, secs = run_peak(cmd)
                rows.append((step, shape, size, peak, secs))
            conv.unlink()
            sent, growth = rest_appends(engram, work, gen, args.append_mb, args.clients)
            rows.append((f"REST append x{args.clients}", shape, sent, growth, 0.0))
        # One memory-import line of `--import-mb` MiB (the entry's content), and many tiny entries.
        line_file = work / "line.jsonl"
        with line_file.open("w") as f:
            text = "word " * int(args.import_mb * MIB / 5)
            f.write(json.dumps({"content": text, "source": "bench"}) + "\n")
        peak, secs = run_peak(
            [engram, "--db", str(work / "m1.db"), "memory", "import", str(line_file)]
        )
        rows.append(("memory import (one line)", "large", line_file.stat().st_size, peak, secs))
        tiny_file = work / "tiny.jsonl"
        with tiny_file.open("w") as f:
            for n, line in enumerate(tiny_messages(int(args.import_mb * MIB))):
                f.write(json.dumps({"content": json.loads(line)["content"], "source": f"s{n % 50}"}) + "\n")
        peak, secs = run_peak(
            [engram, "--db", str(work / "m2.db"), "memory", "import", str(tiny_file)]
        )
        rows.append(("memory import", "tiny", tiny_file.stat().st_size, peak, secs))
    print("| step | messages | input | peak memory | peak / input | seconds |")
    print("|---|---|---:|---:|---:|---:|")
    for step, shape, size, peak, secs in rows:
        secs_text = f"{secs:.1f}" if secs else "-"
        print(
            f"| {step} | {shape} | {size / MIB:.0f} MiB | {peak / MIB:.0f} MiB "
            f"| {peak / size:.1f}x | {secs_text} |"
        )


if __name__ == "__main__":
    main()
