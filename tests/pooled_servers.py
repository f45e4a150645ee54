"""Real `pooled serve` processes for tests: started on a free loopback port from the installed entry
point, waited for until they answer, stopped by SIGINT after.

A server is ready once it answers a one-token completion. With the server's default
`--compile-while-serving true` that comes once the largest shape of each kind is compiled; the
smaller shapes compile while it idles between a test's requests. A test that measures the start,
compares answers with another server's token for token (a step padded to another shape may round
differently), or sends requests under a short `--request-timeout` asks for `every_shape`: it waits
until nothing is left to compile.

Every server of a run shares the persistent XLA cache (`$POOLED_CACHE_DIR`/xla, as `pooled serve`
keeps it), so a server whose model and engine shapes (`--ctx`, `--decode-lanes`, `--kv-memory`,
`--max-loras`, ...) match an earlier one's loads its programs instead of compiling them: use
SMALL_ENGINE on the default model unless the test is about other shapes.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

STARTUP_TIMEOUT_S = 900  # cold: loading plus compiling every engine shape, on 2 busy CPU cores
# The shared e2e server's shape (tests/e2e/conftest.py); a server on the default model with the
# same shape reads its compiled programs from the persistent XLA cache.
CONTEXT = 2048
DECODE_LANES = 4
SMALL_ENGINE = ["--ctx", str(CONTEXT), "--decode-lanes", str(DECODE_LANES)]
POOLED = str(Path(sys.executable).parent / "pooled")  # the installed entry point, as a user runs it


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def fresh_prefix_cache(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A server's environment for an empty prefix-cache disk tier of its own (none from earlier runs)."""
    return {"POOLED_PREFIX_CACHE_DIR": str(tmp_path_factory.mktemp("prefix"))}


@contextmanager
def running_server(
    tmp_path_factory: pytest.TempPathFactory,
    args: list[str],
    headers: Mapping[str, str] | None = None,
    *,
    every_shape: bool = False,
) -> Iterator[str]:
    """`pooled serve` with the default model and `args`, once it answers (asked with `headers`, e.g.
    the key of a server started with `--api-key`); stopped by SIGINT after."""
    with running_process(tmp_path_factory, args, headers, every_shape=every_shape) as (base, _):
        yield base


@contextmanager
def running_process(
    tmp_path_factory: pytest.TempPathFactory,
    args: list[str],
    headers: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    every_shape: bool = False,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`running_server`'s base URL, and the server's process (a test may stop it itself); `env`
    adds to its environment. Its output is in `serve.log` of a fresh temporary folder."""
    port = free_port()
    log = (tmp_path_factory.mktemp("serve") / "serve.log").open("wb")
    process = subprocess.Popen(
        [POOLED, "serve", "--port", str(port), *args],
        cwd=tmp_path_factory.mktemp("cwd"),
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **fresh_prefix_cache(tmp_path_factory), **(env or {})},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not _ready(base, headers or {}, every_shape):
            assert process.poll() is None, Path(log.name).read_text(errors="replace")[-4000:]
            assert time.monotonic() < deadline, "the server did not become ready"
            time.sleep(0.5)
        yield base, process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _ready(base: str, headers: Mapping[str, str], every_shape: bool) -> bool:
    """Ready once a one-token completion is answered (health turns ready before the engine may),
    with `every_shape` once nothing is left to compile too; or once an idle model was unloaded
    (the next request loads it). A model that failed to load fails the test at once, with the
    reason."""
    try:
        health = httpx.get(f"{base}/health", headers=headers, timeout=2).json()
        assert health["state"] != "dead", f"the model did not load: {health['reason']}"
        if health["state"] == "unloaded":
            return True
        if not health["ready"] or (every_shape and (health["engine"] or {}).get("pending_buckets")):
            return False
        body = {"prompt": "Hi", "max_tokens": 1}
        probe = httpx.post(f"{base}/v1/completions", json=body, headers=headers, timeout=120)
    except httpx.TransportError:
        return False
    return probe.status_code == 200
