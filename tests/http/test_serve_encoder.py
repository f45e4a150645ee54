"""`pooled serve --model` an encoder directory: the encoder's routes answer, generation routes are
a 400 naming what the model serves, and the process drains and exits 0 on SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

from tests.engine.tiny_encoders import SENTENCES, build_tiny_encoder
from tests.http.test_serve_process import free_port

GOLDENS = Path(__file__).parent.parent / "goldens" / "tiny_encoders"


def test_an_encoder_served_alone(tmp_path: Path) -> None:
    model = build_tiny_encoder("bert_mean", tmp_path / "tiny-embedder")
    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "pooled"), "serve", "--port", str(port), "--model", str(model)],
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while not _ready(base):
            assert process.poll() is None, (tmp_path / "serve.log").read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "the server did not become ready"
            time.sleep(0.5)
        listed = httpx.get(f"{base}/v1/models").json()["data"]
        assert [(m["id"], m["kind"], m["max_model_len"]) for m in listed] == [("pooled/tiny-embedder", "embedding", 48)]

        answer = httpx.post(f"{base}/v1/embeddings", json={"model": "pooled/tiny-embedder", "input": list(SENTENCES)})
        expected = json.loads((GOLDENS / "bert_mean.json").read_text())["embeddings"]
        np.testing.assert_allclose([d["embedding"] for d in answer.json()["data"]], expected, atol=1e-5)
        ranked = httpx.post(f"{base}/v1/rerank", json={"query": "cat", "documents": ["the cat", "a dog"]})
        assert ranked.status_code == 200 and len(ranked.json()["results"]) == 2

        chat = httpx.post(
            f"{base}/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
        )
        assert chat.status_code == 400, chat.text
        assert (
            "/v1/embeddings" in chat.json()["error"]["message"]
            and chat.json()["error"]["code"] == "model_not_supported"
        )
        messages = httpx.post(
            f"{base}/v1/messages",
            json={"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]},
        )
        assert messages.status_code == 400 and messages.json()["type"] == "error"
        banner = httpx.get(f"{base}/").text
        assert "(Embeddings, Rerank)" in banner and "Anthropic" not in banner and "chat/completions" not in banner
        assert "Embeddings: pooled/tiny-embedder" in banner
        metrics = httpx.get(f"{base}/metrics").json()
        assert metrics["encode_requests_total"] == 2

        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
        log.close()


def _ready(base: str) -> bool:
    try:
        return bool(httpx.get(f"{base}/health", timeout=2).json().get("ready"))
    except (httpx.HTTPError, ValueError):
        return False
