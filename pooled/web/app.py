"""Assemble the ASGI app: guards around FastAPI, the generated routes, the error renderer."""

from __future__ import annotations

import time
from dataclasses import replace

from fastapi import FastAPI
from starlette.types import ASGIApp

from generated.routes import router
from handlers.audio.form import MAX_FIELD_BYTES
from handlers.context import AccessRules, GenerationLimits, ImageFetch, ModelLibrary, ModelService, ServerContext
from handlers.generation.sampling_params import SamplingDefaults
from handlers.generation.volatile_lines import volatile_line_pattern
from handlers.openai_responses.websocket import responses_socket
from handlers.response_store import ResponseStore
from pooled.configuration.config_service import Reloader, SettingsConfig
from pooled.configuration.live_settings import LiveSettings
from pooled.configuration.setting_sources import LoadedSettings
from pooled.configuration.settings import VISION_MAX_BODY, Settings
from pooled.web import error_bodies
from pooled.web.counting import RequestCounting
from pooled.web.guards import Guards
from pooled.web.rate_limit import RateLimit


def server_context(
    settings: Settings,
    model: ModelService,
    library: ModelLibrary | None = None,
    live: LiveSettings | None = None,
    reload: Reloader | None = None,
) -> ServerContext:
    """The state handlers share: the model, its library, the response store, the request counters,
    and the settings in force (`live`; over `settings` alone when not given): a change to them
    replaces the limits, the guards' rules, the volatile-line pattern and the LoRA switch at once.
    `reload` loads the model again for a change that needs it (none: such a change is a 409)."""
    live = live if live is not None else LiveSettings(LoadedSettings.of(settings))
    settings = live.current
    responses = ResponseStore(settings.stored_responses, settings.stored_responses_bytes, settings.stored_response_idle)
    server = ServerContext(
        model=model,
        port=settings.port,
        created=int(time.time()),
        responses=responses,
        limits=generation_limits(settings),
        volatile_lines=volatile_line_pattern(settings.volatile_line_pattern),
        lora_admin=settings.lora_admin,
        ui=settings.server_ui,
        library=library,
        config=SettingsConfig(live, reload),
        access=access_rules(settings),
    )
    live.subscribe(lambda changed: apply_live(server, changed))
    return server


def generation_limits(settings: Settings) -> GenerationLimits:
    return GenerationLimits(
        request_timeout_s=settings.request_timeout,
        max_output_tokens=settings.max_output_tokens,
        max_output_tokens_finish=settings.max_output_tokens_finish,
        keepalive_interval_s=settings.keepalive_interval,
        max_embedding_inputs=settings.max_embedding_inputs,
        max_images=settings.max_images,
        max_audio_bytes=settings.max_audio_bytes,
        max_audio_seconds=settings.max_audio_seconds,
        image_fetch=(
            ImageFetch(settings.image_fetch_timeout, settings.image_fetch_max_bytes)
            if settings.image_url_fetch
            else None
        ),
        sampling=SamplingDefaults(
            settings.temp, settings.top_k, settings.top_p, settings.min_p, settings.repeat_penalty
        ),
    )


def access_rules(settings: Settings) -> AccessRules:
    return AccessRules(allow_origin=frozenset(settings.allow_origin), max_body=settings.max_body)


def apply_live(server: ServerContext, settings: Settings) -> None:
    """The live settings' new values, each part replaced in one assignment (handlers and guards
    read each once per request)."""
    server.limits = generation_limits(settings)
    server.access = access_rules(settings)
    server.volatile_lines = volatile_line_pattern(settings.volatile_line_pattern)
    server.lora_admin = settings.lora_admin


def build_app(settings: Settings, server: ServerContext) -> ASGIApp:
    """The served app; FastAPI's own schema and docs are off, as the spec is served instead."""
    app = FastAPI(title="pooled", openapi_url=None, docs_url=None, redoc_url=None)
    app.state.context = server
    app.include_router(router)
    app.add_api_websocket_route("/v1/responses", responses_socket)
    error_bodies.install(app)
    counted: ASGIApp = RequestCounting(app, server.counters)
    if settings.rate_limit_rpm is not None:
        counted = RateLimit(counted, settings.rate_limit_rpm, server.counters)
    return Guards(counted, settings, lambda: served_access(server))


def served_access(server: ServerContext) -> AccessRules:
    """The access rules in force: while the model takes images (they come inline, base64), the
    body limit is at least VISION_MAX_BODY; while a speech model serves, at least an audio upload
    and its form's other fields."""
    access, engine = server.access, server.model.engine
    least = access.max_body
    if engine is not None and engine.vision is not None:
        least = max(least, VISION_MAX_BODY)
    if server.model.speech is not None:
        least = max(least, server.limits.max_audio_bytes + MAX_FIELD_BYTES)
    return replace(access, max_body=least) if least != access.max_body else access
