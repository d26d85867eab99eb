"""The type stubs match the native module, and the package type-checks."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_stubs_match_the_native_module():
    pytest.importorskip("mypy")
    out = subprocess.run([sys.executable, "-m", "mypy.stubtest", "engram._engram"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_package_and_the_example_type_check():
    pytest.importorskip("mypy")
    out = subprocess.run([sys.executable, "-m", "mypy", "--ignore-missing-imports",
                          str(ROOT / "python" / "engram"), str(ROOT / "examples")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_public_name_has_a_docstring():
    import engram
    import engram.compat

    for module in (engram, engram.compat):
        for name in module.__all__:
            obj = getattr(module, name)
            if callable(obj):
                assert obj.__doc__, f"{module.__name__}.{name} has no docstring"
