"""The engine's admission rules (engine/serving/admission.py): the one place that decides the prompt
against the context, `n` against the lanes and the output budget, naming the field it refuses. The
request's own shape (`n` and `max_tokens` at least 1) is the API spec's: tests/handlers check it."""

import pytest

from engine.api import MAX_TOKENS_CAP, GenerationRequest, OutputCap, RequestRefused, SamplingParams
from engine.serving.admission import Admission, admit

CONTEXT, LANES = 100, 4


def request(prompt: int, max_tokens: int | None = None, n: int = 1, cap: OutputCap | None = None) -> GenerationRequest:
    return GenerationRequest(tuple(range(prompt)), SamplingParams(), max_tokens, n=n, output_cap=cap)


@pytest.mark.parametrize(
    ("asked", "code", "field"),
    [
        (request(0), "invalid_prompt", "prompt"),
        (request(CONTEXT), "context_length_exceeded", "prompt"),
        (request(10, n=LANES + 1), "invalid_n", "n"),
    ],
)
def test_a_refusal_names_its_rule_and_field(asked: GenerationRequest, code: str, field: str) -> None:
    with pytest.raises(RequestRefused) as refused:
        admit(asked, CONTEXT, LANES)
    assert (refused.value.code, refused.value.field) == (code, field)


def test_the_context_refusal_says_how_long_each_is() -> None:
    with pytest.raises(RequestRefused) as refused:
        admit(request(120), CONTEXT, LANES)
    assert "120 tokens" in refused.value.message and f"{CONTEXT} tokens" in refused.value.message


@pytest.mark.parametrize(
    ("asked", "admitted"),
    [
        (request(10), Admission(CONTEXT - 10, "length")),  # no limit: the room left
        (request(10, max_tokens=5), Admission(5, "length")),
        (request(10, max_tokens=10**6), Admission(CONTEXT - 10, "length")),
        (request(10, max_tokens=5, cap=OutputCap(8, "stop")), Admission(5, "length")),  # the request's own is lower
        (request(10, max_tokens=50, cap=OutputCap(8, "stop")), Admission(8, "stop")),  # the cap ends the turn
        (request(10, cap=OutputCap(8)), Admission(8, "length")),
        (request(95, cap=OutputCap(8, "stop")), Admission(5, "length")),  # the context is lower than the cap
        (request(10, max_tokens=8, cap=OutputCap(8, "stop")), Admission(8, "stop")),  # a tie: the cap's finish
    ],
)
def test_the_output_budget_and_its_finish(asked: GenerationRequest, admitted: Admission) -> None:
    assert admit(asked, CONTEXT, LANES) == admitted


def test_the_engine_cap_bounds_a_long_context() -> None:
    assert admit(request(10), 10 * MAX_TOKENS_CAP, LANES).max_tokens == MAX_TOKENS_CAP
