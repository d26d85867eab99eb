"""The inspector at /ui, driven in a real headless Chromium (Debian's `chromium`, through
Playwright for Python) against `engram serve` with two tenants: a session built from a real dev
trajectory and compacted at least twice, the context-window bar's numbers against the API's, a
summary expanded to its originals with the agent's own history tool, the memory and proxy pages,
the keyboard, no console errors, and another tenant's session a 404.

With ENGRAM_SCREENSHOTS=DIR the three pages are saved there as PNG files (docs/ holds them)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import tempfile
import time
import urllib.request

import pytest

from test_proxy import Upstream, start_engram

KEY_A = "acme-inspector-key-0001"
KEY_B = "umbrella-inspector-key-0002"


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.skip("chromium: needs Debian's chromium (apt install chromium; .ci/run installs it)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("chromium: needs Playwright for Python (pip install playwright)")
    return path


def call(base: str, method: str, path: str, key: str, body=None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method,
                                     headers={"authorization": f"Bearer {key}", "content-type": "application/json",
                                              "x-engram-key": key})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


@pytest.fixture
def served(trajectory):
    keys = pathlib.Path(tempfile.mkdtemp()) / "keys"
    keys.write_text(f"acme:{KEY_A}\numbrella:{KEY_B}\n")
    upstream = Upstream()
    proc, base = start_engram("--api-keys", str(keys), "--upstream", f"{upstream.root}/v1",
                              "--model-window", "gpt-4o=16000", "--inspect-proxy-bodies", "5")
    # A session as the agent builds it: the trajectory appended turn by turn in a small window,
    # so that the threshold compacts it more than once.
    status, created = call(base, "POST", "/v1/sessions", KEY_A, {"model": "gpt-4o", "window": 4000, "name": "swe-agent demo"})
    assert status == 201, created
    sid = created["id"] if "id" in created else created["session"]["id"]
    for m in trajectory:
        status, reply = call(base, "POST", f"/v1/sessions/{sid}/messages", KEY_A, {"messages": [m]})
        assert status in (200, 201), reply
    status, detail = call(base, "GET", f"/v1/sessions/{sid}", KEY_A)
    assert len(detail["compactions"]) >= 2, "compacted at least twice"
    # Memory: an entry consolidated by a sleep a day later (archived, with a summary), then one
    # still working.
    call(base, "POST", "/v1/memory", KEY_A, {"content": "The pydicom build fails on the RLE decoder", "source": "notes"})
    tomorrow = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 2 * 86400))
    status, slept = call(base, "POST", "/v1/memory/sleep", KEY_A, {"now": tomorrow})
    assert status == 200 and slept["items_consolidated"] == 1, slept
    call(base, "POST", "/v1/memory", KEY_A, {"content": "Run the RLE tests with pytest -k rle", "source": "notes"})
    # One proxied request, to list on the proxy page.
    status, _ = call(base, "POST", "/v1/chat/completions", KEY_A,
                     {"model": "gpt-4o", "messages": trajectory, "max_tokens": 1000})
    assert status == 200
    # And one engram cannot read (forwarded as sent): the page says so.
    status, _ = call(base, "POST", "/v1/chat/completions", KEY_A,
                     {"model": "gpt-4o", "messages": "not a list"})
    yield base, sid
    proc.terminate()
    proc.wait(timeout=30)
    upstream.close()


def test_the_inspector_shows_what_the_model_sees(served):
    from playwright.sync_api import expect, sync_playwright

    executable = chromium()
    base, sid = served
    shots = os.environ.get("ENGRAM_SCREENSHOTS")
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))

        # With keys, the page asks for one; the key opens its tenant's sessions.
        page.goto(f"{base}/ui")
        page.fill("#key", KEY_A)
        page.keyboard.press("Enter")
        link = page.get_by_role("link", name="swe-agent demo")
        expect(link).to_be_visible()
        link.click()

        # The bar: each kind's tokens as the API counts them.
        expect(page.locator("#window-parts")).to_be_visible()
        _, use = call(base, "GET", f"/v1/sessions/{sid}/window", KEY_A)
        shown = {row.get_attribute("data-kind"): int(row.locator("[data-tokens]").get_attribute("data-tokens"))
                 for row in page.locator("#window-parts tbody tr").all()}
        expected = {part["kind"]: part["tokens"] for part in use["parts"]}
        expected.update(free=use["free"], reply=use["reply_reserve"])
        assert shown == expected
        assert int(page.locator("#window-used").get_attribute("data-tokens")) == use["used"]
        assert use["parts"][1]["tokens"] > 0, "a summary is in the view"
        expect(page.locator("#mark-threshold")).to_be_attached()
        expect(page.locator("#timeline tbody tr")).to_have_count(len(call(base, "GET", f"/v1/sessions/{sid}", KEY_A)[1]["compactions"]))
        if shots:
            page.screenshot(path=os.path.join(shots, "inspector-session.png"), full_page=False)

        # The work ledger: each file the agent's tool calls named, with its latest action, as
        # the API has it.
        _, ledger = call(base, "GET", f"/v1/sessions/{sid}/ledger", KEY_A)
        assert ledger["files"], "the demo trajectory opens and edits files"
        files = page.locator("#ledger-files tbody tr")
        expect(files).to_have_count(len(ledger["files"]))
        expect(files.first).to_contain_text(ledger["files"][0]["path"])
        expect(files.first).to_contain_text(ledger["files"][0]["action"])
        if ledger["failures"]:
            expect(page.locator("#ledger-failures tbody tr")).to_have_count(len(ledger["failures"]))

        # The history part by part, as the sleep built its timeline; a search lists the parts
        # about a topic.
        _, timeline = call(base, "GET", f"/v1/sessions/{sid}/timeline", KEY_A)
        assert timeline["built_to"] is not None and timeline["parts"], timeline
        rows = page.locator("#history-parts tbody tr")
        expect(rows).to_have_count(len(timeline["parts"]))
        expect(rows.first).to_contain_text(timeline["parts"][0]["line"])
        expect(rows.first).to_contain_text(timeline["parts"][0]["from_id"])
        word = "pydicom"
        _, found = call(base, "GET", f"/v1/sessions/{sid}/timeline?query={word}", KEY_A)
        assert 0 < len(found["parts"]) <= len(timeline["parts"]), found
        page.fill("#history-q", word)
        page.get_by_role("button", name="Find").click()
        expect(rows).to_have_count(len(found["parts"]))
        expect(rows.first).to_have_attribute("data-part", str(found["parts"][0]["part"]))
        page.fill("#history-q", "zeppelinesque")
        page.get_by_role("button", name="Find").click()
        expect(page.locator("#history-section")).to_contain_text("No part matches.")

        # A summary expands to the originals it stands for, by keyboard, through read_history.
        summary = page.locator('li[data-kind="summary"]').first
        button = summary.get_by_role("button")
        button.focus()
        page.keyboard.press("Enter")
        expect(button).to_have_attribute("aria-expanded", "true")
        _, context = call(base, "GET", f"/v1/sessions/{sid}/context?provenance=true", KEY_A)
        sources = next(m for m in context["messages"] if m["engram"]["kind"] == "summary")["engram"]["source_ids"]
        _, originals = call(base, "POST", f"/v1/sessions/{sid}/tools/read_history", KEY_A,
                            {"ids": sources, "max_tokens": 8000})
        assert summary.locator("pre").inner_text().strip() == originals["content"].strip()

        # Memory: tier counts, a search, the consolidation log.
        page.goto(f"{base}/ui#/memory")
        _, stats = call(base, "GET", "/v1/memory/stats", KEY_A)
        assert stats["archive"] == 1
        history = stats.pop("history")
        for tier, n in stats.items():
            expect(page.locator(f'#tiers [data-tier="{tier}"]')).to_have_text(f"{tier}: {n:,}")
        # The sleep recorded the counts it left; the page shows them.
        assert len(history) == 1 and history[0]["archive"] == 1
        expect(page.locator("#tier-history tbody tr")).to_have_count(1)
        expect(page.locator("#tier-history tbody tr td").nth(3)).to_have_text("1")
        expect(page.locator("#consolidations tbody tr")).to_have_count(1)
        page.fill("#q", "RLE decoder")
        page.select_option("#tier", "archive")
        page.get_by_role("button", name="Search").click()
        expect(page.locator("#results")).to_contain_text("The pydicom build fails on the RLE decoder")
        expect(page.locator("#results .lineage").first).to_contain_text("consolidated into")
        if shots:
            page.screenshot(path=os.path.join(shots, "inspector-memory.png"))

        # Proxy traffic, with what was sent upstream (kept for the latest 5).
        page.goto(f"{base}/ui#/proxy")
        expect(page.locator("#requests tr.note").first).to_contain_text("forwarded unchanged")
        row = page.locator("#requests tbody tr[data-request]").nth(1)
        expect(row).to_contain_text("/v1/chat/completions")
        row.get_by_role("button", name="What was sent").click()
        expect(page.locator("#requests pre").first).to_contain_text('"messages"')
        if shots:
            page.screenshot(path=os.path.join(shots, "inspector-proxy.png"))

        assert errors == [], errors
        # Another tenant's key: the session is not there (404), and its list is empty.
        page.evaluate(f"sessionStorage.setItem('engram-inspector-key', '{KEY_B}')")
        page.goto(f"{base}/ui#/session/{sid}")
        expect(page.locator('.error[data-status="404"]')).to_be_visible()
        assert call(base, "GET", f"/v1/sessions/{sid}", KEY_B)[0] == 404
        page.goto(f"{base}/ui#/sessions")
        page.reload()
        expect(page.locator("main")).to_contain_text("No sessions yet.")
        browser.close()
    # Only the refused request, as the browser reports any 404.
    assert all("status of 404" in e for e in errors), errors
