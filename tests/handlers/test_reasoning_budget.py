"""The reasoning budget: free reasoning until spent, then only `</think>`, then a free answer."""

import numpy as np

from handlers.generation.prompt import render_chat
from handlers.generation.reasoning_budget import ReasoningBudget, with_reasoning_budget
from text import ChatTemplate, Tokenizer

OPEN, CLOSE, VOCAB = 7, 40, 64


def allowed(budget: ReasoningBudget) -> set[int]:
    mask = np.zeros(VOCAB // 32, np.int32)
    budget.fill_mask(mask)
    bits = np.unpackbits(mask.view(np.uint8), bitorder="little")
    return {int(i) for i in np.flatnonzero(bits)}


def test_reasoning_is_closed_once_the_budget_is_spent() -> None:
    budget = ReasoningBudget(2, OPEN, CLOSE, starts_inside=False)
    assert allowed(budget) == set(range(VOCAB))
    budget.accept(OPEN)
    for token in (3, 4):
        assert allowed(budget) == set(range(VOCAB))
        budget.accept(token)
    assert allowed(budget) == {CLOSE}
    budget.accept(CLOSE)
    assert allowed(budget) == set(range(VOCAB))
    budget.accept(5)
    assert allowed(budget) == set(range(VOCAB)) and not budget.is_finished()


def test_reasoning_closed_early_by_the_model_is_not_forced() -> None:
    budget = ReasoningBudget(3, OPEN, CLOSE, starts_inside=True)
    budget.accept(3)
    budget.accept(CLOSE)
    for token in (4, 5, 6):
        budget.accept(token)
        assert allowed(budget) == set(range(VOCAB))


def test_an_answer_without_reasoning_is_never_constrained() -> None:
    budget = ReasoningBudget(0, OPEN, CLOSE, starts_inside=False)
    budget.accept(3)
    assert allowed(budget) == set(range(VOCAB))


def test_budget_left_out_for_a_model_that_does_not_think(smollm2: tuple[Tokenizer, ChatTemplate]) -> None:
    tokenizer, template = smollm2
    prompt = render_chat(template, tokenizer, [{"role": "user", "content": "hi"}])
    assert not prompt.thinks
    assert with_reasoning_budget(None, 1024, tokenizer, prompt) is None
