"""`SettingsConfig`: `/v1/config` over the live settings (handlers/context.py's `ConfigService`).

A change is refused whole, before anything is applied: an unknown name or a bad value (400,
naming the setting and what it takes), a secret (403), a setting that only a restart applies
(409), or one that only a model reload applies unless the request asks for the reload (409).
A reload is the model host's switch to the same model with the new settings; the settings
change only once it serves. A setting set to the value it already has is no change: a client
may send back what `GET /v1/config` gave it with one value edited.

Threads: every method runs on the event loop; a reload runs on the model host's switch thread,
awaited shielded, so a client that goes away never cancels a reload half done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, get_args

from handlers.context import ConfigRefused, OriginView, SettingRule, SettingView
from pooled.configuration.live_settings import LiveSettings, SettingRefused
from pooled.configuration.setting_sources import BY_NAME, setting_fields, to_data
from pooled.configuration.setting_types import Change
from pooled.configuration.settings import Settings
from pooled.hosting.model_host import ModelHost, SwitchFailed, SwitchRefused

Reloader = Callable[[Settings], Awaitable[None]]


class SettingsConfig:
    def __init__(self, live: LiveSettings, reload: Reloader | None = None) -> None:
        self._live = live
        self._reload = reload

    def values(self) -> dict[str, Any]:
        settings = self._live.current
        return {
            name: to_data(name, getattr(settings, name))
            for name, item in BY_NAME.items()
            if not item.metadata["secret"]
        }

    def fields(self) -> list[SettingView]:
        return [
            SettingView(
                name=row.name,
                kind=row.kind,
                nullable=row.nullable,
                default=None if row.secret else row.default,
                rule=None
                if row.rule is None
                else SettingRule(row.rule.minimum, row.rule.exclusive_minimum, row.rule.maximum, row.rule.choices),
                change=row.change,
                secret=row.secret,
                flag=row.flag,
                env=row.env,
                help=row.help,
            )
            for row in setting_fields()
        ]

    def origins(self) -> dict[str, OriginView]:
        settings = self._live.current
        file = str(Path(settings.config).expanduser()) if settings.config else None
        views = {"file": OriginView("file", file), "profile": OriginView("profile", file, settings.profile)}
        if (model := self._live.model_defaults) is not None:
            views["catalog"] = OriginView("catalog", catalog=model.model, reason=model.reason)
        if (checkpoint := self._live.checkpoint_defaults) is not None:
            views[checkpoint.origin] = OriginView(checkpoint.origin, checkpoint.file)
        return {name: views.get(origin, OriginView(origin)) for name, origin in self._live.origins.items()}

    async def change(self, changes: Mapping[str, Any], reload: bool) -> dict[str, Any]:
        try:
            changed = self._live.changed(self._live.check(changes))
        except SettingRefused as refused:
            status = 403 if refused.code == "secret_setting" else 400
            raise ConfigRefused(status, refused.code, refused.message, refused.name) from None
        by_change = {kind: sorted(n for n in changed if _change(n) == kind) for kind in get_args(Change)}
        if by_change["restart"]:
            names = ", ".join(by_change["restart"])
            message = f"{names}: only a restart applies {'it' if len(by_change['restart']) == 1 else 'them'}"
            raise ConfigRefused(409, "restart_required", message, by_change["restart"][0])
        if by_change["reload"]:
            names = ", ".join(by_change["reload"])
            if not reload:
                message = f"{names}: the model must load again to apply this; send PATCH /v1/config?reload=true"
                raise ConfigRefused(409, "reload_required", message, by_change["reload"][0])
            if self._reload is None:
                message = f"{names}: this server cannot load its model again; restart it with the new settings"
                raise ConfigRefused(409, "reload_unavailable", message, by_change["reload"][0])
            await self._reload(replace(self._live.current, **changed))
        self._live.apply(changes)
        return self.values()


def host_reloader(host: ModelHost) -> Reloader:
    """A reload through `host`: 409 while it cannot start one (loading, switching, draining), 500
    when the model did not load with the new settings (it serves again with the old ones)."""

    async def reload(settings: Settings) -> None:
        try:
            done = host.reload(settings)
        except SwitchRefused as refused:
            raise ConfigRefused(409, "busy", f"cannot reload now: {refused}") from None
        try:
            await asyncio.shield(asyncio.wrap_future(done))
        except SwitchFailed as failed:
            message = f"the reload failed, the old settings serve again: {failed}"
            raise ConfigRefused(500, "reload_failed", message) from None

    return reload


def _change(name: str) -> Change:
    change: Change = BY_NAME[name].metadata["change"]
    return change
