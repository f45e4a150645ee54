"""`GET /health`: the server's state for scripts; never needs the token.

A caller without the token (when one is set) learns only that the process is up.
"""

from __future__ import annotations

from dataclasses import asdict

from fastapi import Request

from engine.stats import EngineStats
from generated import models
from handlers.context import ServerContext, context
from handlers.models_folder import download_progress
from handlers.sampling_defaults import sampling_defaults


def _engine(stats: EngineStats) -> models.HealthEngine:
    return models.HealthEngine(
        decode_lanes=stats.decode_lanes,
        buckets=[models.HealthBucket.model_validate(asdict(bucket)) for bucket in stats.buckets],
        pending_buckets=stats.pending_buckets,
        compiles_after_startup=stats.compiles_after_startup,
        kv_pages=models.HealthKvPages(total=stats.kv_pages_total, used=stats.kv_pages_used),
    )


def health(server: ServerContext) -> models.Health:
    model = server.model
    cause, reason = model.failure or (None, None)
    ready = model.state == "serving"
    engine = model.engine
    return models.Health.model_validate(
        {
            "ok": model.state != "dead",
            "state": model.state,
            "ready": ready,
            "model": model.model_id if ready else None,
            "kind": model.kind,
            "ctx": model.ctx,
            "trained_ctx": model.trained_ctx,
            "rope_scaling": model.rope_scaling,
            "quantization": model.quantization,
            "weight_formats": dict(model.weight_formats) if model.weight_formats else None,
            "sampling_defaults": {
                default.field: {"value": default.value, "origin": default.origin}
                for default in sampling_defaults(server)
            },
            "queue": server.counters.in_flight,
            "served": server.counters.served,
            "progress": model.progress,
            "cause": cause,
            "reason": reason,
            # The decoder's shape and KV pages; an encoder served alone has neither.
            "engine": _engine(engine.stats()) if engine is not None and model.kind == "chat" else None,
            "download": download_progress(server.library.download()) if server.library is not None else None,
            "failed_parts": [
                {"setting": part.setting, "path": part.path, "reason": part.reason} for part in model.failed_parts
            ],
            "released": asdict(model.released) if model.released is not None else None,
        }
    )


async def get_health(request: Request) -> models.Health | models.HealthMinimal:
    if not request.scope["state"].get("authorized", True):
        return models.HealthMinimal(ok=True)
    return health(context(request))
