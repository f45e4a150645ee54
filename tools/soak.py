"""`make soak`: a few thousand mixed requests against one `pooled serve`, in bursts past its queue.

    python tools/soak.py                          # 3000 requests, writes docs/RELIABILITY.md
    python tools/soak.py --requests 600 --write /tmp/soak.md

Every route that takes a request (chat, completions, responses and messages, each streaming or
not; count_tokens, input_tokens, tokenize, detokenize, models, health), in bursts larger than the
engine's lanes plus its queue, a fifth of the streams dropped by the client after their first
event. After each burst the server must settle: nothing in flight and no KV page held. The run
fails (exit 1) on any 5xx, a refusal without `Retry-After`, a request past its time limit, a
server that does not settle, or RSS growth of 5 % or more between the first and the last
thousand requests. Loopback only; bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from bench import REPO, machine_line, pooled_command, running, write_section

from pooled.hosting.model_host import default_model_path

REQUEST_TIMEOUT_S = 120  # past it a request counts as hung
SETTLE_TIMEOUT_S = 60
MESSAGES = [{"role": "user", "content": "Name a colour."}]
ANTHROPIC = {"anthropic-version": "2023-06-01"}


@dataclass
class Tally:
    statuses: Counter[int] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    refusals_without_retry_after: int = 0
    hung: int = 0
    dropped: int = 0
    unsettled: int = 0
    rss_mib: list[tuple[int, float]] = field(default_factory=list)  # (requests so far, RSS)
    settle_s: list[float] = field(default_factory=list)


def request_for(kind: str, rng: random.Random) -> tuple[str, str, dict[str, Any] | None, dict[str, str]]:
    """(method, path, body, headers) of one request of `kind`."""
    tokens = rng.randint(1, 12)
    stream = kind.endswith("-stream")
    base = kind.removesuffix("-stream")
    if base == "chat":
        return (
            "POST",
            "/v1/chat/completions",
            {"model": "m", "messages": MESSAGES, "max_tokens": tokens, "stream": stream},
            {},
        )
    if base == "completions":
        body = {"model": "m", "prompt": f"Item {rng.randint(0, 9999)}:", "max_tokens": tokens, "stream": stream}
        return "POST", "/v1/completions", body, {}
    if base == "responses":
        body = {"model": "m", "input": "Name a colour.", "max_output_tokens": tokens, "stream": stream, "store": False}
        return "POST", "/v1/responses", body, {}
    if base == "messages":
        return "POST", "/v1/messages", {"model": "m", "messages": MESSAGES, "max_tokens": tokens, "stream": stream}, {}
    if base == "count_tokens":
        return "POST", "/v1/messages/count_tokens", {"model": "m", "messages": MESSAGES}, {}
    if base == "input_tokens":
        return "POST", "/v1/responses/input_tokens", {"model": "m", "input": "Name a colour."}, {}
    if base == "tokenize":
        return "POST", "/v1/tokenize", {"prompt": "Name a colour."}, {}
    if base == "detokenize":
        return "POST", "/v1/detokenize", {"tokens": [rng.randint(100, 2000) for _ in range(5)]}, {}
    if base == "models":
        return "GET", "/v1/models", None, ANTHROPIC if rng.random() < 0.5 else {}
    return "GET", "/health", None, {}


KINDS = [
    *("chat", "chat-stream", "completions", "completions-stream", "responses", "responses-stream"),
    *("messages", "messages-stream", "count_tokens", "input_tokens", "tokenize", "detokenize", "models", "health"),
]


async def one(client: httpx.AsyncClient, kind: str, rng: random.Random, tally: Tally) -> None:
    method, path, body, headers = request_for(kind, rng)
    drop = kind.endswith("-stream") and rng.random() < 0.2
    tally.kinds[kind] += 1
    try:
        async with asyncio.timeout(REQUEST_TIMEOUT_S):
            async with client.stream(method, path, json=body, headers=headers) as response:
                status = response.status_code
                async for line in response.aiter_lines():
                    if drop and line.startswith("data:"):
                        tally.dropped += 1
                        break
    except TimeoutError:
        tally.hung += 1
        return
    tally.statuses[status] += 1
    if status in (429, 529) and "retry-after" not in response.headers:
        tally.refusals_without_retry_after += 1


async def settle(client: httpx.AsyncClient, tally: Tally) -> None:
    """Waits until nothing is in flight and no KV page is held."""
    start = time.monotonic()
    while time.monotonic() - start < SETTLE_TIMEOUT_S:
        health = (await client.get("/health")).json()
        if health["queue"] == 0 and health["engine"]["kv_pages"]["used"] == 0:
            tally.settle_s.append(time.monotonic() - start)
            return
        await asyncio.sleep(0.05)
    tally.unsettled += 1


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


async def soak(base_url: str, pid: int, requests: int, burst: int, seed: int) -> Tally:
    rng, tally, sent = random.Random(seed), Tally(), 0
    async with httpx.AsyncClient(base_url=base_url, timeout=REQUEST_TIMEOUT_S) as client:
        while sent < requests:
            size = min(burst, requests - sent)
            await asyncio.gather(*(one(client, rng.choice(KINDS), rng, tally) for _ in range(size)))
            sent += size
            await settle(client, tally)
            tally.rss_mib.append((sent, rss_mib(pid)))
    return tally


def rss_growth(tally: Tally, window: int) -> float:
    """Relative growth of the median RSS from the first `window` requests to the last `window`."""
    total = tally.rss_mib[-1][0]
    first = [rss for sent, rss in tally.rss_mib if sent <= window]
    last = [rss for sent, rss in tally.rss_mib if sent > total - window]
    return statistics.median(last) / statistics.median(first) - 1


def failures(tally: Tally, growth: float) -> list[str]:
    problems = []
    # 529 is Anthropic's refusal of a full queue, as 429 is OpenAI's.
    server_errors = sum(count for status, count in tally.statuses.items() if status >= 500 and status != 529)
    if server_errors:
        problems.append(f"{server_errors} server errors")
    if tally.refusals_without_retry_after:
        problems.append(f"{tally.refusals_without_retry_after} refusals without Retry-After")
    if tally.hung:
        problems.append(f"{tally.hung} requests past {REQUEST_TIMEOUT_S} s")
    if tally.unsettled:
        problems.append(f"{tally.unsettled} bursts after which the server did not settle")
    if growth >= 0.05:
        problems.append(f"RSS grew {growth:.1%}")
    return problems


def report(tally: Tally, args: argparse.Namespace, command: str, wall_s: float, window: int, growth: float) -> str:
    statuses = ", ".join(f"{status}: {count}" for status, count in sorted(tally.statuses.items()))
    first, last = tally.rss_mib[0][1], tally.rss_mib[-1][1]
    problems = failures(tally, growth)
    return "\n".join(
        [
            "## Soak",
            "",
            "Written by `make soak` (`tools/soak.py`); every figure below was measured by that run.",
            "",
            f"- Date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
            f"- Machine: {machine_line()}",
            f"- Command: `{command}`",
            f"- Server: `pooled serve --ctx {args.ctx} --decode-lanes {args.lanes} --max-queue {args.queue}`",
            f"- Requests: {sum(tally.kinds.values())} in bursts of {args.burst} over {wall_s:.0f} s, "
            f"every route ({len(KINDS)} kinds, a fifth of the streams dropped after their first event: "
            f"{tally.dropped})",
            f"- Statuses: {statuses}",
            f"- Refusals without `Retry-After`: {tally.refusals_without_retry_after}; requests past "
            f"{REQUEST_TIMEOUT_S} s: {tally.hung}; bursts after which the server did not settle: {tally.unsettled}",
            f"- Settling after a burst (nothing in flight, no KV page held): median "
            f"{statistics.median(tally.settle_s):.2f} s, longest {max(tally.settle_s):.2f} s",
            f"- RSS: {first:.0f} MiB after the first burst, {last:.0f} MiB after the last; median over the last "
            f"{window} requests against the first {window}: {growth:+.1%}",
            f"- Verdict: {'pass' if not problems else 'FAIL: ' + '; '.join(problems)}",
            "",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=None, help="GGUF file (default: the bundled SmolLM2)")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--burst", type=int, default=40, help="requests sent together (past lanes + queue)")
    parser.add_argument("--lanes", type=int, default=4)
    parser.add_argument("--queue", type=int, default=8)
    parser.add_argument("--ctx", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--port", type=int, default=8093)
    parser.add_argument("--write", type=Path, default=REPO / "docs" / "RELIABILITY.md")
    parser.add_argument("--section", default="soak", help="which marked section of --write this run replaces")
    args = parser.parse_args()
    base_url = f"http://127.0.0.1:{args.port}"
    engine = ["--ctx", str(args.ctx), "--decode-lanes", str(args.lanes), "--max-queue", str(args.queue)]
    (REPO / ".cache").mkdir(exist_ok=True)
    with running(pooled_command(args.model or default_model_path(), args.port, engine), base_url, "/health") as server:
        started = time.monotonic()
        tally = asyncio.run(soak(base_url, server.process.pid, args.requests, args.burst, args.seed))
        wall_s = time.monotonic() - started
    window = min(1000, args.requests // 3)
    growth = rss_growth(tally, window)
    command = "make soak" + (f" ARGS='{' '.join(sys.argv[1:])}'" if len(sys.argv) > 1 else "")
    text = report(tally, args, command, wall_s, window, growth)
    print(text)
    write_section(args.write, args.section, text)
    return 1 if failures(tally, growth) else 0


if __name__ == "__main__":
    sys.exit(main())
