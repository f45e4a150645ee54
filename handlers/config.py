"""`/v1/config`: the settings in force, what each setting is, where each value came from, and
changes while serving (`PATCH`). The server's side (`ConfigService`) checks and applies; here the
answers take the spec's shapes and its refusals become errors in OpenAI's shape.

Secrets (`api_key`) are left out of `GET /v1/config` rather than shown as null, so null keeps
one meaning there: the setting is unset.
"""

from __future__ import annotations

from dataclasses import asdict

from fastapi import Request

from generated import models
from handlers.api_error import ApiError
from handlers.context import ConfigRefused, ConfigService, SettingView, context


async def get_config(request: Request) -> models.Config:
    return models.Config.model_validate(_service(request).values())


async def update_config(request: Request, body: models.ConfigPatch, reload: bool = False) -> models.Config:
    try:
        values = await _service(request).change(body.model_dump(), reload)
    except ConfigRefused as refused:
        raise ApiError(refused.status, refused.message, code=refused.code, param=refused.param) from None
    return models.Config.model_validate(values)


async def list_config_fields(request: Request) -> models.ConfigFieldList:
    data = [_field(view) for view in _service(request).fields()]
    return models.ConfigFieldList(object="list", data=data)


async def get_config_origins(request: Request) -> models.ConfigOrigins:
    origins = {
        name: {key: value for key, value in asdict(view).items() if value is not None}
        for name, view in _service(request).origins().items()
    }
    return models.ConfigOrigins.model_validate(origins)


def _service(request: Request) -> ConfigService:
    config = context(request).config
    if config is None:
        raise ApiError(404, "This server does not serve its configuration.", code="not_found")
    return config


def _field(view: SettingView) -> models.ConfigField:
    rule = None
    if view.rule is not None:
        parts = {
            "minimum": view.rule.minimum,
            "exclusive_minimum": view.rule.exclusive_minimum,
            "maximum": view.rule.maximum,
            "choices": list(view.rule.choices) or None,
        }
        rule = models.ConfigRule.model_validate({key: value for key, value in parts.items() if value is not None})
    return models.ConfigField.model_validate({**asdict(view), "rule": rule})
