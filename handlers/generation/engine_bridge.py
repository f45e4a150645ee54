"""The bridge between a handler on the event loop and the engine on its own thread.

1. `start_generation` submits a `GenerationRequest` with a sink that only posts the event to the
   loop's `Mailbox`: the engine thread never waits on HTTP, and the loop never polls the engine —
   it awaits the queue. The mailbox wakes the loop once for everything posted before it drains
   (one `call_soon_threadsafe`, one write to the loop's self-pipe, for a decode step's events of
   every stream, not one each), and puts each event in its request's queue.
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
import collections
import contextlib
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field, replace

from engine.api import (
    EngineEvent,
    EngineFront,
    EngineUnavailable,
    Failed,
    Finished,
    GenerationRequest,
    OutputCap,
    Prefilled,
    QueueFull,
    RequestRefused,
    TokenLogprob,
    Tokens,
)
from handlers.api_error import ApiError
from handlers.availability import not_serving
from handlers.context import GenerationLimits, ModelService

# How long past the stall timeout the engine may stay silent before the handler gives up on it
# (the engine ends a stalled request itself; this covers an engine thread that stopped answering).
ENGINE_GRACE_S = 5.0


@dataclass(frozen=True)
class ApiShape:
    """How one API answers what the engine turns away: its statuses when the engine cannot take a
    request now, and its own names for the request's parts a refusal names (engine/api.py's
    `RequestRefused.field`; a name not listed is the API's too)."""

    queue_full: int
    unavailable: int
    fields: Mapping[str, str] = field(default_factory=dict)

    def field_name(self, engine_field: str | None) -> str | None:
        return None if engine_field is None else self.fields.get(engine_field, engine_field)


CHAT_API = ApiShape(queue_full=429, unavailable=503, fields={"prompt": "messages"})
COMPLETIONS_API = ApiShape(queue_full=429, unavailable=503)
RESPONSES_API = ApiShape(queue_full=429, unavailable=503, fields={"prompt": "input", "max_tokens": "max_output_tokens"})
MESSAGES_API = ApiShape(queue_full=529, unavailable=529, fields={"prompt": "messages"})

FAILED_STATUS = {"refused": 400, "unavailable": 503, "fault": 500}


class Generation:
    """One submitted request: its events in order, on the event loop."""

    def __init__(
        self,
        engine: EngineFront,
        request_id: int,
        queue: asyncio.Queue[EngineEvent],
        rows: int,
        stall_timeout_s: float,
    ) -> None:
        self._engine = engine
        self._request_id = request_id
        self._queue = queue
        self._unfinished = rows
        self._silence_limit_s = stall_timeout_s + ENGINE_GRACE_S
        # The prompt's scored tokens (GenerationRequest.prompt_logprobs), all in by its first token.
        self.prompt_logprobs: list[TokenLogprob] = []

    @property
    def done(self) -> bool:
        return self._unfinished == 0

    async def events(self) -> AsyncIterator[Tokens | Finished]:
        while self._unfinished:
            event = await self._next_event()
            if isinstance(event, Prefilled):
                self.prompt_logprobs.extend(event.logprobs)
                continue
            if isinstance(event, Failed):
                self._unfinished = 0
                raise ApiError(FAILED_STATUS[event.kind], event.message, code=f"engine_{event.kind}")
            if isinstance(event, Finished):
                self._unfinished -= 1
                if event.reason == "timeout":
                    raise timeout_error()
            yield event

    def cancel(self) -> None:
        """Stop the engine request (idempotent); events already queued are dropped with it."""
        if self._unfinished:
            self._engine.cancel(self._request_id)
            self._unfinished = 0

    async def _next_event(self) -> EngineEvent:
        if not self._queue.empty():
            return self._queue.get_nowait()
        try:
            async with asyncio.timeout(self._silence_limit_s):
                return await self._queue.get()
        except TimeoutError:
            raise timeout_error() from None


class Mailbox:
    """Engine events bound for one event loop's queues, handed over in batches.

    Threads: `post` runs on the engine thread (any thread), `_drain` on the loop; the lock guards
    only the list and the flag that says a drain is scheduled."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._posted: collections.deque[tuple[asyncio.Queue[EngineEvent], EngineEvent]] = collections.deque()
        self._scheduled = False

    def post(self, queue: asyncio.Queue[EngineEvent], event: EngineEvent) -> None:
        with self._lock:
            self._posted.append((queue, event))
            if self._scheduled:
                return
            self._scheduled = True
        # Called on the engine thread, where an exception would stop the engine: a loop that has
        # closed (server shutdown) has nobody left to read the event, so it is dropped.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            posted, self._posted = self._posted, collections.deque()
            self._scheduled = False
        for queue, event in posted:
            queue.put_nowait(event)


_MAILBOXES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Mailbox] = weakref.WeakKeyDictionary()


def mailbox(loop: asyncio.AbstractEventLoop) -> Mailbox:
    """The loop's mailbox (made on first use; called on the loop, so never raced)."""
    box = _MAILBOXES.get(loop)
    if box is None:
        box = _MAILBOXES[loop] = Mailbox(loop)
    return box


def timeout_error() -> ApiError:
    return ApiError(
        504,
        "The request made no progress for the server's request timeout (--request-timeout): it waited in the "
        "queue, or the engine wrote no prompt chunk and no token, for that long.",
        code="timeout",
    )


@asynccontextmanager
async def start_generation(
    model: ModelService, request: GenerationRequest, limits: GenerationLimits, api: ApiShape
) -> AsyncIterator[Generation]:
    """Submit `request` with the server's limits (its stall timeout, the output cap); on exit,
    cancel whatever is unfinished. A refusal is answered in `api`'s terms."""
    engine = model.engine
    if engine is None:
        raise not_serving(model, api.unavailable)
    queue: asyncio.Queue[EngineEvent] = asyncio.Queue()
    box = mailbox(asyncio.get_running_loop())

    def sink(event: EngineEvent) -> None:
        box.post(queue, event)

    try:
        request_id = engine.submit(
            replace(request, stall_timeout=limits.request_timeout_s, output_cap=output_cap(limits)), sink
        )
    except QueueFull as full:
        raise ApiError(
            api.queue_full,
            f"The server is busy: its wait queue is full. Retry after {full.retry_after_s} s.",
            code="queue_full",
            headers={"Retry-After": str(full.retry_after_s)},
        ) from None
    except RequestRefused as refused:
        raise ApiError(400, refused.message, code=refused.code, param=api.field_name(refused.field)) from None
    except EngineUnavailable:
        raise not_serving(model, api.unavailable) from None
    generation = Generation(engine, request_id, queue, request.n, limits.request_timeout_s)
    try:
        yield generation
    finally:
        generation.cancel()


def output_cap(limits: GenerationLimits) -> OutputCap | None:
    """The server's cap on every answer (`--max-output-tokens`) and how an answer it ends
    finishes (`--max-output-tokens-finish`: "stop" for clients such as Claude Code, which take a
    length finish for an error and send the request again)."""
    if limits.max_output_tokens is None:
        return None
    return OutputCap(limits.max_output_tokens, "stop" if limits.max_output_tokens_finish == "stop" else "length")


async def open_generations(
    model: ModelService, requests: Sequence[GenerationRequest], limits: GenerationLimits, api: ApiShape
) -> tuple[list[Generation], Callable[[], Awaitable[None]]]:
    """Submit every request now, so that a refusal is still a plain HTTP error (before a stream's
    200); the caller awaits the returned closer when its answer ends, however it ends."""
    stack = AsyncExitStack()
    try:
        generations = [
            await stack.enter_async_context(start_generation(model, request, limits, api)) for request in requests
        ]
    except BaseException:
        await stack.aclose()
        raise
    return generations, stack.aclose
