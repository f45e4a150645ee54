"""Decode speed at a long context with prompt-lookup drafts off, so that the figure measures the
attention kernels rather than how well the filler text drafts (`make bench`'s long-context decode
runs the server's defaults, drafts on).

    .venv/bin/python tools/long_decode_probe.py [--context 16384] [--pooled-args "..."]

Starts `pooled serve --draft-tokens 0` on the default model with a prefix-cache disk tier of its
own, sends one filler prompt of `--context` tokens and decodes 64 greedy tokens, then sends the
same prompt with one word more (its pages now cached) and decodes 64 again. Prints TTFT and decode
tokens/s of both.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile

import httpx
from bench import REPO, Tokenizer, default_model_path, make_prompt, pooled_command, running, stream_completion

PORT = 8093
DECODE_TOKENS = 64


async def measure(url: str, prompt: str) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=1800) as client:
        for label, text in (("first", prompt), ("resent", prompt + " and")):
            result = await stream_completion(client, text, DECODE_TOKENS)
            decode = (result.tokens - 1) / (result.total_s - result.ttft_s)
            print(f"{label}: TTFT {result.ttft_s:.1f} s, decode {decode:.2f} tokens/s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--context", type=int, default=16384, help="prompt tokens")
    parser.add_argument("--pooled-args", default="", help="extra flags for pooled serve")
    args = parser.parse_args()
    model = default_model_path()
    prompt = make_prompt(Tokenizer.from_gguf_file(model), args.context, f"probe-{random.randrange(10**9)}")
    url = f"http://127.0.0.1:{PORT}"
    with tempfile.TemporaryDirectory(prefix="probe-prefix-") as prefix:
        flags = ["--draft-tokens", "0", "--prefix-cache-dir", prefix, *args.pooled_args.split()]
        with running(pooled_command(model, PORT, flags), url, "/health", REPO / ".cache" / "long-decode-probe.log"):
            asyncio.run(measure(url, prompt))


if __name__ == "__main__":
    main()
