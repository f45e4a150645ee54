"""`POST /v1/responses` and `POST /v1/responses/input_tokens`: request → shared generation layer → answer or stream."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response

from generated import models
from handlers.availability import loaded_tokenizer, serving_for
from handlers.context import context
from handlers.generation.adapter_choice import answering_model, chosen_adapter
from handlers.generation.disconnect import unless_disconnected
from handlers.generation.engine_bridge import OPENAI_BUSY, open_generations
from handlers.generation.sse import EventStream
from handlers.openai_responses.echo import echoed_fields
from handlers.openai_responses.request import plan_response, render_input
from handlers.openai_responses.response import ResponseRun, response_answer, response_stream


async def create_response(request: Request, body: models.CreateResponseRequest) -> models.ResponseObject | Response:
    ready = await serving_for(request, body.model, OPENAI_BUSY.unavailable)
    server, model, tokenizer, limits = ready.server, ready.model, ready.tokenizer, ready.server.limits
    adapter = chosen_adapter(model, body.model)
    plan = plan_response(body, model.chat_template, tokenizer, ready.ctx, limits, server.responses, adapter)
    store = server.responses if body.store is not False else None
    run = ResponseRun(plan, echoed_fields(body, answering_model(model, plan.generation.adapter)), store, tokenizer)
    if body.stream:
        (generation,), close = await open_generations(model, [plan.generation], limits, OPENAI_BUSY)
        return EventStream(response_stream(run, generation), limits.keepalive_interval_s, close)
    return await unless_disconnected(request, response_answer(run, model, limits))


async def count_response_input_tokens(
    request: Request, body: models.ResponseInputTokensRequest
) -> models.ResponseInputTokens:
    server = context(request)
    tokenizer = loaded_tokenizer(server.model, OPENAI_BUSY.unavailable)
    rendered = render_input(body, server.model.chat_template, tokenizer, server.responses)
    return models.ResponseInputTokens(object="response.input_tokens", input_tokens=len(rendered.prompt.token_ids))
