"""`POST /v1/systemone` and `POST /v1/decide` (one handler): System One decisions.

Each question becomes one engine request of one token (greedy, `ignore_eos`, so the token always
arrives with its logprobs) that scores the option labels' ids (`SamplingParams.scored_ids`): the
labels' next-token logprobs after the prompt, read on the device from the same log-softmax the
logprobs come from, however unlikely a label is. Nothing else of the answer is used, and
`usage.output_tokens` is 0. The first question is prefilled alone; the others then find the
state's pages in the prefix cache and prefill only their own question.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from fastapi import Request

from engine.api import GenerationRequest, SamplingParams, Tokens
from generated import models
from handlers.availability import serving_for
from handlers.context import GenerationLimits, ModelService
from handlers.decisions.answers import answer
from handlers.decisions.questions import questions
from handlers.generation.adapter_choice import answering_model
from handlers.generation.disconnect import unless_disconnected
from handlers.generation.engine_bridge import ApiShape, Generation, open_generations

DECISIONS_API = ApiShape(queue_full=429, unavailable=503, fields={"prompt": "questions"})


async def decide(request: Request, body: models.DecisionRequest) -> models.DecisionResponse:
    arrived = time.perf_counter()
    ready = await serving_for(request, body.model, DECISIONS_API.unavailable)
    model, limits = ready.model, ready.server.limits
    asked, labels = questions(body, model.chat_template, ready.tokenizer)
    requests = [
        GenerationRequest(
            prompt_ids=question.prompt_ids,
            sampling=SamplingParams(
                temperature=0.0, logprobs=0, scored_ids=labels[: len(question.options)], ignore_eos=True
            ),
            max_tokens=1,
        )
        for question in asked
    ]
    first = await unless_disconnected(request, _label_logprobs(model, requests[:1], limits))
    rest = await unless_disconnected(request, _label_logprobs(model, requests[1:], limits))
    answers = {question.id: answer(question, logprobs) for question, logprobs in zip(asked, first + rest, strict=True)}
    return models.DecisionResponse(
        model=answering_model(model, None),
        answers=answers,
        usage=models.DecisionUsage(input_tokens=sum(len(r.prompt_ids) for r in requests), output_tokens=0),
        latency_ms=round(1000 * (time.perf_counter() - arrived), 1),
    )


decide_alias = decide  # POST /v1/decide


async def _label_logprobs(
    model: ModelService, requests: Sequence[GenerationRequest], limits: GenerationLimits
) -> list[tuple[float, ...]]:
    """Each request's label logprobs, the requests run together."""
    if not requests:
        return []
    generations, close = await open_generations(model, requests, limits, DECISIONS_API)
    try:
        return [await _scored(generation) for generation in generations]
    finally:
        await close()


async def _scored(generation: Generation) -> tuple[float, ...]:
    scored: tuple[float, ...] = ()
    async for event in generation.events():
        if isinstance(event, Tokens) and event.logprobs and not scored:
            scored = event.logprobs[0].scored
    if not scored:
        raise RuntimeError("the engine answered a decision's request without its label logprobs")
    return scored
