"""`pooled serve` as a user runs it: a real process, the default model, real HTTP."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from engine.model import kernels
from tests.pooled_servers import (
    CONTEXT,
    DECODE_LANES,
    POOLED,
    SMALL_ENGINE,
    STARTUP_TIMEOUT_S,
    free_port,
    fresh_prefix_cache,
)

pytestmark = pytest.mark.server

STREAMS = 32  # in flight when SIGTERM arrives: 4 decoding, the rest queued
QUEUE = ["--max-queue", str(STREAMS)]


@dataclass
class Served:
    base: str
    process: subprocess.Popen[bytes]
    log: Path
    prefix_cache: Path


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """Its own server, not tests/pooled_servers.py's: these tests read its start (every shape
    compiled before it is ready, its console), its catalog defaults (no flag), and stop it."""
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    # The installed entry point, run from elsewhere: what a user runs, not the source tree.
    process = subprocess.Popen(
        [POOLED, "serve", "--port", str(port), *SMALL_ENGINE, *QUEUE],
        cwd=tmp_path_factory.mktemp("cwd"),
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(prefix := fresh_prefix_cache(tmp_path_factory))},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            assert process.poll() is None, log.read_text(errors="replace")[-4000:]
            try:
                health = httpx.get(f"{base}/health", timeout=2).json()
                if health.get("ready") and not health["engine"]["pending_buckets"]:  # every shape compiled
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not become ready"
            time.sleep(0.5)
        yield Served(base, process, log, Path(prefix["POOLED_PREFIX_CACHE_DIR"]))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture
def server(served: Served) -> str:
    return served.base


def test_health_reports_the_default_model(server: str) -> None:
    health = httpx.get(f"{server}/health").json()
    assert health["ok"] is True and health["ready"] is True
    assert health["model"].startswith("pooled/smollm2-135m-instruct")
    assert health["ctx"] == CONTEXT  # --ctx given: within the trained 8192, nothing extended
    assert (health["trained_ctx"], health["rope_scaling"]) == (8192, None)
    assert health["quantization"] == ("w4a8" if kernels.available() else "none")  # auto, on the Q4_1 file
    assert health["engine"]["decode_lanes"] == DECODE_LANES and health["engine"]["compiles_after_startup"] == 0


def test_docs_and_document_are_served(server: str) -> None:
    assert httpx.get(f"{server}/v1/docs/").status_code == 200
    document = httpx.get(f"{server}/v1/openapi.json").json()
    assert document["openapi"].startswith("3.1")
    assert httpx.get(f"{server}/v1", follow_redirects=False).status_code == 307


def test_banner_is_printed_once_ready(served: Served) -> None:
    printed = served.log.read_text(errors="replace")
    assert "ANTHROPIC_BASE_URL" in printed and f"{served.base}/v1" in printed


def test_banner_and_head(server: str) -> None:
    banner = httpx.get(f"{server}/")
    assert banner.headers["content-type"].startswith("text/plain")
    assert f"{server}/v1" in banner.text and "Anthropic" in banner.text
    head = httpx.head(f"{server}/")
    assert head.status_code == 200 and head.content == b""


def test_models_list_the_loaded_model(server: str) -> None:
    listed = httpx.get(f"{server}/v1/models").json()
    model_id = listed["data"][0]["id"]
    assert httpx.get(f"{server}/v1/models/{model_id}").json()["id"] == model_id
    anthropic = httpx.get(f"{server}/v1/models", headers={"anthropic-version": "2023-06-01"}).json()
    assert anthropic["data"][0]["type"] == "model"


def test_the_default_models_catalog_defaults_apply_without_flags(served: Served) -> None:
    """No cap flag given: the default model's catalog entry caps answers at 512 tokens, ended as
    finished turns, says so in the banner, and `/v1/config/origins` says where it came from."""
    values = httpx.get(f"{served.base}/v1/config").json()
    assert (values["max_output_tokens"], values["max_output_tokens_finish"]) == (512, "stop")
    origin = httpx.get(f"{served.base}/v1/config/origins").json()["max_output_tokens"]
    assert (origin["origin"], origin["catalog"]) == ("catalog", "smollm2-135m-instruct-q4_1")
    no_end = {"0": -100, "2": -100}  # <|endoftext|>, <|im_end|>: only the cap can end it
    body = {"prompt": "Once upon a time", "max_tokens": 600, "logit_bias": no_end, "frequency_penalty": 0.01}
    answer = httpx.post(f"{served.base}/v1/completions", json=body, timeout=600).json()
    assert (answer["usage"]["completion_tokens"], answer["choices"][0]["finish_reason"]) == (512, "stop")
    printed = served.log.read_text(errors="replace")
    assert "Defaults of the catalog's smollm2-135m-instruct-q4_1: --max-output-tokens 512, " in printed


def test_the_readmes_curl_samples_as_the_default_models_card_recommends(served: Served) -> None:
    """The README's curl names no sampling field: it samples at the temperature 0.2 and top-p 0.9
    of the default model's card (its catalog entry), not at the APIs' temperature 1 over the whole
    vocabulary, as `/health`, `/v1/config` and the banner say. What reaches the engine is that: a
    seeded request samples token for token as the same one naming them, and again the same."""
    base = served.base
    assert httpx.get(f"{base}/health").json()["sampling_defaults"] == {
        "temperature": {"value": 0.2, "origin": "catalog"},
        "top_k": {"value": 0, "origin": "default"},
        "top_p": {"value": 0.9, "origin": "catalog"},
        "min_p": {"value": 0.0, "origin": "default"},
        "repetition_penalty": {"value": 1.0, "origin": "default"},
    }
    values, origins = httpx.get(f"{base}/v1/config").json(), httpx.get(f"{base}/v1/config/origins").json()
    assert (values["temp"], values["top_p"]) == (0.2, 0.9)
    assert origins["temp"]["origin"] == origins["top_p"]["origin"] == "catalog"
    curl = {"model": "pooled", "messages": [{"role": "user", "content": "Hi"}]}
    answer = httpx.post(f"{base}/v1/chat/completions", json=curl, timeout=600).json()
    assert answer["choices"][0]["message"]["content"].strip()

    def text(body: dict[str, object]) -> str:
        reply = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=600).json()
        return str(reply["choices"][0]["message"]["content"])

    seeded = {**curl, "seed": 7, "max_tokens": 24}
    named = {**seeded, "temperature": 0.2, "top_p": 0.9, "top_k": 0, "min_p": 0, "repetition_penalty": 1}
    assert text(seeded) == text(named) == text(seeded)
    response = httpx.post(f"{base}/v1/responses", json={"model": "pooled", "input": "Hi", "max_output_tokens": 4})
    assert (response.json()["temperature"], response.json()["top_p"]) == (0.2, 0.9)  # what it sampled with
    printed = served.log.read_text(errors="replace")
    assert "Sampling defaults: temperature 0.2 (catalog), top_k 0 (API default), top_p 0.9 (catalog), " in printed


def test_the_console_shows_the_load_stages_and_no_librarys_info_lines(served: Served) -> None:
    """At the default --log-level: absl's and orbax's INFO lines while the weights load, and JAX's,
    stay out; pooled's own say each stage once."""
    printed = served.log.read_text(errors="replace")
    library_info = re.findall(r"^(?:.*(?:INFO|DEBUG) (?:absl|orbax|jax)|[ID]\d{4} ).*$", printed, re.MULTILINE)
    assert library_info == []
    assert printed.count(": loading weights\n") == 1
    assert printed.count(": compiling the engine (") == 1


def _stream(base: str, index: int, started: threading.Event, results: list[tuple[int, list[str]]]) -> None:
    # Long enough for full KV pages (16 tokens each), which the disk tier keeps.
    prompt = f"Count to ten, take {index}: " + "one two three four five six seven eight nine ten, " * 3
    body = {"model": "m", "prompt": prompt, "max_tokens": 12, "stream": True}
    with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=120) as response:
        started.set()
        results[index] = (response.status_code, [line for line in response.iter_lines() if line.startswith("data:")])


def test_sigterm_drains_and_exits_zero(served: Served) -> None:
    """With 32 streams in flight, SIGTERM lets every one finish, refuses new requests with 503 and
    Retry-After meanwhile, and exits 0. Runs last in this module: it stops the shared server."""
    results: list[tuple[int, list[str]]] = [(0, [])] * STREAMS
    started = [threading.Event() for _ in range(STREAMS)]
    threads = [threading.Thread(target=_stream, args=(served.base, i, started[i], results)) for i in range(STREAMS)]
    for thread in threads:
        thread.start()
    assert all(event.wait(60) for event in started)
    in_flight = httpx.get(f"{served.base}/health").json()["queue"]
    served.process.send_signal(signal.SIGTERM)
    refused = httpx.post(f"{served.base}/v1/completions", json={"model": "m", "prompt": "Hi", "max_tokens": 1})
    assert refused.status_code == 503 and refused.headers["retry-after"] == "5"
    assert httpx.get(f"{served.base}/health").json()["state"] == "draining"
    for thread in threads:
        thread.join(120)
    assert in_flight > DECODE_LANES, "most streams had finished before the signal"
    assert [status for status, _ in results] == [200] * STREAMS
    assert all(events[-1] == "data: [DONE]" for _, events in results)
    assert served.process.wait(timeout=30) == 0
    # The engine stopped before the process exited: the prompts' pages are on the disk tier.
    assert list(served.prefix_cache.rglob("*.kv")), "no prefix page was written to disk"
    assert not list(served.prefix_cache.rglob("*.tmp"))


def test_a_dead_model_answers_until_sigterm_then_exits_non_zero(tmp_path: Path) -> None:
    """A model that cannot load leaves the server up, answering 503 with the cause, until it is
    told to stop; then it exits 1, so a supervisor sees it never served."""
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + bytes(60))
    port = free_port()
    process = subprocess.Popen(
        [POOLED, "serve", "--port", str(port), "--model", str(broken)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while _health_state(base) != "dead":
            assert process.poll() is None and time.monotonic() < deadline, "the server did not report dead"
            time.sleep(0.2)
        refused = httpx.post(
            f"{base}/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
        )
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "model_dead"
        assert process.poll() is None
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 1
    finally:
        if process.poll() is None:
            process.kill()


def _health_state(base: str) -> str | None:
    try:
        return str(httpx.get(f"{base}/health", timeout=2).json()["state"])
    except httpx.HTTPError:
        return None
