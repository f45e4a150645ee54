"""The scheduler's decode bursts against the fake runner (tests/engine/fake_runner.py), whose
tokens depend on every position read back through each row's pages: bursts chained on bursts,
pages allocated ahead, rows ending on a stop id or their `max_tokens` inside a burst, rows with a
grammar in plain steps, and a tiny pool's preemptions, all with the tokens of single steps."""

import dataclasses
from collections.abc import Iterator

import pytest

from engine.api import SamplingParams
from engine.engine import Engine
from engine.engine_config import EngineConfig
from tests.engine.engine_harness import generate, start
from tests.engine.fake_runner import reference
from tests.engine.test_scheduler import (
    CONTEXT,
    GREEDY,
    EvenTokens,
    assert_idle,
    build,
    fake,
    hold,
    prompt,
    request,
    row_seed,
)

# Bursts of 3 over pages of 4: a burst's positions cross a page's end at every offset.
BURSTS = EngineConfig(decode_lanes=4, max_queue=4, page_size=4, prefill_chunk=16, draft_tokens=0, burst_steps=3)


@pytest.fixture
def engine() -> Iterator[Engine]:
    built = build(BURSTS)
    yield built
    fake(built).gate.set()
    built.shutdown()


def test_bursts_chain_and_draw_what_single_steps_draw(engine: Engine) -> None:
    seeded = SamplingParams(temperature=1.0, seed=3, ignore_eos=True)
    cases = [(prompt(2, 5), 10, GREEDY), (prompt(3, 30), 9, GREEDY), (prompt(4, 12), 11, seeded)]
    blocker = hold(engine)
    together = [start(engine, request(tokens, count, sampling)) for tokens, count, sampling in cases]
    fake(engine).gate.set()
    for (tokens, count, sampling), result in zip(cases, together, strict=True):
        seed = 0 if sampling.seed is None else row_seed(sampling.seed)
        assert result.wait().tokens[0] == reference(tokens, count, sampling, seed)
        assert result.late_events == 0
    blocker.wait()
    alone = generate(engine, request(prompt(5, 7), 20))
    assert alone.tokens[0] == reference(prompt(5, 7), 20, GREEDY)
    log = fake(engine).log
    assert any(kind == "decode burst" and rows > 1 for kind, rows in log) and ("chained burst", 1) in log
    plain = [entry for entry in log if entry[0] in ("decode", "chained")]
    assert plain == [("decode", 1)]  # the first step, whose time lets bursts start
    assert_idle(engine)


def test_no_burst_while_steps_take_longer_than_the_limit() -> None:
    engine = build(dataclasses.replace(BURSTS, burst_max_step_ms=0.0))
    try:
        result = generate(engine, request(prompt(12, 6), 14))
        assert result.tokens[0] == reference(prompt(12, 6), 14, GREEDY)
        log = fake(engine).log
        assert not any("burst" in kind for kind, _ in log) and ("chained", 1) in log
        assert_idle(engine)
    finally:
        engine.shutdown()


@pytest.mark.parametrize("at", [0, 1, 2, 4, 7])
def test_a_stop_id_inside_a_burst_ends_the_row_there(engine: Engine, at: int) -> None:
    tokens = prompt(6, 9)
    expected = reference(tokens, 12, GREEDY)
    stop = expected[at]
    stopped = generate(engine, request(tokens, 12, stop_token_ids=frozenset({stop})))
    assert stopped.tokens[0] == expected[: expected.index(stop)]
    assert stopped.finished[0].stop_token_id == stop and stopped.late_events == 0
    assert_idle(engine)


@pytest.mark.parametrize("max_tokens", [1, 2, 3, 4, 5, 7])
def test_max_tokens_inside_a_burst_ends_the_row_there(engine: Engine, max_tokens: int) -> None:
    tokens = prompt(7, 6)
    result = generate(engine, request(tokens, max_tokens))
    assert result.tokens[0] == reference(tokens, max_tokens, GREEDY)
    assert result.finished[0].reason == "length" and result.late_events == 0
    assert_idle(engine)


def test_a_row_with_a_grammar_decodes_in_single_steps(engine: Engine) -> None:
    constrained = generate(engine, request(prompt(8, 6), 24, constraint=EvenTokens))
    assert len(constrained.tokens[0]) == 12 and all(token % 2 == 0 for token in constrained.tokens[0])
    assert not any("burst" in kind for kind, _ in fake(engine).log)
    assert_idle(engine)


def test_a_tiny_pool_preempts_and_falls_back_to_single_steps_with_the_same_tokens() -> None:
    config = dataclasses.replace(BURSTS, decode_lanes=2)
    engine = build(config, CONTEXT // 4 + config.decode_lanes + 1)  # the smallest pool the engine accepts
    try:
        seeded = SamplingParams(temperature=1.0, seed=4, ignore_eos=True)
        cases = [(prompt(9, 20), 40, GREEDY), (prompt(10, 17), 44, GREEDY), (prompt(11, 23), 36, seeded)]
        results = [start(engine, request(tokens, count, sampling)) for tokens, count, sampling in cases]
        for (tokens, count, sampling), result in zip(cases, results, strict=True):
            seed = 0 if sampling.seed is None else row_seed(4)
            assert result.wait().tokens[0] == reference(tokens, count, sampling, seed)
        assert engine.stats().preemptions > 0
        kinds = {kind for kind, _ in fake(engine).log}
        assert {"decode burst", "decode"} <= kinds
        assert_idle(engine)
    finally:
        engine.shutdown()
