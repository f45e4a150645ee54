"""`make bench`'s CPU proxy for the host path (issue 41): how fast serving runs when the device does
almost nothing, so the host's own work — scheduling, a step's arguments, dispatch, taking tokens,
the sinks, and the HTTP side's streaming — is what is measured, every session, GPU or not.

    python tools/host_path_bench.py                     # writes its section of docs/BENCHMARKS.md
    python tools/host_path_bench.py --write ''          # printed only
    python tools/host_path_bench.py --write '' --engine-only   # the engine alone, no server

The model is a Llama of 2 layers, 64 wide, with SmolLM2's tokenizer and 49,152-token vocabulary
and random weights (tools/random_checkpoint.py's tiny shape; its decode step's device work is the
head's matmul and the sampling). Measured:

- the engine alone, in this process, with decode bursts off and on (`--burst-steps`): decode
  steps/s at 1 and 64 rows (greedy, `ignore_eos`, drafts off; a burst counts as its decode steps),
  and the host's time per step as the engine counts it (`EngineStats.decode_host_seconds`: the
  engine thread's time in decode steps outside the wait for their tokens, a burst's divided by
  its steps);
- the server: `pooled serve` on the same checkpoint with 64 decode lanes, 64 concurrent
  `/v1/completions` streams of a fixed length: streamed tokens/s, and the CPU time per streamed
  token of the server's main thread, where the event loop runs (HTTP, the handlers' text, SSE).

The client reads the streams with plain asyncio sockets and counts `data:` events without parsing
them, so it takes little of the two cores from the server it measures.
"""

import argparse
import asyncio
import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))

import random_checkpoint  # noqa: E402
from bench import machine_line, write_section  # noqa: E402
from device_bench import stream  # noqa: E402

from engine.api import EngineEvent, Finished, GenerationRequest, SamplingParams  # noqa: E402
from engine.engine import Engine  # noqa: E402
from engine.engine_config import EngineConfig  # noqa: E402
from engine.model.loading.loader import load_model  # noqa: E402
from pooled.configuration.engine_settings import EngineSettings  # noqa: E402
from pooled.hosting.model_host import default_model_path  # noqa: E402
from text.tokenizer import Tokenizer  # noqa: E402

STREAMS = 64
# The proxy stands for a GPU's host, whose decode steps are short; its own 64-row steps on a CPU are
# not, and would keep bursts off (`burst_max_step_ms`), so the bench lifts that limit.
NO_BURST_STEP_LIMIT_MS = 1e9
PROMPT = "Once upon a time"
SECTION = "host-path"
TICKS = os.sysconf("SC_CLK_TCK")


def build_proxy_model(directory: Path) -> list[int]:
    """random_checkpoint's tiny Llama (2 layers, 64 wide, float32) with SmolLM2's tokenizer in place
    of the byte-level one (the same 49,152 ids), written to `directory`; returns the prompt's ids."""
    tokenizer = Tokenizer.from_gguf_file(default_model_path())
    assert tokenizer.vocab_size == random_checkpoint.VOCAB
    random_checkpoint.write(directory, random_checkpoint.SHAPES["tiny"], "float32")
    (directory / "tokenizer.json").write_text(tokenizer.to_json())
    (directory / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": tokenizer.bos_token, "eos_token": tokenizer.eos_token})
    )
    return tokenizer.encode(PROMPT)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def thread_cpu_s(pid: int, tid: int) -> float:
    """User + system CPU seconds of one thread, from /proc (clock-tick resolution)."""
    fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


@dataclass(frozen=True)
class EngineFigures:
    burst_steps: int  # 0: bursts off
    rows: int
    steps_per_s: float
    host_ms_per_step: float


def engine_runs(model_dir: Path, burst_steps: int, tokens: int, prompt: list[int]) -> list[EngineFigures]:
    """The engine alone with `burst_steps` (0: off), warmed, at 1 and STREAMS rows."""
    config = EngineConfig(
        decode_lanes=STREAMS,
        max_queue=STREAMS,
        max_context=2048,
        draft_tokens=0,
        burst_steps=burst_steps,
        burst_max_step_ms=NO_BURST_STEP_LIMIT_MS,
    )
    engine = Engine.build(load_model(model_dir, progress=False), config, lambda what, done, total: None)
    try:
        engine_figures(engine, burst_steps, STREAMS, 16, prompt)  # warm
        return [engine_figures(engine, burst_steps, rows, tokens, prompt) for rows in (1, STREAMS)]
    finally:
        engine.shutdown()


def engine_figures(engine: Engine, burst_steps: int, rows: int, tokens: int, prompt: list[int]) -> EngineFigures:
    """`rows` greedy requests of `tokens` tokens at once: decode steps/s and the host's time a step."""
    finished = threading.Semaphore(0)

    def sink(event: EngineEvent) -> None:
        if isinstance(event, Finished):
            finished.release()

    params = SamplingParams(temperature=0.0, ignore_eos=True)
    before = engine.stats()
    started = time.perf_counter()
    for _ in range(rows):
        engine.submit(GenerationRequest(tuple(prompt), params, tokens), sink)
    for _ in range(rows):
        finished.acquire()
    elapsed = time.perf_counter() - started
    after = engine.stats()
    steps = after.decode_steps - before.decode_steps
    host_s = after.decode_host_seconds - before.decode_host_seconds
    return EngineFigures(burst_steps, rows, steps / elapsed, 1000 * host_s / steps)


@dataclass(frozen=True)
class ServerFigures:
    streams: int
    tokens_per_s: float
    loop_us_per_token: float


def server_figures(model: Path, streams: int, tokens: int, burst_steps: int) -> ServerFigures:
    port = free_port()
    command = [str(Path(sys.executable).parent / "pooled"), "serve", "--model", str(model), "--port", str(port)]
    command += ["--decode-lanes", str(streams), "--max-queue", str(streams), "--ctx", "2048"]
    command += ["--burst-steps", str(burst_steps), "--burst-max-step-ms", str(NO_BURST_STEP_LIMIT_MS)]
    command += ["--draft-tokens", "0", "--max-output-tokens", "none"]
    with tempfile.TemporaryDirectory(prefix="pooled-host-path-") as cache:
        server = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=os.environ | {"POOLED_CACHE_DIR": cache},
        )
        try:
            _wait_ready(port, server)
            body = {"prompt": PROMPT, "max_tokens": tokens, "temperature": 0, "ignore_eos": True}

            async def run(count: int) -> list[int]:
                stamps = await asyncio.gather(*(stream(f"http://127.0.0.1:{port}", body) for _ in range(count)))
                return [len(events) for events in stamps]

            asyncio.run(run(streams))  # warm: every shape the measured run needs
            cpu_before = thread_cpu_s(server.pid, server.pid)
            started = time.perf_counter()
            events = asyncio.run(run(streams))
            elapsed = time.perf_counter() - started
            cpu = thread_cpu_s(server.pid, server.pid) - cpu_before
        finally:
            server.terminate()
            server.wait(timeout=60)
    # Every stream answered (with ignore_eos each one runs its `tokens` tokens; a token whose text
    # the detokenizer holds back sends no event of its own, so events are not counted as tokens).
    assert all(events), f"a stream sent nothing: {events}"
    streamed = streams * tokens
    return ServerFigures(streams, streamed / elapsed, 1e6 * cpu / streamed)


def _wait_ready(port: int, server: subprocess.Popen[bytes]) -> None:
    import httpx

    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"pooled serve exited with {server.returncode}")
        try:
            health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).json()
            if health.get("ready") and not (health.get("engine") or {}).get("pending_buckets"):
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.5)
    raise RuntimeError("pooled serve was not ready in 600 s")


def report(engine_rows: list[EngineFigures], server: ServerFigures | None, tokens: int, command: str) -> str:
    lines = [
        "## Run: the host path's CPU proxy (issue 41)",
        "",
        "Written by `make bench` (`tools/host_path_bench.py`); every figure below was measured by that run.",
        "",
        f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- Machine: {machine_line()}",
        f"- Command: `{command}`",
        "- Model: a random Llama of 2 layers, 64 wide, SmolLM2's tokenizer (49,152 tokens), float32; greedy, "
        f"`ignore_eos`, drafts off, {tokens} tokens a request",
        "",
        "| measure | figure | target |",
        "| --- | --- | --- |",
    ]
    plain = {figures.rows: figures for figures in engine_rows if not figures.burst_steps}
    for figures in engine_rows:
        bursts = f"bursts of {figures.burst_steps}" if figures.burst_steps else "bursts off"
        speed_target = host_target = ""
        if figures.burst_steps and figures.rows == 1 and 1 in plain:
            ratio = figures.steps_per_s / plain[1].steps_per_s
            speed_target = f"≥ 3× bursts off ({ratio:.1f}×)"
        if figures.burst_steps and figures.rows == STREAMS:
            host_target = "≤ 0.3 ms"
        lines.append(
            f"| engine alone, {figures.rows} rows, {bursts}: decode steps/s | {figures.steps_per_s:.0f} | "
            f"{speed_target} |"
        )
        lines.append(
            f"| engine alone, {figures.rows} rows, {bursts}: host time per decode step (ms) | "
            f"{figures.host_ms_per_step:.2f} | {host_target} |"
        )
    if server is None:
        return "\n".join([*lines, ""])
    lines += [
        f"| server, {server.streams} streams: streamed tokens/s | {server.tokens_per_s:.0f} | ≥ 10,000 |",
        f"| server, {server.streams} streams: event-loop thread CPU per streamed token (µs) | "
        f"{server.loop_us_per_token:.0f} | |",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=256, help="tokens a request")
    parser.add_argument("--write", default=str(REPO / "docs" / "BENCHMARKS.md"), help="page to write ('' = print)")
    parser.add_argument(
        "--burst-steps",
        type=int,
        default=EngineSettings().burst_steps,
        help="the burst length measured beside bursts off, and served (default: pooled serve's)",
    )
    parser.add_argument("--engine-only", action="store_true", help="the engine alone: no server run")
    args = parser.parse_args()
    command = "make bench" if os.environ.get("MAKELEVEL") else shlex.join(["python", *sys.argv])
    with tempfile.TemporaryDirectory(prefix="pooled-proxy-") as folder:
        model_dir = Path(folder) / "model"
        prompt = build_proxy_model(model_dir)
        engine_rows = [
            *engine_runs(model_dir, 0, args.tokens, prompt),
            *engine_runs(model_dir, args.burst_steps, args.tokens, prompt),
        ]
        server = None if args.engine_only else server_figures(model_dir, STREAMS, args.tokens, args.burst_steps)
    text = report(engine_rows, server, args.tokens, command)
    print(text)
    if args.write:
        write_section(Path(args.write), SECTION, text)


if __name__ == "__main__":
    main()
