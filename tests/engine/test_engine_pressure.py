"""An engine with the smallest KV pool it accepts: preemption recomputes rows, then the engine dies."""

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

from engine.api import EngineUnavailable, GenerationRequest, SamplingParams
from engine.device.runner import failure_kind
from engine.engine import Engine
from engine.engine_config import EngineConfig
from engine.model.loading.loader import LoadedModel, load_model
from tests.engine.engine_harness import generate, greedy_request, reference_greedy, start

pytestmark = pytest.mark.slow  # builds engines

CONTEXT = 64
# 8 pages hold one full-context row; the pool has just that plus one page per lane.
CONFIG = EngineConfig(decode_lanes=2, page_size=8, prefill_chunk=16, kv_pages=10)


@pytest.fixture(scope="module")
def model(tiny_checkpoint: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    return load_model(tiny_checkpoint("llama_tied"), cache_dir=tmp_path_factory.mktemp("prepared"), progress=False)


@pytest.fixture(scope="module")
def engine(model: LoadedModel) -> Iterator[Engine]:
    built = Engine.build(model, CONFIG, lambda what, done, total: None)
    yield built
    if built.state != "dead":
        built.shutdown()


def prompts() -> list[list[int]]:
    rng = np.random.default_rng(21)
    return [rng.integers(3, 256, size=length).tolist() for length in (20, 17, 23)]


def test_pool_too_small_for_one_row_is_refused_at_build(model: LoadedModel) -> None:
    with pytest.raises(ValueError, match="KV pool"):
        Engine.build(model, EngineConfig(decode_lanes=2, page_size=8, kv_pages=9), lambda *_: None)


def test_preempted_rows_are_recomputed_not_dropped(engine: Engine, model: LoadedModel) -> None:
    seeded = GenerationRequest(tuple(prompts()[2]), SamplingParams(seed=4, ignore_eos=True), 36)
    alone = generate(engine, seeded).tokens[0]
    requests = [greedy_request(p, 40) for p in prompts()[:2]] + [seeded]
    results = [collected.wait() for collected in [start(engine, request) for request in requests]]
    for request, result in zip(requests[:2], results[:2], strict=True):
        assert result.tokens[0] == reference_greedy(model, request.prompt_ids, 40, CONTEXT)
    assert results[2].tokens[0] == alone
    stats = engine.stats()
    assert stats.preemptions > 0 and stats.kv_pages_used == 0 and stats.compiles_after_startup == 0


def test_engine_death_fails_every_request(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_decode(*args: Any) -> Any:
        raise jax.errors.JaxRuntimeError("INTERNAL: device lost")

    monkeypatch.setattr(engine.runner.steps, "decode", broken_decode)
    in_flight = [start(engine, greedy_request(p, 10)) for p in prompts()[:2]]
    for collected in in_flight:
        failed = collected.wait().failed
        assert failed is not None and failed.kind == "fault"
    assert engine.state == "dead" and engine.failure is not None and engine.failure[0] == "fault"
    with pytest.raises(EngineUnavailable):
        engine.submit(greedy_request([5, 6], 1), lambda event: None)


def test_failure_kinds() -> None:
    assert failure_kind(jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: out of memory")) == "fault"
    assert failure_kind(KeyError("row")) == "panicked"
