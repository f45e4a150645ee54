"""The scheduler against a fake runner (tests/engine/fake_runner.py): batching, prefix pages,
preemption, endings, admission, drain and death, each in milliseconds.

The fake's tokens depend on every token a row's block table leads back to, so a right answer
here means the scheduler gave each row the right pages, positions and draw counters. The same
behaviours on a real tiny model are in test_engine.py and test_engine_pressure.py.
"""

import dataclasses
import math
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from engine.api import (
    EngineEvent,
    EngineUnavailable,
    GenerationRequest,
    QueueFull,
    RequestRefused,
    SamplingParams,
    Tokens,
)
from engine.engine import Engine
from engine.engine_config import EngineConfig
from engine.serving.prefix_disk import namespace_digest
from tests.engine.engine_harness import Collected, generate, start
from tests.engine.fake_runner import VOCAB, FakeDeviceError, FakeRunner, reference

GREEDY = SamplingParams(temperature=0.0, ignore_eos=True)
CONTEXT = 64
CONFIG = EngineConfig(decode_lanes=4, max_queue=4, page_size=4, prefill_chunk=16)
DISK_NAMESPACE = namespace_digest({"model": "fake"})  # used where a config names a disk tier


def build(config: EngineConfig = CONFIG, pages: int | None = None, eos: frozenset[int] = frozenset()) -> Engine:
    per_row = math.ceil(CONTEXT / config.page_size)
    pages = pages or per_row * config.decode_lanes + config.decode_lanes + 1
    return Engine(FakeRunner(config, pages, CONTEXT), pages, config, eos, lambda *_: None, DISK_NAMESPACE)


def fake(engine: Engine) -> FakeRunner:
    assert isinstance(engine.runner, FakeRunner)
    return engine.runner


@pytest.fixture
def engine() -> Iterator[Engine]:
    built = build()
    yield built
    fake(built).gate.set()
    built.shutdown()


def prompt(seed: int, length: int) -> list[int]:
    return np.random.default_rng(seed).integers(0, VOCAB, size=length).tolist()


def row_seed(seed: int, row: int = 0) -> int:
    return hash((seed, row)) & 0xFFFFFFFF


def request(
    tokens: list[int], max_tokens: int, sampling: SamplingParams = GREEDY, **fields: object
) -> GenerationRequest:
    return GenerationRequest(tuple(tokens), sampling, max_tokens, **fields)  # type: ignore[arg-type]


def hold(engine: Engine) -> Collected:
    """Holds the engine thread at a step of a request of its own, so the requests that follow arrive together."""
    fake(engine).gate.clear()
    blocker = start(engine, request(prompt(99, 3), 2))
    assert fake(engine).held.wait(5)
    return blocker


def assert_idle(engine: Engine) -> None:
    assert engine.wait_idle(5)
    stats = engine.stats()
    assert (stats.requests_running, stats.requests_waiting, stats.kv_pages_used) == (0, 0, 0)


def test_a_row_draws_what_its_prompt_implies(engine: Engine) -> None:
    tokens = prompt(1, 21)  # two prefill chunks, the last page partial
    result = generate(engine, request(tokens, 12))
    assert result.tokens[0] == reference(tokens, 12, GREEDY)
    assert result.finished[0].reason == "length" and result.finished[0].usage.completion_tokens == 12
    seeded = SamplingParams(temperature=1.0, seed=7, ignore_eos=True)
    assert generate(engine, request(tokens, 9, seeded)).tokens[0] == reference(tokens, 9, seeded, row_seed(7))
    assert_idle(engine)


def test_batched_rows_get_exactly_what_they_get_alone(engine: Engine) -> None:
    seeded = [SamplingParams(temperature=1.0, seed=seed, ignore_eos=True) for seed in (3, 4)]
    cases = [(prompt(2, 5), 10, GREEDY), (prompt(3, 30), 9, GREEDY), (prompt(4, 12), 11, seeded[0])]
    cases.append((prompt(5, 17), 8, seeded[1]))
    blocker = hold(engine)
    together = [start(engine, request(tokens, count, sampling)) for tokens, count, sampling in cases]
    fake(engine).gate.set()
    for (tokens, count, sampling), result in zip(cases, together, strict=True):
        seed = 0 if sampling.seed is None else row_seed(sampling.seed)
        assert result.wait().tokens[0] == reference(tokens, count, sampling, seed)
    blocker.wait()
    assert max(rows for kind, rows in fake(engine).log if kind in ("decode", "chained")) == 4
    assert_idle(engine)


def test_n_rows_share_one_prefill_and_draw_their_own_tokens(engine: Engine) -> None:
    tokens = prompt(6, 10)  # two full pages and a partial one, which rows after the first copy
    sampling = SamplingParams(temperature=1.0, seed=11, ignore_eos=True)
    result = generate(engine, request(tokens, 6, sampling, n=3))
    assert fake(engine).prefilled_tokens == len(tokens)
    assert result.tokens == [reference(tokens, 6, sampling, row_seed(11, row)) for row in range(3)]
    assert len({tuple(row) for row in result.tokens}) == 3
    assert all(f.usage.prompt_tokens == 10 and f.usage.completion_tokens == 6 for f in result.finished.values())
    assert_idle(engine)


def test_a_resent_conversation_prefills_only_what_no_cached_page_holds(engine: Engine) -> None:
    first_prompt = prompt(7, 18)
    first = generate(engine, request(first_prompt, 6)).tokens[0]
    before = fake(engine).prefilled_tokens
    resent = first_prompt + first + prompt(8, 5)
    result = generate(engine, request(resent, 4))
    # Every token but the last output's went through the model; its full pages are named.
    cached = (len(first_prompt) + len(first) - 1) // CONFIG.page_size * CONFIG.page_size
    assert result.finished[0].usage.cached_prompt_tokens == cached == 20
    assert fake(engine).prefilled_tokens - before == len(resent) - cached
    assert result.tokens[0] == reference(resent, 4, GREEDY)
    stats = engine.stats()
    assert stats.prefix_cache_hits == cached and stats.prefix_cache_queries == len(first_prompt) + len(resent)
    assert_idle(engine)


def test_a_restart_reads_a_prompts_pages_back_from_the_disk_tier(tmp_path: Path) -> None:
    config = dataclasses.replace(CONFIG, prefix_disk_dir=str(tmp_path))
    tokens = prompt(30, 41)  # ten full pages and one token
    first = build(config)
    try:
        before = generate(first, request(tokens, 5))
    finally:
        first.shutdown()  # the queued page writes finish first
    second = build(config)  # a new runner: its pool holds nothing
    try:
        again = generate(second, request(tokens, 5))
        assert again.tokens == before.tokens == [reference(tokens, 5, GREEDY)]
        assert again.finished[0].usage.cached_prompt_tokens == 40
        assert fake(second).prefilled_tokens == 1  # the last token, whose logits start the answer
        assert second.stats().prefix_cache_disk_hits == 40
        longer = tokens + prompt(31, 12)  # the same prefix, then new tokens: only those prefilled
        assert generate(second, request(longer, 3)).tokens == [reference(longer, 3, GREEDY)]
        assert fake(second).prefilled_tokens == 1 + 13
        assert_idle(second)
    finally:
        second.shutdown()


def test_rows_preempted_by_a_tiny_pool_are_recomputed_not_dropped() -> None:
    config = EngineConfig(decode_lanes=2, page_size=4, prefill_chunk=16)
    pages = CONTEXT // 4 + config.decode_lanes + 1  # the smallest pool the engine accepts
    engine = build(config, pages)
    try:
        seeded = SamplingParams(temperature=1.0, seed=4, ignore_eos=True)
        cases = [(prompt(9, 20), 40, GREEDY), (prompt(10, 17), 44, GREEDY), (prompt(11, 23), 36, seeded)]
        results = [start(engine, request(tokens, count, sampling)) for tokens, count, sampling in cases]
        for (tokens, count, sampling), result in zip(cases, results, strict=True):
            seed = 0 if sampling.seed is None else row_seed(4)
            assert result.wait().tokens[0] == reference(tokens, count, sampling, seed)
        assert engine.stats().preemptions > 0
        assert_idle(engine)
    finally:
        engine.shutdown()


def test_the_pool_must_hold_one_full_row_plus_a_page_per_lane() -> None:
    with pytest.raises(ValueError, match="KV pool"):
        Engine(FakeRunner(CONFIG, 4, CONTEXT), 4, CONFIG, frozenset(), lambda *_: None)


def test_cancel_frees_the_lane_and_pages_at_once(engine: Engine) -> None:
    runner = fake(engine)

    def stop_after_first(event: EngineEvent) -> None:
        if isinstance(event, Tokens) and not collected.tokens[0]:
            runner.gate.clear()
        collected(event)

    collected = Collected(1)
    collected.request_id = engine.submit(request(prompt(12, 8), 40), stop_after_first)
    assert runner.held.wait(5)
    engine.cancel(collected.request_id)
    runner.gate.set()
    result = collected.wait()
    assert result.finished[0].reason == "cancelled" and len(result.tokens[0]) < 40
    assert_idle(engine)
    every_lane = generate(engine, request(prompt(13, 4), 3, n=CONFIG.decode_lanes))
    assert every_lane.tokens == [reference(prompt(13, 4), 3, GREEDY)] * CONFIG.decode_lanes


def test_a_request_that_keeps_moving_outlives_its_stall_timeout(engine: Engine) -> None:
    """50 steps of 10 ms take over 0.5 s in all, past the 0.2 s stall timeout; no gap reaches it."""
    fake(engine).delay_s = 0.01
    moving = generate(engine, request(prompt(14, 6), 50, stall_timeout=0.2))
    assert moving.finished[0].reason == "length" and len(moving.tokens[0]) == 50
    assert moving.prefilled == [6]  # the prompt's one chunk was reported as progress
    assert_idle(engine)


def test_waiting_counts_against_the_stall_timeout(engine: Engine) -> None:
    blocker = hold(engine)
    waiting = start(engine, request(prompt(15, 6), 5, stall_timeout=0.1))
    time.sleep(0.3)
    fake(engine).gate.set()
    assert waiting.wait().finished[0].reason == "timeout" and waiting.tokens[0] == []
    blocker.wait()
    assert_idle(engine)


def test_a_full_queue_refuses_with_retry_after_and_loses_nothing() -> None:
    config = EngineConfig(decode_lanes=2, max_queue=2, page_size=4, prefill_chunk=16)
    engine = build(config)
    try:
        blocker = hold(engine)  # one lane held
        accepted = [start(engine, request(prompt(16 + i, 5), 4)) for i in range(2)]  # one starts, one waits
        with pytest.raises(QueueFull) as refused:
            engine.submit(request(prompt(20, 5), 4), Collected(1))
        assert refused.value.retry_after_s >= 1 and engine.stats().refusals == 1
        fake(engine).gate.set()
        for i, result in enumerate(accepted):
            assert result.wait().tokens[0] == reference(prompt(16 + i, 5), 4, GREEDY)
        blocker.wait()
        assert_idle(engine)
    finally:
        engine.shutdown()


def test_drain_refuses_new_requests_and_finishes_the_rest(engine: Engine) -> None:
    blocker = hold(engine)
    in_flight = start(engine, request(prompt(21, 5), 6))
    engine.drain()
    with pytest.raises(EngineUnavailable):
        engine.submit(request(prompt(22, 5), 1), Collected(1))
    fake(engine).gate.set()
    assert in_flight.wait().tokens[0] == reference(prompt(21, 5), 6, GREEDY)
    assert blocker.wait().finished[0].reason == "length"
    assert engine.wait_idle(5) and engine.state == "draining"


@pytest.mark.parametrize(("error", "kind"), [(FakeDeviceError("device lost"), "fault"), (KeyError("row"), "panicked")])
def test_death_fails_every_request_with_its_cause(error: Exception, kind: str) -> None:
    engine = build()
    try:
        blocker = hold(engine)
        queued = [start(engine, request(prompt(23 + i, 5), 6)) for i in range(2)]
        fake(engine).fail_with = error
        fake(engine).gate.set()
        for collected in [blocker, *queued]:
            failed = collected.wait().failed
            assert failed is not None and failed.kind == "fault" and type(error).__name__ in failed.message
        assert engine.state == "dead" and engine.failure is not None and engine.failure[0] == kind
        with pytest.raises(EngineUnavailable):
            engine.submit(request(prompt(25, 5), 1), Collected(1))
    finally:
        engine.shutdown()


def test_an_idle_engine_calls_its_runners_idle_and_dies_of_what_it_raises() -> None:
    """A process group's keep-alive (engine/device/mirrored_runner.py): an idle engine thread wakes every
    `idle_interval`; a follower found dead then ends the engine as a fault."""
    per_row = math.ceil(CONTEXT / CONFIG.page_size)
    pages = per_row * CONFIG.decode_lanes + CONFIG.decode_lanes + 1
    runner = FakeRunner(CONFIG, pages, CONTEXT)
    runner.idle_interval = 0.01
    engine = Engine(runner, pages, CONFIG, frozenset(), lambda *_: None, DISK_NAMESPACE)
    try:
        assert generate(engine, request(prompt(31, 5), 3)).failed is None
        deadline = time.monotonic() + 10
        while runner.idles < 3:
            assert time.monotonic() < deadline, "the idle engine never called idle"
            time.sleep(0.01)
        runner.fail_with = FakeDeviceError("process 1 left")
        while engine.state != "dead":
            assert time.monotonic() < deadline, "a failing idle did not end the engine"
            time.sleep(0.01)
        assert engine.failure == ("fault", "FakeDeviceError: process 1 left")
    finally:
        engine.shutdown()


class EvenTokens:
    """A grammar of `length` even tokens: the fake draws only what the mask allows."""

    def __init__(self) -> None:
        self.left = 12

    def fill_mask(self, out: np.ndarray) -> None:
        out[:] = np.int32(0x55555555)

    def accept(self, token_id: int) -> None:
        assert token_id % 2 == 0
        self.left -= 1

    def is_finished(self) -> bool:
        return self.left == 0


def test_steps_chain_on_the_device_unless_a_grammar_needs_the_token(engine: Engine) -> None:
    runner = fake(engine)
    chained = generate(engine, request(prompt(26, 6), 24))
    assert chained.tokens[0] == reference(prompt(26, 6), 24, GREEDY)
    assert ("chained", 1) in runner.log
    runner.log.clear()
    constrained = generate(engine, request(prompt(26, 6), 24, constraint=EvenTokens))
    assert ("chained", 1) not in runner.log and ("decode", 1) in runner.log
    assert len(constrained.tokens[0]) == 12 and all(token % 2 == 0 for token in constrained.tokens[0])
    assert constrained.finished[0].reason == "stop"
    assert_idle(engine)


def test_ignore_eos_passes_the_models_stop_ids_but_not_the_requests() -> None:
    """The model's EOS and the tokenizer's end-of-turn ids (`EngineConfig.stop_token_ids`) end a
    row unless it asks `ignore_eos`; the request's own stop ids end it either way."""
    tokens = prompt(31, 7)
    expected = reference(tokens, 12, GREEDY)
    end_of_turn, eos, own = expected[3], expected[5], expected[8]
    assert [expected.index(token) for token in (end_of_turn, eos, own)] == [3, 5, 8]
    engine = build(dataclasses.replace(CONFIG, stop_token_ids=frozenset({end_of_turn})), eos=frozenset({eos}))
    try:
        plain = generate(engine, request(tokens, 12, SamplingParams(temperature=0.0)))
        assert plain.tokens[0] == expected[:3] and plain.finished[0].stop_token_id == end_of_turn
        ignoring = generate(engine, request(tokens, 12))
        assert ignoring.tokens[0] == expected and ignoring.finished[0].reason == "length"
        own_stop = generate(engine, request(tokens, 12, stop_token_ids=frozenset({own})))
        assert own_stop.tokens[0] == expected[:8] and own_stop.finished[0].stop_token_id == own
    finally:
        engine.shutdown()


def test_stop_tokens_logprobs_and_a_raising_sink(engine: Engine) -> None:
    tokens = prompt(27, 7)
    expected = reference(tokens, 10, GREEDY)
    stopped = generate(engine, request(tokens, 10, stop_token_ids=frozenset({expected[3]})))
    assert stopped.tokens[0] == expected[:3] and stopped.finished[0].stop_token_id == expected[3]
    with_logprobs = generate(engine, request(tokens, 3, SamplingParams(temperature=0.0, logprobs=1, ignore_eos=True)))
    assert [entry.token_id for entry in with_logprobs.logprobs[0]] == expected[:3]
    assert all(len(entry.top) == 1 for entry in with_logprobs.logprobs[0])

    def raising(event: EngineEvent) -> None:
        raise RuntimeError("a broken sink")

    engine.submit(request(tokens, 30), raising)
    assert generate(engine, request(tokens, 5)).tokens[0] == expected[:5]
    assert_idle(engine)


def test_eos_ends_a_row_unless_ignored() -> None:
    tokens = prompt(28, 5)
    expected = reference(tokens, 8, GREEDY)
    engine = build(eos=frozenset({expected[2]}))
    try:
        honoured = generate(engine, request(tokens, 8, SamplingParams(temperature=0.0)))
        assert honoured.tokens[0] == expected[:2] and honoured.finished[0].reason == "stop"
        assert generate(engine, request(tokens, 8)).tokens[0] == expected
    finally:
        engine.shutdown()


def test_short_prompts_arriving_together_share_prefill_steps() -> None:
    config = EngineConfig(decode_lanes=8, page_size=4, prefill_chunk=64)
    engine = build(config)
    try:
        blocker = hold(engine)
        prompts = [prompt(30 + i, 3 + i) for i in range(4)] + [prompt(40, 40)]
        results = [start(engine, request(p, 5, n=2 if i == 1 else 1)) for i, p in enumerate(prompts)]
        fake(engine).log.clear()
        fake(engine).gate.set()
        for p, result in zip(prompts, results, strict=True):
            assert all(tokens == reference(p, 5, GREEDY) for tokens in result.wait().tokens)
        blocker.wait()
        prefills = [rows for kind, rows in fake(engine).log if kind == "prefill"]
        assert prefills == [1, 4, 1]  # the blocker's, the four short prompts together, the long one
        assert_idle(engine)
    finally:
        engine.shutdown()


def test_a_prompt_over_the_context_and_other_faces_are_refused(engine: Engine) -> None:
    for bad, code in [
        (request([], 4), "invalid_prompt"),
        (request(prompt(29, CONTEXT), 4), "context_length_exceeded"),
        (request(prompt(29, 4), 4, n=CONFIG.decode_lanes + 1), "invalid_n"),
    ]:
        with pytest.raises(RequestRefused) as refused:
            engine.submit(bad, Collected(1))
        assert refused.value.code == code
    clamped = generate(engine, request(prompt(29, CONTEXT - 3), 100))
    assert len(clamped.tokens[0]) == 3 and clamped.finished[0].reason == "length"


def test_the_scheduler_knows_nothing_of_the_device() -> None:
    """The scheduler's side of the seam imports no JAX: everything on the device is the runner's."""
    code = "import sys, engine.engine_config, engine.serving.scheduler; sys.exit('jax' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
