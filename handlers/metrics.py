"""`/metrics` (JSON) and `/metrics/prometheus`: one snapshot, two renderings.

The snapshot is taken at scrape time from the HTTP counters and the engine's
own `stats()`, so nothing is counted twice and both renderings always agree.
Names follow vLLM's meanings; Prometheus gets them under the `pooled_` prefix.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import accumulate

from fastapi import Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from engine.stats import EngineStats, Histogram
from generated import models
from handlers.context import ServerContext, context

GAUGES = {
    "requests_running": "Model requests the HTTP layer is answering now.",
    "requests_waiting": "Requests (and preempted rows) waiting for a decode lane or KV pages.",
    "kv_cache_usage_perc": "Fraction of KV cache pages in use.",
}
COUNTERS = {
    "requests_served_total": "Model requests answered since start, any status.",
    "requests_rate_limited_total": "Model requests refused by --rate-limit-rpm (not counted as served).",
    "requests_refused_total": "Requests refused because the wait queue was full.",
    "prompt_tokens_total": "Prompt tokens of requests admitted.",
    "generation_tokens_total": "Tokens generated.",
    "prefix_cache_queries_total": "Prompt tokens looked up in the prefix cache.",
    "prefix_cache_hits_total": "Prompt tokens found in the prefix cache.",
    "prefix_cache_disk_hits_total": "Of those, tokens whose pages were read back from the disk tier.",
    "draft_tokens_total": "Prompt-lookup draft tokens brought to decode steps.",
    "draft_tokens_accepted_total": "Of those, tokens the rows' draws agreed with.",
    "encode_requests_total": "Embedding and rerank requests answered (their tokens count in prompt_tokens_total).",
    "preemptions_total": "Rows preempted when KV pages ran out.",
    "compiles_after_startup_total": "XLA compilations after the compile plan finished.",
}
HISTOGRAMS = {
    "time_to_first_token_seconds": "Time from submission to the first generated token.",
    "inter_token_latency_seconds": "Time between consecutive generated tokens of a row.",
    "e2e_request_latency_seconds": "Time from submission to the last row's end.",
}


def _histogram(histogram: Histogram) -> models.MetricsHistogram:
    bounds: list[float | None] = [*histogram.bounds, None]
    return models.MetricsHistogram(
        buckets=[
            models.MetricsHistogramBucket(le=bound, count=count)
            for bound, count in zip(bounds, accumulate(histogram.counts), strict=True)
        ],
        sum=histogram.sum,
        count=histogram.count,
    )


def _engine_fields(stats: EngineStats) -> dict[str, object]:
    return {
        "requests_waiting": stats.requests_waiting,
        "requests_refused_total": stats.refusals,
        "prompt_tokens_total": stats.prompt_tokens,
        "generation_tokens_total": stats.generation_tokens,
        "prefix_cache_queries_total": stats.prefix_cache_queries,
        "prefix_cache_hits_total": stats.prefix_cache_hits,
        "prefix_cache_disk_hits_total": stats.prefix_cache_disk_hits,
        "draft_tokens_total": stats.draft_tokens,
        "draft_tokens_accepted_total": stats.draft_tokens_accepted,
        "encode_requests_total": stats.encode_requests,
        "preemptions_total": stats.preemptions,
        "kv_cache_usage_perc": stats.kv_cache_usage,
        "compiles_after_startup_total": stats.compiles_after_startup,
        "time_to_first_token_seconds": _histogram(stats.time_to_first_token),
        "inter_token_latency_seconds": _histogram(stats.inter_token_latency),
        "e2e_request_latency_seconds": _histogram(stats.e2e_latency),
    }


def snapshot(server: ServerContext) -> models.Metrics:
    engine = server.model.engine
    return models.Metrics.model_validate(
        {
            "requests_running": server.counters.in_flight,
            "requests_served_total": server.counters.served,
            "requests_rate_limited_total": server.counters.rate_limited,
            **(_engine_fields(engine.stats()) if engine is not None else {}),
        }
    )


class _SnapshotCollector(Collector):
    def __init__(self, server: ServerContext) -> None:
        self.server = server

    def collect(self) -> Iterator[Metric]:
        values = snapshot(self.server)
        for name, help_text in GAUGES.items():
            if (value := getattr(values, name)) is not None:
                yield GaugeMetricFamily(f"pooled_{name}", help_text, value=value)
        for name, help_text in COUNTERS.items():
            if (value := getattr(values, name)) is not None:
                yield CounterMetricFamily(f"pooled_{name.removesuffix('_total')}", help_text, value=value)
        for name, help_text in HISTOGRAMS.items():
            histogram: models.MetricsHistogram | None = getattr(values, name)
            if histogram is not None:
                buckets = [("+Inf" if b.le is None else str(b.le), b.count) for b in histogram.buckets]
                yield HistogramMetricFamily(f"pooled_{name}", help_text, buckets=buckets, sum_value=histogram.sum)


async def get_metrics(request: Request) -> models.Metrics:
    return snapshot(context(request))


async def get_prometheus_metrics(request: Request) -> Response:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_SnapshotCollector(context(request)))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
