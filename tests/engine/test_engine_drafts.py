"""Prompt-lookup drafts on a tiny random Llama: the tokens are those of an engine without drafts.

A random model's greedy output soon falls into a loop, which its own output then drafts well: the
steps over drafts take many guessed tokens here, and miss some.
"""

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from engine.api import GenerationRequest, SamplingParams
from engine.engine import Engine
from engine.engine_config import EngineConfig
from engine.model.loading.loader import LoadedModel, load_model
from tests.engine.engine_harness import generate, prompt, start

pytestmark = pytest.mark.slow  # builds engines

BASE = EngineConfig(decode_lanes=4, max_queue=4, page_size=8, prefill_chunk=16)


def repeated(seed: int, length: int) -> list[int]:
    """A block written twice: drafts propose copying it again, which the model does not do."""
    return prompt(seed, length) * 2


@pytest.fixture(scope="module")
def model(tiny_checkpoint: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    return load_model(tiny_checkpoint("llama_tied"), cache_dir=tmp_path_factory.mktemp("prepared"), progress=False)


@pytest.fixture(scope="module")
def engines(model: LoadedModel) -> Iterator[tuple[Engine, Engine]]:
    drafting = Engine.build(model, dataclasses.replace(BASE, draft_tokens=4, draft_rows=4), _quiet)
    plain = Engine.build(model, dataclasses.replace(BASE, draft_tokens=0), _quiet)
    yield drafting, plain
    drafting.shutdown()
    plain.shutdown()


def _quiet(_what: str, _done: int, _total: int) -> None:
    pass


REQUESTS = [
    GenerationRequest(tuple(prompt(1, 9)), SamplingParams(temperature=0.0, ignore_eos=True), 48),
    GenerationRequest(tuple(repeated(2, 10)), SamplingParams(temperature=0.0, ignore_eos=True), 40),
    GenerationRequest(tuple(repeated(3, 6)), SamplingParams(temperature=2.0, seed=11, ignore_eos=True), 40),
    GenerationRequest(
        tuple(prompt(4, 12)), SamplingParams(temperature=1.5, top_k=8, top_p=0.9, seed=5, ignore_eos=True), 40
    ),
]


def test_drafts_change_no_token_alone_or_batched(engines: tuple[Engine, Engine]) -> None:
    drafting, plain = engines
    want = [generate(plain, request).tokens[0] for request in REQUESTS]
    alone = [generate(drafting, request).tokens[0] for request in REQUESTS]
    assert alone == want
    accepted_alone = drafting.stats().draft_tokens_accepted
    assert 0 < accepted_alone < drafting.stats().draft_tokens  # guesses taken and guesses missed
    together = [collected.wait().tokens[0] for collected in [start(drafting, request) for request in REQUESTS]]
    assert together == want
    assert drafting.stats().draft_tokens_accepted > accepted_alone  # four rows, within draft_rows
    assert drafting.stats().compiles_after_startup == 0


def test_logprobs_of_taken_draft_tokens_match_those_of_single_steps(engines: tuple[Engine, Engine]) -> None:
    drafting, plain = engines
    request = GenerationRequest(tuple(prompt(1, 9)), SamplingParams(temperature=0.0, logprobs=3, ignore_eos=True), 48)
    before = drafting.stats().draft_tokens_accepted
    got, want = generate(drafting, request), generate(plain, request)
    assert drafting.stats().draft_tokens_accepted > before
    assert got.tokens == want.tokens
    for mine, theirs in zip(got.logprobs[0], want.logprobs[0], strict=True):
        assert [token for token, _ in mine.top] == [token for token, _ in theirs.top]
        np.testing.assert_allclose(mine.logprob, theirs.logprob, atol=1e-4)
