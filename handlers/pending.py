"""Model routes whose engine part has not landed: each answers 501 in its API's shape.

They still check readiness first, so a client sees the same 503/529 while the
model loads that it will see once the route is built.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import Request
from fastapi.responses import Response

from handlers.availability import require_ready
from handlers.errors import not_built

PendingHandler = Callable[..., Awaitable[Response]]


def _pending(route: str) -> PendingHandler:
    async def handler(request: Request, body: object, **params: object) -> Response:
        require_ready(request)
        raise not_built(route)

    handler.__name__ = route
    return handler


create_embedding = _pending("POST /v1/embeddings")
create_rerank = _pending("POST /v1/rerank")
