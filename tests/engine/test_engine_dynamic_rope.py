"""Dynamic NTK RoPE in the engine: each row's rotation follows its own length, so batching rows of
different lengths past the trained length changes none of their tokens."""

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from engine.engine import Engine
from engine.engine_config import EngineConfig
from engine.model.loading.loader import load_model
from tests.engine.engine_harness import generate, greedy_request, start

pytestmark = pytest.mark.slow  # builds an engine

# The tiny dynamic-NTK model is trained to 8 positions: every prompt here outgrows it.
CONFIG = EngineConfig(decode_lanes=2, page_size=8, prefill_chunk=8, max_context=48)


def test_rows_past_the_trained_length_batch_without_changing(
    tiny_checkpoint: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    model = load_model(tiny_checkpoint("llama_dynamic"), cache_dir=tmp_path_factory.mktemp("prepared"), progress=False)
    engine = Engine.build(model, CONFIG, lambda what, done, total: None)
    try:
        prompts = [
            np.random.default_rng(seed).integers(3, 256, size=size).tolist() for seed, size in ((30, 9), (31, 21))
        ]
        alone = [generate(engine, greedy_request(p, 12)).tokens[0] for p in prompts]
        together = [start(engine, greedy_request(p, 12)) for p in prompts]
        assert [collected.wait().tokens[0] for collected in together] == alone
    finally:
        engine.shutdown()
