"""A prompt's scored tokens (engine `Prefilled` events) → vLLM's `prompt_logprobs`: one entry per
prompt token, the first null, each the token and its position's most likely tokens by token id."""

from __future__ import annotations

from collections.abc import Sequence

from engine.api import TokenLogprob
from generated import models
from text import Tokenizer

PromptLogprobs = list[dict[str, models.PromptTokenLogprob] | None]


def prompt_logprobs(entries: Sequence[TokenLogprob], top: int, tokenizer: Tokenizer) -> PromptLogprobs:
    def scored(token: int, logprob: float, rank: int) -> models.PromptTokenLogprob:
        return models.PromptTokenLogprob(logprob=logprob, rank=rank, decoded_token=tokenizer.decode([token]))

    answer: PromptLogprobs = [None]
    for entry in entries:
        position = {str(entry.token_id): scored(entry.token_id, entry.logprob, entry.rank or 1)}
        for rank, (token, logprob) in enumerate(entry.top[:top], start=1):
            position.setdefault(str(token), scored(token, logprob, rank))
        answer.append(position)
    return answer
