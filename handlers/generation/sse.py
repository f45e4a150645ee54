"""Server-sent events: framing, keep-alive comments while a stream waits, and the streamed response."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

KEEPALIVE = ": keep-alive\n\n"


def data_line(payload: object) -> str:
    """One `data:` event; `payload` is JSON-ready (or a literal such as `[DONE]`)."""
    text = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return f"data: {text}\n\n"


def named_event(name: str, payload: object) -> str:
    """An `event:` + `data:` pair, as Anthropic's and the Responses API's streams send."""
    return f"event: {name}\n{data_line(payload)}"


async def with_keepalive(
    events: AsyncGenerator[str, None], interval_s: float, keepalive: str = KEEPALIVE
) -> AsyncIterator[str]:
    """Pass `events` through, adding `keepalive` (a comment line) whenever none came for `interval_s`.

    Proxies and clients drop a silent connection; a request queued behind others, or a long
    prefill, would otherwise be silent for longer than their idle timeouts.

    Threads: all on the event loop. One task per stream (the pump) runs `events` and queues what it
    yields; this generator takes everything queued at once, so a client that falls behind gets
    several events in one write instead of one write each, and waits with a timeout only when the
    queue is empty. (Timing out an `anext(events)` would need a task per event, since cancelling
    the generator mid-await would end it.)
    """
    queue: asyncio.Queue[str | _End] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for event in events:
                queue.put_nowait(event)
            queue.put_nowait(_End(None))
        except Exception as error:  # noqa: BLE001 - handed to the consumer, which raises it
            queue.put_nowait(_End(error))

    pumping = asyncio.create_task(pump())
    try:
        while True:
            if queue.empty():
                try:
                    async with asyncio.timeout(interval_s):
                        first = await queue.get()
                except TimeoutError:
                    yield keepalive
                    continue
            else:
                first = queue.get_nowait()
            parts: list[str] = []
            item = first
            while not isinstance(item, _End):
                parts.append(item)
                if queue.empty():
                    break
                item = queue.get_nowait()
            if parts:
                yield "".join(parts)
            if isinstance(item, _End):
                if item.error is not None:
                    raise item.error
                return
    finally:
        pumping.cancel()
        with contextlib.suppress(BaseException):  # its outcome no longer matters, only that it ended
            await pumping
        await events.aclose()


@dataclass(frozen=True)
class _End:
    """The end of a pumped stream: its error, if it raised one."""

    error: Exception | None


class EventStream(StreamingResponse):
    """The 200 answer of a stream, which runs `on_close` however it ends: finished, failed, or
    cut off by the client before or while it streamed (Starlette then stops the iteration).
    `keepalive` is what is sent while it waits (Anthropic's streams send a `ping` event instead)."""

    def __init__(
        self,
        events: AsyncGenerator[str, None],
        keepalive_interval_s: float,
        on_close: Callable[[], Awaitable[None]],
        keepalive: str = KEEPALIVE,
    ) -> None:
        super().__init__(
            with_keepalive(events, keepalive_interval_s, keepalive),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._on_close()
