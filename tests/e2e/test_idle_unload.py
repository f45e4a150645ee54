"""`--idle-unload` on a real `pooled serve` (the default model): after the idle spell the model's
memory goes back to the system and /health says unloaded; the next request loads it again and
is answered, its first token waiting for the load."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import running_process

IDLE_S = 2


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    args = ["--ctx", "512", "--decode-lanes", "2", "--idle-unload", str(IDLE_S), "--kv-memory", "268435456"]
    with running_process(tmp_path_factory, args) as running:
        yield running


def resident_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def wait_for_state(base: str, state: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while httpx.get(f"{base}/health", timeout=5).json()["state"] != state:
        assert time.monotonic() < deadline, f"the server did not become {state}"
        time.sleep(0.2)


def test_an_idle_model_is_unloaded_and_the_next_request_loads_it(served: tuple[str, subprocess.Popen[bytes]]) -> None:
    base, process = served
    body = {"prompt": "The capital of France is", "max_tokens": 6, "temperature": 0}
    before = httpx.post(f"{base}/v1/completions", json=body, timeout=300).json()["choices"][0]["text"]
    loaded = resident_bytes(process.pid)
    wait_for_state(base, "unloaded", IDLE_S + 60)
    assert httpx.get(f"{base}/v1/models", timeout=5).json()["data"][0]["status"] == "unloaded"
    time.sleep(1)
    unloaded = resident_bytes(process.pid)
    print(f"resident: {loaded / 2**20:.0f} MiB loaded, {unloaded / 2**20:.0f} MiB unloaded")
    assert loaded - unloaded > 200 * 2**20  # the KV pool (256 MiB) at least went back
    again = httpx.post(f"{base}/v1/completions", json=body, timeout=600)
    assert again.status_code == 200 and again.json()["choices"][0]["text"] == before
    assert httpx.get(f"{base}/health", timeout=5).json()["state"] == "serving"
