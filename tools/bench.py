"""`make bench`: pooled and llama.cpp's llama-server on the same GGUF, in one run.

    python tools/bench.py                       # both servers, default model, writes docs/BENCHMARKS.md
    python tools/bench.py --only pooled         # one server
    python tools/bench.py --base-url URL        # an already running OpenAI-compatible server, printed only
    python tools/bench.py --quantize Q4_K_M     # the default model requantized by llama-quantize
    python tools/bench.py --model-shape qwen2-0.5b --quantize Q4_K_M   # a random Qwen2-0.5B, Q4_K_M

Each server is started, measured and stopped in turn, so they never compete for
the CPU; keep the machine otherwise quiet (llama-server with 2 threads collapses
when anything else loads it). `--rounds` (default 3) repeats that, the servers
taking turns, so a drift in the machine's speed between one server's turn and the
other's (a shared VM's can move by half) reaches both: each figure is the median
of the rounds, each ratio the median of the rounds' own ratios, with their range.
Measured over `/v1/completions` streams with a fixed output length (`ignore_eos`),
so both servers do the same work:

- TTFT at ~128, ~1k and ~3k prompt tokens (each prompt new to the server);
- TTFT of a resent ~1k conversation plus one turn (prefix reuse);
- single-stream decode tokens/s;
- aggregate output tokens/s and p50/p99 request latency at 1/4/16/32 streams;
- long contexts (skipped with --no-long) at a 32768-token context (pooled's default for the
  default model; llama-server restarted with YaRN from the trained 8192, one slot): TTFT at ~8k, ~16k and ~21k prompt
  tokens (filler text; Claude Code's first request is ~21k tokens of the default model), decode
  tokens/s at ~16k tokens of context, and, for pooled only, an agent's second turn after a
  restart: the ~21k prompt plus a new turn, its pages on the prefix cache's disk tier;
- a code-editing replay: greedy tokens/s while the model rewrites a ~940-token Python method it
  was given (the standard library's `textwrap.TextWrapper._wrap_chunks`, one name changed), and
  for pooled the same with prompt-lookup drafts off (`--draft-tokens 0`) and the drafts'
  acceptance rate (`/metrics`);
- peak RSS of the server process; without the long figures pooled serves the context each of
  llama-server's slots holds (`--ctx` 4096, as many decode lanes as slots), so both hold the
  same KV cache;
- start to ready: pooled's first start in a round compiles from nothing (a prepared-weights
  and compilation cache of the run's own, the native kernels linked in), its second start is warm
  (that cache filled); llama-server's start;
- the first minute after ready (pooled): 4 streams kept busy for FIRST_MINUTE_S from the moment the
  cold and the warm start say ready, against the same streams once every shape is ready (the
  steady state); issue 52's target is ≥ 90 %;
- greedy agreement (with both servers): the first tokens of a few greedy answers, compared
  token by token, the share matched before the answers part;
- a roofline: the decode step's bytes moved over the machine's measured memory
  bandwidth gives the ceiling a batch-1 step can reach.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.cache_paths import cache_root  # noqa: E402
from pooled.hosting.model_host import default_model_path  # noqa: E402
from text import Tokenizer  # noqa: E402

PROMPT_SIZES = (128, 1024, 3072)
LONG_SIZES = (8192, 16384, 21000)
LONG_CONTEXT = 32768
LONG_DECODE_TOKENS = 64  # decoded after the ~16k prompt
SLOT_CONTEXT = 4096  # tokens a llama-server slot holds for the main figures (pooled's --ctx without the long ones)
CONCURRENCY = (1, 4, 16, 32)
DECODE_TOKENS = 128
CONCURRENT_TOKENS = 64
READY_TIMEOUT_S = 900
FIRST_MINUTE_S = 60.0  # how long after ready the first-minute figure runs its streams
FIRST_MINUTE_STREAMS = 4
REPLAY_TOKENS = 256  # of the rewritten method (the whole is ~940 tokens), greedy
GREEDY_PROMPTS = (
    "The three laws of thermodynamics are",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "User: What is the capital of France, and why is it famous?\nAssistant:",
    "Once upon a time, in a small village by the sea,",
)
GREEDY_TOKENS = 48
FILLER = (
    "The history of computing is a story of abstractions layered on abstractions, each one hiding "
    "the details below it so that people can think about bigger problems. "
)


@dataclass
class StreamResult:
    ttft_s: float
    total_s: float
    tokens: int
    text: str


@dataclass
class Report:
    name: str
    ttft_s: dict[int, float] = field(default_factory=dict)
    resent_ttft_s: float = 0.0
    decode_tps: float = 0.0
    aggregate_tps: dict[int, float] = field(default_factory=dict)
    latency_p50_s: dict[int, float] = field(default_factory=dict)
    latency_p99_s: dict[int, float] = field(default_factory=dict)
    peak_rss_mib: float = 0.0
    bytes_per_step: int = 0
    long_ttft_s: dict[int, float] = field(default_factory=dict)
    long_decode_tps: float = 0.0
    restart_ttft_s: float = 0.0  # 0: not measured (llama-server keeps no prefix across a restart)
    replay_tps: float = 0.0
    replay_no_drafts_tps: float = 0.0  # pooled only: the replay with --draft-tokens 0
    replay_acceptance: float = 0.0  # pooled only: draft tokens accepted / proposed in the replay
    ready_s: float = 0.0  # start to ready (pooled: from an empty cache)
    warm_ready_s: float = 0.0  # pooled only: start to ready again, its cache filled
    # pooled only: 4 streams' tokens/s in the first minute after the cold and the warm start's
    # ready, and once every shape is ready
    first_minute_tps: float = 0.0
    warm_first_minute_tps: float = 0.0
    steady_tps: float = 0.0
    greedy_texts: list[str] = field(default_factory=list)  # the answers to GREEDY_PROMPTS


def make_prompt(tokenizer: Tokenizer, size: int, salt: str) -> str:
    """A prompt of about `size` tokens that starts with `salt`, so no two share a cached prefix."""
    text = f"[{salt}] "
    while len(tokenizer.encode(text)) < size:
        text += FILLER
    ids = tokenizer.encode(text)[:size]
    return tokenizer.decode(ids)


async def stream_completion(client: httpx.AsyncClient, prompt: str, max_tokens: int) -> StreamResult:
    body = {
        "model": "bench",
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    start = time.perf_counter()
    first: float | None = None
    tokens = 0
    usage_tokens: int | None = None
    pieces: list[str] = []
    async with client.stream("POST", "/v1/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage_tokens = chunk["usage"].get("completion_tokens")
            if not chunk.get("choices"):
                continue
            text = chunk["choices"][0].get("text", "")
            if text:
                first = first or time.perf_counter()
                tokens += 1
                pieces.append(text)
    end = time.perf_counter()
    # A chunk may carry several tokens (pooled's steps over drafts): the usage counts them.
    return StreamResult((first or end) - start, end - start, usage_tokens or tokens, "".join(pieces))


def peak_rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def memory_bandwidth_gbs() -> float:
    """Best of a few large copies: bytes read plus bytes written per second."""
    source = np.ones(256 * 1024 * 1024 // 8)
    target = np.empty_like(source)
    best = 0.0
    for _ in range(5):
        start = time.perf_counter()
        np.copyto(target, source)
        best = max(best, 2 * source.nbytes / (time.perf_counter() - start))
    return best / 1e9


async def measure(name: str, base_url: str, tokenizer: Tokenizer, pid: int | None) -> Report:
    report = Report(name)
    # A connection per request: llama-server closes idle keep-alive connections, and a request sent
    # on one it was closing failed the run ("Server disconnected without sending a response").
    fresh_connections = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=base_url, timeout=600, limits=fresh_connections) as client:
        await stream_completion(client, make_prompt(tokenizer, 64, "warm-up"), 8)
        for size in PROMPT_SIZES:
            result = await stream_completion(client, make_prompt(tokenizer, size, f"ttft-{size}"), 4)
            report.ttft_s[size] = result.ttft_s
        conversation = make_prompt(tokenizer, 1024, "resent")
        first = await stream_completion(client, conversation, 32)
        resent = conversation + first.text + "\n\nUser: And what came after that?\nAssistant:"
        report.resent_ttft_s = (await stream_completion(client, resent, 4)).ttft_s
        single = await stream_completion(client, make_prompt(tokenizer, 32, "decode"), DECODE_TOKENS)
        report.decode_tps = (single.tokens - 1) / (single.total_s - single.ttft_s)
        for streams in CONCURRENCY:
            prompts = [make_prompt(tokenizer, 32, f"c{streams}-{i}") for i in range(streams)]
            start = time.perf_counter()
            results = await asyncio.gather(*(stream_completion(client, p, CONCURRENT_TOKENS) for p in prompts))
            wall = time.perf_counter() - start
            latencies = sorted(r.total_s for r in results)
            report.aggregate_tps[streams] = sum(r.tokens for r in results) / wall
            report.latency_p50_s[streams] = statistics.median(latencies)
            report.latency_p99_s[streams] = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
        for prompt in GREEDY_PROMPTS:
            report.greedy_texts.append((await stream_completion(client, prompt, GREEDY_TOKENS)).text)
    report.replay_tps = await measure_replay(base_url)
    if pid is not None:
        report.peak_rss_mib = peak_rss_mib(pid)
    return report


def replay_prompt() -> str:
    """A coding agent's edit: the model is shown a method and writes it back with one name changed,
    so most of its answer copies text its prompt holds."""
    source = inspect.getsource(textwrap.TextWrapper._wrap_chunks)
    return (
        "Below is a Python method, then the same method with the variable `chunks` renamed to `pieces`; "
        f"nothing else changes.\n\n```python\n{source}```\n\n"
        "The method with `chunks` renamed to `pieces`:\n\n```python\n"
    )


async def measure_replay(base_url: str) -> float:
    """Greedy decode tokens/s of the code-editing replay (its prompt prefilled by a first request)."""
    fresh_connections = httpx.Limits(max_keepalive_connections=0)  # as in `measure`
    async with httpx.AsyncClient(base_url=base_url, timeout=600, limits=fresh_connections) as client:
        await stream_completion(client, replay_prompt(), 4)
        result = await stream_completion(client, replay_prompt(), REPLAY_TOKENS)
        # ignore_eos: exactly REPLAY_TOKENS tokens, however the server groups them into chunks
        return (REPLAY_TOKENS - 1) / (result.total_s - result.ttft_s)


def draft_counts(base_url: str) -> tuple[int, int]:
    metrics = httpx.get(base_url + "/metrics", timeout=10).json()
    return metrics.get("draft_tokens_total", 0), metrics.get("draft_tokens_accepted_total", 0)


def agent_prompt(tokenizer: Tokenizer) -> str:
    return make_prompt(tokenizer, LONG_SIZES[-1], "agent")


AGENT_NEXT_TURN = "\n\nUser: The tests pass now. What should we change next?\nAssistant:"


async def measure_long(report: Report, base_url: str, tokenizer: Tokenizer) -> None:
    """TTFT at each long size (the largest is the agent prompt, for the restart that may follow),
    and decode speed after the ~16k prompt."""
    async with httpx.AsyncClient(
        base_url=base_url, timeout=1800, limits=httpx.Limits(max_keepalive_connections=0)
    ) as client:
        for size in LONG_SIZES:
            prompt = agent_prompt(tokenizer) if size == LONG_SIZES[-1] else make_prompt(tokenizer, size, f"long-{size}")
            tokens = LONG_DECODE_TOKENS if size == 16384 else 4
            result = await stream_completion(client, prompt, tokens)
            report.long_ttft_s[size] = result.ttft_s
            if size == 16384:
                report.long_decode_tps = (result.tokens - 1) / (result.total_s - result.ttft_s)


async def measure_second_turn(base_url: str, tokenizer: Tokenizer) -> float:
    async with httpx.AsyncClient(base_url=base_url, timeout=1800) as client:
        return (await stream_completion(client, agent_prompt(tokenizer) + AGENT_NEXT_TURN, 4)).ttft_s


async def busy_streams(base_url: str, tokenizer: Tokenizer, seconds: float, salt: str) -> float:
    """FIRST_MINUTE_STREAMS streams, each sending its next request as soon as one ends, for
    `seconds`: their output tokens/s over the whole span (requests still running at its end are
    waited for and counted)."""
    deadline = time.perf_counter() + seconds
    async with httpx.AsyncClient(base_url=base_url, timeout=600) as client:

        async def stream(index: int) -> int:
            tokens, sent = 0, 0
            while time.perf_counter() < deadline:
                prompt = make_prompt(tokenizer, 32, f"{salt}-{index}-{sent}")
                tokens += (await stream_completion(client, prompt, CONCURRENT_TOKENS)).tokens
                sent += 1
            return tokens

        started = time.perf_counter()
        counts = await asyncio.gather(*(stream(i) for i in range(FIRST_MINUTE_STREAMS)))
        return sum(counts) / (time.perf_counter() - started)


def first_minute(base_url: str, tokenizer: Tokenizer, salt: str) -> Callable[[], float]:
    """`running`'s `at_ready` for the first-minute figure: `busy_streams` for FIRST_MINUTE_S."""
    return lambda: asyncio.run(busy_streams(base_url, tokenizer, FIRST_MINUTE_S, salt))


@dataclass
class Started:
    process: subprocess.Popen[bytes]
    ready_s: float  # from the process's start until `ready_path` said ready
    at_ready: float = 0.0  # what `running`'s `at_ready` measured


@contextmanager
def running(
    command: list[str],
    base_url: str,
    ready_path: str,
    log_path: Path | None = None,
    env: dict[str, str] | None = None,
    at_ready: Callable[[], float] | None = None,
) -> Iterator[Started]:
    """`command` started (`env` added to the environment), its output in `log_path` (default
    .cache/bench-NAME.log), once `ready_path` says ready; `at_ready` runs the moment it does
    (before pooled's smaller shapes are compiled), its figure in `Started.at_ready`."""
    log_path = log_path or REPO / ".cache" / f"bench-{Path(command[0]).name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)  # a fresh checkout has no .cache yet
    log = open(log_path, "wb")  # noqa: SIM115
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{command[0]} exited with {process.returncode}; see {log.name}")
            try:
                response = httpx.get(base_url + ready_path, timeout=2)
                health = response.json() if response.status_code == 200 else {}
                # pooled says {"ready": true}; llama-server says {"status": "ok"} (503 while loading).
                if health and health.get("ready", True) and health.get("status", "ok") == "ok":
                    ready_s = time.perf_counter() - started
                    break
                if health.get("state") == "dead":  # pooled's model failed to load: it will not be ready
                    raise RuntimeError(f"{command[0]} failed: {health.get('reason')}")
            except (httpx.TransportError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{command[0]} was not ready after {READY_TIMEOUT_S} s")
            time.sleep(0.25)
        measured = at_ready() if at_ready is not None else 0.0
        # pooled serves before its smaller shapes are compiled: measure once they are.
        while (httpx.get(base_url + ready_path, timeout=10).json().get("engine") or {}).get("pending_buckets"):
            time.sleep(0.5)
        yield Started(process, ready_s, measured)
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def pooled_command(model: Path, port: int, extra: list[str]) -> list[str]:
    return [str(Path(sys.executable).parent / "pooled"), "serve", "--model", str(model), "--port", str(port), *extra]


def llama_command(binary: Path, model: Path, port: int, threads: int, slots: int, ctx: int) -> list[str]:
    return [
        str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-t", str(threads),
        "-np", str(slots), "-c", str(slots * ctx), "--no-webui",
    ]  # fmt: skip


def median_report(rounds: list[Report]) -> Report:
    """A server's report whose every figure is the median of its rounds' reports."""
    first, median = rounds[0], statistics.median
    return Report(
        first.name,
        ttft_s={size: median([r.ttft_s[size] for r in rounds]) for size in first.ttft_s},
        resent_ttft_s=median([r.resent_ttft_s for r in rounds]),
        decode_tps=median([r.decode_tps for r in rounds]),
        aggregate_tps={n: median([r.aggregate_tps[n] for r in rounds]) for n in first.aggregate_tps},
        latency_p50_s={n: median([r.latency_p50_s[n] for r in rounds]) for n in first.latency_p50_s},
        latency_p99_s={n: median([r.latency_p99_s[n] for r in rounds]) for n in first.latency_p99_s},
        peak_rss_mib=median([r.peak_rss_mib for r in rounds]),
        bytes_per_step=first.bytes_per_step,
        long_ttft_s={size: median([r.long_ttft_s[size] for r in rounds]) for size in first.long_ttft_s},
        long_decode_tps=median([r.long_decode_tps for r in rounds]),
        restart_ttft_s=median([r.restart_ttft_s for r in rounds]),
        replay_tps=median([r.replay_tps for r in rounds]),
        replay_no_drafts_tps=median([r.replay_no_drafts_tps for r in rounds]),
        replay_acceptance=median([r.replay_acceptance for r in rounds]),
        ready_s=median([r.ready_s for r in rounds]),
        warm_ready_s=median([r.warm_ready_s for r in rounds]),
        first_minute_tps=median([r.first_minute_tps for r in rounds]),
        warm_first_minute_tps=median([r.warm_first_minute_tps for r in rounds]),
        steady_tps=median([r.steady_tps for r in rounds]),
        greedy_texts=first.greedy_texts,
    )


def speedup(ours: list[float], theirs: list[float], higher_is_better: bool) -> str:
    """pooled's speed-up over llama-server: the median of the rounds' own ratios (rounds where both
    servers were measured), with their range when there are several."""
    pairs = list(zip(ours, theirs, strict=False))
    if not pairs or not all(a and b for a, b in pairs):
        return "n/a"
    ratios = [a / b if higher_is_better else b / a for a, b in pairs]
    text = f"{statistics.median(ratios):.2f}×"
    return text + (f" ({min(ratios):.2f}–{max(ratios):.2f})" if len(ratios) > 1 else "")


def greedy_agreement(tokenizer: Tokenizer, ours: list[str], theirs: list[str]) -> list[float]:
    """Per greedy prompt, the share of tokens the two answers hold alike before they first part
    (of the longer answer's tokens, retokenized here: both servers' chunks are text)."""
    shares = []
    for a, b in zip(ours, theirs, strict=True):
        x, y = tokenizer.encode(a), tokenizer.encode(b)
        same = next((i for i, (p, q) in enumerate(zip(x, y, strict=False)) if p != q), min(len(x), len(y)))
        shares.append(same / max(len(x), len(y), 1))
    return shares


def first_minute_share(warm: bool) -> Callable[[Report], float]:
    """A report's first-minute figure over its steady state (0: not measured)."""

    def share(report: Report) -> float:
        figure = report.warm_first_minute_tps if warm else report.first_minute_tps
        return figure / report.steady_tps if report.steady_tps else 0.0

    return share


def markdown(runs: list[list[Report]], bandwidth: float, command: str, greedy_shares: list[float] | None = None) -> str:
    """The page section for `runs`: per server (pooled first), its reports, one a round, and the
    greedy agreement of the two servers' first rounds (`greedy_agreement`) when both ran."""
    compared = len(runs) == 2
    reports = [median_report(rounds) for rounds in runs]
    rounds = max(len(r) for r in runs)
    lines = [
        f"## Run: {', '.join(r.name for r in reports)}",
        "",
        "Written by `make bench` (`tools/bench.py`); every figure below was measured by that run.",
        "",
        f"- Date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        f"- Machine: {machine_line()}; measured memory bandwidth {bandwidth:.1f} GB/s (numpy copy, read+write)",
        f"- Command: `{command}`",
        f"- Workload: `/v1/completions` streams, temperature 0, `ignore_eos`; decode {DECODE_TOKENS} tokens; "
        f"{CONCURRENT_TOKENS} tokens per concurrent stream",
        f"- Rounds: {rounds}"
        + (
            ", the servers taking turns; each figure is the median of the rounds, each ratio the median of the "
            "rounds' own ratios (their range in brackets)"
            if compared
            else "; each figure is the median of the rounds"
        ),
        "",
        "| metric | " + " | ".join(r.name for r in reports) + (" | pooled / llama-server" if compared else "") + " |",
        "| --- | " + " | ".join("---" for _ in reports) + (" | ---" if compared else "") + " |",
    ]

    def row(label: str, figure: Callable[[Report], float], fmt: str, higher_is_better: bool) -> None:
        cells = " | ".join(format(figure(r), fmt) if figure(r) else "n/a" for r in reports)  # 0: not measured
        extra = ""
        if compared:
            ours, theirs = ([figure(r) for r in server] for server in runs)
            extra = " | " + speedup(ours, theirs, higher_is_better)
        lines.append(f"| {label} | {cells}{extra} |")

    def entry(table: Callable[[Report], dict[int, float]], key: int) -> Callable[[Report], float]:
        return lambda report: table(report)[key]

    for size in PROMPT_SIZES:
        row(f"TTFT, {size}-token prompt (s)", entry(lambda r: r.ttft_s, size), ".2f", False)
    row("TTFT, resent 1k conversation + one turn (s)", lambda r: r.resent_ttft_s, ".2f", False)
    row("single-stream decode (tokens/s)", lambda r: r.decode_tps, ".1f", True)
    for n in CONCURRENCY:
        row(f"aggregate decode, {n} streams (tokens/s)", entry(lambda r: r.aggregate_tps, n), ".1f", True)
        row(f"p50 latency, {n} streams (s)", entry(lambda r: r.latency_p50_s, n), ".2f", False)
        row(f"p99 latency, {n} streams (s)", entry(lambda r: r.latency_p99_s, n), ".2f", False)
    if all(r.long_ttft_s for r in reports):
        for size in LONG_SIZES:
            row(f"TTFT, {size}-token prompt, 32k context (s)", entry(lambda r: r.long_ttft_s, size), ".2f", False)
        row("decode at ~16k tokens of context (tokens/s)", lambda r: r.long_decode_tps, ".1f", True)
        row("TTFT, agent second turn after a restart (s)", lambda r: r.restart_ttft_s, ".2f", False)
    row("code-editing replay, greedy (tokens/s)", lambda r: r.replay_tps, ".1f", True)
    row("code-editing replay, drafts off (tokens/s)", lambda r: r.replay_no_drafts_tps, ".1f", True)
    row("code-editing replay, drafts accepted (share)", lambda r: r.replay_acceptance, ".2f", True)
    row("peak RSS (MiB)", lambda r: r.peak_rss_mib, ".0f", False)
    row("start to ready (s; pooled: nothing cached)", lambda r: r.ready_s, ".1f", False)
    row("start to ready, warm (s; pooled: its cache filled)", lambda r: r.warm_ready_s or r.ready_s, ".1f", False)
    row("4 streams, steady state (tokens/s; pooled: every shape ready)", lambda r: r.steady_tps, ".1f", True)
    row("4 streams, first minute after a cold start (share of steady)", first_minute_share(False), ".2f", True)
    row("4 streams, first minute after a warm start (share of steady)", first_minute_share(True), ".2f", True)
    lines += ["", "Ratios are speed-ups (above 1× means pooled is better), for latencies and TTFT too."]
    if greedy_shares:
        shares = greedy_shares
        lines += [
            "",
            f"Greedy agreement with llama-server (first round; {len(shares)} prompts, {GREEDY_TOKENS} tokens each, "
            f"the share of tokens alike before the answers part): mean {100 * statistics.mean(shares):.0f} %, per "
            f"prompt {', '.join(f'{100 * share:.0f} %' for share in shares)}.",
        ]
    lines += [""]
    lines += ["### Roofline (batch-1 decode)", ""]
    for report in reports:
        if report.bytes_per_step:
            ceiling = bandwidth * 1e9 / report.bytes_per_step
            lines.append(
                f"- {report.name}: ~{report.bytes_per_step / 1e6:.0f} MB read per decode step → ceiling "
                f"{ceiling:.0f} tokens/s at {bandwidth:.1f} GB/s; measured {report.decode_tps:.1f} "
                f"({100 * report.decode_tps / ceiling:.0f} % of the roofline)"
            )
    return "\n".join(lines) + "\n"


def write_section(path: Path, name: str, text: str) -> None:
    """Replace this run's marked section of the page, keeping every other section as it was."""
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    block = f"{start}\n{text}{end}\n"
    page = path.read_text(encoding="utf-8") if path.exists() else ""
    if start in page and end in page:
        before, rest = page.split(start, 1)
        page = before + block + rest.split(end, 1)[1].lstrip("\n")
    else:
        page = page + ("\n" if page else "") + block
    path.write_text(page, encoding="utf-8")


def machine_line() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores ({_cpu_name()}), {_memory_gib():.0f} GiB"


# The instruction sets the kernels and XLA pick paths by, as /proc/cpuinfo names them.
_FLAGS_OF_NOTE = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_int8")


def _cpu_name() -> str:
    """The CPU's name, family and model, and which of `_FLAGS_OF_NOTE` it has."""
    fields: dict[str, str] = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
        if not line.strip():
            break  # the first processor's block is enough
    name = fields.get("model name") or platform.processor() or "unknown CPU"
    flags = [flag for flag in _FLAGS_OF_NOTE if flag in fields.get("flags", "").split()]
    return f"{name}, family {fields.get('cpu family', '?')} model {fields.get('model', '?')}, {' '.join(flags)}"


def _memory_gib() -> float:
    first = Path("/proc/meminfo").read_text().splitlines()[0]
    return int(first.split()[1]) / 1024 / 1024


def pooled_bytes_per_step(model: Path, quantization: str) -> int:
    """Weights read once per decode step: float32; with `--quantization w8a8` one byte for each
    matrix element (the per-channel scales are under 1 %); with `w4a8` 5 bits (Q4_1: 16 bytes of
    codes and two f16 per 32 elements) except the embedding and output head, int8; with `gguf` the
    file's own bytes. A tied embedding is read once, as the output matrix. `quantization` is what
    the server says it serves."""
    from gguf import GGUFReader

    if quantization == "gguf":
        return int(sum(int(t.n_bytes) for t in GGUFReader(model).tensors))

    def element_bytes(name: str, dimensions: int) -> float:
        if dimensions < 2 or quantization == "none":
            return 4
        if quantization == "w4a8" and name not in ("token_embd.weight", "output.weight"):
            return 5 / 8
        return 1

    tensors = GGUFReader(model).tensors
    return int(sum(int(t.n_elements) * element_bytes(t.name, len(t.shape)) for t in tensors))


def pooled_flags(prefix_dir: str, extra: list[str], slots: int, long: bool) -> list[str]:
    """pooled's flags in a round: a prefix-cache disk tier of the run's own (cold at the first
    start, warm after the restart); without the long figures the context and lanes llama-server's
    slots hold, so peak RSS compares the same KV cache (with them pooled's default context, which
    they need); `extra` (--pooled-args) last, so it wins."""
    same_context = [] if long else ["--ctx", str(SLOT_CONTEXT), "--decode-lanes", str(slots)]
    return [*same_context, "--prefix-cache-dir", prefix_dir, *extra]


def measure_pooled(model: Path, tokenizer: Tokenizer, pooled_args: list[str], slots: int, long: bool) -> Report:
    url = "http://127.0.0.1:8091"
    with (
        tempfile.TemporaryDirectory(prefix="bench-prefix-") as prefix,
        tempfile.TemporaryDirectory(prefix="bench-cache-") as cache,
    ):
        args = pooled_flags(prefix, pooled_args, slots, long)
        # A prepared-weights and compilation cache of the run's own, so the first start compiles
        # from nothing and the second finds it filled; the native kernels, built once per machine,
        # are linked in (building them is not the model's start).
        kernels = cache_root(None) / "kernels"
        if kernels.is_dir():
            (Path(cache) / "kernels").symlink_to(kernels)
        env = {"POOLED_CACHE_DIR": cache}
        # Without --ctx pooled serves a model trained on less than 32768 tokens at 32768
        # (pooled/configuration/context_policy.py): the long figures need no other server.
        cold_minute = first_minute(url, tokenizer, "cold")
        with running(pooled_command(model, 8091, args), url, "/health", env=env, at_ready=cold_minute) as server:
            quantization = httpx.get(url + "/health", timeout=10).json()["quantization"]
            steady_tps = asyncio.run(busy_streams(url, tokenizer, FIRST_MINUTE_S, "steady"))
            report = asyncio.run(measure("pooled", url, tokenizer, server.process.pid))
            report.ready_s, report.first_minute_tps, report.steady_tps = server.ready_s, server.at_ready, steady_tps
            before = draft_counts(url)
            asyncio.run(measure_replay(url))
            proposed, accepted = (after - first for after, first in zip(draft_counts(url), before, strict=True))
            report.replay_acceptance = accepted / proposed if proposed else 0.0
            if long:
                asyncio.run(measure_long(report, url, tokenizer))
        warm_minute = first_minute(url, tokenizer, "warm")
        with running(pooled_command(model, 8091, args), url, "/health", env=env, at_ready=warm_minute) as server:
            report.warm_ready_s, report.warm_first_minute_tps = server.ready_s, server.at_ready
            if long:
                report.restart_ttft_s = asyncio.run(measure_second_turn(url, tokenizer))
        with running(pooled_command(model, 8091, [*args, "--draft-tokens", "0"]), url, "/health", env=env):
            report.replay_no_drafts_tps = asyncio.run(measure_replay(url))
    report.bytes_per_step = pooled_bytes_per_step(model, quantization)
    return report


def llama_tools() -> Path:
    """The folder of the llama.cpp build (llama-server, llama-quantize), built first if need be."""
    script = REPO / "tools" / "build_llama_server.sh"
    return Path(subprocess.check_output([str(script)], text=True).strip()).parent


def bench_models() -> Path:
    """Where the GGUF files the bench makes are kept: beside the llama.cpp build."""
    return llama_tools().parent.parent / "models"


def requantized(model: Path, quantization: str) -> Path:
    """`model` requantized to `quantization` by llama-quantize (`--allow-requantize`: from its
    dequantized blocks, as from a float file), kept among the bench's models, named as `model`
    less its own type ("NAME.Q4_1.gguf" → "NAME.Q4_K_M.gguf")."""
    target = bench_models() / f"{model.stem.rsplit('.', 1)[0]}.{quantization}.gguf"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial")
        command = [str(llama_tools() / "llama-quantize"), "--allow-requantize", str(model), str(partial), quantization]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        partial.rename(target)
    return target


def random_model(shape: str) -> Path:
    """A random-weight checkpoint of `shape` (tools/random_checkpoint.py) as an F16 GGUF, as
    llama.cpp's converter would write it (tools/qwen2_gguf.py: the converter refuses its made-in-code
    tokenizer), made once among the bench's models: llama-quantize's input. Both are run as their
    own processes, so their JAX and their gigabytes stay out of this one."""
    target = bench_models() / f"random-{shape}.F16.gguf"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial")
        with tempfile.TemporaryDirectory(prefix="random-", dir=target.parent) as folder:
            for tool, *arguments in (
                ("tools.random_checkpoint", folder, "--shape", shape),
                ("tools.qwen2_gguf", folder, str(partial), "--type", "F16"),
            ):
                subprocess.run([sys.executable, "-m", tool, *arguments], cwd=REPO, check=True)
        partial.rename(target)
    return target


def measure_llama_server(model: Path, tokenizer: Tokenizer, threads: int, slots: int, long: bool) -> Report:
    binary = llama_tools() / "llama-server"
    url = "http://127.0.0.1:8092"
    with running(llama_command(binary, model, 8092, threads, slots, SLOT_CONTEXT), url, "/health") as server:
        report = asyncio.run(measure("llama-server", url, tokenizer, server.process.pid))
        report.ready_s = server.ready_s
    if long:
        yarn = ["--rope-scaling", "yarn", "--yarn-orig-ctx", "8192"]
        with running([*llama_command(binary, model, 8092, threads, 1, LONG_CONTEXT), *yarn], url, "/health"):
            asyncio.run(measure_long(report, url, tokenizer))
    report.bytes_per_step = model.stat().st_size
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=None, help="GGUF file (default: the bundled SmolLM2)")
    parser.add_argument(
        "--quantize", metavar="TYPE", help="serve --model (or the default) requantized by llama-quantize, e.g. Q4_K_M"
    )
    parser.add_argument(
        "--model-shape",
        metavar="SHAPE",
        help="instead of --model, a random-weight Qwen2 checkpoint of tools/random_checkpoint.py's SHAPE "
        "(qwen2-0.5b) as an F16 GGUF, made once in the bench folder",
    )
    parser.add_argument("--only", choices=("pooled", "llama-server"), help="measure one server")
    parser.add_argument("--base-url", help="measure an already running server and print the figures only")
    parser.add_argument("--threads", type=int, default=2, help="llama-server threads")
    parser.add_argument("--slots", type=int, default=32, help="llama-server parallel slots")
    parser.add_argument("--pooled-args", default="", help="extra flags for pooled serve")
    parser.add_argument("--rounds", type=int, default=3, help="turns each server takes (figures: medians)")
    parser.add_argument("--no-long", dest="long", action="store_false", help="skip the long-context figures")
    parser.add_argument("--write", type=Path, default=REPO / "docs" / "BENCHMARKS.md")
    parser.add_argument(
        "--section",
        help="which marked section of --write this run replaces (default: --model-shape and --quantize's type "
        "joined by '-', or main)",
    )
    parser.add_argument("--plan", action="store_true", help="print what would be measured, measure nothing")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.model and args.model_shape:
        parser.error("--model and --model-shape name two models; give one")
    model = random_model(args.model_shape) if args.model_shape else args.model or default_model_path()
    if args.quantize:
        model = requantized(model, args.quantize)
    args.section = args.section or "-".join(filter(None, (args.model_shape, args.quantize))) or "main"
    if args.plan:
        servers = [server for server in ("pooled", "llama-server") if args.only in (None, server)]
        long = "with" if args.long else "without"
        print(f"bench plan: {', '.join(servers)} on {model} ({model.stat().st_size} bytes), {args.rounds} round(s),")
        print(
            f"  {long} the long-context figures, pooled flags {args.pooled_args!r}, into {args.write} [{args.section}]"
        )
        return 0
    tokenizer = Tokenizer.from_gguf_file(model)
    (REPO / ".cache").mkdir(exist_ok=True)

    if args.base_url:
        print(json.dumps(asyncio.run(measure("server", args.base_url, tokenizer, None)).__dict__, indent=2))
        return 0

    runs: dict[str, list[Report]] = {server: [] for server in ("pooled", "llama-server") if args.only in (None, server)}
    llama_server_failed = False
    for round_index in range(args.rounds):
        # Every other round the other server goes first, so a steady drift reaches both alike.
        for server in list(runs) if round_index % 2 == 0 else list(runs)[::-1]:
            if server == "pooled":
                runs[server].append(measure_pooled(model, tokenizer, args.pooled_args.split(), args.slots, args.long))
            elif not llama_server_failed:
                try:
                    runs[server].append(measure_llama_server(model, tokenizer, args.threads, args.slots, args.long))
                except (RuntimeError, subprocess.CalledProcessError) as error:
                    # Keep what was measured: a failed baseline must not throw away pooled's figures.
                    print(f"bench: llama-server could not be measured: {error}", file=sys.stderr)
                    llama_server_failed = True
    measured = [rounds for rounds in runs.values() if rounds]
    if not measured:
        return 1
    bandwidth = memory_bandwidth_gbs()
    # The page names the command that wrote it, every flag included.
    flags = shlex.join(sys.argv[1:])
    command = "make bench" + (f" ARGS={shlex.quote(flags)}" if flags else "")
    greedy = None
    if len(measured) == 2 and all(rounds[0].greedy_texts for rounds in measured):
        greedy = greedy_agreement(tokenizer, measured[0][0].greedy_texts, measured[1][0].greedy_texts)
    text = markdown(measured, bandwidth, command, greedy)
    write_section(args.write, args.section, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
