"""Error bodies in each API's own shape, and the exception handlers that produce them.

Anthropic's shape (`{"type": "error", "error": {"type", "message"}}`) answers on
`/v1/messages*` and on an Anthropic-style `/v1/models` request; every other path
gets OpenAI's (`{"error": {"message", "type", "param", "code"}}`). Validation
errors, unknown paths and wrong methods go through the same renderer, so no
error ever leaves in FastAPI's default shape.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import Scope

from handlers.api_error import ApiError, anthropic_error_body, openai_error_body

log = logging.getLogger(__name__)

NOT_SERVED = {
    "/v1/responses/compact": "Response compaction is not served by pooled; Codex falls back to summarising itself.",
    "/v1/images/generations": "Image generation is not served by pooled.",
    "/v1/images/edits": "Image editing is not served by pooled.",
    "/v1/images/variations": "Image variations are not served by pooled.",
    "/v1/audio/speech": "Speech synthesis is not served by pooled.",
    "/v1/realtime": "The Realtime API is not served by pooled.",
}


def is_anthropic(scope: Scope) -> bool:
    path: str = scope["path"]
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return True
    if path == "/v1/models" or path.startswith("/v1/models/"):
        headers = {key.decode("latin-1"): value for key, value in scope.get("headers", [])}
        return "anthropic-version" in headers or ("x-api-key" in headers and "authorization" not in headers)
    return False


def error_response(
    scope: Scope,
    status: int,
    message: str,
    code: str | None = None,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """The error answer for `scope`'s path, in that API's shape."""
    error = ApiError(status, message, code, param)
    body = anthropic_error_body(error) if is_anthropic(scope) else openai_error_body(error)
    return JSONResponse(body, status_code=status, headers=dict(headers or {}))


def _validation_message(error: RequestValidationError) -> tuple[str, str | None]:
    first = error.errors()[0]
    location = [str(part) for part in first.get("loc", ()) if part not in ("body", "query", "path")]
    param = ".".join(location) or None
    if first.get("type") == "json_invalid":
        return f"The request body is not valid JSON: {first.get('msg', '')}", None
    where = f" at '{param}'" if param else ""
    return f"Invalid request{where}: {first.get('msg', 'invalid value')}.", param


def install(app: FastAPI) -> None:
    """Route every error the app can raise through `error_response`."""

    async def on_api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return error_response(request.scope, exc.status, exc.message, exc.code, exc.param, exc.headers)

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        message, param = _validation_message(exc)
        return error_response(request.scope, 400, message, "invalid_request", param)

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        path = request.url.path
        if path in NOT_SERVED or (exc.status_code == 404 and path.rstrip("/") in NOT_SERVED):
            return error_response(request.scope, 404, NOT_SERVED[path.rstrip("/")], "not_served")
        if exc.status_code == 404:
            return error_response(request.scope, 404, f"No route {request.method} {path}.", "not_found")
        if exc.status_code == 405:
            allow = (exc.headers or {}).get("Allow", "")
            return error_response(
                request.scope,
                405,
                f"{path} does not take {request.method}; it takes {allow}.",
                "method_not_allowed",
                headers={"Allow": allow},
            )
        code = "request_too_large" if exc.status_code == 413 else None
        return error_response(request.scope, exc.status_code, str(exc.detail), code, headers=exc.headers)

    async def on_crash(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        return error_response(request.scope, 500, "Internal server error; the server log has the details.")

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(Exception, on_crash)
