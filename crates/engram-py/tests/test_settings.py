"""The package finds its settings as the CLI does: the models file, the configuration file and the
database from ENGRAM_MODELS, ENGRAM_CONFIG and ENGRAM_DB (else engram's config and data
directories). Each case runs in a fresh interpreter: the registry is read once per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

SCRIPT = """
import json, engram
store = engram.Store()
session = store.new_session()
print(json.dumps({
    "window": engram.Counter("house-model").window,
    "session_model": session.info["model"],
    "db": store.path,
}))
"""


def run(env: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT], env={**os.environ, **env},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_models_file_the_config_file_and_the_database_are_found(tmp_path):
    models = tmp_path / "models.toml"
    models.write_text('[[model]]\nid = "house-model"\ncontext_window = 12345\n'
                      'max_output_tokens = 1000\ntokenizer = "cl100k"\n')
    config = tmp_path / "config.toml"
    config.write_text('[session]\nmodel = "house-model"\n')
    db = tmp_path / "settings.db"
    got = run({"ENGRAM_MODELS": str(models), "ENGRAM_CONFIG": str(config), "ENGRAM_DB": str(db)})
    assert got["window"] == 12345
    assert got["session_model"] == "house-model", "the configuration's session model"
    assert got["db"] == str(db)


def test_a_broken_models_file_is_an_error_that_names_it(tmp_path):
    models = tmp_path / "models.toml"
    models.write_text("[[model]]\nid = 1\n")
    out = subprocess.run([sys.executable, "-c", "import engram; engram.Counter('gpt-4o')"],
                         env={**os.environ, "ENGRAM_MODELS": str(models)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "models.toml" in out.stderr, out.stderr
