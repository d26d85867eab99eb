"""Observe mode (`engram serve --observe`), as a user would try it before trusting engram with
their traffic: the OpenAI SDK's requests go upstream exactly as sent, and engram says what it
would have saved, per request, in all (GET /v1/proxy/savings) and on the inspector's page."""

from __future__ import annotations

import json
import urllib.request

from test_inspector import chromium
from test_proxy import Upstream, start_engram


def test_observing_forwards_as_sent_and_says_what_engram_would_save(trajectory):
    import openai
    from playwright.sync_api import expect, sync_playwright

    upstream = Upstream()
    proc, base = start_engram("--upstream", f"{upstream.root}/v1", "--model-window", "gpt-4o=16000", "--observe")
    try:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-test", max_retries=0)
        sent = []
        for end in range(4, len(trajectory), 4):
            messages = trajectory[:end]
            client.chat.completions.create(model="gpt-4o", messages=messages)
            sent.append(messages)
        received = [r["body"]["messages"] for r in upstream.requests if r["path"].endswith("/chat/completions")]
        assert received == sent, "every request went as the agent sent it"
        with urllib.request.urlopen(f"{base}/v1/proxy/savings", timeout=30) as r:
            savings = json.loads(r.read())
        assert savings["observe"] is True
        assert savings["savings"]["requests"] == len(sent)
        assert savings["savings"]["tokens_after"] < savings["savings"]["tokens_before"], savings
        executable = chromium()
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
            page = browser.new_page()
            page.goto(f"{base}/ui#/proxy")
            expect(page.locator("#savings")).to_contain_text("engram would have cut the bill")
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        upstream.close()
