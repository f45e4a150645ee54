"""Counts the API requests in flight and answered, for /health and /metrics.

Only model routes (POST under /v1) count: a health probe or a docs page load is
not a request for the model (nor activity that keeps an idle model loaded). Runs on the event loop, like everything that
touches the counters.
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Receive, Scope, Send

from handlers.context import Counters


class RequestCounting:
    def __init__(self, app: ASGIApp, counters: Counters) -> None:
        self.app = app
        self.counters = counters

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        self.counters.in_flight += 1
        self.counters.last_active = time.monotonic()
        try:
            await self.app(scope, receive, send)
        finally:
            self.counters.in_flight -= 1
            self.counters.served += 1
            self.counters.last_active = time.monotonic()
