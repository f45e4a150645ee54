"""The Playground's routes at the HTTP layer: the page and its assets load without the key (the
page asks for it), /ui/metrics stays behind it, and --server-ui false turns all of them off."""

from __future__ import annotations

from fastapi.testclient import TestClient

from pooled.configuration.settings import Settings
from pooled.web.app import build_app, server_context
from pooled.web.guards import is_public
from tests.conftest import BASE_URL, StubModel


def make_client(**overrides: object) -> TestClient:
    settings = Settings(**overrides)  # type: ignore[arg-type]
    return TestClient(build_app(settings, server_context(settings, StubModel())), base_url=BASE_URL)


def test_page_and_assets_are_served_without_the_key() -> None:
    with make_client(api_key="sekrit") as client:
        page = client.get("/ui/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert 'src="playground.js"' in page.text
        assert "http://" not in page.text and "https://" not in page.text  # no CDN, no external URL
        script = client.get("/ui/playground.js")
        assert script.status_code == 200
        assert script.headers["content-type"].startswith("text/javascript")
        assert client.get("/ui/playground.css").headers["content-type"].startswith("text/css")
        assert client.get("/ui/nothing.js").status_code == 404


def test_ui_metrics_is_prometheus_text_behind_the_key() -> None:
    with make_client(api_key="sekrit") as client:
        assert client.get("/ui/metrics").status_code == 401
        response = client.get("/ui/metrics", headers={"Authorization": "Bearer sekrit"})
        assert response.status_code == 200
        prometheus = client.get("/metrics/prometheus", headers={"Authorization": "Bearer sekrit"})
        assert response.headers["content-type"] == prometheus.headers["content-type"]
        assert response.headers["content-type"].startswith("text/plain")
        assert "# TYPE pooled_requests_served_total counter" in response.text
    assert not is_public("/ui/metrics") and is_public("/ui/") and is_public("/ui/playground.js")


def test_server_ui_false_turns_the_playground_off() -> None:
    with make_client(server_ui=False) as client:
        for path in ("/ui/", "/ui/playground.js", "/ui/metrics"):
            assert client.get(path).status_code == 404, path
