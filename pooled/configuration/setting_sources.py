"""Where a setting's value comes from, and the views derived from the table: flags, `POOLED_*`
variables, the config file and its profiles, the served model's catalog defaults.

`load` is the one place precedence is decided: a flag wins over a `POOLED_*` variable, which
wins over the config file (`--config`), which wins over its profile (`--profile`), which wins
over the default; it says where each value came from (`LoadedSettings.origins`). Below them
all but the default come the served model's own defaults (`with_model_defaults`): its catalog
entry's `[model.serving]` table, known once `--model` is resolved, then the sampling its
checkpoint's files recommend, known once it is loaded. The catalog's go first: an entry is
written for its exact file, so where it differs from the file's keys it does on purpose.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import Field, dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

from pooled.configuration.config_file import ConfigFile, read_config_file
from pooled.configuration.setting_types import Change, Kind, Parser, Rule, SettingsError
from pooled.configuration.settings import Settings

Origin = Literal["default", "gguf", "generation_config", "catalog", "profile", "file", "env", "flag", "live"]
# The origins of a served model's own defaults, which a change of model replaces.
MODEL_ORIGINS: tuple[Origin, ...] = ("default", "gguf", "generation_config", "catalog")


SETTINGS: tuple[Field[Any], ...] = fields(Settings)
BY_NAME: dict[str, Field[Any]] = {item.name: item for item in SETTINGS}


def env_name(name: str) -> str:
    return "POOLED_" + name.upper()


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def _parser_of(name: str) -> Parser:
    parse: Parser = BY_NAME[name].metadata["parse"]
    return parse


@dataclass(frozen=True)
class SettingField:
    """One setting as `/v1/config/fields` and docs/configuration.md show it."""

    name: str
    kind: Kind
    nullable: bool
    default: Any  # as JSON
    rule: Rule | None
    change: Change
    secret: bool
    flag: str
    env: str
    help: str


def setting_fields() -> list[SettingField]:
    rows = []
    for item in SETTINGS:
        parse, meta = _parser_of(item.name), item.metadata
        rows.append(
            SettingField(
                name=item.name,
                kind="list" if meta["repeatable"] else parse.kind,
                nullable=parse.nullable,
                default=to_data(item.name, item.default),
                rule=parse.rule,
                change=meta["change"],
                secret=meta["secret"],
                flag=flag_name(item.name),
                env=env_name(item.name),
                help=meta["help"],
            )
        )
    return rows


def from_data(name: str, data: Any) -> Any:
    """The value of setting `name` from JSON or TOML data, of its kind exactly; ValueError says
    what it takes."""
    parse = _parser_of(name)
    if not BY_NAME[name].metadata["repeatable"]:
        return parse.from_data(data)
    if not isinstance(data, list):
        raise ValueError(expects(name))
    try:
        return tuple(parse.from_data(item) for item in data)
    except ValueError:
        raise ValueError(expects(name)) from None


def to_data(name: str, value: Any) -> Any:
    """The value of setting `name` as JSON."""
    parse = _parser_of(name)
    if BY_NAME[name].metadata["repeatable"]:
        return [parse.to_data(item) for item in value]
    return parse.to_data(value)


def expects(name: str) -> str:
    """What setting `name` takes, for error messages."""
    parse = _parser_of(name)
    return f"a list, each item {parse.expects()}" if BY_NAME[name].metadata["repeatable"] else parse.expects()


def add_arguments(parser: argparse.ArgumentParser, only: Collection[str] | None = None) -> None:
    """Add one flag per setting, or per setting named in `only` (a command that reads a few, such as
    `pooled pull`, takes them under serve's names); an unset flag leaves the value to the environment
    or default."""
    for item in SETTINGS:
        if only is not None and item.name not in only:
            continue
        parser.add_argument(
            flag_name(item.name),
            dest=item.name,
            type=_parser_of(item.name),
            default=argparse.SUPPRESS,
            action="append" if item.metadata["repeatable"] else "store",
            help=f"{item.metadata['help']} (env {env_name(item.name)})".replace("%", "%%"),
        )


@dataclass(frozen=True)
class ModelDefaults:
    """Settings a model is served with unless the user sets them: its catalog entry's
    `[model.serving]` table (pooled/models_folder/catalog.py)."""

    model: str  # the catalog entry's id
    values: Mapping[str, Any]  # setting name → value, of the setting's kind
    reason: str  # why the model needs them, for the banner and /v1/config/origins


@dataclass(frozen=True)
class CheckpointDefaults:
    """Settings the served checkpoint's own files recommend: the sampling of its GGUF's
    `general.sampling.*` keys or its generation_config.json (pooled/configuration/
    model_sampling.py)."""

    origin: Literal["gguf", "generation_config"]
    file: str  # the GGUF file or the generation_config.json
    values: Mapping[str, Any]  # setting name → value, of the setting's kind


@dataclass(frozen=True)
class LoadedSettings:
    """The settings in force and where each came from (`config` and `profile` say which file
    and profile, for the settings whose origin is `file` or `profile`; `model_defaults` which
    catalog entry, for those whose origin is `catalog`; `checkpoint_defaults` which file, for
    those whose origin is `gguf` or `generation_config`)."""

    settings: Settings
    origins: Mapping[str, Origin]
    model_defaults: ModelDefaults | None = None
    checkpoint_defaults: CheckpointDefaults | None = None

    @classmethod
    def of(cls, settings: Settings) -> LoadedSettings:
        """Settings built in code (tests, tools), as if each were a default."""
        return cls(settings, dict.fromkeys(BY_NAME, "default"))


def load(arguments: Mapping[str, Any], environ: Mapping[str, str] = os.environ) -> Settings:
    """The settings of `load_with_origins`, for callers that need no origins."""
    return load_with_origins(arguments, environ).settings


def load_with_origins(arguments: Mapping[str, Any], environ: Mapping[str, str] = os.environ) -> LoadedSettings:
    """Flags win over `POOLED_*` variables, which win over the config file's keys, which win over
    its chosen profile's, which win over the defaults. SettingsError names what cannot be read."""
    values: dict[str, Any] = {}
    origins_found: dict[str, Origin] = {}
    for name in ("config", "profile"):  # they choose the file, so only flags and variables set them
        if name in arguments:
            values[name], origins_found[name] = arguments[name], "flag"
        elif env_name(name) in environ:
            values[name], origins_found[name] = _from_env(name, environ[env_name(name)]), "env"
    layers = _file_layers(values.get("config"), values.get("profile"))
    for item in SETTINGS:
        name = item.name
        if name in values:
            continue
        repeatable = item.metadata["repeatable"]
        if name in arguments:
            values[name] = tuple(arguments[name]) if repeatable else arguments[name]
            origins_found[name] = "flag"
        elif env_name(name) in environ:
            values[name], origins_found[name] = _from_env(name, environ[env_name(name)]), "env"
        else:
            for origin, table, where in layers:
                if name in table:
                    values[name], origins_found[name] = _from_file(name, table[name], where), origin
                    break
    origins_found = {item.name: origins_found.get(item.name, "default") for item in SETTINGS}
    return LoadedSettings(Settings(**values), origins_found)


def with_model_defaults(
    loaded: LoadedSettings, defaults: ModelDefaults | None, checkpoint: CheckpointDefaults | None = None
) -> LoadedSettings:
    """The served model's defaults under everything the user set: a setting whose value is the
    built-in default, or an earlier model's, takes this model's catalog value (origin `catalog`),
    else its checkpoint's (origin `gguf` or `generation_config`), else the built-in default
    (None: a model the catalog does not know, a checkpoint that recommends nothing)."""
    values: dict[str, Any] = {}
    origins: dict[str, Origin] = dict(loaded.origins)
    catalog_values = defaults.values if defaults is not None else {}
    checkpoint_values = checkpoint.values if checkpoint is not None else {}
    for item in SETTINGS:
        name = item.name
        if origins[name] not in MODEL_ORIGINS:
            continue
        if name in catalog_values:
            values[name], origins[name] = catalog_values[name], "catalog"
        elif checkpoint is not None and name in checkpoint_values:
            values[name], origins[name] = checkpoint_values[name], checkpoint.origin
        else:
            values[name], origins[name] = item.default, "default"
    return LoadedSettings(replace(loaded.settings, **values), origins, defaults, checkpoint)


def _file_layers(config: str | None, profile: str | None) -> list[tuple[Origin, Mapping[str, Any], str]]:
    """The config file's keys, then its profile's, each with how an error names where it is; every
    key of the file (every profile's too) is read here, so a bad one stops the start even when a
    flag overrides it or its profile is not chosen."""
    if config is None:
        if profile is not None:
            raise SettingsError(f"--profile {profile}: a profile is a table of the --config file; no file is given")
        return []
    path = Path(config).expanduser()
    document: ConfigFile = read_config_file(path, BY_NAME.keys())
    for name, data in document.values.items():
        _from_file(name, data, str(path))
    for table_name, table in document.profiles.items():
        for name, data in table.items():
            _from_file(name, data, f"{path} [profile.{table_name}]")
    layers: list[tuple[Origin, Mapping[str, Any], str]] = [("file", document.values, str(path))]
    if profile is not None:
        if profile not in document.profiles:
            known = ", ".join(sorted(document.profiles)) or "none"
            raise SettingsError(f"--profile {profile}: {path} has no [profile.{profile}] table (its profiles: {known})")
        layers.append(("profile", document.profiles[profile], f"{path} [profile.{profile}]"))
    return layers


def _from_env(name: str, text_value: str) -> Any:
    parse = _parser_of(name)
    try:
        if BY_NAME[name].metadata["repeatable"]:
            return tuple(parse(part) for part in text_value.split(",") if part)
        return parse(text_value)
    except ValueError:
        raise SettingsError(f"{env_name(name)}={text_value!r}: {name} takes {expects(name)}") from None


def _from_file(name: str, data: Any, where: str) -> Any:
    """A TOML value: of the setting's kind, or a string read as the flag would read it (TOML has no
    null: `ctx = "auto"`)."""
    parse = _parser_of(name)
    try:
        if isinstance(data, str) and BY_NAME[name].metadata["repeatable"]:
            return tuple(parse(part) for part in data.split(",") if part)
        if isinstance(data, str):
            return parse(data)
        return from_data(name, data)
    except ValueError:
        raise SettingsError(f"{where}: key '{name}' takes {expects(name)}, not {data!r}") from None


def describe() -> Sequence[tuple[str, str, str, str, str]]:
    """(flag, variable, default, how a change takes effect, help) for each setting, for
    docs/configuration.md."""
    rows = []
    for item in SETTINGS:
        default = "none" if item.default in (None, ()) else str(item.default)
        rows.append((flag_name(item.name), env_name(item.name), default, item.metadata["change"], _help(item)))
    return rows


def _help(item: Field[Any]) -> str:
    rule = _parser_of(item.name).rule
    rule_text = f" Allowed: {rule}." if rule is not None and not rule.choices else ""
    return str(item.metadata["help"]) + rule_text
