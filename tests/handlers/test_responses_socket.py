"""The Responses API's WebSocket mode over a scripted engine: the same events as the HTTP stream,
lanes by `stream_id`, errors that keep the connection open, a full queue that waits, a closed
socket that cancels, and the guards' checks on the upgrade. (The official SDK against a real
server is in tests/e2e/test_openai_responses.py.)"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.testclient import WebSocketDenialResponse
from starlette.websockets import WebSocketDisconnect

from pooled.configuration.settings import Settings
from pooled.web.app import build_app, server_context
from tests.conftest import BASE_URL, StubModel
from tests.fake_engine import FakeEngine
from text import ChatTemplate, Tokenizer

Socket = Any  # starlette's WebSocketTestSession


def connect(client: TestClient, headers: dict[str, str] | None = None) -> Any:
    """A WebSocket to /v1/responses with the Host the server listens on (the test client's own
    default, `testserver`, is a foreign Host to the guards)."""
    return client.websocket_connect("ws://127.0.0.1:8080/v1/responses", headers=dict(headers or {}))


def events_until_done(socket: Socket) -> list[dict[str, Any]]:
    """One response's events: up to its completed, incomplete or failed event, or a lone error."""
    events = []
    while True:
        event = json.loads(socket.receive_text())
        events.append(event)
        if event["type"] in ("response.completed", "response.incomplete", "response.failed"):
            return events
        if event["type"] == "error" and len(events) == 1:
            return events


def stream_payloads(api: TestClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    answer = api.post("/v1/responses", json={**body, "stream": True})
    return [json.loads(line[len("data: ") :]) for line in answer.text.splitlines() if line.startswith("data: ")]


def test_a_response_over_the_socket_has_the_http_streams_events(api: TestClient) -> None:
    body = {"input": "Hi", "max_output_tokens": 16}
    over_http = stream_payloads(api, body)
    with connect(api) as socket:
        socket.send_text(json.dumps({"type": "response.create", **body}))
        over_socket = events_until_done(socket)
    assert [e["type"] for e in over_socket] == [e["type"] for e in over_http]
    assert [e["sequence_number"] for e in over_socket] == list(range(len(over_socket)))
    assert over_socket[-1]["type"] == "response.completed"
    text = over_socket[-1]["response"]["output"][-1]["content"][0]["text"]
    assert text == over_http[-1]["response"]["output"][-1]["content"][0]["text"] == "Hello there, how can I help?"


def test_responses_of_one_lane_run_in_order_and_continue_across_http(api: TestClient) -> None:
    with connect(api) as socket:
        for word in ("first", "second"):
            socket.send_text(json.dumps({"type": "response.create", "input": word, "stream_id": "a"}))
        first, second = events_until_done(socket), events_until_done(socket)
        assert all(event["stream_id"] == "a" for event in first + second)
        assert first[-1]["response"]["id"] != second[-1]["response"]["id"]
        earlier = first[-1]["response"]["id"]
        socket.send_text(json.dumps({"type": "response.create", "input": "more", "previous_response_id": earlier}))
        assert events_until_done(socket)[-1]["type"] == "response.completed"
    over_http = api.post("/v1/responses", json={"input": "and more", "previous_response_id": earlier})
    assert over_http.status_code == 200


@pytest.mark.parametrize(
    ("event", "problem"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "a JSON object"),
        (json.dumps({"type": "response.steer"}), "Unknown event type 'response.steer'"),
        (json.dumps({"type": "response.create", "input": "Hi", "temperature": "hot"}), "temperature"),
        (json.dumps({"type": "response.create", "input": "Hi", "background": True}), "Background"),
        (json.dumps({"type": "response.create", "input": "Hi", "stream_id": 7}), "stream_id"),
    ],
)
def test_a_bad_event_gets_an_error_event_and_the_connection_stays_open(
    api: TestClient, event: str, problem: str
) -> None:
    with connect(api) as socket:
        socket.send_text(event)
        (error,) = events_until_done(socket)
        assert error["type"] == "error" and problem in error["message"], error
        socket.send_text(json.dumps({"type": "response.create", "input": "Hi"}))
        assert events_until_done(socket)[-1]["type"] == "response.completed"


def test_a_full_queue_makes_the_response_wait_instead_of_refusing(api: TestClient, fake_engine: FakeEngine) -> None:
    fake_engine.queue_full_after = 0
    assert api.post("/v1/responses", json={"input": "Hi"}).status_code == 429  # over HTTP: refused
    threading.Timer(0.6, lambda: setattr(fake_engine, "queue_full_after", None)).start()
    with connect(api) as socket:
        socket.send_text(json.dumps({"type": "response.create", "input": "Hi"}))
        assert events_until_done(socket)[-1]["type"] == "response.completed"


def test_closing_the_socket_cancels_the_running_response(api: TestClient, fake_engine: FakeEngine) -> None:
    fake_engine.gate.clear()  # hold the response in flight
    with connect(api) as socket:
        socket.send_text(json.dumps({"type": "response.create", "input": "Hi"}))
        assert json.loads(socket.receive_text())["type"] == "response.created"
    deadline = time.monotonic() + 5
    while not fake_engine.cancelled:
        assert time.monotonic() < deadline, "the response was not cancelled"
        time.sleep(0.01)
    fake_engine.gate.set()


@pytest.fixture
def keyed(smollm2: tuple[Tokenizer, ChatTemplate], fake_engine: FakeEngine) -> Iterator[TestClient]:
    tokenizer, template = smollm2
    settings = Settings(api_key="sekrit", decode_lanes=4)
    model = StubModel(engine=fake_engine, tokenizer=tokenizer, chat_template=template)
    with TestClient(build_app(settings, server_context(settings, model)), base_url=BASE_URL) as client:
        yield client


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "API key"),
        ({"Authorization": "Bearer wrong"}, "API key"),
        ({"Authorization": "Bearer sekrit", "Origin": "https://evil.example"}, "Origin 'https://evil.example'"),
        ({"Authorization": "Bearer sekrit", "Host": "evil.example"}, "Host 'evil.example'"),
    ],
)
def test_the_upgrade_passes_the_guards(keyed: TestClient, headers: dict[str, str], reason: str) -> None:
    with pytest.raises((WebSocketDisconnect, WebSocketDenialResponse)) as refused, connect(keyed, headers) as socket:
        socket.receive_text()
    if isinstance(refused.value, WebSocketDisconnect):
        assert refused.value.code == 1008 and reason in refused.value.reason
    with connect(keyed, {"Authorization": "Bearer sekrit"}) as socket:
        socket.send_text(json.dumps({"type": "response.create", "input": "Hi"}))
        assert events_until_done(socket)[-1]["type"] == "response.completed"


def test_a_plain_get_is_a_426(api: TestClient) -> None:
    answer = api.get("/v1/responses")
    assert answer.status_code == 426 and answer.headers["upgrade"] == "websocket"
    assert answer.json()["error"]["code"] == "upgrade_required"
