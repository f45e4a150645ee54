"""`--idle-unload` on a real `pooled serve` (the default model): after the idle spell the model's
memory is freed and /health says unloaded, and what the engine's device arrays held; the next
request loads it again and is answered, its first token waiting for the load.

What was freed is what the server reports (/health's `released`: the bytes of the engine's
arrays that no longer exist), not the process's resident set: the allocator keeps freed pages
and the KV pool's pages are resident only once touched, so on a busy machine that measure moved
by less than the pool."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.pooled_servers import running_process

IDLE_S = 2


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    args = ["--ctx", "512", "--decode-lanes", "2", "--idle-unload", str(IDLE_S), "--kv-memory", str(KV_MEMORY)]
    with running_process(tmp_path_factory, args) as running:
        yield running


KV_MEMORY = 256 * 2**20


def wait_for_state(base: str, state: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while httpx.get(f"{base}/health", timeout=5).json()["state"] != state:
        assert time.monotonic() < deadline, f"the server did not become {state}"
        time.sleep(0.2)


def wait_for_release(base: str, timeout: float) -> dict:
    """What the unload reports it freed: the state says "unloaded" as the unload begins, the
    report comes once the lifecycle thread has stopped the engine and dropped it."""
    deadline = time.monotonic() + timeout
    while (released := httpx.get(f"{base}/health", timeout=5).json()["released"]) is None:
        assert time.monotonic() < deadline, "the unload reported no freed memory"
        time.sleep(0.2)
    return released


def test_an_idle_model_is_unloaded_and_the_next_request_loads_it(served: tuple[str, subprocess.Popen[bytes]]) -> None:
    base, _ = served
    body = {"prompt": "The capital of France is", "max_tokens": 6, "temperature": 0}
    before = httpx.post(f"{base}/v1/completions", json=body, timeout=300).json()["choices"][0]["text"]
    wait_for_state(base, "unloaded", IDLE_S + 60)
    assert httpx.get(f"{base}/v1/models", timeout=5).json()["data"][0]["status"] == "unloaded"
    released = wait_for_release(base, 60)
    print(f"released: {released}")
    assert released["kv_cache_bytes"] >= KV_MEMORY  # the whole KV pool (--kv-memory) went
    assert released["weights_bytes"] > 50 * 2**20  # SmolLM2-135M's Q4_1 weights, ~90 MiB as served
    assert released["still_held_bytes"] == 0  # nothing kept a reference to the engine's arrays
    again = httpx.post(f"{base}/v1/completions", json=body, timeout=600)
    assert again.status_code == 200 and again.json()["choices"][0]["text"] == before
    assert httpx.get(f"{base}/health", timeout=5).json()["state"] == "serving"
