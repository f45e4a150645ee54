"""The models routes of a running `pooled serve`, as `pooled pull`, `list` and `rm` call them.

A command goes through the server when one answers on the configured host and port, so that a
download shows in the server's catalog and /health, and a remove is refused for the model it
serves; `find_server` says whether one does. A server is recognised by `GET /health` answering
with pooled's `ok` member within a second: anything else there (nothing listening, another
program) leaves the command to work on the models folder itself.

Environment proxies are not used: the address is the server's own (`--host`), not the internet's.
"""

from __future__ import annotations

from typing import Any

import httpx

from pooled.configuration.settings import Settings

DETECT_TIMEOUT_S = 1.0
CALL_TIMEOUT_S = 30.0


class ServerRefused(Exception):
    """The server answered with an error: its HTTP status and its message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ServerGone(Exception):
    """The server stopped answering in the middle of a command."""


class PooledServer:
    def __init__(self, base: str, api_key: str | None) -> None:
        self.base = base
        self._client = httpx.Client(base_url=base, headers=_auth(api_key), timeout=CALL_TIMEOUT_S, trust_env=False)

    def get(self, path: str) -> Any:
        return self._call("GET", path, None)

    def post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        return self._call("POST", path, body if body is not None else {})

    def close(self) -> None:
        self._client.close()

    def _call(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        try:
            response = self._client.request(method, path, json=body)
        except httpx.HTTPError as error:
            raise ServerGone(f"the server at {self.base} stopped answering: {error or type(error).__name__}") from None
        if response.status_code >= 400:
            raise ServerRefused(response.status_code, _message(response))
        return response.json()


def find_server(settings: Settings, timeout_s: float = DETECT_TIMEOUT_S) -> PooledServer | None:
    """The pooled server on `settings.host`/`port`, or None when none answers there."""
    base = server_base(settings.host, settings.port)
    try:
        health = httpx.get(f"{base}/health", headers=_auth(settings.api_key), timeout=timeout_s, trust_env=False)
        answer = health.json() if health.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    if not isinstance(answer, dict) or "ok" not in answer:
        return None
    return PooledServer(base, settings.api_key)


def server_base(host: str, port: int) -> str:
    """The URL a client reaches a server listening on `host` at: a wildcard address is reached on
    the loopback interface."""
    host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _auth(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _message(response: httpx.Response) -> str:
    """The server's error message (its `error.message`), else the status line and the body."""
    try:
        error = response.json().get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            message: str = error["message"]
            if response.status_code == 401:
                message += " (give it with --api-key or POOLED_API_KEY)"
            return message
    except (ValueError, AttributeError):
        pass
    return f"HTTP {response.status_code}: {response.text[:200]}"
