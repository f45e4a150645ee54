"""`EngineConfig.compile_while_serving`: the engine serves once the largest shape of each kind is
compiled, and compiles the rest on its thread while idle; answers are the same before and after,
and none of those compiles counts as a compile a request caused."""

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from engine.device.compiled_shapes import CompiledShapes
from engine.device.runner_api import PREFILL_ROWS
from engine.engine import Engine
from engine.engine_config import EngineConfig
from engine.model.loading.loader import load_model
from engine.stats import Bucket
from tests.engine.engine_harness import generate, greedy_request, prompt, reference_greedy

pytestmark = pytest.mark.slow  # builds an engine

CONTEXT = 64  # the tiny model's trained length


def test_serving_starts_from_the_largest_shape_of_each_kind() -> None:
    config = EngineConfig(decode_lanes=32, prefill_chunk=512, draft_tokens=4, draft_rows=1)
    shapes = CompiledShapes(config, max_context=1024)
    plan = shapes.plan()
    first = shapes.first(plan)
    kinds = {(b.kind, b.rows, b.tokens) for b in first if b.kind in ("prefill", "decode", "first_tokens", "verify")}
    assert kinds == {("prefill", 1, 512), ("decode", 32, 1), ("first_tokens", 32, 1)}
    assert {b.kind for b in plan} == {b.kind for b in first} | {"verify", "prefill_scored"}  # and every helper

    later = shapes.defer(plan, first)
    assert not shapes.scored_ready  # a prompt to score waits for its shape
    assert sorted(later, key=repr) == sorted(set(plan) - set(first), key=repr)
    # A single stream's steps first: one row, then with drafts.
    assert [(b.kind, b.rows) for b in later[:3]] == [("first_tokens", 1), ("decode", 1), ("verify", 1)]
    assert shapes.batched_chunk == 0 and shapes.ready_draft_rows == 0 and shapes.ready_sizes("prefill") == [512]
    assert shapes.ready_sizes("decode") == [32]

    batched = [b for b in later if b.kind == "prefill" and b.rows == PREFILL_ROWS]
    largest = 512 // PREFILL_ROWS
    assert batched[0].tokens == largest  # the largest batched chunk first: it turns batching on
    shapes.mark_ready([batched[0], Bucket("decode", 1, 1, shapes.width)])
    assert shapes.batched_chunk == largest and shapes.ready_sizes("decode") == [1, 32]
    shapes.mark_ready(later[:3])
    assert shapes.ready_draft_rows == 1
    shapes.mark_ready(later)
    assert shapes.scored_ready and shapes.pending == [] and shapes.ready_sizes("prefill") == shapes.chunks
    assert shapes.ready_sizes("decode") == shapes.rows and shapes.batched_chunk == largest


def test_an_engine_answers_alike_while_its_shapes_compile_and_after(
    tiny_checkpoint: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    model = load_model(tiny_checkpoint("llama_tied"), cache_dir=tmp_path_factory.mktemp("prepared"), progress=False)
    config = EngineConfig(decode_lanes=4, max_queue=2, page_size=8, prefill_chunk=16, compile_while_serving=True)
    engine = Engine.build(model, config, lambda *_: None)
    try:
        planned = len(CompiledShapes(replace(config, compile_while_serving=False), CONTEXT).plan())
        assert len(engine.stats().buckets) + engine.stats().pending_buckets == planned
        assert engine.stats().pending_buckets > 0
        tokens = prompt(3, 11)
        expected = reference_greedy(model, tokens, 6, CONTEXT)
        assert generate(engine, greedy_request(tokens, 6)).tokens[0] == expected
        # A prompt to score before its shape is ready: the engine compiles on until it is.
        scored = generate(engine, replace(greedy_request(tokens, 6), prompt_logprobs=1))
        assert scored.tokens[0] == expected and len(scored.prompt_logprobs) == len(tokens) - 1

        deadline = time.monotonic() + 600
        while engine.stats().pending_buckets and time.monotonic() < deadline:
            time.sleep(0.1)
        stats = engine.stats()
        assert stats.pending_buckets == 0 and len(stats.buckets) == planned
        assert generate(engine, greedy_request(tokens, 6)).tokens[0] == expected
        assert engine.stats().compiles_after_startup == 0
    finally:
        engine.shutdown()
