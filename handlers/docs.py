"""The API reference: the bundled spec and Swagger UI, served from the installed assets.

The page names no external URL: its scripts and styles come from the
`swagger-ui-bundle` package next to it, and the validator badge (which would
call an outside service) is turned off.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from swagger_ui_bundle import swagger_ui_path

import generated
from handlers.api_error import ApiError

DOCS_PATH = "/v1/docs/"
ASSET_TYPES = {".js": "application/javascript", ".css": "text/css", ".png": "image/png"}

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>pooled API reference</title>
<link rel="stylesheet" href="swagger-ui.css">
<link rel="icon" type="image/png" href="favicon-32x32.png">
</head>
<body>
<div id="swagger-ui"></div>
<script src="swagger-ui-bundle.js"></script>
<script>
window.ui = SwaggerUIBundle({
  url: "/v1/openapi.json",
  dom_id: "#swagger-ui",
  validatorUrl: null,
  deepLinking: true,
  persistAuthorization: true
});
</script>
</body>
</html>
"""


@cache
def openapi_document() -> dict[str, Any]:
    text = (Path(generated.__file__).parent / "openapi.json").read_text(encoding="utf-8")
    document: dict[str, Any] = json.loads(text)
    return document


@cache
def _assets() -> dict[str, Path]:
    root = Path(str(swagger_ui_path))
    return {path.name: path for path in root.iterdir() if path.suffix in ASSET_TYPES}


async def get_api_root(request: Request) -> Response:
    return RedirectResponse(DOCS_PATH, status_code=307)


async def get_openapi_document(request: Request) -> Response:
    return JSONResponse(openapi_document())


async def get_docs(request: Request) -> Response:
    return HTMLResponse(PAGE)


async def get_docs_asset(request: Request, asset: str) -> Response:
    path = _assets().get(asset)
    if path is None:
        raise ApiError(404, f"No documentation asset named '{asset}'.", code="not_found")
    return FileResponse(path, media_type=ASSET_TYPES[path.suffix])
