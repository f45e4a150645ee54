"""A seeded or greedy request draws the same tokens with the same logprobs, bit for bit, whatever
the prefix cache holds, however the prompt is chunked and beside whatever other streams.

The model is wide enough (256 and 512 inputs) that XLA's own CPU dot orders a row's sums by the
number of rows in the call; the engine's float matmuls must not (engine/model/kernels/f32_matmul.cc),
nor may the int8 ones switch rounding between the native kernel (few rows) and XLA's dot (many).
Each quantization gets its own model and runner.
One runner (compiled once) serves every case; each case gets a fresh Engine around it, so a fresh
prefix cache and its own prefill chunk.
"""

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from engine.api import GenerationRequest, SamplingParams
from engine.device.kv_sizing import pool_pages
from engine.device.runner import DeviceRunner
from engine.device.runner_api import PrefillChunk
from engine.engine import Engine
from engine.engine_config import EngineConfig
from engine.model.loading.loader import LoadedModel, load_model
from engine.serving.prefix_disk import namespace_digest
from pooled.hosting.model_host import default_model_path
from tests.engine.engine_harness import Collected, generate, start
from text import Tokenizer

pytestmark = pytest.mark.slow  # builds engines

PAGE = 8
CONFIG = EngineConfig(decode_lanes=4, max_queue=4, page_size=PAGE, prefill_chunk=64, kv_cache_dtype="bfloat16")
PROMPT = tuple(np.random.default_rng(11).integers(3, 256, size=5 * PAGE + 3).tolist())
SAMPLINGS = {
    "seeded": SamplingParams(temperature=1.0, seed=1234, logprobs=2, ignore_eos=True),
    "greedy": SamplingParams(temperature=0.0, logprobs=2, ignore_eos=True),
}
STEPS = 16


@pytest.fixture(scope="module", params=["none", "w8a8", "w4a8"])
def model(
    request: pytest.FixtureRequest, tiny_checkpoint: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> LoadedModel:
    checkpoint = tiny_checkpoint("llama_wide")
    cache = tmp_path_factory.mktemp("prepared")
    return load_model(checkpoint, cache_dir=cache, progress=False, quantization=request.param)


@pytest.fixture(scope="module")
def runner(model: LoadedModel) -> Iterator[tuple[DeviceRunner, int]]:
    pages = pool_pages(model, CONFIG)
    yield DeviceRunner(model, CONFIG, pages), pages


@pytest.fixture
def fresh(runner: tuple[DeviceRunner, int], model: LoadedModel) -> Iterator[Callable[..., Engine]]:
    """chunk → a new Engine (empty prefix cache) on the shared runner, prefilling `chunk` tokens a
    step; with `disk`, its prefix cache has a disk tier there."""
    built: list[Engine] = []

    def make(chunk: int = CONFIG.prefill_chunk, disk: Path | None = None) -> Engine:
        if built:
            built.pop().shutdown()
        config = dataclasses.replace(CONFIG, prefill_chunk=chunk, prefix_disk_dir=str(disk or ""))
        eos = frozenset(model.config.eos_token_ids)
        built.append(Engine(runner[0], runner[1], config, eos, lambda *_: None, namespace_digest({"model": "tiny"})))
        return built[-1]

    yield make
    for engine in built:
        engine.shutdown()


def request_for(sampling: SamplingParams, prompt: tuple[int, ...] = PROMPT) -> GenerationRequest:
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
    cold = drawn(generate(engine, request_for(sampling)))
    assert len(cold[0]) == STEPS and len(cold[1]) == STEPS

    cached = engine.stats().prefix_cache_hits
    assert drawn(generate(engine, request_for(sampling))) == cold, "fully cached"
    assert engine.stats().prefix_cache_hits > cached

    for boundary in (PAGE, 3 * PAGE, 5 * PAGE):
        engine = fresh()
        other = PROMPT[:boundary] + tuple(3 + (t + 1) % 250 for t in PROMPT[boundary:])
        generate(engine, request_for(SAMPLINGS["greedy"], other))
        assert drawn(generate(engine, request_for(sampling))) == cold, f"{boundary} tokens cached"

    for chunk in (8, 16, 32):
        assert drawn(generate(fresh(chunk), request_for(sampling))) == cold, f"prefilled {chunk} tokens a step"

    engine = fresh()
    neighbours = [
        request_for(SAMPLINGS["greedy"], PROMPT[:9]),
        request_for(dataclasses.replace(SAMPLINGS["seeded"], seed=7), PROMPT[::-1]),
        request_for(SAMPLINGS["greedy"], PROMPT[5:30]),
    ]
    together = [start(engine, r) for r in [*neighbours[:2], request_for(sampling), neighbours[2]]]
    assert drawn(together[2].wait()) == cold, "batched beside three other streams"
    for collected in together:
        collected.wait()


@pytest.mark.parametrize("kind", SAMPLINGS)
def test_a_prompt_read_back_from_the_disk_tier_after_a_restart_draws_the_same(
    fresh: Callable[..., Engine], runner: tuple[DeviceRunner, int], kind: str, tmp_path: Path
) -> None:
    sampling = SAMPLINGS[kind]
    cold = drawn(generate(fresh(disk=tmp_path), request_for(sampling)))
    device, pages = runner
    # What the pool held must not stand in for what the disk holds: every page to zeros.
    device.write_pages(list(range(1, pages)), [bytes(device.page_bytes)] * (pages - 1))
    restarted = fresh(disk=tmp_path)
    again = generate(restarted, request_for(sampling))
    assert again.finished[0].usage.cached_prompt_tokens == 5 * PAGE
    assert restarted.stats().prefix_cache_disk_hits == 5 * PAGE
    assert drawn(again) == cold


CHAT = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWrite a short story about a robot who learns to paint.<|im_end|>\n<|im_start|>assistant\n"
)


@pytest.mark.parametrize("quantization", ["none", "w8a8"])
def test_the_default_models_prompt_ends_alike_however_it_is_split(
    quantization: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The real model's shapes (576 and 1536 inputs, 30 layers), where the tiny model's do not meet
    every rounding that depends on the rows (w8a8's activations rounded apart by the native kernel
    and XLA's dot): a chat prompt's last logits prefilled whole and split at page boundaries."""
    path = default_model_path()
    cache = tmp_path_factory.getbasetemp() / "default-model-prepared"
    model = load_model(path, cache_dir=cache, progress=False, quantization=quantization)
    prompt = tuple(Tokenizer.from_gguf_file(path).encode(CHAT))
    config = EngineConfig(decode_lanes=1, max_context=1024, page_size=16, prefill_chunk=512, kv_cache_dtype="bfloat16")
    runner = DeviceRunner(model, config, 64)
    pages = [list(range(first, first + -(-len(prompt) // 16))) for first in (1, 20)]

    def last_logits(*chunks: PrefillChunk) -> np.ndarray:
        return np.asarray([runner.prefill([chunk]) for chunk in chunks][-1])[0]

    whole = last_logits(PrefillChunk(prompt, 0, pages[0]))
    for split in (16, 32, 48, 64):
        parts = last_logits(PrefillChunk(prompt[:split], 0, pages[1]), PrefillChunk(prompt[split:], split, pages[1]))
        assert np.array_equal(parts, whole), f"split at {split}: {np.max(np.abs(parts - whole))}"
