"""A (legacy) Completions request → one engine request per prompt, on the raw prompt (no template).

Documented limits: `suffix` (fill-in-the-middle) is a 400; `best_of` other than 1 or `n` is a 400
(pooled does not rank candidates). `echo` with `logprobs` reports the prompt's tokens too (the
engine scores the prompt while it prefills it): the first token's logprob and alternatives are
null, as in OpenAI's legacy API, which evaluation harnesses read for loglikelihoods.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.api import GenerationRequest
from generated import models
from handlers.api_error import ApiError
from handlers.context import DEFAULT_LIMITS, GenerationLimits
from handlers.generation.sampling_params import openai_sampling_fields, sampling_params
from handlers.generation.stop_strings import stop_strings
from handlers.openai_usage import StreamUsage
from text import Tokenizer

DEFAULT_MAX_TOKENS = 16


@dataclass(frozen=True)
class CompletionPlan:
    requests: list[GenerationRequest]  # one per prompt, each with `n` rows
    prompt_texts: list[str]  # for `echo`
    stops: tuple[str, ...]
    echo: bool
    logprobs: bool
    logprobs_top: int  # the alternatives a token reports (`logprobs`)
    prompt_logprobs: int | None  # vLLM's: each prompt token's alternatives in `prompt_logprobs`
    stream_usage: StreamUsage

    @property
    def n(self) -> int:
        return self.requests[0].n


def plan_completion(
    body: models.CompletionRequest,
    tokenizer: Tokenizer,
    adapter: str | None = None,
    limits: GenerationLimits = DEFAULT_LIMITS,
) -> CompletionPlan:
    if body.suffix:
        raise ApiError(400, "'suffix' (fill-in-the-middle) is not supported by pooled.", param="suffix")
    n = body.n or 1
    if body.best_of not in (None, 0, 1, n):
        raise ApiError(400, "'best_of' must be 1 or equal to 'n': pooled does not rank candidates.", param="best_of")
    prompts = _prompt_ids(body.prompt, tokenizer)
    sampling = sampling_params(
        openai_sampling_fields(body, body.logprobs),
        tokenizer.vocab_size,
        limits.sampling,
    )
    requested = DEFAULT_MAX_TOKENS if body.max_tokens is None else body.max_tokens
    requests = [
        GenerationRequest(
            prompt_ids=tuple(ids),
            sampling=sampling,
            max_tokens=requested,
            n=n,
            adapter=adapter,
            prompt_logprobs=_prompt_top(body),
        )
        for ids in prompts
    ]
    return CompletionPlan(
        requests=requests,
        prompt_texts=[tokenizer.decode(ids) for ids in prompts] if body.echo else [""] * len(prompts),
        stops=stop_strings(body.stop),
        echo=bool(body.echo),
        logprobs=body.logprobs is not None,
        logprobs_top=body.logprobs or 0,
        prompt_logprobs=body.prompt_logprobs,
        stream_usage=StreamUsage.asked(body.stream_options),
    )


def _prompt_top(body: models.CompletionRequest) -> int | None:
    """The alternatives the prompt's tokens need: for `echo` with `logprobs`, and for vLLM's `prompt_logprobs`."""
    asked = [top for top in (body.logprobs if body.echo else None, body.prompt_logprobs) if top is not None]
    return max(asked, default=None)


def _prompt_ids(prompt: str | list[str] | list[int] | list[list[int]], tokenizer: Tokenizer) -> list[list[int]]:
    if isinstance(prompt, str):
        prompts: list[list[int]] = [tokenizer.encode(prompt, add_special_tokens=True)]
    elif prompt and all(isinstance(item, int) for item in prompt):
        prompts = [[int(item) for item in prompt]]  # type: ignore[arg-type]
    else:
        prompts = [
            tokenizer.encode(item, add_special_tokens=True) if isinstance(item, str) else list(item)  # type: ignore[arg-type]
            for item in prompt
        ]
    if not prompts or any(not ids for ids in prompts):
        raise ApiError(400, "The prompt is empty.", code="empty_prompt", param="prompt")
    for ids in prompts:
        if any(not 0 <= token < tokenizer.vocab_size for token in ids):
            raise ApiError(400, f"The prompt has token ids outside 0..{tokenizer.vocab_size - 1}.", param="prompt")
    return prompts
