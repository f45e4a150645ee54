"""The --metrics-bind listener's app: /metrics/prometheus only, behind the key when one is set."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from pooled.configuration.setting_types import host_port
from pooled.configuration.settings import Settings
from pooled.web.app import server_context
from pooled.web.metrics_listener import metrics_app
from tests.conftest import StubModel


def test_it_serves_the_prometheus_body_and_nothing_else() -> None:
    app = metrics_app(server_context(Settings(), StubModel()), api_key=None)
    with TestClient(app) as client:
        response = client.get("/metrics/prometheus")
        assert response.status_code == 200
        assert "# TYPE pooled_requests_served_total counter" in response.text
        assert client.get("/v1/models").status_code == 404
        assert client.get("/metrics").status_code == 404


def test_it_needs_the_key_when_one_is_set() -> None:
    app = metrics_app(server_context(Settings(), StubModel()), api_key="sekrit")
    with TestClient(app) as client:
        assert client.get("/metrics/prometheus").status_code == 401
        assert client.get("/metrics/prometheus", headers={"Authorization": "Bearer sekrit"}).status_code == 200


def test_the_setting_is_host_and_port() -> None:
    parse = host_port(nullable=True)
    assert parse("0.0.0.0:9090") == "0.0.0.0:9090"
    assert parse("") is None and parse("none") is None
    for bad in ("9090", "host:", ":9090", "host:99999", "host:http"):
        with pytest.raises(ValueError):
            parse(bad)
