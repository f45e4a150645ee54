"""One real `pooled serve` (the default model, the real engine) for the whole e2e session, with a
tiny random embedding encoder (a BERT directory) and cross-encoder (an XLM-RoBERTa GGUF, as
llama.cpp converts one) beside it (tests/engine/tiny_encoders.py), and a second listener for the
Prometheus metrics (`--metrics-bind`).

A small context and few decode lanes keep the engine's start-up compile short on a CPU machine;
every test asks for few tokens. A test that needs other settings, or stops its server, starts
its own (tests/pooled_servers.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openai import OpenAI

from tests.engine.tiny_encoders import build_tiny_encoder
from tests.engine.tiny_gguf_encoders import write_encoder_gguf
from tests.pooled_servers import CONTEXT, DECODE_LANES, SMALL_ENGINE, free_port, running_server

__all__ = ["CONTEXT", "DECODE_LANES"]  # the e2e server's shape, for tests that probe its limits

EMBEDDING_ENCODER, RERANK_ENCODER = "bert_mean", "xlm_roberta_cross_encoder"  # served as pooled/<name>

# Short, so that a test can show an answer that streams for longer is not cut by it (e2e requests
# run one at a time: none waits in the queue).
REQUEST_TIMEOUT_S = 5


@pytest.fixture(scope="session")
def metrics_bind() -> str:
    """The session server's second listener (`--metrics-bind`), which serves /metrics/prometheus alone."""
    return f"127.0.0.1:{free_port()}"


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory, metrics_bind: str) -> Iterator[str]:
    encoders = tmp_path_factory.mktemp("encoders")
    embedding = build_tiny_encoder(EMBEDDING_ENCODER, encoders / EMBEDDING_ENCODER)
    rerank = write_encoder_gguf(
        build_tiny_encoder(RERANK_ENCODER, encoders / "directory"), encoders / f"{RERANK_ENCODER}.gguf"
    )
    encoder_args = ("--embedding-model", str(embedding), "--rerank-model", str(rerank))
    # No output cap: tests here ask for answers past the default model's catalog cap (512 tokens).
    uncapped = ("--max-output-tokens", "none")
    args = [*SMALL_ENGINE, *encoder_args, *uncapped, "--request-timeout", str(REQUEST_TIMEOUT_S)]
    # Every shape compiled before the first test: the tests see one engine, not one that changes
    # shapes under them, and no request waits for a compile past the short request timeout.
    with running_server(tmp_path_factory, [*args, "--metrics-bind", metrics_bind], every_shape=True) as base:
        yield base


@pytest.fixture(scope="session")
def client(server: str) -> OpenAI:
    return OpenAI(base_url=f"{server}/v1", api_key="pooled", max_retries=0, timeout=300)
