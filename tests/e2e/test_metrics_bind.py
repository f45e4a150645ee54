"""`--metrics-bind`: a real `pooled serve` (the shared e2e server, tests/e2e/conftest.py) answers
/metrics/prometheus on a second address too, and only that path there."""

from __future__ import annotations

import httpx


def test_a_second_listener_serves_only_the_prometheus_metrics(server: str, metrics_bind: str) -> None:
    scraped = httpx.get(f"http://{metrics_bind}/metrics/prometheus", timeout=10)
    assert scraped.status_code == 200
    assert "pooled_requests_served_total" in scraped.text
    assert scraped.text.count("pooled_generation_tokens_total") >= 1  # the engine's own figures
    assert httpx.get(f"http://{metrics_bind}/v1/models", timeout=10).status_code == 404
    assert httpx.get(f"{server}/metrics/prometheus", timeout=10).status_code == 200  # the main one still does
