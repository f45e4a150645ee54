"""`--metrics-bind`: a real `pooled serve` answers /metrics/prometheus on a second address too,
and only that path there."""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.conftest import running_server
from tests.http.test_serve_process import free_port


def test_a_second_listener_serves_only_the_prometheus_metrics(tmp_path_factory: pytest.TempPathFactory) -> None:
    bind = f"127.0.0.1:{free_port()}"
    with running_server(tmp_path_factory, ["--ctx", "1024", "--decode-lanes", "2", "--metrics-bind", bind]) as base:
        scraped = httpx.get(f"http://{bind}/metrics/prometheus", timeout=10)
        assert scraped.status_code == 200
        assert "pooled_requests_served_total" in scraped.text
        assert scraped.text.count("pooled_generation_tokens_total") >= 1  # the engine's own figures
        assert httpx.get(f"http://{bind}/v1/models", timeout=10).status_code == 404
        assert httpx.get(f"{base}/metrics/prometheus", timeout=10).status_code == 200  # the main one still does
