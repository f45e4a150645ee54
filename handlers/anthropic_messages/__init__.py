"""`POST /v1/messages` and `POST /v1/messages/count_tokens`: Anthropic's shape over the shared generation layer.

Errors answer in Anthropic's shape (pooled/web/error_bodies.py picks it by path); a full queue or a model
still loading or draining is 529 `overloaded_error` with `Retry-After`, the status Anthropic's
clients retry on; a dead engine is 503 `api_error`.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response

from generated import models
from handlers.anthropic_messages.request import messages_prompt, plan_message
from handlers.anthropic_messages.response import PING, MessageStream, message
from handlers.availability import counting_images, loaded_tokenizer, serving_for
from handlers.context import context
from handlers.generation.adapter_choice import answering_model, chosen_adapter
from handlers.generation.disconnect import unless_disconnected
from handlers.generation.engine_bridge import MESSAGES_API, open_generations
from handlers.generation.images import planned
from handlers.generation.sse import EventStream


async def create_message(
    request: Request, body: models.AnthropicMessagesRequest, beta: str | None = None
) -> models.AnthropicMessage | Response:
    """`beta` (Claude Code's `?beta=true`) and the `anthropic-*` headers change nothing here."""
    ready = await serving_for(request, body.model, MESSAGES_API.unavailable)
    server, model, tokenizer, limits = ready.server, ready.model, ready.tokenizer, ready.server.limits
    adapter = chosen_adapter(model, body.model)
    vision = model.engine.vision if model.engine is not None else None
    plan = await planned(
        vision,
        lambda: plan_message(body, model.chat_template, tokenizer, server.volatile_lines, adapter, vision, limits),
    )
    if body.stream:
        (generation,), close = await open_generations(model, [plan.generation], limits, MESSAGES_API)
        stream = MessageStream(plan, generation, answering_model(model, plan.generation.adapter), tokenizer)
        return EventStream(stream.lines(), limits.keepalive_interval_s, close, keepalive=PING)
    return await unless_disconnected(request, message(plan, model, tokenizer, limits))


async def count_message_tokens(
    request: Request, body: models.AnthropicCountTokensRequest, beta: str | None = None
) -> models.AnthropicCountTokensResponse:
    """The prompt's exact length as `create_message` renders it; needs the tokenizer only, not the engine."""
    server = context(request)
    tokenizer = loaded_tokenizer(server.model, MESSAGES_API.unavailable)
    with counting_images(server.model, MESSAGES_API.unavailable) as vision:
        prompt, _, _ = await planned(
            vision,
            lambda: messages_prompt(
                body, server.model.chat_template, tokenizer, server.volatile_lines, vision, server.limits
            ),
        )
    return models.AnthropicCountTokensResponse(input_tokens=len(prompt.token_ids))
