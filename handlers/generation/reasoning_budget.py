"""A cap on how many tokens a thinking model spends reasoning (Anthropic `thinking.budget_tokens`).

Built as an engine `Constraint`, so the engine stays ignorant of reasoning: the row reasons freely
until the budget is spent, then the only token allowed is `</think>`; after it the answer follows
unconstrained. Reasoning is open from the first token when the chat template ended the prompt
inside `<think>`, otherwise when the model's first token is `<think>`.

A row that also has a grammar (a forced tool call) keeps only the grammar: that grammar already
decides what may come first, and forcing `</think>` into it would break it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np

from engine.api import Constraint
from handlers.generation.prompt import ChatPrompt
from handlers.generation.reasoning import THINK_CLOSE, THINK_OPEN
from text import Tokenizer

State = Literal["start", "reasoning", "answer"]


class ReasoningBudget:
    """Allows every token, except that reasoning longer than `budget` tokens is closed by force."""

    def __init__(self, budget: int, open_id: int, close_id: int, starts_inside: bool) -> None:
        self._left = budget
        self._open_id, self._close_id = open_id, close_id
        self._state: State = "reasoning" if starts_inside else "start"

    def fill_mask(self, out: np.ndarray) -> None:
        if self._state == "reasoning" and self._left <= 0:
            out[:] = 0
            out[self._close_id // 32] = np.int32(np.uint32(1 << (self._close_id % 32)).view(np.int32))
        else:
            out[:] = -1

    def accept(self, token_id: int) -> None:
        if self._state == "start":
            self._state = "reasoning" if token_id == self._open_id else "answer"
        elif self._state == "reasoning":
            self._left -= 1
            if token_id == self._close_id:
                self._state = "answer"

    def is_finished(self) -> bool:
        return False


def with_reasoning_budget(
    constraint: Callable[[], Constraint] | None, budget: int | None, tokenizer: Tokenizer, prompt: ChatPrompt
) -> Callable[[], Constraint] | None:
    """The row's constraint factory with the budget applied; unchanged for a model that does not
    think, without a budget, or with a grammar (see the module docstring)."""
    if budget is None or constraint is not None or not prompt.thinks:
        return constraint
    (open_id,), (close_id,) = tokenizer.encode(THINK_OPEN), tokenizer.encode(THINK_CLOSE)
    starts_inside = prompt.starts_in_reasoning
    return lambda: ReasoningBudget(budget, open_id, close_id, starts_inside)
