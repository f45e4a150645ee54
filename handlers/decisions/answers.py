"""The label logprobs of a question → its System One answer.

The probabilities are the softmax of the option labels' logprobs over the labels alone (the rest
of the vocabulary thrown away), at temperature 1: pooled has no fitted temperatures, so every
answer is what Jev clients call `calibration: "raw"`. The confidences are TypeSafe's formulas, as
llama.cpp's server computes them: a choice's (p_max − 1/n) / (1 − 1/n); a score's
max(0, 1 − E|i − mode| / D), D the mean distance of the levels from their middle.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from generated import models
from handlers.decisions.questions import Question


def answer(
    question: Question, logprobs: Sequence[float]
) -> models.ChoiceAnswer | models.ScoreAnswer | models.NoulAnswer:
    probabilities = label_softmax(logprobs)
    if question.type == "noul":
        return models.NoulAnswer(type="noul", noul=probabilities[0])
    by_option = dict(zip(question.options, probabilities, strict=True))
    if question.type == "choice":
        best = max(range(len(probabilities)), key=probabilities.__getitem__)
        return models.ChoiceAnswer(
            type="choice",
            choice=question.options[best],
            probabilities=by_option,
            confidence=choice_confidence(probabilities),
        )
    return models.ScoreAnswer(
        type="score",
        score=sum(level * p for level, p in enumerate(probabilities)),
        legend={
            option: description or ""
            for option, description in zip(question.options, question.descriptions, strict=True)
        },
        probabilities=by_option,
        confidence=score_confidence(probabilities),
    )


def label_softmax(logprobs: Sequence[float]) -> list[float]:
    peak = max(logprobs)
    weights = [math.exp(value - peak) for value in logprobs]
    total = sum(weights)
    return [weight / total for weight in weights]


def choice_confidence(probabilities: Sequence[float]) -> float:
    n = len(probabilities)
    if n == 1:
        return 1.0
    return max(0.0, min(1.0, (max(probabilities) - 1 / n) / (1 - 1 / n)))


def score_confidence(probabilities: Sequence[float]) -> float:
    n = len(probabilities)
    mode = max(range(n), key=probabilities.__getitem__)
    middle = (n - 1) / 2
    spread = sum(abs(level - middle) for level in range(n)) / n
    expected_distance = sum(p * abs(level - mode) for level, p in enumerate(probabilities))
    return max(0.0, 1 - expected_distance / spread)
