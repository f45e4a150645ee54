"""The config file (`--config pooled.toml`): settings by their names, and profiles.

    max_queue = 16
    allow_origin = ["https://app.example"]

    [profile.big]
    decode_lanes = 64
    kv_memory = 8589934592

Top-level keys are settings (`pooled/configuration/settings.py`'s names); `[profile.NAME]` tables hold
settings too, and `--profile NAME` picks one, below the file's own keys. The file is read with
the standard library's `tomllib`. A key that names no setting, anywhere in the file, is an error
at start-up naming the key and the file, as a mistyped name would otherwise be silently ignored;
the values are read by pooled/configuration/settings.py, which decides precedence.
"""

from __future__ import annotations

import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pooled.configuration.setting_types import SettingsError

PROFILES_KEY = "profile"
CHOSEN_ELSEWHERE = ("config", "profile")  # settings that choose the file itself: flags or variables only


@dataclass(frozen=True)
class ConfigFile:
    path: Path
    values: Mapping[str, Any]  # the top-level settings
    profiles: Mapping[str, Mapping[str, Any]]  # by name


def read_config_file(path: Path, known: Collection[str]) -> ConfigFile:
    try:
        with path.open("rb") as handle:
            document = tomllib.load(handle)
    except OSError as error:
        raise SettingsError(f"--config {path}: cannot read it: {error.strerror or error}") from None
    except tomllib.TOMLDecodeError as error:
        raise SettingsError(f"--config {path}: not valid TOML: {error}") from None
    profiles = document.pop(PROFILES_KEY, {})
    if not isinstance(profiles, dict) or not all(isinstance(table, dict) for table in profiles.values()):
        raise SettingsError(
            f"{path}: '{PROFILES_KEY}' holds [profile.NAME] tables; a profile is chosen with --profile NAME"
        )
    _check_keys(path, document, known, "")
    for name, table in profiles.items():
        _check_keys(path, table, known, f"[profile.{name}] ")
    return ConfigFile(path, document, profiles)


def _check_keys(path: Path, table: Mapping[str, Any], known: Collection[str], where: str) -> None:
    for key in table:
        if key in CHOSEN_ELSEWHERE:
            raise SettingsError(f"{path}: {where}key '{key}' is chosen by a flag or variable, not in the file")
        if key not in known:
            raise SettingsError(f"{path}: {where}key '{key}' is not a setting (docs/configuration.md lists them)")
