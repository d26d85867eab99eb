#!/usr/bin/env python3
"""Cuts the small dev-data fixtures the default test suite runs on (testdata/dev/).

A fresh clone has no dev data beside it, so the tests read a few whole records of each dev file
from testdata/dev/, under the same file names; the licences of the sources are copied beside them.
Tests that want every record run when ENGRAM_DEV_DATA points at the full dev data.

    python3 scripts/make_test_fixtures.py [DEV_DATA_DIR]    # default: $ENGRAM_DEV_DATA
"""
import json
import os
import shutil
import sys

import devpaths

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = devpaths.require(sys.argv[1] if len(sys.argv) > 1 else devpaths.data_dir(), "the first argument",
                        devpaths.DATA_ENV, "the dev data directory")
LICENSES = os.path.join(DATA, "..", "licenses")
OUT = os.path.join(HERE, "..", "testdata", "dev")

# file -> (the first N records, and these records by id). The tests pick by id or take the
# longest record or the first few; these are the ones they name or take.
PICK = {
    "minisweagent_swebv_gemini3pro.jsonl": (1, ["sphinx-doc__sphinx-9229"]),
    "sweagent_demos.jsonl": (3, ["longest"]),
    "taubench_gpt4o_airline.jsonl": (3, ["airline-task10-trial0"]),
    "locomo.jsonl": (1, []),
    "longmemeval_oracle.jsonl": (3, []),
}
SOURCES = {
    "minisweagent_swebv_gemini3pro.jsonl": "mini-swe-agent-LICENSE.md",
    "sweagent_demos.jsonl": "swe-agent-LICENSE",
    "taubench_gpt4o_airline.jsonl": "tau-bench-LICENSE",
    "locomo.jsonl": "locomo-LICENSE.txt",
    "longmemeval_oracle.jsonl": "longmemeval-LICENSE",
}

os.makedirs(os.path.join(OUT, "licenses"), exist_ok=True)
for name, (first, ids) in PICK.items():
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        lines = [l for l in f if l.strip()]
    chosen = lines[:first]
    records = [json.loads(l) for l in lines]
    for want in ids:
        if want == "longest":
            line = max(lines, key=len)
        else:
            line = next(l for l, r in zip(lines, records) if r.get("id") == want)
        if line not in chosen:
            chosen.append(line)
    with open(os.path.join(OUT, name), "w", encoding="utf-8") as f:
        f.writelines(chosen)
    print(f"{name}: {len(chosen)} of {len(lines)} records")
for lic in sorted(set(SOURCES.values())):
    shutil.copy(os.path.join(LICENSES, lic), os.path.join(OUT, "licenses", lic))
