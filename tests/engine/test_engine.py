"""The serving engine on a tiny random Llama: batching, prefix cache, n > 1, stops, cancel, admission.

One engine serves the whole module (compiling its buckets once); the last test checks that none
of the mixed workload before it compiled anything.
"""

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
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
from engine.model.loading.loader import LoadedModel, load_model
from tests.engine.conftest import Golden
from tests.engine.engine_harness import GREEDY, Collected, generate, greedy_request, prompt, reference_greedy, start

pytestmark = pytest.mark.slow  # builds engines

CONTEXT = 64  # the tiny model's trained length
CONFIG = EngineConfig(decode_lanes=4, max_queue=2, page_size=8, prefill_chunk=8)


@pytest.fixture(scope="module")
def model(tiny_checkpoint: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    return load_model(tiny_checkpoint("llama_tied"), cache_dir=tmp_path_factory.mktemp("prepared"), progress=False)


@pytest.fixture(scope="module")
def engine(model: LoadedModel) -> Iterator[Engine]:
    progress: list[tuple[str, int, int]] = []
    built = Engine.build(model, CONFIG, lambda what, done, total: progress.append((what, done, total)))
    assert progress[-1][1] == progress[-1][2] == len(built.stats().buckets)
    yield built
    built.shutdown()


def assert_idle(engine: Engine) -> None:
    deadline = time.monotonic() + 5
    while (stats := engine.stats()).requests_running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert (stats.requests_running, stats.requests_waiting, stats.kv_pages_used) == (0, 0, 0)


def test_greedy_matches_the_contiguous_cache_forward(engine: Engine, model: LoadedModel) -> None:
    tokens = prompt(1, 21)  # three prefill chunks, last page partial
    before = engine.stats()
    result = generate(engine, greedy_request(tokens, 12))
    assert result.tokens[0] == reference_greedy(model, tokens, 12, CONTEXT)
    assert result.finished[0].reason == "length" and result.finished[0].usage.completion_tokens == 12
    after = engine.stats()  # 12 tokens counted: the first's time to it, the 11 others' gaps
    assert after.generation_tokens - before.generation_tokens == 12
    assert after.time_to_first_token.count - before.time_to_first_token.count == 1
    assert after.inter_token_latency.count - before.inter_token_latency.count == 11


def test_batched_rows_get_exactly_what_they_get_alone(engine: Engine) -> None:
    requests = [
        greedy_request(prompt(2, 5), 10),
        greedy_request(prompt(3, 30), 9),
        GenerationRequest(tuple(prompt(4, 12)), SamplingParams(temperature=1.0, seed=7, ignore_eos=True), 11),
        GenerationRequest(
            tuple(prompt(5, 17)), SamplingParams(temperature=0.8, top_k=20, top_p=0.9, seed=3, ignore_eos=True), 8
        ),
    ]
    alone = [generate(engine, request).tokens[0] for request in requests]
    together = [collected.wait().tokens[0] for collected in [start(engine, request) for request in requests]]
    assert together == alone
    assert_idle(engine)


def test_resent_conversation_prefills_only_the_new_tokens(engine: Engine, model: LoadedModel) -> None:
    first_turn = prompt(6, 19)
    answer = generate(engine, greedy_request(first_turn, 10)).tokens[0]
    second_turn = first_turn + answer + prompt(7, 6)
    hits_before = engine.stats().prefix_cache_hits
    result = generate(engine, greedy_request(second_turn, 8))
    cached = result.finished[0].usage.cached_prompt_tokens
    assert cached >= 24 and cached % CONFIG.page_size == 0
    assert engine.stats().prefix_cache_hits - hits_before == cached
    assert result.tokens[0] == reference_greedy(model, second_turn, 8, CONTEXT)


def test_n_rows_share_the_prompt(engine: Engine, model: LoadedModel) -> None:
    tokens = prompt(8, 13)
    greedy = generate(engine, GenerationRequest(tuple(tokens), GREEDY, 6, n=3))
    assert greedy.tokens == [reference_greedy(model, tokens, 6, CONTEXT)] * 3
    sampled = generate(engine, GenerationRequest(tuple(tokens), SamplingParams(seed=11, ignore_eos=True), 6, n=3))
    assert len({tuple(row) for row in sampled.tokens}) > 1  # rows of one seeded request differ
    assert all(f.usage.prompt_tokens == 13 and f.usage.completion_tokens == 6 for f in sampled.finished.values())
    assert_idle(engine)


def test_the_first_token_comes_from_the_prefill(
    engine: Engine, model: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No decode step runs for a row's first token: each of the n rows draws it from the logits of
    the prompt's last position, and the second token is the first decode step's."""
    decode_steps: list[int] = []
    decode = engine.runner.steps.decode

    def counted(*args: object) -> object:
        decode_steps.append(1)
        return decode(*args)

    monkeypatch.setattr(engine.runner.steps, "decode", counted)
    tokens = prompt(20, 16)  # the last prompt token fills a page: the first token starts a new one
    one = generate(engine, GenerationRequest(tuple(tokens), GREEDY, 1, n=2))
    assert one.tokens == [reference_greedy(model, tokens, 1, CONTEXT)] * 2 and not decode_steps
    two = generate(engine, greedy_request(tokens, 2))
    assert two.tokens[0] == reference_greedy(model, tokens, 2, CONTEXT) and len(decode_steps) == 1
    assert_idle(engine)


def test_stop_ids_constraint_logprobs_and_clamping(engine: Engine, model: LoadedModel) -> None:
    tokens = prompt(9, 10)
    first = reference_greedy(model, tokens, 1, CONTEXT)[0]
    stopped = generate(engine, GenerationRequest(tuple(tokens), GREEDY, 5, stop_token_ids=frozenset({first})))
    assert (
        stopped.tokens[0] == [] and stopped.finished[0].reason == "stop" and stopped.finished[0].stop_token_id == first
    )

    clamped = generate(engine, greedy_request(prompt(10, CONTEXT - 3), 10**9))
    assert len(clamped.tokens[0]) == 3 and clamped.finished[0].reason == "length"

    with_logprobs = generate(engine, greedy_request(tokens, 3, logprobs=2))
    assert [lp.token_id for lp in with_logprobs.logprobs[0]] == with_logprobs.tokens[0]
    assert all(len(lp.top) == 2 and lp.top[0][0] == lp.token_id for lp in with_logprobs.logprobs[0])

    constrained = generate(
        engine, GenerationRequest(tuple(tokens), SamplingParams(seed=1), 10, constraint=lambda: OnlyTokens({40, 41}, 4))
    )
    assert constrained.finished[0].reason == "stop" and len(constrained.tokens[0]) == 4
    assert set(constrained.tokens[0]) <= {40, 41}


def test_scored_ids_report_the_models_logprobs_at_those_ids(engine: Engine, model: LoadedModel) -> None:
    """A request's scored ids (a decision's option labels) report the model's own next-token
    logprobs at those ids after the prompt, in the request's order, likely or not."""
    tokens = prompt(14, 11)
    cache = model.init_kv_cache(batch=1, length=CONTEXT)
    logits, _ = model.forward(jnp.asarray([tokens], jnp.int32), jnp.arange(len(tokens), dtype=jnp.int32)[None], cache)
    expected = np.asarray(jax.nn.log_softmax(logits[0, -1]))
    ids = (int(np.argmin(expected)), int(np.argmax(expected)), 5)
    scored = generate(engine, greedy_request(tokens, 1, logprobs=0, scored_ids=ids))
    np.testing.assert_allclose(scored.logprobs[0][0].scored, expected[list(ids)], atol=1e-4)
    with pytest.raises(RequestRefused, match="need logprobs"):
        engine.submit(greedy_request(tokens, 1, scored_ids=ids), lambda event: None)


def test_prompt_logprobs_are_the_models_at_each_prompt_position(engine: Engine, model: LoadedModel) -> None:
    """A prompt of three chunks (8 tokens each at most) reports each token after the first with the
    model's logprob of it from the positions before, and its top alternatives — also when the
    same prompt is in the prefix cache already (then it is prefilled whole again)."""
    tokens = prompt(15, 21)
    cache = model.init_kv_cache(batch=1, length=CONTEXT)
    logits, _ = model.forward(jnp.asarray([tokens], jnp.int32), jnp.arange(len(tokens), dtype=jnp.int32)[None], cache)
    expected = np.asarray(jax.nn.log_softmax(logits[0], axis=-1))
    generate(engine, greedy_request(tokens, 1))  # the prompt's pages now in the prefix cache
    scored = generate(engine, dataclasses.replace(greedy_request(tokens, 2), prompt_logprobs=3))
    entries = scored.prompt_logprobs
    assert [entry.token_id for entry in entries] == tokens[1:]
    np.testing.assert_allclose([entry.logprob for entry in entries], expected[np.arange(20), tokens[1:]], atol=1e-4)
    for position, entry in enumerate(entries):
        assert entry.rank == 1 + int(np.sum(expected[position] > expected[position, entry.token_id]))
        best = np.argsort(-expected[position])[:3]
        assert [token for token, _ in entry.top] == best.tolist()
        np.testing.assert_allclose([value for _, value in entry.top], expected[position, best], atol=1e-4)
    assert len(scored.tokens[0]) == 2 and not generate(engine, greedy_request(tokens, 1)).prompt_logprobs


def test_prompt_logprobs_match_transformers(engine: Engine, golden: Callable[[str], Golden]) -> None:
    """The golden prompts' logprobs against transformers' float32 log-softmax at each position
    (tests/goldens/tiny, the same checkpoint): within 1e-3, as an evaluation harness reads them."""
    reference = golden("llama_tied")
    for tokens, logits in zip(np.asarray(reference["tokens"]).tolist(), reference["logits"], strict=True):
        expected = np.asarray(jax.nn.log_softmax(jnp.asarray(logits), axis=-1))
        entries = generate(engine, dataclasses.replace(greedy_request(tokens, 1), prompt_logprobs=0)).prompt_logprobs
        got = [entry.logprob for entry in entries]
        np.testing.assert_allclose(got, expected[np.arange(len(tokens) - 1), tokens[1:]], atol=1e-3)


def test_penalties_change_the_output(engine: Engine) -> None:
    tokens = prompt(12, 9)
    plain = generate(engine, greedy_request(tokens, 12)).tokens[0]
    penalised = generate(engine, greedy_request(tokens, 12, presence_penalty=2.0, repetition_penalty=1.5)).tokens[0]
    assert penalised != plain
    assert len(set(penalised)) > len(set(plain))


class OnlyTokens:
    """A constraint that allows a fixed set of tokens and is finished after `length` of them."""

    def __init__(self, allowed: set[int], length: int) -> None:
        self._allowed, self._left = allowed, length

    def fill_mask(self, out: np.ndarray) -> None:
        out[:] = 0
        for token in self._allowed:
            out[token // 32] |= np.int32(1 << (token % 32)) if token % 32 < 31 else np.int32(-(2**31))

    def accept(self, token_id: int) -> None:
        assert token_id in self._allowed
        self._left -= 1

    def is_finished(self) -> bool:
        return self._left == 0


class AllTokens:
    """A constraint that allows every token and never finishes."""

    def fill_mask(self, out: np.ndarray) -> None:
        out[:] = -1

    def accept(self, token_id: int) -> None:
        pass

    def is_finished(self) -> bool:
        return False


def test_chained_steps_draw_what_settled_steps_draw(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """While the same rows decode, each step is dispatched on the last step's sampled tokens before
    the host takes them; a row with a grammar is not (its mask needs the token). A seeded row draws
    the same tokens either way: the draw counter counts the token still in flight."""
    calls: list[str] = []
    decode, take_tokens = engine.runner.steps.decode, engine._scheduler._decode_steps._take_tokens

    def counted_decode(*args: Any) -> Any:
        calls.append("decode")
        return decode(*args)

    def counted_take(*args: Any) -> None:
        calls.append("take")
        take_tokens(*args)

    monkeypatch.setattr(engine.runner.steps, "decode", counted_decode)
    monkeypatch.setattr(engine._scheduler._decode_steps, "_take_tokens", counted_take)
    sampling = SamplingParams(temperature=1.5, seed=5, ignore_eos=True)
    request = GenerationRequest(tuple(prompt(50, 6)), sampling, 24)
    chained = generate(engine, request).tokens[0]
    assert "decode,decode" in ",".join(calls)
    calls.clear()
    settled = generate(engine, dataclasses.replace(request, constraint=AllTokens)).tokens[0]
    assert "decode,decode" not in ",".join(calls)
    assert chained == settled and len(set(chained)) > 4
    assert_idle(engine)


def test_refusals_on_their_face(engine: Engine) -> None:
    with pytest.raises(RequestRefused) as too_long:
        engine.submit(greedy_request(prompt(13, CONTEXT), 1), lambda event: None)
    assert too_long.value.code == "context_length_exceeded" and str(CONTEXT) in too_long.value.message
    with pytest.raises(RequestRefused):
        engine.submit(greedy_request([], 1), lambda event: None)
    with pytest.raises(RequestRefused):
        engine.submit(GenerationRequest((5,), GREEDY, 1, n=CONFIG.decode_lanes + 1), lambda event: None)


def test_a_long_prompt_prefills_between_decode_steps(engine: Engine) -> None:
    """Each engine iteration runs one prefill chunk, then a decode step for the running rows: the
    running stream keeps getting tokens while a 7-chunk prompt is prefilled."""
    running = start(engine, greedy_request(prompt(18, 9), 45))
    while not running.tokens[0]:
        time.sleep(0.001)
    seen_when_first_token: list[int] = []
    long_prompt = Collected(1)

    def sink(event: EngineEvent) -> None:
        if isinstance(event, Tokens) and not long_prompt.tokens[0]:
            seen_when_first_token.append(len(running.tokens[0]))
        long_prompt(event)

    tokens_before = len(running.tokens[0])
    engine.submit(greedy_request(prompt(19, 7 * CONFIG.prefill_chunk + 1), 2), sink)
    long_prompt.wait()
    running.wait()
    assert seen_when_first_token[0] - tokens_before >= 4
    assert_idle(engine)


def test_cancel_and_stall_timeout_free_lanes_and_pages(engine: Engine) -> None:
    cancelled = start(engine, greedy_request(prompt(14, 20), 40))
    timed_out = start(engine, GenerationRequest(tuple(prompt(15, 20)), GREEDY, 40, n=2, stall_timeout=0.0))
    while not cancelled.tokens[0]:
        time.sleep(0.001)
    engine.cancel(1_000_000)  # unknown ids are ignored
    engine.cancel(cancelled.request_id)
    assert cancelled.wait().finished[0].reason == "cancelled" and len(cancelled.tokens[0]) < 40
    assert {f.reason for f in timed_out.wait().finished.values()} == {"timeout"}
    assert_idle(engine)


def test_a_stall_mid_decode_ends_the_row_and_frees_its_lane(engine: Engine) -> None:
    """A sink that takes 0.3 s per event stalls the engine thread (sinks run on it): 0.3 s pass
    between one token and the next step, past the 0.2 s stall timeout."""
    collected = Collected(1)

    def slow_sink(event: EngineEvent) -> None:
        time.sleep(0.3)
        collected(event)

    request = GenerationRequest(tuple(prompt(20, 9)), GREEDY, 40, stall_timeout=0.2)
    engine.submit(request, slow_sink)
    collected.wait()
    assert collected.finished[0].reason == "timeout"
    assert 0 < len(collected.tokens[0]) < 40
    assert_idle(engine)


def test_queue_overflow_refuses_with_retry_after_and_loses_nothing(engine: Engine) -> None:
    accepted: list[Collected] = []
    retry_after: list[int] = []
    for seed in range(12):
        collected = Collected(1)
        try:
            engine.submit(greedy_request(prompt(100 + seed, 10), 20), collected)
            accepted.append(collected)
        except QueueFull as full:
            retry_after.append(full.retry_after_s)
    assert retry_after and all(2 <= seconds <= 60 for seconds in retry_after)
    assert len(accepted) >= CONFIG.decode_lanes
    assert all(len(c.wait().tokens[0]) == 20 for c in accepted)
    assert engine.stats().refusals >= len(retry_after)
    assert_idle(engine)


def test_drain_finishes_in_flight_then_refuses(engine: Engine) -> None:
    in_flight = start(engine, greedy_request(prompt(16, 9), 15))
    engine.drain()
    with pytest.raises(EngineUnavailable):
        engine.submit(greedy_request(prompt(17, 9), 1), lambda event: None)
    assert engine.wait_idle(timeout=30)
    assert len(in_flight.wait().tokens[0]) == 15


def test_no_compiles_after_startup(engine: Engine) -> None:
    stats = engine.stats()
    assert stats.compiles_after_startup == 0
    assert stats.generation_tokens > 0 and stats.time_to_first_token.count > 0 and stats.e2e_latency.count > 0


def test_short_prompts_arriving_together_share_prefill_steps(
    model: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With room for it (8 prompts × an 8-token chunk within a 64-token prefill chunk), prompts
    with a short chunk left are prefilled in one step; each still gets exactly its own tokens,
    n > 1 rows included, and a longer prompt gets a step of its own."""
    engine = Engine.build(model, EngineConfig(decode_lanes=8, page_size=8, prefill_chunk=64), lambda *_: None)
    rows_per_step: list[int] = []
    prefill = engine.runner.steps.prefill

    def counted(*args: Any) -> Any:
        rows_per_step.append(args[3].shape[0])  # (params, lora, kv, tokens, ...)
        return prefill(*args)

    # Sinks run on the engine thread: holding the first token of this request holds the engine,
    # so the prompts below arrive together.
    release, held = threading.Event(), threading.Event()
    blocker = Collected(1)

    def holding_sink(event: EngineEvent) -> None:
        if isinstance(event, Tokens) and not held.is_set():
            held.set()
            release.wait()
        blocker(event)

    try:
        engine.submit(greedy_request(prompt(29, 4), 2), holding_sink)
        assert held.wait(30)
        monkeypatch.setattr(engine.runner.steps, "prefill", counted)
        prompts = [prompt(30 + i, 3 + i) for i in range(4)] + [prompt(40, 40)]
        requests = [GenerationRequest(tuple(p), GREEDY, 5, n=2 if i == 1 else 1) for i, p in enumerate(prompts)]
        collected = [start(engine, request) for request in requests]
        release.set()
        for p, request, result in zip(prompts, requests, collected, strict=True):
            assert result.wait().tokens == [reference_greedy(model, p, 5, CONTEXT)] * request.n
        assert rows_per_step == [8, 1]  # the four short prompts together (padded to 8 rows), then the long one
        blocker.wait()
        assert engine.stats().compiles_after_startup == 0
        assert_idle(engine)
    finally:
        release.set()
        engine.shutdown()
