"""`--metrics-bind HOST:PORT`: a second listener that serves only `/metrics/prometheus`.

A scraper often reaches the machine on an address the API should not listen on; this listener
answers that one path (the key, when set, is still needed) and 404 to anything else, so opening
it opens nothing else. It runs on the main server's event loop and stops with it; it does not
take over the process's signals (the main server's drain handles them).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from handlers.context import ServerContext
from handlers.metrics import get_prometheus_metrics
from pooled.web.guards import presented_token

PATH = "/metrics/prometheus"


def metrics_app(server: ServerContext, api_key: str | None) -> Starlette:
    async def prometheus(request: Request) -> Response:
        if api_key is not None and presented_token(request.headers) != api_key:
            return PlainTextResponse("Missing or wrong API key.\n", status_code=401)
        return await get_prometheus_metrics(request)

    app = Starlette(routes=[Route(PATH, prometheus, methods=["GET", "HEAD"])])
    app.state.context = server
    return app


class MetricsServer(uvicorn.Server):
    """A uvicorn server that leaves the signals to the main one."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def metrics_server(bind: str, server: ServerContext, api_key: str | None) -> MetricsServer:
    host, _, port = bind.rpartition(":")
    app = metrics_app(server, api_key)
    return MetricsServer(uvicorn.Config(app, host=host.strip("[]"), port=int(port), log_level="warning"))
