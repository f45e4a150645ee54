"""Assemble the ASGI app: guards around FastAPI, the generated routes, the error renderer."""

from __future__ import annotations

import time

from fastapi import FastAPI
from starlette.types import ASGIApp

from generated.routes import router
from handlers.context import GenerationLimits, ModelLibrary, ModelService, ServerContext
from handlers.generation.volatile_lines import volatile_line_pattern
from handlers.openai_responses.websocket import responses_socket
from handlers.response_store import ResponseStore
from pooled import errors
from pooled.counting import RequestCounting
from pooled.guards import Guards
from pooled.settings import Settings


def server_context(settings: Settings, model: ModelService, library: ModelLibrary | None = None) -> ServerContext:
    """The state handlers share: the model, its library, the response store, the request counters."""
    responses = ResponseStore(settings.stored_responses, settings.stored_responses_bytes, settings.stored_response_idle)
    limits = GenerationLimits(
        request_timeout_s=settings.request_timeout,
        max_output_tokens=settings.max_output_tokens,
        max_output_tokens_finish=settings.max_output_tokens_finish,
        keepalive_interval_s=settings.keepalive_interval,
        max_embedding_inputs=settings.max_embedding_inputs,
    )
    return ServerContext(
        model=model,
        port=settings.port,
        created=int(time.time()),
        responses=responses,
        limits=limits,
        volatile_lines=volatile_line_pattern(settings.volatile_line_pattern),
        lora_admin=settings.lora_admin,
        library=library,
    )


def build_app(settings: Settings, server: ServerContext) -> ASGIApp:
    """The served app; FastAPI's own schema and docs are off, as the spec is served instead."""
    app = FastAPI(title="pooled", openapi_url=None, docs_url=None, redoc_url=None)
    app.state.context = server
    app.include_router(router)
    app.add_api_websocket_route("/v1/responses", responses_socket)
    errors.install(app)
    return Guards(RequestCounting(app, server.counters), settings)
