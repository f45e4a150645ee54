"""`GET /v1/responses` upgraded to a WebSocket: the Responses API's WebSocket mode.

The client sends `response.create` events, each carrying the fields of `POST /v1/responses`
(`stream` is implied, and `stream_id` optional); the server answers each with the events of the
HTTP stream, numbered by `sequence_number` per response and carrying the `stream_id` they were
asked under. Responses of one `stream_id` (or of none) run one after another, in the order they
were sent; different `stream_id`s run side by side. `previous_response_id` works across them and
across HTTP (they share the response store). A malformed event, or a response refused before it
starts, gets an `error` event and the connection stays open. A full engine queue does not refuse
a response here, as it does over HTTP: it waits for room (the one route that queues instead).
Closing the socket cancels what is running and frees its lanes.

Tasks: the connection's own task runs the receive loop, parsing each event and putting it on its
lane's asyncio queue; each lane is one task that runs its responses in turn. Sends from the lanes
go through one lock, so no two events interleave on the socket. When the client goes, the receive
loop cancels the lane tasks; each response's generation is cancelled by `open_generations`'
closer as its task unwinds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from pydantic import ValidationError
from starlette.websockets import WebSocket, WebSocketDisconnect

from generated import models
from handlers.api_error import ApiError
from handlers.generation.engine_bridge import RESPONSES_API, open_generations
from handlers.openai_responses import prepared_response
from handlers.openai_responses.response import response_events

QUEUE_POLL_S = 0.25  # how often a response waiting for room in the engine queue tries again
Lane = asyncio.Queue[dict[str, Any]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


async def responses_socket(websocket: WebSocket) -> None:
    await websocket.accept()
    sending = asyncio.Lock()
    lanes: dict[str | None, tuple[Lane, asyncio.Task[None]]] = {}

    async def send(event: dict[str, Any]) -> None:
        async with sending:
            await websocket.send_text(json.dumps(event))

    try:
        while True:
            event = _parsed(await websocket.receive_text())
            if isinstance(event, str):
                await send(_error("invalid_request_error", event))
                continue
            stream_id = event.pop("stream_id", None)
            if stream_id not in lanes:
                lane: Lane = asyncio.Queue()
                lanes[stream_id] = (lane, asyncio.create_task(_run_lane(websocket, lane, stream_id, send)))
            lanes[stream_id][0].put_nowait(event)
    except WebSocketDisconnect:
        pass
    finally:
        for _, task in lanes.values():
            task.cancel()
        for _, task in lanes.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _parsed(text: str) -> dict[str, Any] | str:
    """A `response.create` event's fields, or why the event cannot be one."""
    try:
        event = json.loads(text)
    except ValueError as error:
        return f"The event is not JSON: {error}."
    if not isinstance(event, dict):
        return "An event is a JSON object with a 'type'."
    if event.get("type") != "response.create":
        return f"Unknown event type {event.get('type')!r}: this server takes 'response.create'."
    stream_id = event.get("stream_id")
    if stream_id is not None and not isinstance(stream_id, str):
        return "'stream_id' must be a string."
    return {key: value for key, value in event.items() if key not in ("type", "stream")}


async def _run_lane(websocket: WebSocket, lane: Lane, stream_id: str | None, send: Send) -> None:
    echo = {"stream_id": stream_id} if stream_id is not None else {}
    while True:
        fields = await lane.get()
        async for event in _response(websocket, fields):
            await send({**event, **echo})


async def _response(websocket: WebSocket, fields: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    """The events of one response: its stream's, or one `error` event when it cannot start."""
    try:
        body = models.CreateResponseRequest.model_validate(fields)
        ready, run = await prepared_response(websocket, body)
        model, limits = ready.model, ready.server.limits
        while True:
            try:
                (generation,), close = await open_generations(model, [run.plan.generation], limits, RESPONSES_API)
                break
            except ApiError as refused:
                if refused.code != "queue_full":
                    raise
                await asyncio.sleep(QUEUE_POLL_S)
    except ValidationError as invalid:
        yield _error("invalid_request_error", _first_problem(invalid))
        return
    except ApiError as error:
        yield _error(error.code or "invalid_request_error", error.message, error.param)
        return
    try:
        async for event in response_events(run, generation):
            yield event
    finally:
        await close()


def _error(code: str, message: str, param: str | None = None) -> dict[str, Any]:
    return {"type": "error", "code": code, "message": message, "param": param, "sequence_number": 0}


def _first_problem(invalid: ValidationError) -> str:
    problem = invalid.errors()[0]
    where = ".".join(str(part) for part in problem["loc"]) or "the event"
    return f"{where}: {problem['msg']}"
