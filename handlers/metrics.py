"""`/metrics` (JSON) and `/metrics/prometheus`: one snapshot, two renderings.

The snapshot is taken at scrape time from the HTTP counters and the model
service, so nothing is counted twice and both renderings always agree.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from generated import models
from handlers.context import ServerContext, context

# name -> (kind, help); names follow vLLM's meanings under the pooled_ prefix.
METRICS: dict[str, tuple[str, str]] = {
    "requests_running": ("gauge", "Requests being answered now."),
    "requests_served_total": ("counter", "Requests answered since start, any status."),
}


def snapshot(server: ServerContext) -> dict[str, float]:
    return {
        "requests_running": server.counters.in_flight,
        "requests_served_total": server.counters.served,
    }


class _SnapshotCollector(Collector):
    def __init__(self, server: ServerContext) -> None:
        self.server = server

    def collect(self):  # type: ignore[no-untyped-def]
        for name, value in snapshot(self.server).items():
            kind, help_text = METRICS[name]
            if kind == "counter":
                yield CounterMetricFamily(f"pooled_{name.removesuffix('_total')}", help_text, value=value)
            else:
                yield GaugeMetricFamily(f"pooled_{name}", help_text, value=value)


async def get_metrics(request: Request) -> models.Metrics:
    return models.Metrics.model_validate(snapshot(context(request)))


async def get_prometheus_metrics(request: Request) -> Response:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_SnapshotCollector(context(request)))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
