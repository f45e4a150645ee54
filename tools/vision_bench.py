"""Image chats: pooled against llama-server (`--mmproj`) on one vision-language model, same machine.

    python tools/vision_bench.py [--rounds 3] [--depth 8]

No published Qwen2-VL pair can be downloaded here (no registry package ships one), so the model
is built: a random-weight Qwen2.5-VL whose vision tower has Qwen2.5-VL-3B's blocks (1280 wide,
16 heads, MLP 3420, windows of 112 pixels, full attention every fourth block) but `--depth` of
them (the 3B has 32), and a decoder of SmolLM2-135M's shape (576 wide, 30 layers), with the tiny
test model's tokenizer and Qwen2-VL's chat template. Its language GGUF (Q8_0) is written by
tools/vision_gguf.py (llama.cpp's converter refuses a tokenizer it does not know), its mmproj GGUF
(F32) by llama.cpp's convert_hf_to_gguf.py --mmproj; both servers load that pair, pooled with
--mmproj as llama-server is given it.

Figures (each request's picture one neither server has seen, random pixels, 448 × 448: 1,024
patches, 256 image tokens on both servers, whose image token counts are printed):
- image chat TTFT: one picture and a question, 1 token answered, one request at a time: the
  request's time (its prompt's prefill, the picture through the tower, one token), median of rounds;
- images/s: 8 requests of a picture each, 4 at a time, 1 token each: pictures over the wall time.

The section of docs/BENCHMARKS.md between its vision markers is rewritten with the figures.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from bench import REPO, llama_tools, machine_line, peak_rss_mib, pooled_command, running, write_section
from PIL import Image

from tests.engine.tiny_vision_checkpoints import write_vision_checkpoint
from tests.engine.tiny_vision_server_model import build_tiny_vision_server_model, server_config
from tools.vision_gguf import write_pair

POOLED_PORT, LLAMA_PORT = 8391, 8392
SIDE = 448  # pixels: 32 × 32 patches of 14, 256 merged tokens
CONCURRENT, CONCURRENT_REQUESTS = 4, 8
CONTEXT = 2048  # tokens a slot (llama-server) or lane (pooled) holds
QUESTION = "What is in this picture?"

_DECODER = {
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "rope_theta": 1000000.0,
    # head_dim 64: 32 rotary frequencies, as Qwen2.5-VL's 128-wide heads split their 64 (16, 24, 24)
    "rope_scaling": {"type": "mrope", "mrope_section": [8, 12, 12]},
    "tie_word_embeddings": True,
}


def bench_model(directory: Path, depth: int) -> tuple[Path, Path]:
    """The bench's model as a safetensors folder, then its language GGUF (tools/vision_gguf.py) and
    its mmproj GGUF by llama.cpp's own converter (from the sources llama-server is built from); the
    two files' paths."""
    folder = directory / f"qwen2_5_vl-depth{depth}"
    language, mmproj = directory / f"{folder.name}-q8_0.gguf", directory / f"mmproj-{folder.name}-f32.gguf"
    if language.is_file() and mmproj.is_file():
        return language, mmproj
    build_tiny_vision_server_model(folder)  # tokenizer, template and preprocessor files
    config: dict[str, Any] = {**server_config(), **_DECODER}
    config["vision_config"] = {
        **config["vision_config"],
        "depth": depth,
        "hidden_size": 1280,
        "num_heads": 16,
        "intermediate_size": 3420,
        "out_hidden_size": _DECODER["hidden_size"],
        "window_size": 112,
        "fullatt_block_indexes": [i for i in range(depth) if i % 4 == 3],
    }
    write_vision_checkpoint(config, folder, seed=0)
    processor = json.loads((folder / "preprocessor_config.json").read_text())
    (folder / "preprocessor_config.json").write_text(json.dumps({**processor, "max_pixels": 1280 * 28 * 28}))
    written, _ = write_pair(folder, directory / "pair", "Q8_0")
    written.rename(language)
    converter = next(llama_tools().parents[1].glob("llama_cpp_python-*/vendor/llama.cpp/convert_hf_to_gguf.py"))
    convert = [sys.executable, str(converter), str(folder), "--mmproj", "--outtype", "f32", "--outfile", str(mmproj)]
    subprocess.run(convert, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return language, mmproj


def picture(seed: int) -> str:
    pixels = np.random.default_rng(seed).integers(0, 256, size=(SIDE, SIDE, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def ask(client: httpx.Client, seed: int) -> tuple[float, int]:
    """One image chat answered with one token: its seconds and its prompt tokens."""
    content = [{"type": "text", "text": QUESTION}, {"type": "image_url", "image_url": {"url": picture(seed)}}]
    body = {"model": "any", "messages": [{"role": "user", "content": content}], "max_tokens": 1, "temperature": 0}
    start = time.perf_counter()
    response = client.post("/v1/chat/completions", json=body)
    response.raise_for_status()
    return time.perf_counter() - start, int(response.json()["usage"]["prompt_tokens"])


def measure(base_url: str, rounds: int, seeds: list[int]) -> dict[str, Any]:
    """TTFT per round, images/s, prompt tokens; `seeds` gives each request its own picture."""
    with httpx.Client(base_url=base_url, timeout=900) as client:
        ask(client, seeds.pop())  # warm-up: the tower's and the prompt's shapes
        timed = [ask(client, seeds.pop()) for _ in range(rounds)]
        batch = [seeds.pop() for _ in range(CONCURRENT_REQUESTS)]
        start = time.perf_counter()
        with ThreadPoolExecutor(CONCURRENT) as pool:
            list(pool.map(lambda seed: ask(client, seed), batch))
        images_per_s = CONCURRENT_REQUESTS / (time.perf_counter() - start)
    return {"ttft": [t for t, _ in timed], "prompt_tokens": timed[0][1], "images_per_s": images_per_s}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--depth", type=int, default=8, help="vision blocks (Qwen2.5-VL-3B: 32)")
    parser.add_argument("--no-write", action="store_true", help="print the figures, leave docs/BENCHMARKS.md")
    args = parser.parse_args()
    language, mmproj = bench_model(REPO / ".cache" / "vision-bench", args.depth)
    seeds = list(range(1000))
    results: dict[str, dict[str, Any]] = {}
    # As llama-server's: 4 lanes of 2,048 tokens.
    lanes = ["--decode-lanes", str(CONCURRENT), "--ctx", str(CONTEXT)]
    pooled = pooled_command(language, POOLED_PORT, ["--mmproj", str(mmproj), *lanes])
    with running(
        pooled, f"http://127.0.0.1:{POOLED_PORT}", "/health", REPO / ".cache" / "vision-bench-pooled.log"
    ) as p:
        results["pooled"] = measure(f"http://127.0.0.1:{POOLED_PORT}", args.rounds, seeds)
        results["pooled"]["rss_mib"] = peak_rss_mib(p.process.pid)
    binary = llama_tools() / "llama-server"
    llama = [
        str(binary), "-m", str(language), "--mmproj", str(mmproj), "--host", "127.0.0.1", "--port", str(LLAMA_PORT),
        "-t", "2", "-np", str(CONCURRENT), "-c", str(CONCURRENT * CONTEXT), "--no-webui",
    ]  # fmt: skip
    log = REPO / ".cache" / "vision-bench-llama-server.log"
    with running(llama, f"http://127.0.0.1:{LLAMA_PORT}", "/health", log) as started:
        results["llama-server"] = measure(f"http://127.0.0.1:{LLAMA_PORT}", args.rounds, seeds)
        results["llama-server"]["rss_mib"] = peak_rss_mib(started.process.pid)
    text = markdown(results, args)
    print(text)
    if not args.no_write:
        write_section(REPO / "docs" / "BENCHMARKS.md", "vision", text)
    return 0


def markdown(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    ours, theirs = results["pooled"], results["llama-server"]
    ttft_ours, ttft_theirs = statistics.median(ours["ttft"]), statistics.median(theirs["ttft"])
    command = f"python tools/vision_bench.py --rounds {args.rounds} --depth {args.depth}"
    lines = [
        f"`{command}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {machine_line()}.",
        f"Random-weight Qwen2.5-VL: tower of {args.depth} Qwen2.5-VL-3B blocks, SmolLM2-135M-shaped decoder;",
        "language GGUF Q8_0, mmproj F32 by llama.cpp's converter; llama-server (tools/build_llama_server.sh)",
        f"with 2 threads and {CONCURRENT} slots of {CONTEXT} tokens, pooled with {CONCURRENT} lanes of {CONTEXT}",
        "(`--decode-lanes`, `--ctx`);",
        f"pictures of {SIDE} x {SIDE} random pixels, each new to the server.",
        "",
        "| | pooled | llama-server | pooled faster by |",
        "|---|---|---|---|",
        f"| image chat TTFT (1 token; median of {args.rounds}) | {ttft_ours:.2f} s | {ttft_theirs:.2f} s | "
        f"{ttft_theirs / ttft_ours:.2f}x |",
        f"| images/s ({CONCURRENT_REQUESTS} requests, {CONCURRENT} at a time) | {ours['images_per_s']:.2f} | "
        f"{theirs['images_per_s']:.2f} | {ours['images_per_s'] / theirs['images_per_s']:.2f}x |",
        f"| prompt tokens of one chat | {ours['prompt_tokens']} | {theirs['prompt_tokens']} | |",
        f"| peak RSS | {ours['rss_mib']:.0f} MiB | {theirs['rss_mib']:.0f} MiB | |",
        "",
        "Each TTFT round: " + ", ".join(f"{a:.2f}/{b:.2f} s" for a, b in zip(ours["ttft"], theirs["ttft"], strict=True))
        + " (pooled/llama-server).",
        "",
    ]  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
