"""A System One request's questions → one chat prompt each, its options under single-token labels.

The prompt (the JEB/AINode wording, state first so that every question of a request shares the
state's prefix pages):

    system: You are a decision function. Answer with the single letter of the best option and nothing else.
    user:   STATE:
            <state>

            QUESTION: <instructions>          (left out when empty)

            OPTIONS:
            A. <name>: <description>           (or A. <name> without one)
            ...

            Answer with the label of one option and nothing else.

rendered with the chat template, thinking off, ending at the assistant's turn. A `choice` lists
its options by name; a `score` its levels by index ("0. can wait"), lowest first; a `noul` true
then false. Everything is checked before anything reaches the engine: a bad question is a 400
naming it, and so is a model whose labels A..Z are not single tokens or whose template opens
reasoning even with thinking off.
"""

from __future__ import annotations

import json
import string
from dataclasses import dataclass
from typing import Any, Literal

from generated import models
from handlers.api_error import ApiError
from handlers.generation.prompt import render_chat
from text import ChatTemplate, Tokenizer

SYSTEM_PROMPT = "You are a decision function. Answer with the single letter of the best option and nothing else."
LABELS = string.ascii_uppercase  # one label an option: at most 26 options a question
QuestionType = Literal["choice", "score", "noul"]


@dataclass(frozen=True)
class Question:
    """One question, checked: its options in label order (names, or level indices as text) and
    their descriptions, and its prompt's token ids."""

    id: str
    type: QuestionType
    options: tuple[str, ...]
    descriptions: tuple[str | None, ...]
    prompt_ids: tuple[int, ...]


def questions(
    body: models.DecisionRequest, template: ChatTemplate | None, tokenizer: Tokenizer
) -> tuple[list[Question], tuple[int, ...]]:
    """Every question of the request, rendered, and the label tokens' ids (A, B, ...)."""
    if not body.questions:
        raise ApiError(400, "'questions' is empty: ask at least one question.", param="questions")
    labels = label_ids(tokenizer)
    state = body.state if isinstance(body.state, str) else _compact(body.state)
    checked = []
    for question_id, question in body.questions.items():
        kind, options, descriptions = _options(question_id, question)
        prompt = _render(template, tokenizer, state, _text(question.instructions), options, descriptions, kind)
        checked.append(Question(question_id, kind, options, descriptions, prompt))
    return checked, labels


def label_ids(tokenizer: Tokenizer) -> tuple[int, ...]:
    """The token id of each label, which must be one token as the answer's first."""
    ids = []
    for label in LABELS:
        encoded = tokenizer.encode(label, add_special_tokens=False)
        if len(encoded) != 1:
            raise ApiError(
                400,
                f"This model's tokenizer writes the option label '{label}' as {len(encoded)} tokens, so its "
                "decisions cannot be read from one next-token distribution.",
                code="unsupported_model",
            )
        ids.append(encoded[0])
    return tuple(ids)


def _options(
    question_id: str, question: models.DecisionQuestion
) -> tuple[QuestionType, tuple[str, ...], tuple[str | None, ...]]:
    param = f"questions.{question_id}.criteria"
    criteria = question.criteria
    if question.type == "choice":
        if not isinstance(criteria, dict) or not criteria:
            raise ApiError(400, f"Question '{question_id}': a choice's criteria are an object of options.", param=param)
        _at_most_labels(question_id, len(criteria), param)
        return "choice", tuple(criteria), tuple(_description(question_id, value, param) for value in criteria.values())
    if question.type == "score":
        if not isinstance(criteria, list) or len(criteria) < 2:
            raise ApiError(
                400, f"Question '{question_id}': a score's criteria are a list of 2 or more levels.", param=param
            )
        _at_most_labels(question_id, len(criteria), param)
        levels = tuple(_description(question_id, value, param) for value in criteria)
        return "score", tuple(str(index) for index in range(len(levels))), levels
    if question.type == "noul":
        if criteria is None:
            return "noul", ("true", "false"), (None, None)
        if not isinstance(criteria, dict) or not set(criteria) <= {"true", "false"}:
            raise ApiError(
                400, f"Question '{question_id}': a noul's criteria name only 'true' and 'false'.", param=param
            )
        return (
            "noul",
            ("true", "false"),
            tuple(_description(question_id, criteria.get(key), param) for key in ("true", "false")),
        )
    raise ApiError(
        400,
        f"Question '{question_id}' has type '{question.type}'; it must be 'choice', 'score' or 'noul'.",
        param=f"questions.{question_id}.type",
    )


def _at_most_labels(question_id: str, count: int, param: str) -> None:
    if count > len(LABELS):
        raise ApiError(
            400, f"Question '{question_id}' has {count} options; at most {len(LABELS)} are served.", param=param
        )


def _description(question_id: str, value: Any, param: str) -> str | None:
    if value is None or isinstance(value, str):
        return value or None
    raise ApiError(400, f"Question '{question_id}': each option's description is a string or null.", param=param)


def _text(value: str | dict[str, Any] | list[Any] | None) -> str:
    return value if isinstance(value, str) else "" if value is None else _compact(value)


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _render(
    template: ChatTemplate | None,
    tokenizer: Tokenizer,
    state: str,
    instructions: str,
    options: tuple[str, ...],
    descriptions: tuple[str | None, ...],
    kind: QuestionType,
) -> tuple[int, ...]:
    lines = [f"STATE:\n{state}", ""]
    if instructions.strip():
        lines += [f"QUESTION: {instructions.strip()}", ""]
    lines.append("OPTIONS:")
    for label, option, description in zip(LABELS, options, descriptions, strict=False):
        name = f"{option}: {description}" if description and kind != "score" else description or option
        lines.append(f"{label}. {name}")
    lines += ["", "Answer with the label of one option and nothing else."]
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "\n".join(lines)}]
    prompt = render_chat(template, tokenizer, messages, (), {"enable_thinking": False})
    if prompt.starts_in_reasoning:
        raise ApiError(
            400,
            "This model's chat template opens its reasoning even with thinking off, so a decision cannot be read "
            "from the answer's first token.",
            code="unsupported_model",
        )
    return prompt.token_ids
