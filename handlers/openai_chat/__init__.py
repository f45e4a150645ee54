"""`POST /v1/chat/completions`: request → shared generation layer → answer or stream."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response

from generated import models
from handlers.availability import serving_for
from handlers.generation.adapter_choice import answering_model, chosen_adapter
from handlers.generation.disconnect import unless_disconnected
from handlers.generation.engine_bridge import CHAT_API, open_generations
from handlers.generation.images import planned
from handlers.generation.sse import EventStream
from handlers.openai_chat.request import plan_chat
from handlers.openai_chat.response import ChatStream, chat_completion


async def create_chat_completion(
    request: Request, body: models.ChatCompletionRequest
) -> models.ChatCompletion | Response:
    ready = await serving_for(request, body.model, CHAT_API.unavailable)
    model, tokenizer, limits = ready.model, ready.tokenizer, ready.server.limits
    adapter = chosen_adapter(model, body.model, body.lora_adapter)
    vision = model.engine.vision if model.engine is not None else None
    plan = await planned(vision, lambda: plan_chat(body, model.chat_template, tokenizer, adapter, vision, limits))
    if body.stream:
        (generation,), close = await open_generations(model, [plan.generation], limits, CHAT_API)
        stream = ChatStream(plan, generation, answering_model(model, plan.generation.adapter), tokenizer)
        return EventStream(stream.lines(), limits.keepalive_interval_s, close)
    return await unless_disconnected(request, chat_completion(plan, model, tokenizer, limits))
