"""`pooled serve --model` an encoder directory, or a decoder that declares itself an embedding
model: its routes answer, generation routes are a 400 naming what the model serves, and the
process drains and exits 0 on SIGTERM. A chat model with `--embeddings true` and a decoder as
`--embedding-model` answer /v1/embeddings beside generation."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.engine.tiny_decoder_embedders import build_tiny_decoder_embedder
from tests.engine.tiny_encoders import SENTENCES, build_tiny_encoder
from tests.engine.tiny_gguf_encoders import write_encoder_gguf
from tests.pooled_servers import POOLED, free_port

pytestmark = pytest.mark.server

GOLDENS = Path(__file__).parent.parent / "goldens" / "tiny_encoders"


def bert_gguf(_: str, path: Path) -> Path:
    directory = build_tiny_encoder("bert_mean", path.parent / "bert_mean")
    return write_encoder_gguf(directory, path.with_suffix(".gguf"))


# served model → (how to build it, its goldens, its longest input)
BUILDERS: dict[str, tuple[Callable[[str, Path], Path], str, int]] = {
    "bert_mean": (build_tiny_encoder, "bert_mean", 48),
    "bert_gguf": (bert_gguf, "bert_mean", 64),  # the GGUF keeps the position table's length, not max_seq_length
    "qwen3_embedding": (build_tiny_decoder_embedder, "qwen3_embedding", 48),
}


@contextmanager
def serving(tmp_path: Path, *args: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A `pooled serve` process with `args`, once ready: its base URL and the process."""
    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    process = subprocess.Popen(
        [POOLED, "serve", "--port", str(port), *args],
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
        yield base, process
    finally:
        if process.poll() is None:
            process.kill()
        log.close()


@pytest.mark.parametrize("tiny", list(BUILDERS))
def test_an_embedding_model_served_alone(tmp_path: Path, tiny: str) -> None:
    build, golden, longest = BUILDERS[tiny]
    model = build(tiny, tmp_path / "tiny-embedder")
    with serving(tmp_path, "--model", str(model)) as (base, process):
        listed = httpx.get(f"{base}/v1/models").json()["data"]
        expected_models = [("pooled/tiny-embedder", "embedding", longest)]
        assert [(m["id"], m["kind"], m["max_model_len"]) for m in listed] == expected_models

        answer = httpx.post(f"{base}/v1/embeddings", json={"model": "pooled/tiny-embedder", "input": list(SENTENCES)})
        expected = json.loads((GOLDENS / f"{golden}.json").read_text())["embeddings"]
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


def test_a_chat_model_embeds_beside_generating(tmp_path: Path) -> None:
    """The chat model's own embedding pass (`--embeddings true`) and a decoder embedding model
    beside it: each answers /v1/embeddings by name, while the chat model still generates."""
    embedder = build_tiny_decoder_embedder("qwen3_embedding", tmp_path / "tiny-embedder")
    chat = build_tiny_decoder_embedder("qwen3_embedding", tmp_path / "tiny-chat")
    (chat / "modules.json").unlink()  # the same weights, no longer declaring themselves an embedding model
    args = ["--model", str(chat), "--embeddings", "true", "--embedding-model", str(embedder), "--ctx", "64"]
    with serving(tmp_path, *args, "--decode-lanes", "2", "--embedding-max-tokens", "32") as (base, _):
        listed = httpx.get(f"{base}/v1/models").json()["data"]
        assert [(m["id"], m["kind"]) for m in listed] == [
            ("pooled/tiny-chat", "chat"),
            ("pooled/tiny-embedder", "embedding"),
        ]
        expected = json.loads((GOLDENS / "qwen3_embedding.json").read_text())["embeddings"]
        for name in ("pooled/tiny-chat", "pooled/tiny-embedder"):  # --embedding-max-tokens caps both
            answer = httpx.post(f"{base}/v1/embeddings", json={"model": name, "input": list(SENTENCES)})
            assert answer.status_code == 200, answer.text
            assert answer.json()["model"] == name
            np.testing.assert_allclose([d["embedding"] for d in answer.json()["data"]], expected, atol=1e-5)
            too_long = httpx.post(f"{base}/v1/embeddings", json={"model": name, "input": [[5] * 33]})
            assert too_long.status_code == 400 and "at most 32" in too_long.json()["error"]["message"]
        completion = httpx.post(f"{base}/v1/completions", json={"model": "m", "prompt": "the cat", "max_tokens": 4})
        assert completion.status_code == 200, completion.text
        assert completion.json()["choices"][0]["finish_reason"] in ("stop", "length")  # a random model may end at once


def test_an_embedding_model_that_does_not_load_takes_down_only_its_routes(tmp_path: Path) -> None:
    """An encoder beside the chat model whose weights are damaged passes the start's checks (a
    config.json and a model.safetensors are there) and fails to load: /v1/embeddings answers 503
    naming why, while the chat model generates and the cross-encoder beside it reranks; /health
    names the failed part. A speech model with a damaged model.bin is the same: the audio routes
    answer 503 and /v1/models' speech object says why."""
    broken = build_tiny_encoder("bert_mean", tmp_path / "broken-embedder")
    (broken / "model.safetensors").write_bytes(b"\x00\x01")
    reranker = build_tiny_encoder("xlm_roberta_cross_encoder", tmp_path / "reranker")
    chat = build_tiny_decoder_embedder("qwen3_embedding", tmp_path / "tiny-chat")
    (chat / "modules.json").unlink()  # a chat model, not an embedding model
    whisper = tmp_path / "broken-whisper"
    whisper.mkdir()
    for name, text in (("config.json", "{}"), ("tokenizer.json", "{}"), ("model.bin", "not a model")):
        (whisper / name).write_text(text)
    args = ["--model", str(chat), "--embedding-model", str(broken), "--rerank-model", str(reranker), "--ctx", "64"]
    with serving(tmp_path, *args, "--speech-model", str(whisper), "--decode-lanes", "2") as (base, _):
        health = httpx.get(f"{base}/health").json()
        assert (health["ok"], health["state"]) == (True, "serving")
        failed, failed_speech = health["failed_parts"]
        assert (failed["setting"], failed["path"]) == ("embedding_model", str(broken))
        assert (failed_speech["setting"], failed_speech["path"]) == ("speech_model", str(whisper))
        audio = httpx.post(f"{base}/v1/audio/transcriptions", files={"file": ("a.wav", b"RIFF")})
        assert audio.status_code == 503 and f"--speech-model {whisper}" in audio.json()["error"]["message"]
        listed = httpx.get(f"{base}/v1/models").json()
        assert listed["speech"]["available"] is False and failed_speech["reason"] in listed["speech"]["reason"]
        assert "speech" not in [entry["kind"] for entry in listed["data"]]
        assert "truncated" in failed["reason"]

        embeddings = httpx.post(f"{base}/v1/embeddings", json={"input": "the cat"})
        assert embeddings.status_code == 503, embeddings.text
        error = embeddings.json()["error"]
        assert error["code"] == "model_failed" and f"--embedding-model {broken}" in error["message"]
        assert failed["reason"] in error["message"]

        ranked = httpx.post(f"{base}/v1/rerank", json={"query": "cat", "documents": ["the cat", "a dog"]})
        assert ranked.status_code == 200 and ranked.json()["model"] == "pooled/reranker"
        completion = httpx.post(f"{base}/v1/completions", json={"model": "m", "prompt": "the cat", "max_tokens": 4})
        assert completion.status_code == 200, completion.text
        assert f"Embedding model {broken} did not load" in httpx.get(f"{base}/").text


def _ready(base: str) -> bool:
    try:
        return bool(httpx.get(f"{base}/health", timeout=2).json().get("ready"))
    except (httpx.HTTPError, ValueError):
        return False
