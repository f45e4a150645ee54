"""The bridge between a handler on the event loop and the engine on its own thread.

1. `start_generation` submits a `GenerationRequest` with a sink that only schedules
   `queue.put_nowait(event)` on the loop (`call_soon_threadsafe`): the engine thread never waits on
   HTTP, and the loop never polls the engine — it awaits the queue.
2. `Generation.events()` yields each row's `Tokens` and `Finished` in order and ends once every
   row has finished; a `Failed`, a row that stalled past the timeout, or an engine silent for
   longer than the timeout (a prefill chunk's `Prefilled` counts as word from it) raise `ApiError`
   instead.
3. Leaving the `async with` early — the client went away (the task is cancelled), a stop string
   matched, an error — cancels the engine request, which frees its lanes and pages at once.

`submit` refusals (queue full, refused on its face, engine not serving) are raised before any
answer has started, so they become plain HTTP errors.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, replace

from engine.api import (
    EngineEvent,
    EngineUnavailable,
    Failed,
    Finished,
    GenerationEngine,
    GenerationRequest,
    Prefilled,
    QueueFull,
    RequestRefused,
    Tokens,
)
from handlers.api_error import ApiError
from handlers.availability import not_serving
from handlers.context import GenerationLimits, ModelService

# How long past the stall timeout the engine may stay silent before the handler gives up on it
# (the engine ends a stalled request itself; this covers an engine thread that stopped answering).
ENGINE_GRACE_S = 5.0


@dataclass(frozen=True)
class BusyStatuses:
    """The statuses an API answers when the engine cannot take a request now."""

    queue_full: int
    unavailable: int


OPENAI_BUSY = BusyStatuses(queue_full=429, unavailable=503)
ANTHROPIC_BUSY = BusyStatuses(queue_full=529, unavailable=529)

FAILED_STATUS = {"refused": 400, "unavailable": 503, "fault": 500}


class Generation:
    """One submitted request: its events in order, on the event loop."""

    def __init__(
        self,
        engine: GenerationEngine,
        request_id: int,
        queue: asyncio.Queue[EngineEvent],
        rows: int,
        stall_timeout_s: float,
        length_ends_turn: bool = False,
    ) -> None:
        self._engine = engine
        self._request_id = request_id
        self._queue = queue
        self._unfinished = rows
        self._silence_limit_s = stall_timeout_s + ENGINE_GRACE_S
        self._length_ends_turn = length_ends_turn

    @property
    def done(self) -> bool:
        return self._unfinished == 0

    async def events(self) -> AsyncIterator[Tokens | Finished]:
        while self._unfinished:
            event = await self._next_event()
            if isinstance(event, Prefilled):
                continue
            if isinstance(event, Failed):
                self._unfinished = 0
                raise ApiError(FAILED_STATUS[event.kind], event.message, code=f"engine_{event.kind}")
            if isinstance(event, Finished):
                self._unfinished -= 1
                if event.reason == "timeout":
                    raise timeout_error()
                if event.reason == "length" and self._length_ends_turn:
                    event = replace(event, reason="stop")
            yield event

    def cancel(self) -> None:
        """Stop the engine request (idempotent); events already queued are dropped with it."""
        if self._unfinished:
            self._engine.cancel(self._request_id)
            self._unfinished = 0

    async def _next_event(self) -> EngineEvent:
        try:
            return await asyncio.wait_for(self._queue.get(), timeout=self._silence_limit_s)
        except TimeoutError:
            raise timeout_error() from None


def timeout_error() -> ApiError:
    return ApiError(
        504,
        "The request made no progress for the server's request timeout (--request-timeout): it waited in the "
        "queue, or the engine wrote no prompt chunk and no token, for that long.",
        code="timeout",
    )


@asynccontextmanager
async def start_generation(
    model: ModelService, request: GenerationRequest, limits: GenerationLimits, busy: BusyStatuses
) -> AsyncIterator[Generation]:
    """Submit `request` (its stall timeout from `limits`); on exit, cancel whatever is unfinished.

    An answer that the server's own output cap (`--max-output-tokens`) ended is reported as the end
    of the turn when `--max-output-tokens-finish stop` says so: clients such as Claude Code treat
    a length finish as an error and send the request again."""
    engine = model.engine
    if engine is None:
        raise not_serving(model, busy.unavailable)
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[EngineEvent] = asyncio.Queue()

    def sink(event: EngineEvent) -> None:
        # Called on the engine thread, where an exception would stop the engine: a loop that has
        # closed (server shutdown) has nobody left to read the event, so it is dropped.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(queue.put_nowait, event)

    try:
        request_id = engine.submit(replace(request, stall_timeout=limits.request_timeout_s), sink)
    except QueueFull as full:
        raise ApiError(
            busy.queue_full,
            f"The server is busy: its wait queue is full. Retry after {full.retry_after_s} s.",
            code="queue_full",
            headers={"Retry-After": str(full.retry_after_s)},
        ) from None
    except RequestRefused as refused:
        raise ApiError(400, refused.message, code=refused.code) from None
    except EngineUnavailable:
        raise not_serving(model, busy.unavailable) from None
    capped = limits.max_output_tokens is not None and request.max_tokens >= limits.max_output_tokens
    ends_turn = capped and limits.max_output_tokens_finish == "stop"
    generation = Generation(engine, request_id, queue, request.n, limits.request_timeout_s, ends_turn)
    try:
        yield generation
    finally:
        generation.cancel()


async def open_generations(
    model: ModelService, requests: Sequence[GenerationRequest], limits: GenerationLimits, busy: BusyStatuses
) -> tuple[list[Generation], Callable[[], Awaitable[None]]]:
    """Submit every request now, so that a refusal is still a plain HTTP error (before a stream's
    200); the caller awaits the returned closer when its answer ends, however it ends."""
    stack = AsyncExitStack()
    try:
        generations = [
            await stack.enter_async_context(start_generation(model, request, limits, busy)) for request in requests
        ]
    except BaseException:
        await stack.aclose()
        raise
    return generations, stack.aclose
