"""One model over two processes (engine/device/process_group.py), on loopback, each process with 2
simulated CPU devices and gloo collectives: its answers equal a single process's over the same
4-device mesh, token for token; SIGTERM on process 0 drains and stops both; a follower killed
mid-stream ends the stream with an error event and leaves process 0 dead with the cause.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.test_switching import servable
from tests.pooled_servers import POOLED, free_port, running_process

pytestmark = pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="two processes of a group need two cores")

ENGINE = ["--ctx", "256", "--decode-lanes", "4"]
ON_CPU = {"JAX_PLATFORMS": "cpu"}
PROMPTS = ["hello world", "the quick brown fox", "one two three four five six"]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = servable("llama_tied", tmp_path_factory.mktemp("models") / "tiny-llama")
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 512}))
    return directory


@contextmanager
def group(
    tmp_path_factory: pytest.TempPathFactory, model: Path, *leader_args: str
) -> Iterator[tuple[str, subprocess.Popen[bytes], subprocess.Popen[bytes]]]:
    """Process 0 (the server, with `leader_args`: base URL and process) and process 1, once the group answers."""
    joined = ["--coordinator", f"127.0.0.1:{free_port()}", "--num-processes", "2"]
    env = {**os.environ, **ON_CPU, "JAX_NUM_CPU_DEVICES": "2", "PYTHONUNBUFFERED": "1"}
    log = (tmp_path_factory.mktemp("follower") / "follower.log").open("wb")
    follower = subprocess.Popen(
        [POOLED, "serve", *joined, "--process-id", "1"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    args = ["--model", str(model), *ENGINE, *joined, "--process-id", "0", *leader_args]
    try:
        with running_process(tmp_path_factory, args, env={**ON_CPU, "JAX_NUM_CPU_DEVICES": "2"}) as (base, leader):
            yield base, leader, follower
    finally:
        if follower.poll() is None:
            follower.send_signal(signal.SIGCONT)
            follower.kill()
        follower.wait()
        log.close()


def bodies() -> list[dict[str, Any]]:
    greedy = [{"prompt": prompt, "max_tokens": 24, "temperature": 0} for prompt in PROMPTS]
    seeded = [
        {"prompt": prompt, "max_tokens": 24, "temperature": 0.9, "top_p": 0.95, "seed": 11 + i}
        for i, prompt in enumerate(PROMPTS)
    ]
    several = {"prompt": PROMPTS[0], "max_tokens": 12, "temperature": 1.0, "seed": 5, "n": 2, "logprobs": 1}
    return [*greedy, *seeded, several]


def answers(base: str) -> list[list[tuple[str, str, Any]]]:
    """Each body's choices (text, finish reason, tokens), asked one at a time and then all at once."""

    def ask(body: dict[str, Any]) -> list[tuple[str, str, Any]]:
        answer = httpx.post(f"{base}/v1/completions", json=body, timeout=300)
        assert answer.status_code == 200, answer.text
        choices = answer.json()["choices"]
        return [(c["text"], c["finish_reason"], (c["logprobs"] or {}).get("tokens")) for c in choices]

    alone = [ask(body) for body in bodies()]
    with ThreadPoolExecutor(len(bodies())) as pool:
        together = list(pool.map(ask, bodies()))
    return alone + together


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory, model: Path) -> list[list[tuple[str, str, Any]]]:
    """The answers of one process over 4 devices: the group's mesh in one process."""
    env = {**ON_CPU, "JAX_NUM_CPU_DEVICES": "4"}
    # Every shape first, as a group compiles them: each step then runs on the shape the group's
    # does (a step padded to a larger shape may round differently), token for token.
    args = ["--model", str(model), *ENGINE]
    with running_process(tmp_path_factory, args, env=env, every_shape=True) as (base, _):
        return answers(base)


def test_two_processes_answer_as_one_and_stop_together_on_sigterm(
    tmp_path_factory: pytest.TempPathFactory, model: Path, single: list[list[tuple[str, str, Any]]]
) -> None:
    with group(tmp_path_factory, model) as (base, leader, follower):
        health = httpx.get(f"{base}/health", timeout=5).json()
        assert health["state"] == "serving"
        assert answers(base) == single

        streamed: dict[str, Any] = {}
        started = threading.Event()
        worker = threading.Thread(target=stream, args=(base, 60, streamed, started))
        worker.start()
        assert started.wait(60)
        leader.send_signal(signal.SIGTERM)
        worker.join(120)
        assert streamed["error"] is None and streamed["finish"] == "length", streamed  # drained, not cut
        assert leader.wait(60) == 0
        assert follower.wait(60) == 0


def test_a_follower_killed_mid_stream_ends_the_stream_with_an_error_and_the_group_dead(
    tmp_path_factory: pytest.TempPathFactory, model: Path
) -> None:
    with group(tmp_path_factory, model) as (base, leader, follower):
        streamed: dict[str, Any] = {}
        started = threading.Event()
        worker = threading.Thread(target=stream, args=(base, 230, streamed, started))
        worker.start()
        assert started.wait(60)
        follower.kill()
        worker.join(120)
        assert streamed["finish"] is None and streamed["error"]["code"] == "engine_fault", streamed
        health = httpx.get(f"{base}/health", timeout=5).json()
        assert health["state"] == "dead" and health["cause"] == "fault"
        assert "the group of 2 processes broke" in health["reason"], health
        leader.send_signal(signal.SIGTERM)
        assert leader.wait(60) == 1  # it did not serve to the end: a supervisor must see that


def test_a_follower_that_stops_answering_makes_process_0_exit(
    tmp_path_factory: pytest.TempPathFactory, model: Path
) -> None:
    """Stopped, not dead, a follower fails no collective: process 0's watchdog ends the group."""
    with group(tmp_path_factory, model, "--group-step-timeout", "3") as (base, leader, follower):
        streamed: dict[str, Any] = {}
        started = threading.Event()
        worker = threading.Thread(target=stream, args=(base, 230, streamed, started))
        worker.start()
        assert started.wait(60)
        follower.send_signal(signal.SIGSTOP)
        assert leader.wait(60) == 1
        worker.join(60)
        assert streamed["finish"] is None and streamed["error"] is not None, streamed  # cut, not finished
        follower.send_signal(signal.SIGCONT)
        # Its leader is gone: it fails (JAX's coordination client aborts it once the coordinator goes).
        assert follower.wait(60) != 0


def stream(base: str, tokens: int, seen: dict[str, Any], started: threading.Event) -> None:
    """A streamed completion of `tokens` tokens: its finish reason, or the error event (or the
    broken connection) that ended it."""
    body = {"prompt": PROMPTS[1], "max_tokens": tokens, "temperature": 0, "ignore_eos": True, "stream": True}
    seen.update(finish=None, error=None, chunks=0)
    try:
        read_stream(base, body, seen, started)
    except httpx.TransportError as error:
        seen["error"] = f"{type(error).__name__}: {error}"


def read_stream(base: str, body: dict[str, Any], seen: dict[str, Any], started: threading.Event) -> None:
    with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=300) as answer:
        assert answer.status_code == 200
        for line in answer.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: ") :])
            if "error" in event:
                seen["error"] = event["error"]
                continue
            seen["chunks"] += 1
            started.set()
            seen["finish"] = event["choices"][0]["finish_reason"] or seen["finish"]
