"""A question's label logprobs → its System One answer: the numbers of the reference examples
(llama.cpp's README score example, jebadiah-decide's billing example)."""

import math

import pytest

from handlers.decisions.answers import answer, choice_confidence, label_softmax, score_confidence
from handlers.decisions.questions import Question


def test_label_softmax_is_the_softmax_over_the_labels_alone() -> None:
    probabilities = label_softmax([math.log(0.2), math.log(0.1), math.log(0.1)])  # a vocabulary's 0.4 of mass
    assert probabilities == pytest.approx([0.5, 0.25, 0.25])


def test_choice_and_score_confidences_are_typesafes_formulas() -> None:
    assert choice_confidence([0.641142, 0.036095, 0.322763]) == pytest.approx((3 * 0.641142 - 1) / 2)
    assert choice_confidence([1 / 3] * 3) == pytest.approx(0.0)
    assert choice_confidence([1.0]) == 1.0
    assert score_confidence([0.0023, 0.116, 0.6753, 0.2064]) == pytest.approx(0.673, abs=1e-4)


def test_each_type_answers_in_its_shape() -> None:
    levels = Question("urgency", "score", ("0", "1", "2", "3"), ("can wait", "this week", "today", "right now"), (1,))
    logprobs = [math.log(p) for p in (0.0023, 0.116, 0.6753, 0.2064)]
    scored = answer(levels, logprobs).model_dump()
    assert scored["score"] == pytest.approx(2.0858, abs=1e-4) and scored["legend"]["3"] == "right now"
    assert scored["probabilities"]["2"] == pytest.approx(0.6753, abs=1e-4)

    route = Question("route", "choice", ("billing", "support", "sales"), (None, None, None), (1,))
    chosen = answer(route, [math.log(p) for p in (0.641142, 0.036095, 0.322763)]).model_dump()
    assert chosen["choice"] == "billing" and sum(chosen["probabilities"].values()) == pytest.approx(1.0)

    urgent = Question("urgent", "noul", ("true", "false"), (None, None), (1,))
    assert answer(urgent, [math.log(0.2), math.log(0.6)]).model_dump() == {"type": "noul", "noul": pytest.approx(0.25)}
