#!/usr/bin/env python3
"""Checks that the test suite's three builds share their dependencies.

`scripts/test.sh` builds the Rust tests (`cargo test --workspace --all-features`), the Python
wheel (`-p engram-py`) and the Node module (`-p engram-node`) into one target directory. Cargo
compiles a dependency again when a build asks it for other features (or when anything below it
changed), so a dependency that the bindings ask for with fewer features than the tests do is
compiled twice, and with it everything above it (candle, tantivy, tokenizers: minutes on 2
cores). crates/engram-workspace-hack lists the features that make the builds agree; this script
says which dependencies still differ, from cargo's unit graphs (`--unit-graph`, nightly cargo),
without building anything.

    python3 scripts/feature_unification.py     # exit 1 and the packages when a dependency differs

The workspace's own crates are left out (the bindings build the core with fewer features, on
purpose), as are packages that only one build has (pyo3, napi).
"""
import hashlib
import json
import subprocess
import sys

BUILDS = {
    "tests": ["test", "--workspace", "--all-features", "--no-run"],
    "python": ["build", "-p", "engram-py", "--features", "embeddings,workspace-hack,pyo3/extension-module"],
    "node": ["build", "-p", "engram-node", "--features", "embeddings,workspace-hack"],
}


def units(args):
    """Each unit of the build, by an identity that covers everything below it."""
    command = ["cargo", "+nightly", *args, "--locked", "--unit-graph", "-Z", "unstable-options"]
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{run.stderr}")
    graph = json.loads(run.stdout)["units"]
    memo = {}

    def identity(i):
        if i not in memo:
            unit = graph[i]
            profile = {k: v for k, v in unit["profile"].items() if k != "name"}  # test = dev
            below = sorted(identity(d["index"]) for d in unit["dependencies"])
            key = [unit["pkg_id"], unit["target"]["name"], unit["target"]["kind"], unit["mode"],
                   sorted(unit["features"]), profile, unit["platform"], below]
            memo[i] = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()
        return memo[i]

    return {identity(i): unit["pkg_id"] for i, unit in enumerate(graph)}


def package(pkg_id):
    return pkg_id.rsplit("#", 1)[-1]


def main():
    built = {name: units(args) for name, args in BUILDS.items()}
    tests = built["tests"]
    in_tests = {package(p) for p in tests.values()}
    differ = False
    for name in ("python", "node"):
        again = sorted({package(p) for key, p in built[name].items()
                        if key not in tests and not p.startswith("path+") and package(p) in in_tests})
        if again:
            differ = True
            print(f"the {name} build compiles these dependencies again (not as the tests do): {' '.join(again)}")
    if differ:
        print("give crates/engram-workspace-hack/Cargo.toml the features the tests' build gives the lowest of them")
        return 1
    print("the Python and Node builds reuse every dependency the tests' build compiles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
