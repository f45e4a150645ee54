"""One real `pooled serve` (the default model, the real engine) for the whole e2e session, with a
tiny random embedding encoder (a BERT directory) and cross-encoder (an XLM-RoBERTa GGUF, as
llama.cpp converts one) beside it (tests/engine/tiny_encoders.py).

A small context and few decode lanes keep the engine's start-up compile short on a CPU machine;
every test asks for few tokens.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from tests.engine.tiny_encoders import build_tiny_encoder
from tests.engine.tiny_gguf_encoders import write_encoder_gguf
from tests.http.test_serve_process import CONTEXT, DECODE_LANES, SMALL_ENGINE, free_port, fresh_prefix_cache

__all__ = ["CONTEXT", "DECODE_LANES"]  # the e2e server's shape, for tests that probe its limits

EMBEDDING_ENCODER, RERANK_ENCODER = "bert_mean", "xlm_roberta_cross_encoder"  # served as pooled/<name>

# Short, so that a test can show an answer that streams for longer is not cut by it (e2e requests
# run one at a time: none waits in the queue).
REQUEST_TIMEOUT_S = 5

STARTUP_TIMEOUT_S = 900  # loading plus compiling every engine shape bucket, on 2 CPU cores


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    encoders = tmp_path_factory.mktemp("encoders")
    embedding = build_tiny_encoder(EMBEDDING_ENCODER, encoders / EMBEDDING_ENCODER)
    rerank = write_encoder_gguf(
        build_tiny_encoder(RERANK_ENCODER, encoders / "directory"), encoders / f"{RERANK_ENCODER}.gguf"
    )
    encoder_args = ("--embedding-model", str(embedding), "--rerank-model", str(rerank))
    # No output cap: tests here ask for answers past the default model's catalog cap (512 tokens).
    uncapped = ("--max-output-tokens", "none")
    with running_server(
        tmp_path_factory, [*SMALL_ENGINE, *encoder_args, *uncapped, "--request-timeout", str(REQUEST_TIMEOUT_S)]
    ) as base:
        yield base


@contextmanager
def running_server(
    tmp_path_factory: pytest.TempPathFactory, args: list[str], headers: Mapping[str, str] | None = None
) -> Iterator[str]:
    """`pooled serve` with the default model and `args`, once it answers (asked with `headers`, e.g.
    the key of a server started with `--api-key`); stopped by SIGINT after."""
    with running_process(tmp_path_factory, args, headers) as (base, _):
        yield base


@contextmanager
def running_process(
    tmp_path_factory: pytest.TempPathFactory,
    args: list[str],
    headers: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`running_server`'s base URL, and the server's process (a test may stop it itself); `env`
    adds to its environment."""
    port = free_port()
    log = (tmp_path_factory.mktemp("serve") / "serve.log").open("wb")
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "pooled"), "serve", "--port", str(port), *args],
        cwd=tmp_path_factory.mktemp("cwd"),
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **fresh_prefix_cache(tmp_path_factory), **(env or {})},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not _ready(base, headers or {}):
            assert process.poll() is None, Path(log.name).read_text(errors="replace")[-4000:]
            assert time.monotonic() < deadline, "the server did not become ready"
            time.sleep(1)
        yield base, process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def _ready(base: str, headers: Mapping[str, str]) -> bool:
    """Ready once every engine shape is compiled (the tests see one engine, not one that changes
    shapes under them) and a one-token completion is answered (health turns ready before the
    engine may), or once an idle model was unloaded (the next request loads it); a model that
    failed to load fails the test at once, with the reason."""
    try:
        health = httpx.get(f"{base}/health", headers=headers, timeout=2).json()
        assert health["state"] != "dead", f"the model did not load: {health['reason']}"
        if health["state"] == "unloaded":
            return True
        if not health["ready"] or (health["engine"] or {}).get("pending_buckets"):
            return False
        body = {"prompt": "Hi", "max_tokens": 1}
        probe = httpx.post(f"{base}/v1/completions", json=body, headers=headers, timeout=120)
    except httpx.TransportError:
        return False
    return probe.status_code == 200


@pytest.fixture(scope="session")
def client(server: str) -> OpenAI:
    return OpenAI(base_url=f"{server}/v1", api_key="pooled", max_retries=0, timeout=300)
