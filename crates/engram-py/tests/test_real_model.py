"""A real model: llama.cpp's llama-server with SmolLM2 writes (or fails to write) the summary
of a real trajectory through the Python API. `scripts/llama_server.sh` provides it; CI never
skips this test."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request

import pytest

import engram
from conftest import load_records, openai_messages
from test_compact import tool_pairs_intact


@pytest.fixture(scope="module")
def llama():
    server, model = os.environ.get("ENGRAM_LLAMA_SERVER"), os.environ.get("ENGRAM_SMOLLM2_GGUF")
    if not (server and model and os.path.isfile(server) and os.path.isfile(model)):
        if os.environ.get("CI"):
            pytest.fail('CI must run the real-model test: eval "$(scripts/llama_server.sh)" first')
        pytest.skip('llama: needs llama-server and SmolLM2: eval "$(scripts/llama_server.sh)"')
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # `-n 256`: the server caps each reply at 256 tokens whatever a request asks for (engram's
    # requests are unchanged). SmolLM2 writing a whole summary budget took 8 to 9 minutes a test
    # on 2 cores; a capped reply proves the same path, to a real model and back or to the fallback.
    proc = subprocess.Popen([server, "-m", model, "--host", "127.0.0.1", "--port", str(port),
                             "-t", "2", "-c", "4096", "-n", "256"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.time() < deadline, "llama-server did not become ready"
            assert proc.poll() is None, "llama-server exited"
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.kill()
        proc.wait()


def test_a_real_model_summarises_or_falls_back_cleanly(llama):
    record = load_records("minisweagent_swebv_gemini3pro.jsonl", 1)[0]
    messages = [{k: v for k, v in m.items() if k != "meta"} for m in openai_messages(record)][:14]
    model = engram.LlmSummarizer("openai", "smollm2", base_url=llama, timeout_seconds=120,
                                 max_retries=1)
    budget = engram.count_tokens(messages, model="gpt-4o") // 3
    out = engram.compact(messages, budget, model="gpt-4o", strategy="summarize", summarizer=model)
    usage = __import__("json").loads(model.usage_json())
    assert usage["calls"] >= 1, "the real model was called"
    assert engram.count_tokens(out.messages, model="gpt-4o") <= budget
    assert out.messages[0] == messages[0] and out.messages[-1] == messages[-1]
    tool_pairs_intact(out.messages)
    # SmolLM2-135M rarely writes all six sections: either its summary passed validation or the
    # report says why the model-free one stands in.
    assert out.report["summarizer"] == "openai:smollm2" or out.report["summary_fallback"], out.report
    print("summarizer:", out.report["summarizer"], "fallback:", out.report["summary_fallback"])

    s = engram.summarize(messages, summarizer=model, max_tokens=400)
    assert s["summary"] and (s["fallback"] is None) == (s["summarizer"] == "openai:smollm2")
