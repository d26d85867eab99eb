#!/usr/bin/env python3
"""Memory benchmark: engram against mnemosyne-memory, side by side, on the same entries.

Working-memory entries are built from the dev data (--data): every message's text,
cut into pieces of at most 600 characters, becomes one entry whose source is the dataset and the
role (or tool), whose session is the conversation, and whose time is spread over the 48 hours
before now. For more entries than the data has, the data is cycled with new ids and sessions.
Queries are the LoCoMo and LongMemEval questions. A Mnemosyne object keeps one session, so the
side by side gives both tools the entries in one session ("bench"); engram also runs on them
with their conversations as sessions (a group, and a summary, per source and conversation).

    python3 scripts/bench_memory.py --entries 10000 --peer        # engram and mnemosyne
    python3 scripts/bench_memory.py --entries 1000000             # engram alone, at scale

engram: `engram memory import` (one process, timed end to end), `engram memory sleep` (with
--now after every entry's TTL/2, so everything is consolidated, as mnemosyne's force=True; one
process each time, run --sleep-runs times on copies of the imported store, the median reported), and
`engram bench search` (each query in process, after a warm-up pass; run before the sleep and again
after it, when everything is archived and the default search finds the summaries). Peak memory is each
process's maximum resident set (GNU time's, or wait4's without it). Every timed step, of either tool,
starts after os.sync(). mnemosyne: Mnemosyne(db_path=...).remember() per
entry, sleep(force=True) until it has nothing left to consolidate (one call takes at most 5,000
entries), recall(q, top_k=10) per query, in this Python process.
"""

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import devpaths

ROOT = Path(__file__).resolve().parent.parent


def texts(dev):
    """(dataset, conversation id, role or tool, text) for every message of the dev data."""
    for path in sorted(dev.glob("*.jsonl")):
        dataset = path.stem.split("_")[0]
        for line in path.open():
            conv = json.loads(line)
            names = {}
            for m in conv["messages"]:
                for call in m.get("tool_calls") or []:
                    names[call.get("id")] = call.get("function", {}).get("name", "tool")
                content = m.get("content") or ""
                if isinstance(content, list):
                    content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
                role = m.get("role", "user")
                if role == "tool":
                    role = names.get(m.get("tool_call_id"), "tool")
                if content.strip():
                    yield dataset, conv["id"], role, content


def pieces(text, size=600):
    text = " ".join(text.split())
    for i in range(0, len(text), size):
        yield text[i : i + size]


def build_entries(dev, n, out, session=None):
    base = [(d, c, r, p) for d, c, r, t in texts(dev) for p in pieces(t)]
    # Every dataset in any prefix of the entries.
    random.Random(11).shuffle(base)
    now = datetime.now(timezone.utc)
    rng = random.Random(7)
    with out.open("w") as f:
        for i in range(n):
            d, c, r, p = base[i % len(base)]
            cycle = i // len(base)
            at = now - timedelta(seconds=rng.uniform(0, 48 * 3600))
            f.write(
                json.dumps(
                    {
                        "id": f"e{i}",
                        "content": p,
                        "source": f"{d}:{r}",
                        "session_id": session or f"{c}#{cycle}",
                        "created_at": at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                        "importance": 0.5,
                    }
                )
                + "\n"
            )
    return len(base)


def build_queries(dev, out, limit=200):
    qs = []
    for name in ["locomo.jsonl", "longmemeval_oracle.jsonl", "longmemeval_s_sample.jsonl"]:
        for line in (dev / name).open():
            for q in json.loads(line).get("questions", []):
                text = q.get("question") if isinstance(q, dict) else q
                if text:
                    qs.append(" ".join(str(text).split()))
    random.Random(3).shuffle(qs)
    qs = qs[:limit]
    out.write_text("\n".join(qs) + "\n")
    return qs


# A child's maximum resident set as wait4 reports it includes what it was before exec, a copy of
# this Python process (60 MiB and more): GNU time, a small process, runs the command instead when
# the machine has it (Debian's package `time`).
GNU_TIME = "/usr/bin/time" if os.path.exists("/usr/bin/time") else None


def settle():
    """Writes out what earlier steps left in the page cache, so that a step's fsyncs do not wait
    for the previous step's data (a 10k sleep right after the import took 20 ms longer)."""
    if hasattr(os, "sync"):
        os.sync()


def run(cmd, env=None):
    """Runs a command; returns (seconds, peak RSS MiB, stdout)."""
    settle()
    with tempfile.NamedTemporaryFile(mode="r", suffix=".rss") as rss_file:
        full = [GNU_TIME, "-f", "%M", "-o", rss_file.name, *cmd] if GNU_TIME else cmd
        started = time.perf_counter()
        p = subprocess.Popen(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        out = p.stdout.read()
        err = p.stderr.read()
        _, status, usage = os.wait4(p.pid, 0)
        seconds = time.perf_counter() - started
        if status != 0:
            sys.exit(f"{' '.join(cmd)} failed: {err.decode()}")
        rss_mib = int(rss_file.read().split()[-1]) / 1024 if GNU_TIME else usage.ru_maxrss / 1024
    return seconds, rss_mib, out.decode()


def remove_store(db):
    """Deletes a database, its WAL and its search index."""
    for suffix in ["", "-wal", "-shm"]:
        Path(str(db) + suffix).unlink(missing_ok=True)
    shutil.rmtree(str(db) + "-index", ignore_errors=True)


def copy_store(db, to):
    """Copies a closed database (no WAL) and its search index."""
    remove_store(to)
    shutil.copyfile(db, to)
    shutil.copytree(str(db) + "-index", str(to) + "-index")


def bench_engram(binary, entries, queries, workdir, name="engram", sleep_runs=1):
    db = workdir / f"{name}.db"
    remove_store(db)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    result = {}
    secs, rss, _ = run([binary, "--db", str(db), "memory", "import", str(entries)], env)
    result["import_s"], result["import_rss_mib"] = secs, rss
    secs, rss, out = run([binary, "--db", str(db), "bench", "search", str(queries), "--json"], env)
    search = json.loads(out)
    result["search_median_ms"] = search["median_ms"]
    result["search_p99_ms"] = search["p99_ms"]
    result["search_rss_mib"] = rss
    later = (datetime.now(timezone.utc) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    # A sleep of 10,000 entries is tens of milliseconds, and one run of it can catch the
    # machine's hiccup: it runs `sleep_runs` times, each on a copy of the imported store but the
    # last (on the store itself), and the median is reported with every run.
    runs = []
    for i in range(sleep_runs):
        target = db
        if i < sleep_runs - 1:
            target = workdir / f"{name}-sleep.db"
            copy_store(db, target)
        secs, rss, out = run(
            [binary, "--db", str(target), "memory", "sleep", "--now", later, "--max-working", "100000000", "--json"],
            env,
        )
        runs.append((secs, rss, json.loads(out)))
    remove_store(workdir / f"{name}-sleep.db")
    secs, rss, slept = sorted(runs, key=lambda r: r[0])[len(runs) // 2]
    result["sleep_s"], result["sleep_rss_mib"] = secs, rss
    result["sleep_runs_s"] = [r[0] for r in runs]
    result["consolidated"] = slept["items_consolidated"]
    result["summaries"] = slept["summaries_created"]
    result["sleep_in_process_s"] = statistics.median(r[2]["duration_ms"] for r in runs) / 1e3
    # Searched again once everything is consolidated: the default search (working and episodic
    # memory) must not slow down as the archive grows.
    secs, rss, out = run([binary, "--db", str(db), "bench", "search", str(queries), "--json"], env)
    search = json.loads(out)
    result["slept_search_median_ms"] = search["median_ms"]
    result["slept_search_p99_ms"] = search["p99_ms"]
    result["slept_search_rss_mib"] = rss
    index = Path(str(db) + "-index")
    result["db_mib"] = (
        sum(Path(str(db) + s).stat().st_size for s in ["", "-wal"] if Path(str(db) + s).exists())
        + sum(f.stat().st_size for f in index.glob("*") if f.is_file())
    ) / (1 << 20)
    return result


def bench_mnemosyne(entries, queries, workdir):
    os.environ.setdefault("MNEMOSYNE_DATA_DIR", str(workdir / "mnemosyne-home"))
    from mnemosyne import Mnemosyne  # noqa: E402

    rows = [json.loads(l) for l in entries.open()]
    db = workdir / "mnemosyne.db"
    db.unlink(missing_ok=True)
    mem = Mnemosyne(session_id="bench", db_path=db)
    settle()
    started = time.perf_counter()
    for r in rows:
        mem.remember(r["content"], source=r["source"], importance=r["importance"])
    result = {"import_s": time.perf_counter() - started}
    times = []
    for q in queries:
        t = time.perf_counter()
        mem.recall(q, top_k=10)
        times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    result["search_median_ms"] = statistics.median(times)
    result["search_p99_ms"] = times[round((len(times) - 1) * 0.99)]
    # One sleep(force=True) consolidates at most SLEEP_BATCH_SIZE (5,000) entries: it is
    # called until it has nothing left, so both tools do the same work (every entry).
    settle()
    started = time.perf_counter()
    reports = []
    while True:
        t = time.perf_counter()
        slept = mem.sleep(force=True)
        if slept.get("status") == "no_op" or not slept.get("items_consolidated"):
            break
        reports.append(
            {k: v for k, v in slept.items() if isinstance(v, (int, float, str))}
            | {"seconds": time.perf_counter() - t}
        )
    result["sleep_s"] = time.perf_counter() - started
    result["sleep_calls"] = reports
    result["consolidated"] = sum(r.get("items_consolidated", 0) for r in reports)
    result["summaries"] = sum(r.get("summaries_created", 0) for r in reports)
    import resource

    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=10_000)
    ap.add_argument("--peer", action="store_true", help="also run mnemosyne-memory")
    ap.add_argument("--engram-bin", default=str(ROOT / "target" / "release" / "engram"))
    ap.add_argument("--data", default=devpaths.data_dir(), help="the dev data directory (default: $ENGRAM_DEV_DATA)")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument(
        "--sleep-runs",
        type=int,
        default=None,
        help="engram sleeps this many times on copies of the imported store and reports the median "
        "(default 5 up to 100,000 entries, else 1)",
    )
    args = ap.parse_args()
    args.data = devpaths.require(args.data, "--data", devpaths.DATA_ENV, "the dev data directory")
    sleep_runs = args.sleep_runs or (5 if args.entries <= 100_000 else 1)
    if sleep_runs < 1:
        sys.exit("--sleep-runs must be at least 1")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="engram-bench-memory-"))
    workdir.mkdir(parents=True, exist_ok=True)
    entries, queries_file = workdir / "entries.jsonl", workdir / "queries.txt"
    one_session = workdir / "entries-one-session.jsonl"
    distinct = build_entries(Path(args.data), args.entries, entries)
    build_entries(Path(args.data), args.entries, one_session, session="bench")
    queries = build_queries(Path(args.data), queries_file)
    print(f"{args.entries} entries ({distinct} distinct pieces of the dev data), {len(queries)} queries; {workdir}")
    # mnemosyne keeps one session per Mnemosyne object (and its sleep groups by source within
    # it): the side by side gives engram the same entries in one session. engram also runs on
    # the entries with their conversations as sessions, where it writes a summary per source
    # and conversation (about 20 times as many groups).
    results = {
        "entries": args.entries,
        "engram": bench_engram(args.engram_bin, one_session, queries_file, workdir, sleep_runs=sleep_runs),
        "engram_sessions": bench_engram(
            args.engram_bin, entries, queries_file, workdir, name="engram-sessions", sleep_runs=sleep_runs
        ),
    }
    for key, label in [("engram", "engram (one session)"), ("engram_sessions", "engram (sessions)")]:
        e = results[key]
        print(
            f"{label}: import {e['import_s']:.2f} s ({e['import_rss_mib']:.0f} MiB), "
            f"sleep {e['sleep_s'] * 1e3:.0f} ms (median of {len(e['sleep_runs_s'])}: "
            f"{', '.join(f'{s * 1e3:.0f}' for s in e['sleep_runs_s'])}), {e['sleep_in_process_s'] * 1e3:.0f} ms in process "
            f"({e['sleep_rss_mib']:.0f} MiB, {e['consolidated']} -> {e['summaries']}), "
            f"search median {e['search_median_ms']:.2f} ms p99 {e['search_p99_ms']:.2f} ms ({e['search_rss_mib']:.0f} MiB), "
            f"after the sleep {e['slept_search_median_ms']:.2f} ms p99 {e['slept_search_p99_ms']:.2f} ms "
            f"({e['slept_search_rss_mib']:.0f} MiB), database {e['db_mib']:.0f} MiB"
        )
    e = results["engram"]
    if args.peer:
        m = bench_mnemosyne(one_session, queries, workdir)
        results["mnemosyne"] = m
        print(
            f"mnemosyne: import {m['import_s']:.2f} s, sleep {m['sleep_s']:.2f} s "
            f"({len(m['sleep_calls'])} calls, {m['consolidated']} -> {m['summaries']}), "
            f"search median {m['search_median_ms']:.2f} ms p99 {m['search_p99_ms']:.2f} ms, peak {m['peak_rss_mib']:.0f} MiB"
        )
        # Per entry consolidated: mnemosyne stores a repeated text once (it consolidates fewer).
        per_entry = (m["sleep_s"] / m["consolidated"]) / (e["sleep_s"] / e["consolidated"])
        per_entry_in = (m["sleep_s"] / m["consolidated"]) / (e["sleep_in_process_s"] / e["consolidated"])
        print(
            f"ratios (mnemosyne / engram, same entries): import {m['import_s'] / e['import_s']:.0f}x, "
            f"sleep {m['sleep_s'] / e['sleep_s']:.0f}x "
            f"({m['sleep_s'] / e['sleep_in_process_s']:.0f}x in process; per entry consolidated "
            f"{per_entry:.0f}x, {per_entry_in:.0f}x in process), "
            f"search median {m['search_median_ms'] / e['search_median_ms']:.1f}x"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
