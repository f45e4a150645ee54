"""Decode bursts on a tiny random Llama: the tokens, logprobs and endings are those of an engine
without bursts, alone and batched, for greedy, seeded and penalised rows, rows that end on a stop
id or their `max_tokens` inside a burst, rows whose pages run out (plain steps then), and rows of
LoRA adapters."""

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.api import GenerationRequest, SamplingParams
from engine.device.compiled_shapes import CompiledShapes
from engine.device.runner import DeviceRunner
from engine.engine import Engine
from engine.engine_config import EngineConfig
from engine.lora.peft_adapter import LoraAdapter
from engine.model.loading.loader import LoadedModel, load_model
from tests.engine.engine_harness import Collected, generate, prompt, start
from tests.engine.test_engine_lora import CONFIG as LORA_CONFIG
from tests.engine.test_engine_lora import NAMES, adapters, alone_reference

__all__ = ["adapters"]  # the LoRA tests' fixture, used here too

pytestmark = pytest.mark.slow  # builds engines

# Bursts of 5 over pages of 8: a burst's positions cross a page's end at every offset.
BASE = EngineConfig(decode_lanes=4, max_queue=4, page_size=8, prefill_chunk=16, draft_tokens=0)
BURSTS = dataclasses.replace(BASE, burst_steps=5)


@pytest.fixture(scope="module")
def model(tiny_checkpoint: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    return load_model(tiny_checkpoint("llama_tied"), cache_dir=tmp_path_factory.mktemp("prepared"), progress=False)


@pytest.fixture(scope="module")
def engines(model: LoadedModel) -> Iterator[tuple[Engine, Engine]]:
    bursting = Engine.build(model, BURSTS, _quiet)
    plain = Engine.build(model, BASE, _quiet)
    yield bursting, plain
    bursting.shutdown()
    plain.shutdown()


def _quiet(_what: str, _done: int, _total: int) -> None:
    pass


def _request(prompt_seed: int, length: int, max_tokens: int, **sampling: object) -> GenerationRequest:
    params = SamplingParams(**{"temperature": 0.0, "ignore_eos": True, **sampling})  # type: ignore[arg-type]
    return GenerationRequest(tuple(prompt(prompt_seed, length)), params, max_tokens)


REQUESTS = [
    _request(1, 9, 41),
    _request(2, 20, 33, temperature=2.0, seed=11),
    _request(3, 6, 37, temperature=1.5, top_k=8, top_p=0.9, seed=5),
    _request(4, 12, 30, temperature=1.0, seed=3, repetition_penalty=1.3, presence_penalty=0.5, frequency_penalty=0.4),
]


def _outcome(collected: Collected) -> tuple[list[int], str]:
    return collected.tokens[0], collected.finished[0].reason


def test_bursts_change_no_token_alone_or_batched(
    engines: tuple[Engine, Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    bursting, plain = engines
    want = [_outcome(generate(plain, request)) for request in REQUESTS]
    kinds: list[tuple[bool, bool]] = []  # each step's (chained, burst)
    generate_step = DeviceRunner.generate

    def watched(runner: DeviceRunner, rows: Any, chained: Any = None, burst: bool = False) -> Any:
        kinds.append((chained is not None, burst))
        return generate_step(runner, rows, chained, burst)

    monkeypatch.setattr(DeviceRunner, "generate", watched)
    assert [_outcome(generate(bursting, request)) for request in REQUESTS] == want
    together = [_outcome(collected.wait()) for collected in [start(bursting, request) for request in REQUESTS]]
    assert together == want
    assert (True, True) in kinds and (False, True) in kinds  # bursts, chained and from host tokens
    assert kinds.count((False, False)) < len(kinds) / 4  # few plain steps
    assert bursting.stats().compiles_after_startup == 0


def test_logprobs_of_every_burst_token_match_those_of_single_steps(engines: tuple[Engine, Engine]) -> None:
    bursting, plain = engines
    request = _request(5, 9, 23, logprobs=3, temperature=0.7, seed=2)
    got, want = generate(bursting, request), generate(plain, request)
    assert got.tokens == want.tokens
    assert len(got.logprobs[0]) == 23
    assert got.logprobs == want.logprobs


@pytest.mark.parametrize("at", [0, 3, 7, 12])
def test_a_stop_id_inside_a_burst_ends_the_row_there(engines: tuple[Engine, Engine], at: int) -> None:
    bursting, plain = engines
    free = generate(plain, _request(6, 11, 30)).tokens[0]
    stop = free[at]
    request = dataclasses.replace(_request(6, 11, 30), stop_token_ids=frozenset({stop}))
    got, want = generate(bursting, request), generate(plain, request)
    assert _outcome(got) == _outcome(want) == (free[: free.index(stop)], "stop")
    assert got.finished[0].stop_token_id == want.finished[0].stop_token_id == stop
    assert got.late_events == 0


@pytest.mark.parametrize("max_tokens", [1, 2, 4, 5, 6, 13])
def test_max_tokens_inside_a_burst_ends_the_row_there(engines: tuple[Engine, Engine], max_tokens: int) -> None:
    bursting, plain = engines
    request = _request(7, 10, max_tokens, temperature=1.0, seed=9)
    got, want = generate(bursting, request), generate(plain, request)
    assert _outcome(got) == _outcome(want)
    assert len(got.tokens[0]) == max_tokens and got.finished[0].reason == "length"


def test_rows_short_of_pages_decode_in_plain_steps_with_the_same_tokens(model: LoadedModel) -> None:
    """Few pages: rows are preempted and recomputed, and bursts find no page ahead; tokens unchanged."""
    requests = [_request(10 + i, 12, 40, temperature=1.0, seed=i) for i in range(4)]
    outcomes = []
    for config in (BASE, BURSTS):
        engine = Engine.build(model, dataclasses.replace(config, kv_pages=14), _quiet)
        try:
            outcomes.append([_outcome(c.wait()) for c in [start(engine, request) for request in requests]])
            preempted = engine.stats().preemptions
        finally:
            engine.shutdown()
    assert outcomes[0] == outcomes[1]
    assert preempted > 0


def test_rows_of_adapters_burst_as_each_adapters_forward_pass_gives(
    model: LoadedModel, adapters: dict[str, LoraAdapter]
) -> None:
    engine = Engine.build(model, dataclasses.replace(LORA_CONFIG, draft_tokens=0, burst_steps=5), _quiet)
    try:
        for name, adapter in adapters.items():
            engine.load_adapter(name, adapter).result(timeout=30)
        tokens = prompt(1, 13)
        names: list[str | None] = [*NAMES, None]
        expected = [alone_reference(model, adapters[n] if n else None, tokens, 12) for n in names]
        greedy = SamplingParams(temperature=0.0, ignore_eos=True)
        requests = [GenerationRequest(tuple(tokens), greedy, 12, adapter=n) for n in names]
        assert [collected.wait().tokens[0] for collected in [start(engine, r) for r in requests]] == expected
    finally:
        engine.shutdown()


def test_bursts_compile_a_shape_per_row_count_the_largest_before_serving() -> None:
    bursting = CompiledShapes(EngineConfig(decode_lanes=32, burst_steps=8), max_context=1024)
    plan = bursting.plan()
    assert [(b.rows, b.tokens) for b in plan if b.kind == "burst"] == [(rows, 8) for rows in bursting.rows]
    assert [b.rows for b in bursting.first(plan) if b.kind == "burst"] == [32]
    assert not any(b.kind == "burst" for b in CompiledShapes(EngineConfig(decode_lanes=32), max_context=1024).plan())
