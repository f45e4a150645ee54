"""The guards every request passes before routing: Host, Origin, CORS, token, body size.

A model on 127.0.0.1 must not be reachable from a web page on another site, not
even through DNS rebinding, so a foreign `Host` or `Origin` is 403 before
anything else. The server's own origin is allowed: the docs page and browser
tools send it on every POST. `--allow-origin` opens chosen origins, and only
for those is a CORS preflight answered. The token (when set) is checked next;
the body limit is enforced while the body streams in, before JSON parsing.
It is a plain ASGI middleware: it runs on the event loop and keeps no state
between requests.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pooled.errors import error_response
from pooled.settings import Settings

PUBLIC_PATHS = ("/", "/health", "/v1", "/v1/openapi.json")
PUBLIC_PREFIXES = ("/v1/docs/",)
CORS_ALLOW_HEADERS = "authorization, content-type, x-api-key, anthropic-version, anthropic-beta, openai-beta"


def is_public(path: str) -> bool:
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


def presented_token(headers: Headers) -> str | None:
    authorization = headers.get("authorization", "")
    if authorization.lower().startswith("bearer "):
        return authorization[7:].strip()
    return headers.get("x-api-key")


class Guards:
    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings
        self.allowed_hosts = frozenset(f"{name}:{settings.port}" for name in settings.local_names) | (
            frozenset(settings.local_names) if settings.port == 80 else frozenset()
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        origin = headers.get("origin", "").rstrip("/")
        if origin in self.settings.allow_origin:
            if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
                await self._preflight(origin)(scope, receive, send)
                return
            send = _with_cors(send, origin)
        scope.setdefault("state", {})["authorized"] = self._authorized(headers)
        if not is_public(scope["path"]) and not scope["state"]["authorized"]:
            message = "Missing or wrong API key: send it as 'Authorization: Bearer <key>' or 'x-api-key'."
            await error_response(scope, 401, message, "invalid_api_key")(scope, receive, send)
            return
        await self._with_body_limit(scope, receive, send)

    def _refusal(self, scope: Scope, headers: Headers) -> Response | None:
        host = headers.get("host", "")
        if host not in self.allowed_hosts:
            port = self.settings.port
            message = f"Host '{host}' is not this server; use 127.0.0.1:{port} or localhost:{port}."
            return error_response(scope, 403, message, "forbidden_host")
        origin = headers.get("origin")
        if origin is not None:
            origin = origin.rstrip("/")
            if origin not in self.settings.own_origins and origin not in self.settings.allow_origin:
                message = (
                    f"Origin '{origin}' may not use this server; start it with --allow-origin {origin} to allow it."
                )
                return error_response(scope, 403, message, "forbidden_origin")
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.settings.max_body:
            return self._too_large(scope)
        return None

    def _authorized(self, headers: Headers) -> bool:
        return self.settings.api_key is None or presented_token(headers) == self.settings.api_key

    def _too_large_message(self) -> str:
        return f"The request body is over the {self.settings.max_body}-byte limit (--max-body)."

    def _too_large(self, scope: Scope) -> Response:
        return error_response(scope, 413, self._too_large_message(), "request_too_large")

    def _preflight(self, origin: str) -> Response:
        return Response(
            status_code=204,
            headers={
                "Access-Control-Allow-Origin": origin,
                "Access-Control-Allow-Methods": "GET, POST, DELETE, OPTIONS",
                "Access-Control-Allow-Headers": CORS_ALLOW_HEADERS,
                "Access-Control-Max-Age": "600",
                "Vary": "Origin",
            },
        )

    async def _with_body_limit(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Count a body that arrives without (or with a false) Content-Length as it streams in.

        The refusal is an HTTPException so that it passes through FastAPI's body
        reading untouched and is rendered by the app's error handler.
        """
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.settings.max_body:
                    raise HTTPException(413, self._too_large_message())
            return message

        await self.app(scope, counting_receive, send)


def _with_cors(send: Send, origin: str) -> Send:
    async def send_with_cors(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [
                *message.get("headers", []),
                (b"access-control-allow-origin", origin.encode("latin-1")),
                (b"vary", b"Origin"),
            ]
        await send(message)

    return send_with_cors
