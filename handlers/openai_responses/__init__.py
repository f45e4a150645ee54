"""`POST /v1/responses` and `POST /v1/responses/input_tokens`: request → shared generation layer → answer or stream."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response
from starlette.requests import HTTPConnection

from generated import models
from handlers.api_error import ApiError
from handlers.availability import Serving, counting_images, loaded_tokenizer, serving_for
from handlers.context import context
from handlers.generation.adapter_choice import answering_model, chosen_adapter
from handlers.generation.disconnect import unless_disconnected
from handlers.generation.engine_bridge import RESPONSES_API, open_generations
from handlers.generation.images import planned
from handlers.generation.sse import EventStream
from handlers.openai_responses.echo import echoed_fields
from handlers.openai_responses.request import plan_response, render_input
from handlers.openai_responses.response import ResponseRun, response_answer, response_stream


async def create_response(request: Request, body: models.CreateResponseRequest) -> models.ResponseObject | Response:
    ready, run = await prepared_response(request, body)
    model, limits = ready.model, ready.server.limits
    if body.stream:
        (generation,), close = await open_generations(model, [run.plan.generation], limits, RESPONSES_API)
        return EventStream(response_stream(run, generation), limits.keepalive_interval_s, close)
    return await unless_disconnected(request, response_answer(run, model, limits))


async def prepared_response(
    connection: HTTPConnection, body: models.CreateResponseRequest
) -> tuple[Serving, ResponseRun]:
    """The serving model and the response `body` asks for, planned: over HTTP or a WebSocket."""
    ready = await serving_for(connection, body.model, RESPONSES_API.unavailable)
    server, model, tokenizer = ready.server, ready.model, ready.tokenizer
    adapter = chosen_adapter(model, body.model)
    vision = model.engine.vision if model.engine is not None else None
    plan = await planned(
        vision,
        lambda: plan_response(body, model.chat_template, tokenizer, server.responses, adapter, vision, server.limits),
    )
    store = server.responses if body.store is not False else None
    echoed = echoed_fields(body, answering_model(model, adapter), plan.generation.sampling)
    return ready, ResponseRun(plan, echoed, store, tokenizer)


async def count_response_input_tokens(
    request: Request, body: models.ResponseInputTokensRequest
) -> models.ResponseInputTokens:
    server = context(request)
    tokenizer = loaded_tokenizer(server.model, RESPONSES_API.unavailable)
    with counting_images(server.model, RESPONSES_API.unavailable) as vision:
        rendered = await planned(
            vision,
            lambda: render_input(body, server.model.chat_template, tokenizer, server.responses, vision, server.limits),
        )
    return models.ResponseInputTokens(object="response.input_tokens", input_tokens=len(rendered.prompt.token_ids))


async def open_responses_socket(request: Request) -> models.ResponseStreamEvent:
    """A plain GET: the WebSocket itself is handlers/openai_responses/websocket.py's."""
    raise ApiError(
        426,
        "GET /v1/responses is the Responses API's WebSocket mode: connect with 'Upgrade: websocket'.",
        code="upgrade_required",
        headers={"Upgrade": "websocket"},
    )
