"""A non-streamed answer whose client went away stops generating: its work is cancelled."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, TypeVar

from fastapi import Request

from handlers.api_error import ApiError

T = TypeVar("T")

# nginx's status for a request its client closed; nobody reads it, but the logs and counters do.
CLIENT_CLOSED = 499


async def unless_disconnected(request: Request, work: Coroutine[Any, Any, T]) -> T:
    """Run `work`; if the client disconnects first, cancel it (its cleanup cancels the engine request)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnect(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        raise ApiError(CLIENT_CLOSED, "The client closed the request.", code="client_closed")
    finally:
        for pending in (task, watcher):
            pending.cancel()
            with contextlib.suppress(BaseException):  # only that it ended matters now
                await pending


async def _disconnect(request: Request) -> None:
    # The body has been read, so the next message the server sends is the disconnect.
    while (await request.receive())["type"] != "http.disconnect":
        continue
