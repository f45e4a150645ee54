"""`POST /v1/completions`: raw prompts → shared generation layer → answer or stream."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response

from generated import models
from handlers.availability import serving_for
from handlers.generation.adapter_choice import answering_model, chosen_adapter
from handlers.generation.disconnect import unless_disconnected
from handlers.generation.engine_bridge import COMPLETIONS_API, open_generations
from handlers.generation.sse import EventStream
from handlers.openai_completions.request import plan_completion
from handlers.openai_completions.response import CompletionRun, completion, completion_stream


async def create_completion(request: Request, body: models.CompletionRequest) -> models.Completion | Response:
    ready = await serving_for(request, body.model, COMPLETIONS_API.unavailable)
    model, tokenizer, limits = ready.model, ready.tokenizer, ready.server.limits
    adapter = chosen_adapter(model, body.model, body.lora_adapter)
    plan = plan_completion(body, tokenizer, adapter, limits)
    generations, close = await open_generations(model, plan.requests, limits, COMPLETIONS_API)
    run = CompletionRun(plan, generations, tokenizer)
    answering = answering_model(model, adapter)
    if body.stream:
        return EventStream(completion_stream(run, answering), limits.keepalive_interval_s, close)
    try:
        return await unless_disconnected(request, completion(run, answering))
    finally:
        await close()
