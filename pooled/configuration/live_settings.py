"""`LiveSettings`: the settings in force on a running server, and where each value came from.

`PATCH /v1/config` writes here, and so does a change of model (`serve_model`: the new model's
own defaults, its catalog entry's and its checkpoint's, replace the old one's); `GET /v1/config`
and the server's parts that apply a change (the generation limits and sampling defaults, the
guards' origins, the engine's queue bound: see pooled/web/app.py and pooled/cli.py, which
subscribe them) read from here. A change is checked whole before anything is swapped, so a
request with one bad value changes nothing.

Threads: `apply` runs on the event loop (the PATCH handler); `current` and `origins` may be read
from any thread. One lock guards the pair (settings, origins), swapped together; subscribers are
called under it, in the order the changes were made, and must only assign (no waiting).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from pooled.configuration.setting_sources import (
    BY_NAME,
    CheckpointDefaults,
    LoadedSettings,
    ModelDefaults,
    Origin,
    expects,
    from_data,
    with_model_defaults,
)
from pooled.configuration.settings import Settings


class SettingRefused(ValueError):
    """A change `LiveSettings` will not make: `name` is the setting (or the unknown name), `code`
    says which rule (`unknown_setting`, `invalid_value`, `secret_setting`)."""

    def __init__(self, name: str, code: str, message: str) -> None:
        super().__init__(message)
        self.name, self.code, self.message = name, code, message


class LiveSettings:
    def __init__(self, loaded: LoadedSettings) -> None:
        self._lock = threading.Lock()
        self._settings = loaded.settings
        self._origins: dict[str, Origin] = dict(loaded.origins)
        self._model_defaults = loaded.model_defaults
        self._checkpoint_defaults = loaded.checkpoint_defaults
        self._subscribers: list[Callable[[Settings], None]] = []

    @property
    def current(self) -> Settings:
        return self._settings

    @property
    def origins(self) -> dict[str, Origin]:
        with self._lock:
            return dict(self._origins)

    @property
    def model_defaults(self) -> ModelDefaults | None:
        """The served model's catalog defaults: where the settings of origin `catalog` came from."""
        return self._model_defaults

    @property
    def checkpoint_defaults(self) -> CheckpointDefaults | None:
        """The served checkpoint's own sampling: where the settings of origin `gguf` or
        `generation_config` came from."""
        return self._checkpoint_defaults

    def subscribe(self, callback: Callable[[Settings], None]) -> None:
        """`callback(settings)` after every change, with the settings now in force."""
        with self._lock:
            self._subscribers.append(callback)

    def check(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        """The values `changes` (setting name → JSON value) asks for, read as the settings' own; the
        first refusal raises SettingRefused. Secrets are never changed here."""
        values: dict[str, Any] = {}
        for name, data in changes.items():
            if name not in BY_NAME:
                raise SettingRefused(name, "unknown_setting", f"'{name}' is not a setting (GET /v1/config/fields)")
            if BY_NAME[name].metadata["secret"]:
                raise SettingRefused(name, "secret_setting", f"'{name}' is secret: it is set at start only")
            try:
                values[name] = from_data(name, data)
            except ValueError:
                raise SettingRefused(
                    name, "invalid_value", f"'{name}' takes {expects(name)}; got {_shown(data)}"
                ) from None
        return values

    def changed(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Those of `values` that differ from the settings in force."""
        current = self._settings
        return {name: value for name, value in values.items() if getattr(current, name) != value}

    def apply(self, changes: Mapping[str, Any]) -> Settings:
        """Checks every change, then swaps them in together; the changed settings' origin becomes
        `live`. Returns the settings now in force."""
        values = self.changed(self.check(changes))
        with self._lock:
            values = {name: value for name, value in values.items() if getattr(self._settings, name) != value}
            if not values:
                return self._settings
            self._settings = replace(self._settings, **values)
            self._origins.update(dict.fromkeys(values, "live"))
            for callback in self._subscribers:
                callback(self._settings)
            return self._settings

    def serve_model(self, defaults: ModelDefaults | None, checkpoint: CheckpointDefaults | None = None) -> Settings:
        """The newly served model's own defaults, its catalog entry's and its checkpoint's (None:
        it has none), in place of the last model's, under every value the user set
        (pooled/configuration/setting_sources.py's `with_model_defaults`). Returns the settings now
        in force."""
        with self._lock:
            loaded = LoadedSettings(self._settings, self._origins, self._model_defaults, self._checkpoint_defaults)
            served = with_model_defaults(loaded, defaults, checkpoint)
            changed = served.settings != self._settings
            self._settings, self._origins = served.settings, dict(served.origins)
            self._model_defaults, self._checkpoint_defaults = defaults, checkpoint
            if changed:
                for callback in self._subscribers:
                    callback(self._settings)
            return self._settings


def _shown(data: Any) -> str:
    text = json.dumps(data)
    return text if len(text) <= 80 else text[:77] + "..."
