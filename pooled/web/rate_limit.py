"""`--rate-limit-rpm`: model requests per minute per API key (per client address without one).

A client's requests of the last 60 seconds are kept as their start times; one past the limit is
refused with 429 (`rate_limit_error` on Anthropic's paths, in each API's own shape) and
`Retry-After` until the oldest of them leaves the window. Only model requests count (POST under
/v1, as `RequestCounting` counts them): health probes, docs and metrics never do. A refused
request is not a request in the window. Runs on the event loop, like the other middlewares, so
the windows need no lock.
"""

from __future__ import annotations

import math
import time
from collections import deque

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from handlers.context import Counters
from pooled.web.error_bodies import error_response
from pooled.web.guards import presented_token

WINDOW_S = 60.0


class RateLimit:
    def __init__(self, app: ASGIApp, requests_per_minute: int, counters: Counters) -> None:
        self.app = app
        self.limit = requests_per_minute
        self.counters = counters
        self._windows: dict[str, deque[float]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        wait_s = self._admit(self._client(scope), time.monotonic())
        if wait_s is None:
            await self.app(scope, receive, send)
            return
        self.counters.rate_limited += 1
        message = f"Over the rate limit of {self.limit} requests a minute (--rate-limit-rpm); retry in {wait_s} s."
        refusal = error_response(scope, 429, message, "rate_limit_exceeded", headers={"Retry-After": str(wait_s)})
        await refusal(scope, receive, send)

    def _client(self, scope: Scope) -> str:
        token = presented_token(Headers(scope=scope))
        if token is not None:
            return f"key:{token}"
        client = scope.get("client")
        return f"address:{client[0] if client else 'unknown'}"

    def _admit(self, client: str, now: float) -> int | None:
        """None when `client` may send one more request now (it is counted), else the whole
        seconds until it may."""
        window = self._windows.setdefault(client, deque())
        while window and window[0] <= now - WINDOW_S:
            window.popleft()
        if len(window) < self.limit:
            window.append(now)
            return None
        return max(1, math.ceil(window[0] + WINDOW_S - now))
