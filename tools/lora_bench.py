"""Decode tokens per second at 32 streams with four different LoRA adapters, against the same
streams without adapters: the default model (SmolLM2-135M, as `pooled serve` loads it) on the
engine in this process, once with no adapter slots and once with four slots of rank 16 holding
random adapters on every projection. Part of `make bench`.

    python tools/lora_bench.py [--write docs/BENCHMARKS.md]

Each run submits 32 greedy requests at once (32-token prompts, 64 output tokens, EOS ignored);
with adapters, request i names adapter i mod 4. The figure is output tokens over the time from
the first token to the last, the median of ROUNDS runs.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import jax
import numpy as np
from bench import machine_line, write_section

from engine.api import GenerationRequest, SamplingParams
from engine.engine import Engine
from engine.engine_config import EngineConfig
from engine.lora.peft_adapter import LoraAdapter, LoraPair, projection_shapes
from engine.model.loading.loader import LoadedModel, load_model
from pooled.hosting.loading import resolve_dtype
from pooled.hosting.model_host import default_model_path
from tests.engine.engine_harness import Collected, prompt

STREAMS, PROMPT_TOKENS, OUTPUT_TOKENS, ROUNDS = 32, 32, 64, 3
GREEDY = SamplingParams(temperature=0.0, ignore_eos=True)
ADAPTERS, RANK = 4, 16


def random_adapter(model: LoadedModel, seed: int) -> LoraAdapter:
    """Rank-RANK pairs on every projection the engine adapts, at a scale that changes the output."""
    rng = np.random.default_rng(seed)
    pairs = {}
    for layer in range(model.config.num_layers):
        for name, (inputs, outputs) in projection_shapes(model.config, layer).items():
            a = rng.standard_normal((*inputs, RANK)).astype(np.float32) / np.sqrt(np.prod(inputs))
            b = 0.1 * rng.standard_normal((RANK, *outputs)).astype(np.float32) / np.sqrt(RANK)
            pairs[(layer, name)] = LoraPair(a, b)
    targets = tuple(projection_shapes(model.config, 0))
    return LoraAdapter(Path(f"random-{seed}"), RANK, float(RANK), 1.0, targets, pairs, 0, f"{seed:064x}")


def tokens_per_second(model: LoadedModel, slots: int) -> float:
    config = EngineConfig(decode_lanes=STREAMS, max_context=256, max_loras=slots, max_lora_rank=RANK)
    engine = Engine.build(model, config, lambda *_: None)
    try:
        names = [f"adapter-{i}" for i in range(slots)]
        for i, name in enumerate(names):
            engine.load_adapter(name, random_adapter(model, i)).result()
        rates = []
        for round_ in range(ROUNDS + 1):  # the first round warms up
            requests = [
                GenerationRequest(
                    tuple(prompt(round_ * STREAMS + i, PROMPT_TOKENS)),
                    GREEDY,
                    OUTPUT_TOKENS,
                    adapter=names[i % slots] if slots else None,
                )
                for i in range(STREAMS)
            ]
            collected = [Collected(1) for _ in requests]
            for request, sink in zip(requests, collected, strict=True):
                engine.submit(request, sink)
            start = time.perf_counter()
            results = [sink.wait() for sink in collected]
            elapsed = time.perf_counter() - start
            if round_:
                rates.append(sum(len(r.tokens[0]) for r in results) / elapsed)
        assert engine.stats().compiles_after_startup == 0, "a step compiled after start-up"
        return statistics.median(rates)
    finally:
        engine.shutdown()


def markdown(plain: float, adapted: float) -> str:
    return (
        f"`python tools/lora_bench.py`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {machine_line()}. "
        f"SmolLM2-135M (the default GGUF, w4a8), {STREAMS} greedy streams of {OUTPUT_TOKENS} tokens after "
        f"{PROMPT_TOKENS}-token prompts; median of {ROUNDS} rounds.\n\n"
        "| decode tokens/s, 32 streams | tokens/s |\n| --- | --- |\n"
        f"| no adapter slots | {plain:.1f} |\n"
        f"| {ADAPTERS} slots of rank {RANK}, four different adapters across the streams | {adapted:.1f} |\n"
        f"| ratio (target ≥ 0.8×) | {adapted / plain:.2f}× |\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", type=Path, help="a page whose `bench:lora` section this run replaces")
    args = parser.parse_args()
    model = load_model(default_model_path(), dtype=resolve_dtype("auto", jax.default_backend()), progress=False)
    plain = tokens_per_second(model, 0)
    adapted = tokens_per_second(model, ADAPTERS)
    text = markdown(plain, adapted)
    print(text)
    if args.write:
        write_section(args.write, "lora", text)


if __name__ == "__main__":
    main()
