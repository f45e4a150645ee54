"""The sampling defaults in force and where each came from, as `/health` and the banner show them:
each is a setting's value (handlers/generation/sampling_params.py's `DEFAULT_SETTINGS`), so its
origin is the setting's (`GET /v1/config/origins`)."""

from __future__ import annotations

from dataclasses import dataclass

from handlers.context import ServerContext, SettingOrigin
from handlers.generation.sampling_params import DEFAULT_SETTINGS


@dataclass(frozen=True)
class SamplingDefault:
    field: str  # the request field it stands in for (temperature, top_k, …)
    setting: str  # the setting that sets it (temp, top_k, …)
    value: float | int
    origin: SettingOrigin


def sampling_defaults(server: ServerContext) -> list[SamplingDefault]:
    """In DEFAULT_SETTINGS' order. A context without a configuration service (`pooled` always
    gives it one) cannot say where they came from: `default`."""
    defaults = server.limits.sampling
    origins = server.config.origins() if server.config is not None else {}
    return [
        SamplingDefault(
            field,
            setting,
            getattr(defaults, field),
            origins[setting].origin if setting in origins else "default",
        )
        for field, setting in DEFAULT_SETTINGS.items()
    ]
