"""The executable cache (engine/device/executables.py): a second engine of the same model loads every
shape from it and compiles none, answering alike; a changed key misses; a corrupt entry is compiled
again and rewritten."""

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import jax
import numpy as np
import pytest

from engine.device.executables import ExecutableStore, namespace
from engine.device.runner import DeviceRunner
from engine.engine import Engine
from engine.engine_config import EngineConfig
from engine.model.loading.loader import LoadedModel, load_model
from tests.engine.engine_harness import generate, greedy_request, prompt

pytestmark = pytest.mark.slow  # builds engines

CONTEXT = 64  # the tiny model's trained length


@pytest.fixture(scope="module")
def model(tiny_checkpoint: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    return load_model(tiny_checkpoint("llama_tied"), cache_dir=tmp_path_factory.mktemp("prepared"), progress=False)


def store_of(engine: Engine) -> ExecutableStore:
    assert isinstance(engine.runner, DeviceRunner) and engine.runner.executables is not None
    return engine.runner.executables


def built(model: LoadedModel, config: EngineConfig) -> tuple[ExecutableStore, list[int], int]:
    """An engine's executable store after its start, its greedy answer and its buckets' count."""
    engine = Engine.build(model, config, lambda *_: None)
    try:
        answer = generate(engine, greedy_request(prompt(3, 11), 6)).tokens[0]
        store = store_of(engine)
        assert engine.stats().compiles_after_startup == 0
        return store, answer, len(engine.stats().buckets)
    finally:
        engine.shutdown()


def test_a_second_start_loads_every_shape_and_a_changed_key_misses(model: LoadedModel, tmp_path: Path) -> None:
    config = EngineConfig(
        decode_lanes=4, max_queue=2, page_size=8, prefill_chunk=16, executable_cache_dir=str(tmp_path)
    )
    cold, answer, buckets = built(model, config)
    assert cold.compiled > 0  # (a call placed otherwise but alike loads what an earlier one compiled)
    assert len(list(tmp_path.glob("*.exe"))) == cold.compiled

    warm, warm_answer, warm_buckets = built(model, config)
    # Nothing compiled; a prefill shape's store of its keys and values loads at its first use
    # (a warm start does not run prefill on padding), so fewer than the cold start's calls.
    assert warm.compiled == 0 and 0 < warm.loaded <= cold.compiled + cold.loaded
    assert warm_answer == answer and warm_buckets == buckets

    # Another page size changes the programs: nothing of the first start's is loaded.
    other, _, _ = built(model, replace(config, page_size=16))
    assert (other.compiled, other.loaded) == (cold.compiled, cold.loaded)
    assert len(list(tmp_path.glob("*.exe"))) == 2 * cold.compiled


def test_a_warm_start_loads_the_shapes_it_would_compile_while_serving(model: LoadedModel, tmp_path: Path) -> None:
    config = EngineConfig(
        decode_lanes=4, max_queue=2, page_size=8, prefill_chunk=16, executable_cache_dir=str(tmp_path)
    )
    built(model, config)  # every shape stored
    engine = Engine.build(model, replace(config, compile_while_serving=True), lambda *_: None)
    try:
        # The shapes a cold start would compile while serving are loaded before serving.
        assert engine.stats().pending_buckets == 0
        assert store_of(engine).compiled == 0 and store_of(engine).loaded > 0
    finally:
        engine.shutdown()


def test_a_store_after_another_engine_of_the_same_shapes_ran_stores_every_program(
    model: LoadedModel, tmp_path: Path
) -> None:
    # An engine without a store runs its programs first, sorting (top-p) and reporting logprobs:
    # an XLA CPU program that has run holds its sort's comparator and no longer serializes, so the
    # stored engine's programs must be its own, compiled afresh (as when a full test run or a
    # process serving several models builds engines of the same shapes one after another).
    config = EngineConfig(decode_lanes=4, max_queue=2, page_size=8, prefill_chunk=16)
    engine = Engine.build(model, config, lambda *_: None)
    try:
        generate(engine, greedy_request(prompt(5, 9), 4, temperature=0.8, top_p=0.9, top_k=20, logprobs=2, seed=1))
    finally:
        engine.shutdown()
    stored, answer, _ = built(model, replace(config, executable_cache_dir=str(tmp_path)))
    assert stored.compiled > 0 and len(list(tmp_path.glob("*.exe"))) == stored.compiled
    assert built(model, replace(config, executable_cache_dir=str(tmp_path)))[1] == answer


def test_a_corrupt_entry_is_compiled_again_and_rewritten(model: LoadedModel, tmp_path: Path) -> None:
    config = EngineConfig(
        decode_lanes=4, max_queue=2, page_size=8, prefill_chunk=16, executable_cache_dir=str(tmp_path)
    )
    _, answer, _ = built(model, config)
    entries = sorted(tmp_path.glob("*.exe"))
    for entry in entries:
        entry.write_bytes(b"not an executable")
    again, again_answer, _ = built(model, config)
    assert again.compiled > 0 and again_answer == answer
    rewritten = [entry for entry in entries if entry.read_bytes() != b"not an executable"]
    assert len(rewritten) == again.compiled


def test_the_store_stays_within_its_bound(tmp_path: Path) -> None:
    store = ExecutableStore(tmp_path, namespace({"test": 1}), max_bytes=0)
    compiled = jax.jit(lambda x: x + 1).lower(np.zeros(3, np.float32)).compile()
    store.save("add", "f32[3]", compiled)
    assert list(tmp_path.glob("*.exe")) == []
