"""The README's Python snippet runs as written, from the repository's root, in a fresh home."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import REPO


def test_the_readmes_python_snippet_runs_as_written(tmp_path):
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert blocks, "the README has a Python snippet"
    # The first block is the one a user runs with nothing else set up; the second needs a model.
    env = dict(os.environ, HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path / "data"),
               XDG_CONFIG_HOME=str(tmp_path / "config"))
    env = {k: v for k, v in env.items() if not k.startswith("ENGRAM_") or k == "ENGRAM_SKIP_LOG"}
    out = subprocess.run([sys.executable, "-c", blocks[0]], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "data" / "engram" / "engram.db").exists(), "Store() used the data directory"
