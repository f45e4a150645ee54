"""The device check's bench (tools/device_check.sh): a served random-weight checkpoint of a real shape
(tools/random_checkpoint.py) measured over `/v1/completions` streams, each figure beside its roofline
and issue 41's target, written as a section of docs/BENCHMARKS.md.

    python tools/device_bench.py --base-url http://127.0.0.1:18080 --model DIR --ready-s 42 [--write PAGE]
    python tools/device_bench.py --model DIR --plan      # what it would measure (the dry run)

Measured: single-stream decode tokens/s; aggregate tokens/s at 16 and 64 streams; time to first
token at ~1k and ~4k prompt tokens (fresh text each, so no prefix is cached); start to ready as
the caller timed it. Rooflines: a decode step reads every weight once, so one stream's ceiling is
the memory bandwidth over the weights' bytes (and N streams' N times that, KV reads aside); a
prompt's ceiling is its 2 × parameters × tokens FLOPs at the device's dense bf16 rate.

The client is plain asyncio sockets: it counts `data:` events and stamps them, without parsing, so
it takes little from the server it measures (tools/host_path_bench.py uses it too).
"""

import argparse
import asyncio
import json
import random
import string
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))

from bench import machine_line, write_section  # noqa: E402

# Published peaks: HBM bytes/s and dense bf16 FLOP/s.
DEVICE_PEAKS = {"H200": (4.8e12, 989e12), "H100": (3.35e12, 989e12)}
TARGETS: dict[tuple[str, str | int], str] = {  # issue 41, on one H200: (shape, measure) -> target
    ("1b", "single"): "≥ 1,000",
    ("1b", 64): "≥ 20,000",
    ("1b", 4000): "≤ 0.040",
    ("8b", "single"): "≥ 200",
}
READY_TARGET = "≤ 20"


async def stream(base_url: str, body: dict[str, object]) -> list[float]:
    """POSTs `body` to /v1/completions as a stream; the perf_counter stamp of each `data:` event
    that carries JSON (the `[DONE]` line excluded)."""
    url = urlsplit(base_url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    payload = json.dumps(body | {"stream": True}).encode()
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n".encode()
        + f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
        + payload
    )
    await writer.drain()
    stamps: list[float] = []
    tail = b""
    while chunk := await reader.read(65536):
        now = time.perf_counter()
        data = tail + chunk
        found = data.count(b"\ndata: {") + data.startswith(b"data: {") - tail.count(b"\ndata: {")
        stamps += [now] * found
        tail = data[-8:]
    writer.close()
    return stamps


def completion(prompt: str, tokens: int) -> dict[str, object]:
    return {"prompt": prompt, "max_tokens": tokens, "temperature": 0, "ignore_eos": True}


def fresh_text(tokens: int) -> str:
    """About `tokens` tokens of text no earlier request began with (a byte-level tokenizer takes one
    token an ASCII character)."""
    return "".join(random.choices(string.ascii_lowercase + " ", k=tokens))


@dataclass(frozen=True)
class Figures:
    single_tokens_per_s: float
    streams_tokens_per_s: dict[int, float]
    ttft_s: dict[int, float]


async def measure(base_url: str, decode_tokens: int = 256, stream_tokens: int = 128) -> Figures:
    await stream(base_url, completion(fresh_text(64), 16))  # warm
    stamps = await stream(base_url, completion(fresh_text(32), decode_tokens))
    # Tokens, not events: a token whose bytes end inside a character sends no event of its own.
    single = (decode_tokens - 1) / (stamps[-1] - stamps[0])
    streams: dict[int, float] = {}
    for count in (16, 64):
        started = time.perf_counter()
        await asyncio.gather(*(stream(base_url, completion(fresh_text(32), stream_tokens)) for _ in range(count)))
        streams[count] = count * stream_tokens / (time.perf_counter() - started)
    ttft: dict[int, float] = {}
    for size in (1000, 4000):
        started = time.perf_counter()
        first = await stream(base_url, completion(fresh_text(size), 1))
        ttft[size] = first[0] - started
    return Figures(single, streams, ttft)


def model_facts(model: Path) -> tuple[str, int]:
    """The checkpoint's shape name (by its width) and its weights' bytes."""
    config = json.loads((model / "config.json").read_text())
    shape = {64: "tiny", 2048: "1b", 4096: "8b"}.get(config["hidden_size"], "other")
    return shape, (model / "model.safetensors").stat().st_size


def report(figures: Figures, model: Path, ready_s: float, device: str, command: str) -> str:
    shape, weight_bytes = model_facts(model)
    peaks = next((peak for name, peak in DEVICE_PEAKS.items() if name in device), None)
    parameters = weight_bytes / 2  # bf16

    def roofline_decode(streams: int) -> str:
        return f"{streams * peaks[0] / weight_bytes:,.0f}" if peaks else "n/a"

    def roofline_prompt(tokens: int) -> str:
        return f"{2 * parameters * tokens / peaks[1]:.4f}" if peaks else "n/a"

    rows: list[tuple[str, str, str, str | int]] = [
        ("single-stream decode (tokens/s)", f"{figures.single_tokens_per_s:,.0f}", roofline_decode(1), "single")
    ]
    rows += [
        (f"{count} streams aggregate (tokens/s)", f"{rate:,.0f}", roofline_decode(count), count)
        for count, rate in figures.streams_tokens_per_s.items()
    ]
    rows += [
        (f"TTFT at ~{size} tokens (s)", f"{seconds:.3f}", roofline_prompt(size), size)
        for size, seconds in figures.ttft_s.items()
    ]
    lines = [
        f"## Run: the device check on {device} ({shape} shape)",
        "",
        "Written by `tools/device_check.sh` (`tools/device_bench.py`); every figure below was measured by that run.",
        "",
        f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- Machine: {machine_line()}; device {device}",
        f"- Command: `{command}`",
        f"- Model: {model.name}, a random-weight Llama of the {shape} shape ({weight_bytes / 2**30:.2f} GiB of "
        "bf16 weights, tools/random_checkpoint.py); greedy, `ignore_eos`",
        "",
        "| measure | pooled | roofline | target (issue 41) |",
        "| --- | --- | --- | --- |",
    ]
    lines += [f"| {label} | {value} | {roof} | {TARGETS.get((shape, key), '')} |" for label, value, roof, key in rows]
    lines += [f"| start to ready (s) | {ready_s:.1f} | | {READY_TARGET if shape == '1b' else ''} |", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", default="http://127.0.0.1:18080")
    parser.add_argument("--model", type=Path, required=True, help="the served checkpoint's folder")
    parser.add_argument("--ready-s", type=float, default=0.0, help="start to ready, as the caller timed it")
    parser.add_argument("--device", default="an unknown device", help="the device's name (e.g. nvidia-smi's)")
    parser.add_argument("--write", type=Path, default=REPO / "docs" / "BENCHMARKS.md")
    parser.add_argument("--plan", action="store_true", help="print what would be measured, measure nothing")
    args = parser.parse_args()
    shape, weight_bytes = model_facts(args.model)
    section = f"device-{shape}"
    if args.plan:
        plan = f"{args.base_url}, the {shape} shape ({weight_bytes} bytes)"
        print(f"device bench plan: {plan} into {args.write} [{section}]")
        return
    figures = asyncio.run(measure(args.base_url))
    text = report(figures, args.model, args.ready_s, args.device, "tools/device_check.sh")
    print(text)
    write_section(args.write, section, text)


if __name__ == "__main__":
    main()
