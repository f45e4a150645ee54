"""Prompt-lookup drafts: the lookup itself, and the scheduler's steps over drafts against the fake
runner (tests/engine/fake_runner.py), whose `copying_token` model copies from the context most of
the time, so drafts hold for a while and then miss.

A right answer here is the tokens `reference` draws one step at a time: a row that took a
rejected guess, or read a position its draft step wrote but it never took, gets other tokens.
"""

import math

import numpy as np
import pytest

from engine.api import GenerationRequest, SamplingParams
from engine.engine import Engine
from engine.engine_config import EngineConfig
from engine.serving.drafts import PromptLookup
from tests.engine.engine_harness import generate, start
from tests.engine.fake_runner import VOCAB, FakeRunner, copying_token, reference

GREEDY = SamplingParams(temperature=0.0, ignore_eos=True)
SEEDED = SamplingParams(temperature=0.8, seed=7, ignore_eos=True)
CONTEXT = 256
CONFIG = EngineConfig(decode_lanes=4, max_queue=4, page_size=4, prefill_chunk=32, draft_tokens=4, draft_rows=2)


def build(config: EngineConfig = CONFIG) -> Engine:
    pages = math.ceil(CONTEXT / config.page_size) * config.decode_lanes + config.decode_lanes + 1
    engine = Engine(FakeRunner(config, pages, CONTEXT), pages, config, frozenset(), lambda *_: None)
    fake(engine).model = copying_token
    return engine


def fake(engine: Engine) -> FakeRunner:
    assert isinstance(engine.runner, FakeRunner)
    return engine.runner


def repeating_prompt(seed: int, length: int = 60) -> list[int]:
    """A block of random tokens written twice: a copying model copies it a third time."""
    block = np.random.default_rng(seed).integers(0, VOCAB, size=length // 2).tolist()
    return block + block


def request(
    tokens: list[int], max_tokens: int, sampling: SamplingParams = GREEDY, **fields: object
) -> GenerationRequest:
    return GenerationRequest(tuple(tokens), sampling, max_tokens, **fields)  # type: ignore[arg-type]


def row_seed(seed: int, row: int = 0) -> int:
    return hash((seed, row)) & 0xFFFFFFFF


# --- the lookup -----------------------------------------------------------------------------


def test_the_draft_is_what_followed_the_latest_earlier_occurrence_of_the_suffix() -> None:
    tokens = [1, 2, 3, 9, 9, 1, 2, 3, 4, 5, 6, 7, 1, 2, 3]
    lookup = PromptLookup(tokens)
    assert list(lookup.draft(3)) == [4, 5, 6]  # the later of the two earlier [1, 2, 3]
    assert list(lookup.draft(10)) == [4, 5, 6, 7, 1, 2, 3]  # runs up to the row's end, no further
    tokens.append(4)  # the row grows; the lookup catches up
    assert list(lookup.draft(2)) == [5, 6]


def test_the_longest_matching_suffix_wins_and_a_suffix_never_matches_itself() -> None:
    lookup = PromptLookup([5, 6, 1, 7, 8, 2, 6, 1, 3])  # suffix [6, 1, 3] unseen, [1, 3] unseen
    assert list(lookup.draft(4)) == []
    lookup = PromptLookup([6, 1, 4, 9, 2, 6, 1])  # [2, 6, 1] unseen; [6, 1] was followed by 4
    assert list(lookup.draft(2)) == [4, 9]
    assert list(PromptLookup([3, 3]).draft(4)) == []  # one token of context: nothing before it
    assert list(PromptLookup([1, 2, 3, 1, 2]).draft(0)) == []


# --- the scheduler over drafts --------------------------------------------------------------


@pytest.mark.parametrize("sampling", [GREEDY, SEEDED], ids=["greedy", "seeded"])
def test_steps_over_drafts_give_the_tokens_of_one_step_at_a_time(sampling: SamplingParams) -> None:
    engine = build()
    try:
        tokens = repeating_prompt(1)
        got = generate(engine, request(tokens, 80, sampling)).tokens[0]
        want = reference(tokens, 80, sampling, row_seed(7) if sampling.seed else 0, copying_token)
        assert got == want
        stats, log = engine.stats(), fake(engine).log
        assert ("verify", 1) in log
        assert 0 < stats.draft_tokens_accepted < stats.draft_tokens  # guesses held and missed
        decode_steps = sum(1 for kind, _ in log if kind in ("decode", "chained", "verify"))
        assert decode_steps + stats.draft_tokens_accepted == 80 - 1  # the first token costs no decode step
    finally:
        engine.shutdown()


def test_without_drafts_the_same_tokens_take_a_step_each() -> None:
    engine = build(EngineConfig(decode_lanes=4, max_queue=4, page_size=4, prefill_chunk=32, draft_tokens=0))
    try:
        tokens = repeating_prompt(1)
        assert generate(engine, request(tokens, 80)).tokens[0] == reference(tokens, 80, GREEDY, model=copying_token)
        assert engine.stats().draft_tokens == 0
        assert not any(kind == "verify" for kind, _ in fake(engine).log)
    finally:
        engine.shutdown()


def test_rows_with_penalties_or_grammars_or_past_draft_rows_decode_without_drafts() -> None:
    engine = build()
    try:
        penalised = SamplingParams(temperature=0.0, repetition_penalty=1.2, ignore_eos=True)
        tokens = repeating_prompt(2)
        generate(engine, request(tokens, 20, penalised))
        assert engine.stats().draft_tokens == 0
        fake(engine).gate.clear()  # three rows together, over draft_rows = 2
        collected = [start(engine, request(repeating_prompt(3 + i), 20)) for i in range(3)]
        fake(engine).gate.set()
        for i, done in enumerate(collected):
            prompt = repeating_prompt(3 + i)
            assert done.wait().tokens[0] == reference(prompt, 20, GREEDY, model=copying_token)
        assert all(rows <= CONFIG.draft_rows for kind, rows in fake(engine).log if kind == "verify")
    finally:
        engine.shutdown()


def test_a_stop_token_or_max_tokens_inside_a_taken_draft_ends_the_row_there() -> None:
    engine = build()
    try:
        tokens = repeating_prompt(4)
        want = reference(tokens, 40, GREEDY, model=copying_token)
        stop = want[25]
        first_stop = want.index(stop)
        got = generate(engine, request(tokens, 40, stop_token_ids=frozenset({stop})))
        assert got.tokens[0] == want[:first_stop]
        assert got.finished[0].reason == "stop" and got.finished[0].stop_token_id == stop
        for max_tokens in (7, 13):  # cut inside a draft the model would have taken further
            got = generate(engine, request(tokens, max_tokens))
            assert got.tokens[0] == want[:max_tokens] and got.finished[0].reason == "length"
        assert engine.stats().draft_tokens_accepted > 0
    finally:
        engine.shutdown()


def test_each_taken_draft_token_reports_its_own_logprobs() -> None:
    engine = build()
    try:
        tokens = repeating_prompt(5)
        got = generate(engine, request(tokens, 30, SamplingParams(temperature=0.0, logprobs=1, ignore_eos=True)))
        assert engine.stats().draft_tokens_accepted > 0
        assert [entry.token_id for entry in got.logprobs[0]] == got.tokens[0]
        assert [entry.logprob for entry in got.logprobs[0]] == [-token / VOCAB for token in got.tokens[0]]
    finally:
        engine.shutdown()
