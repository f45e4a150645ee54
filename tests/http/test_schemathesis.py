"""Schemathesis fuzzes every operation of the served spec in-process against the ASGI app.

Checks: no server error, only documented status codes and content types, and
every response body matches its schema (response schemas are closed, so an
extra or missing field fails here).
"""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from pooled.app import build_app
from pooled.settings import Settings
from tests.conftest import BASE_URL, StubModel

app = build_app(Settings(), StubModel())
schema = schemathesis.openapi.from_asgi("/v1/openapi.json", app)
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_conforms(case: schemathesis.Case) -> None:
    case.call_and_validate(base_url=BASE_URL, checks=CHECKS)
