"""`--kv-cache-dtype bfloat16`: a KV pool in bfloat16 under float32 weights."""

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from engine.api import GenerationRequest
from engine.engine import Engine
from engine.engine_config import EngineConfig
from engine.model.loading.loader import LoadedModel, load_model
from tests.engine.engine_harness import GREEDY, generate, greedy_request, start

pytestmark = pytest.mark.slow  # builds engines

PROMPTS = [np.random.default_rng(seed).integers(3, 256, 11 + 7 * seed).tolist() for seed in range(3)]


@pytest.fixture(scope="module")
def model(tiny_checkpoint: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    return load_model(tiny_checkpoint("llama_tied"), cache_dir=tmp_path_factory.mktemp("prepared"), progress=False)


def _engine(model: LoadedModel, kv_cache_dtype: str) -> Engine:
    config = EngineConfig(decode_lanes=4, page_size=8, prefill_chunk=8, kv_cache_dtype=kv_cache_dtype)
    return Engine.build(model, config, lambda *_: None)


def _logprobs(engine: Engine, prompt: list[int]) -> tuple[list[int], list[float]]:
    collected = generate(engine, greedy_request(prompt, 8, logprobs=0))
    return collected.tokens[0], [entry.logprob for entry in collected.logprobs[0]]


def test_bfloat16_pool_tracks_the_float32_pool(model: LoadedModel) -> None:
    """Keys and values rounded to bfloat16 move the chosen tokens' logprobs by a little only."""
    runs = {}
    for kv_cache_dtype in ("auto", "bfloat16"):
        engine = _engine(model, kv_cache_dtype)
        try:
            runs[kv_cache_dtype] = [_logprobs(engine, prompt) for prompt in PROMPTS]
        finally:
            engine.shutdown()
    for (tokens, exact), (rounded_tokens, rounded) in zip(runs["auto"], runs["bfloat16"], strict=True):
        assert rounded_tokens == tokens
        np.testing.assert_allclose(rounded, exact, atol=0.05)
        assert rounded != exact  # the pool did hold bfloat16


def test_bfloat16_pool_batches_and_reuses_prefixes_exactly(model: LoadedModel) -> None:
    engine = _engine(model, "bfloat16")
    try:
        alone = [generate(engine, greedy_request(p, 6)).tokens[0] for p in PROMPTS]
        together = [start(engine, greedy_request(p, 6)) for p in PROMPTS]
        assert [c.wait().tokens[0] for c in together] == alone
        assert generate(engine, GenerationRequest(tuple(PROMPTS[1]), GREEDY, 6, n=2)).tokens == [alone[1]] * 2
        resent = generate(engine, greedy_request(PROMPTS[2] + alone[2], 4))
        again = generate(engine, greedy_request(PROMPTS[2] + alone[2], 4))
        assert again.finished[0].usage.cached_prompt_tokens > 0 and again.tokens == resent.tokens
        assert engine.stats().compiles_after_startup == 0
    finally:
        engine.shutdown()


def test_bfloat16_pool_holds_twice_the_pages(model: LoadedModel) -> None:
    pages = {}
    for kv_cache_dtype in ("auto", "bfloat16"):
        # One prefill chunk size (the pool's size does not depend on it): a few shapes to compile, not dozens.
        config = EngineConfig(
            decode_lanes=2, page_size=8, prefill_chunk=8, kv_memory_bytes=1 << 20, kv_cache_dtype=kv_cache_dtype
        )
        engine = Engine.build(model, config, lambda *_: None)
        try:
            pages[kv_cache_dtype] = engine.stats().kv_pages_total
        finally:
            engine.shutdown()
    assert pages["bfloat16"] == pytest.approx(2 * pages["auto"], abs=2)
