"""Starts `engram serve` for a benchmark: a fresh database, no configuration from the
environment, loopback on a free port; returns once /healthz answers."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import tempfile
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(engram_bin: str, *args: str) -> tuple[subprocess.Popen, int]:
    """The server process and its port."""
    port = free_port()
    db = pathlib.Path(tempfile.mkdtemp()) / "engram.db"
    proc = subprocess.Popen([engram_bin, "--db", str(db), "serve", "--listen", f"127.0.0.1:{port}", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")})
    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return proc, port
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"engram serve exited with {proc.returncode}")
            time.sleep(0.1)
    proc.terminate()
    raise SystemExit("engram serve did not answer /healthz within 30 s")
