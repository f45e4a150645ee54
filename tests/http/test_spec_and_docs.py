"""The served document is the committed spec, valid, and in step with the routes; docs need no CDN."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from openapi_spec_validator import validate
from starlette.routing import Route

from generated.routes import router

REPO = Path(__file__).resolve().parents[2]
HTTP_METHODS = {"get", "post", "put", "delete", "patch"}


@pytest.mark.slow  # runs tools/generate.py
def test_generated_code_matches_spec(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(REPO / "tools" / "generate.py"), "--out", str(tmp_path)], check=True, cwd=REPO)
    for name in ("openapi.json", "models.py", "routes.py", "__init__.py"):
        committed = (REPO / "generated" / name).read_text(encoding="utf-8")
        fresh = (tmp_path / name).read_text(encoding="utf-8")
        assert fresh == committed, f"generated/{name} is stale or hand-edited: run `make generate` and commit"


def test_served_document_is_valid_openapi_3_1(client: TestClient) -> None:
    response = client.get("/v1/openapi.json")
    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.1")
    validate(document)
    assert document == __import__("json").loads((REPO / "generated" / "openapi.json").read_text(encoding="utf-8"))


def _spec_operations(document: dict) -> set[tuple[str, str]]:
    return {
        (method.upper(), path) for path, item in document["paths"].items() for method in item if method in HTTP_METHODS
    }


def _routed_operations() -> set[tuple[str, str]]:
    found = set()
    for route in router.routes:
        assert isinstance(route, Route)
        path = re.sub(r"\{(\w+):path\}", r"{\1}", route.path)
        found |= {(method, path) for method in route.methods or () if method != "HEAD"}
    return found


def test_every_route_is_in_the_spec_and_every_operation_is_routed(client: TestClient) -> None:
    document = client.get("/v1/openapi.json").json()
    assert _routed_operations() == _spec_operations(document)


def test_docs_redirect_and_page(client: TestClient) -> None:
    redirect = client.get("/v1", follow_redirects=False)
    assert redirect.status_code == 307 and redirect.headers["location"] == "/v1/docs/"
    page = client.get("/v1/docs/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "/v1/openapi.json" in page.text


def test_docs_page_names_no_external_url(client: TestClient) -> None:
    page = client.get("/v1/docs/").text
    assert not re.search(r"(https?:)?//[^\s\"'<>]+", page), "the docs page must not load anything from outside"
    for asset in re.findall(r'(?:src|href)="([^"]+)"', page):
        response = client.get(f"/v1/docs/{asset}")
        assert response.status_code == 200, asset
        assert len(response.content) > 100


def test_unknown_docs_asset_is_404(client: TestClient) -> None:
    assert client.get("/v1/docs/nope.js").status_code == 404


def test_swagger_ui_renders_openapi_3_1() -> None:
    # Swagger UI 4 refuses any `openapi` field but 3.0.x ("Unable to render this definition").
    from swagger_ui_bundle import swagger_ui_path

    major = int(re.search(r"swagger-ui-(\d+)\.", str(swagger_ui_path)).group(1))  # type: ignore[union-attr]
    assert major >= 5
