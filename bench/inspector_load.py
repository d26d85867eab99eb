"""How long the inspector's session page takes to show a long session, in a real headless
Chromium: a session of N messages (the dev trajectories' messages, appended in batches the way
a busy agent's log grows, so that the threshold compacts it along the way), then the page loaded
R times; the time, on the page's own clock, from navigation to the window bar, the view and the
compaction timeline on screen (the timeline fills in after the bar and the view).

    python3 bench/inspector_load.py --engram-bin target/release/engram [--messages 10000] [--runs 20]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import statistics
import time
import urllib.request

import serve

ROOT = pathlib.Path(__file__).resolve().parents[1]


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def main() -> None:
    from playwright.sync_api import sync_playwright

    ap = argparse.ArgumentParser()
    ap.add_argument("--engram-bin", default="target/release/engram")
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    source = [json.loads(l) for l in open(ROOT / "testdata/dev/minisweagent_swebv_gemini3pro.jsonl") if l.strip()]
    pool = [{k: v for k, v in m.items() if k not in ("id", "meta")} for r in source for m in r["messages"][1:]]
    proc, port = serve.start(args.engram_bin)
    base = f"http://127.0.0.1:{port}"
    try:
        sid = post(f"{base}/v1/sessions", {"model": "gpt-4o", "name": "long"})["id"]
        post(f"{base}/v1/sessions/{sid}/messages", {"messages": [source[0]["messages"][0] | {"id": None}]})
        started = time.time()
        n, batch = 1, []
        while n < args.messages:
            # Whole turns (an assistant call with its result), cycling through the pool.
            m = pool[(n - 1) % len(pool)]
            batch.append(m)
            n += 1
            if len(batch) >= 200 and batch[-1]["role"] != "assistant":
                post(f"{base}/v1/sessions/{sid}/messages", {"messages": batch})
                batch = []
        if batch:
            post(f"{base}/v1/sessions/{sid}/messages", {"messages": batch})
        detail = json.loads(urllib.request.urlopen(f"{base}/v1/sessions/{sid}").read())
        print(f"session: {detail['session']['messages']} messages, {len(detail['compactions'])} compactions, "
              f"built in {time.time() - started:.1f} s")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
            page = browser.new_page()
            times, outside, whole = [], [], []
            for i in range(args.runs + 3):
                start = time.perf_counter()
                page.goto(f"{base}/ui#/session/{sid}")
                page.wait_for_selector("#view li")
                outside.append((time.perf_counter() - start) * 1e3)
                # The page's own clock: from the start of navigation to its content on screen.
                page.wait_for_selector("#timeline")
                times.append(page.evaluate(
                    "new Promise(r => requestAnimationFrame(() => r(performance.getEntriesByName('engram:rendered')[0].startTime)))"))
                whole.append(page.evaluate("performance.getEntriesByName('engram:timeline')[0].startTime"))
                page.goto("about:blank")
            times, outside, whole = times[3:], outside[3:], whole[3:]
            print(f"navigation to the whole page on screen (the page's clock): "
                  f"p50 {statistics.median(times):.1f} ms, max {max(times):.1f} ms over {len(times)} loads; "
                  f"the compaction timeline (filled in last) at p50 {statistics.median(whole):.1f} ms; "
                  f"as Playwright sees it (with its own round trips): p50 {statistics.median(outside):.1f} ms")
            browser.close()
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
