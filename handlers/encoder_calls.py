"""What the embeddings and rerank handlers share: choosing the encoder a request goes to, and one
encode request's round trip to the engine thread.

The engine calls the sink on its own thread; the sink only schedules the answer into a future on
the event loop (`call_soon_threadsafe`), which the handler awaits. A client that leaves cancels
the engine request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from fastapi import Request

from engine.api import (
    Encoded,
    EncodeEvent,
    EncodeRequest,
    EncoderInput,
    EngineUnavailable,
    Failed,
    QueueFull,
    RequestRefused,
)
from handlers.api_error import ApiError
from handlers.availability import awake, not_serving, require_ready
from handlers.context import EncoderKind, EncoderService, ModelService, context
from handlers.generation.engine_bridge import FAILED_STATUS

FLAGS = {"embedding": "--embedding-model", "rerank": "--rerank-model"}


async def serving_model(request: Request) -> ModelService:
    await awake(context(request).model)
    require_ready(request)
    return context(request).model


def choose_encoder(
    model: ModelService, requested: str | None, kinds: Sequence[EncoderKind]
) -> tuple[str, EncoderService]:
    """The encoder `requested` names if it is one of `kinds`, else the first loaded of the first
    kind there is one of; a 503 naming the failure when the first kind given is one that did not
    load (another kind does not stand in for it), a 400 naming the flag that loads one when there
    is none."""
    encoders = model.encoders
    if requested is not None and requested in encoders and encoders[requested].kind in kinds:
        return requested, encoders[requested]
    for kind in kinds:
        for name, encoder in encoders.items():
            if encoder.kind == kind:
                return name, encoder
        for part in model.failed_parts:
            if part.kind == kind:
                raise ApiError(
                    503,
                    f"The {kind} model ({FLAGS[kind]} {part.path}) did not load: {part.reason}. "
                    f"Its routes are down until the server starts with one that loads; '{model.model_id}' "
                    "still serves.",
                    code="model_failed",
                )
    flags = " or ".join(FLAGS[kind] for kind in kinds)
    raise ApiError(
        400,
        f"This server has no {' or '.join(kinds)} model: start it with {flags} PATH "
        f"(it serves '{model.model_id}', a chat model; --embeddings true embeds with it).",
        code="model_not_supported",
        param="model",
    )


def check_count(count: int, limit: int, field: str) -> None:
    """At least one and at most `limit` of the request's `field` (its inputs or documents)."""
    if count == 0:
        raise ApiError(400, f"The request has no {field}.", code="invalid_input", param=field)
    if count > limit:
        raise ApiError(
            400, f"The request has {count} {field}; at most {limit} are taken.", code="too_many_inputs", param=field
        )


async def encode(model: ModelService, name: str, inputs: Sequence[EncoderInput]) -> Encoded:
    """Runs `inputs` through encoder `name` on the engine thread; API errors for refusals."""
    engine = model.engine
    if engine is None:
        raise not_serving(model, 503)
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[EncodeEvent] = loop.create_future()

    def settle(event: EncodeEvent) -> None:
        if not answer.done():  # the handler may have given up (the client left)
            answer.set_result(event)

    def sink(event: EncodeEvent) -> None:
        loop.call_soon_threadsafe(settle, event)

    try:
        request_id = engine.submit(EncodeRequest(name, tuple(inputs)), sink)
    except QueueFull as full:
        raise ApiError(
            429,
            f"The server is busy: its wait queue is full. Retry after {full.retry_after_s} s.",
            code="queue_full",
            headers={"Retry-After": str(full.retry_after_s)},
        ) from None
    except RequestRefused as refused:
        raise ApiError(400, refused.message, code=refused.code, param="input") from None
    except EngineUnavailable:
        raise not_serving(model, 503) from None
    try:
        event = await answer
    except asyncio.CancelledError:
        engine.cancel(request_id)
        raise
    if isinstance(event, Failed):
        raise ApiError(FAILED_STATUS[event.kind], event.message, code=event.kind)
    return event
