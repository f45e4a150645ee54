"""A seeded or greedy request draws the same tokens with the same logprobs, bit for bit, whatever
the prefix cache holds, however the prompt is chunked and beside whatever other streams.

The model is wide enough (256 and 512 inputs) that XLA's own CPU dot orders a row's sums by the
number of rows in the call; the engine's float matmuls must not (engine/kernels/f32_matmul.cc).
One runner (compiled once) serves every case; each case gets a fresh Engine around it, so a fresh
prefix cache and its own prefill chunk.
"""

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from engine.api import GenerationRequest, SamplingParams
from engine.checkpoint.loader import LoadedModel, load_model
from engine.engine import Engine
from engine.engine_config import EngineConfig
from engine.kv_sizing import pool_pages
from engine.runner import DeviceRunner
from tests.engine.engine_harness import Collected, generate, start

PAGE = 8
CONFIG = EngineConfig(decode_lanes=4, max_queue=4, page_size=PAGE, prefill_chunk=64, kv_cache_dtype="bfloat16")
PROMPT = tuple(np.random.default_rng(11).integers(3, 256, size=5 * PAGE + 3).tolist())
SAMPLINGS = {
    "seeded": SamplingParams(temperature=1.0, seed=1234, logprobs=2, ignore_eos=True),
    "greedy": SamplingParams(temperature=0.0, logprobs=2, ignore_eos=True),
}
STEPS = 16


@pytest.fixture(scope="module")
def model(tiny_checkpoint: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    return load_model(tiny_checkpoint("llama_wide"), cache_dir=tmp_path_factory.mktemp("prepared"), progress=False)


@pytest.fixture(scope="module")
def runner(model: LoadedModel) -> Iterator[tuple[DeviceRunner, int]]:
    pages = pool_pages(model, CONFIG)
    yield DeviceRunner(model, CONFIG, pages), pages


@pytest.fixture
def fresh(runner: tuple[DeviceRunner, int], model: LoadedModel) -> Iterator[Callable[..., Engine]]:
    """chunk → a new Engine (empty prefix cache) on the shared runner, prefilling `chunk` tokens a step."""
    built: list[Engine] = []

    def make(chunk: int = CONFIG.prefill_chunk) -> Engine:
        if built:
            built.pop().shutdown()
        config = dataclasses.replace(CONFIG, prefill_chunk=chunk)
        built.append(Engine(runner[0], runner[1], config, frozenset(model.config.eos_token_ids), lambda *_: None))
        return built[-1]

    yield make
    for engine in built:
        engine.shutdown()


def request(sampling: SamplingParams, prompt: tuple[int, ...] = PROMPT) -> GenerationRequest:
    return GenerationRequest(prompt, sampling, STEPS)


def drawn(collected: Collected) -> tuple[list[int], list]:
    assert collected.failed is None
    return collected.tokens[0], collected.logprobs[0]


@pytest.mark.parametrize("kind", SAMPLINGS)
def test_the_same_request_draws_the_same_tokens_and_logprobs_however_it_is_served(
    fresh: Callable[..., Engine], kind: str
) -> None:
    sampling = SAMPLINGS[kind]
    engine = fresh()
    cold = drawn(generate(engine, request(sampling)))
    assert len(cold[0]) == STEPS and len(cold[1]) == STEPS

    cached = engine.stats().prefix_cache_hits
    assert drawn(generate(engine, request(sampling))) == cold, "fully cached"
    assert engine.stats().prefix_cache_hits > cached

    for boundary in (PAGE, 3 * PAGE, 5 * PAGE):
        engine = fresh()
        other = PROMPT[:boundary] + tuple(3 + (t + 1) % 250 for t in PROMPT[boundary:])
        generate(engine, request(SAMPLINGS["greedy"], other))
        assert drawn(generate(engine, request(sampling))) == cold, f"{boundary} tokens cached"

    for chunk in (8, 16, 32):
        assert drawn(generate(fresh(chunk), request(sampling))) == cold, f"prefilled {chunk} tokens a step"

    engine = fresh()
    neighbours = [
        request(SAMPLINGS["greedy"], PROMPT[:9]),
        request(dataclasses.replace(SAMPLINGS["seeded"], seed=7), PROMPT[::-1]),
        request(SAMPLINGS["greedy"], PROMPT[5:30]),
    ]
    together = [start(engine, r) for r in [*neighbours[:2], request(sampling), neighbours[2]]]
    assert drawn(together[2].wait()) == cold, "batched beside three other streams"
    for collected in together:
        collected.wait()
