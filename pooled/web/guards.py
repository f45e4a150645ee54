"""The guards every request passes before routing: Host, Origin, CORS, token, body size.

A model on 127.0.0.1 must not be reachable from a web page on another site, not
even through DNS rebinding, so a foreign `Host` or `Origin` is 403 before
anything else. The server's own origin is allowed: the docs page and browser
tools send it on every POST. `--allow-origin` opens chosen origins, and only
for those is a CORS preflight answered. The token (when set) is checked next
(a WebSocket passes the same checks, and a refused one is closed unaccepted);
the body limit is enforced while the body streams in, before JSON parsing.
It is a plain ASGI middleware: it runs on the event loop and keeps no state
between requests. The allowed origins and the body limit are read per request
(`access`), so a `PATCH /v1/config` of `allow_origin` or `max_body` holds from
the next request on.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from handlers.context import AccessRules
from pooled.configuration.settings import Settings
from pooled.web.error_bodies import error_response

PUBLIC_PATHS = ("/", "/health", "/v1", "/v1/openapi.json", "/ui")
PUBLIC_PREFIXES = ("/v1/docs/", "/ui/")
KEYED_PATHS = ("/ui/metrics",)  # under a public prefix, yet behind the key like /metrics
CORS_ALLOW_HEADERS = "authorization, content-type, x-api-key, anthropic-version, anthropic-beta, openai-beta"


def is_public(path: str) -> bool:
    return path in PUBLIC_PATHS or (path.startswith(PUBLIC_PREFIXES) and path not in KEYED_PATHS)


def presented_token(headers: Headers) -> str | None:
    authorization = headers.get("authorization", "")
    if authorization.lower().startswith("bearer "):
        return authorization[7:].strip()
    return headers.get("x-api-key")


POLICY_VIOLATION = 1008  # the WebSocket close code for a refused connection
MAX_CLOSE_REASON = 123  # bytes a close frame's reason may hold


class Guards:
    def __init__(self, app: ASGIApp, settings: Settings, access: Callable[[], AccessRules] | None = None) -> None:
        """`settings` give what only a restart changes (the port, the names, the key); `access` the
        rules a configuration change may replace (allowed origins, body limit), read per request."""
        self.app = app
        self.settings = settings
        fixed = AccessRules(frozenset(settings.allow_origin), settings.max_body)
        self.access = access or (lambda: fixed)
        self.allowed_hosts = (
            frozenset(f"{name}:{settings.port}" for name in settings.local_names)
            | (frozenset(settings.local_names) if settings.port == 80 else frozenset())
            | frozenset(settings.allow_host)
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        origin = headers.get("origin", "").rstrip("/")
        if origin in self.access().allow_origin:
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

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A WebSocket passes the same Host, Origin and key checks; a refused one is closed before
        it is accepted (the client sees the handshake refused), the reason in the close frame."""
        headers = Headers(scope=scope)
        foreign = self._foreign(headers)
        refusal = foreign[1] if foreign is not None else None
        if refusal is None and not self._authorized(headers):
            refusal = "Missing or wrong API key: send it as 'Authorization: Bearer <key>' or 'x-api-key'."
        if refusal is not None:
            await send({"type": "websocket.close", "code": POLICY_VIOLATION, "reason": refusal[:MAX_CLOSE_REASON]})
            return
        await self.app(scope, receive, send)

    def _foreign(self, headers: Headers) -> tuple[str, str] | None:
        """(code, message) when a request from this Host or Origin is refused, else None."""
        host = headers.get("host", "").lower()
        if host not in self.allowed_hosts:
            port = self.settings.port
            return "forbidden_host", f"Host '{host}' is not this server; use 127.0.0.1:{port} or localhost:{port}."
        origin = headers.get("origin")
        if origin is not None:
            origin = origin.rstrip("/")
            if origin not in self.settings.own_origins and origin not in self.access().allow_origin:
                message = (
                    f"Origin '{origin}' may not use this server; start it with --allow-origin {origin} to allow it."
                )
                return "forbidden_origin", message
        return None

    def _refusal(self, scope: Scope, headers: Headers) -> Response | None:
        foreign = self._foreign(headers)
        if foreign is not None:
            code, message = foreign
            return error_response(scope, 403, message, code)
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.access().max_body:
            return self._too_large(scope)
        return None

    def _authorized(self, headers: Headers) -> bool:
        return self.settings.api_key is None or presented_token(headers) == self.settings.api_key

    def _too_large_message(self) -> str:
        return f"The request body is over the {self.access().max_body}-byte limit (--max-body)."

    def _too_large(self, scope: Scope) -> Response:
        return error_response(scope, 413, self._too_large_message(), "request_too_large")

    def _preflight(self, origin: str) -> Response:
        return Response(
            status_code=204,
            headers={
                "Access-Control-Allow-Origin": origin,
                "Access-Control-Allow-Methods": "GET, POST, PATCH, DELETE, OPTIONS",
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
        received, limit = 0, self.access().max_body

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
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
