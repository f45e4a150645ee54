"""The Playground at `/ui/`: a chat page, a speech tab and a server view, served from files in this package.

Like the API reference (handlers/docs.py) it names no external URL and needs no build step:
`handlers/ui/` holds plain HTML, CSS and JavaScript, read from the installed package. The page
loads without the token (it asks for it on a 401); `/ui/metrics`, which it reads for its
histograms, is `/metrics/prometheus`'s body and stays behind the token.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from fastapi import Request
from fastapi.responses import FileResponse, Response

from handlers.api_error import ApiError
from handlers.context import context
from handlers.metrics import get_prometheus_metrics

UI_DIR = Path(__file__).parent / "ui"
ASSET_TYPES = {".js": "text/javascript", ".css": "text/css"}
# The page's script is fetched fresh while the server runs: a stale cached copy after an upgrade
# would talk to routes the server no longer has.
NO_CACHE = {"Cache-Control": "no-cache"}


@cache
def _assets() -> dict[str, Path]:
    return {path.name: path for path in UI_DIR.iterdir() if path.suffix in ASSET_TYPES}


def _require_enabled(request: Request) -> None:
    if not context(request).ui:
        raise ApiError(404, "The Playground is turned off (--server-ui false).", code="not_found")


async def get_ui(request: Request) -> Response:
    _require_enabled(request)
    return FileResponse(UI_DIR / "index.html", media_type="text/html", headers=NO_CACHE)


async def get_ui_asset(request: Request, asset: str) -> Response:
    _require_enabled(request)
    path = _assets().get(asset)
    if path is None:
        raise ApiError(404, f"No Playground asset named '{asset}'.", code="not_found")
    return FileResponse(path, media_type=ASSET_TYPES[path.suffix], headers=NO_CACHE)


async def get_ui_metrics(request: Request) -> Response:
    _require_enabled(request)
    return await get_prometheus_metrics(request)
