"""Settings: flag over environment over default, and the docs list every one."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from pooled.configuration import setting_sources
from pooled.configuration.settings import Settings

DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def parse(argv: list[str], environ: dict[str, str]) -> Settings:
    parser = argparse.ArgumentParser()
    setting_sources.add_arguments(parser)
    return setting_sources.load(vars(parser.parse_args(argv)), environ)


def test_defaults() -> None:
    settings = parse([], {})
    assert (settings.host, settings.port, settings.max_body, settings.max_queue) == ("127.0.0.1", 8080, 4 << 20, 8)
    assert settings.api_key is None and settings.model is None


def test_flag_wins_over_environment() -> None:
    environ = {
        "POOLED_PORT": "9001",
        "POOLED_API_KEY": "from-env",
        "POOLED_ALLOW_ORIGIN": "https://a.example, https://b.example/",
    }
    settings = parse(["--port", "9002"], environ)
    assert settings.port == 9002
    assert settings.api_key == "from-env"
    assert settings.allow_origin == ("https://a.example", "https://b.example")


def test_bad_value_is_refused() -> None:
    with pytest.raises(SystemExit):
        parse(["--port", "eighty"], {})
    with pytest.raises(SystemExit):
        parse(["--quantization", "int4"], {})
    assert parse(["--quantization", "w8a8"], {}).quantization == "w8a8"


def test_docs_list_every_setting_with_its_default() -> None:
    page = DOCS.read_text(encoding="utf-8")
    for flag, env, default, change, _ in setting_sources.describe():
        assert f"| `{flag}` | `{env}` | `{default}` | {change} |" in page, flag


def test_help_lists_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(["--help"], {})
    text = capsys.readouterr().out
    for flag, *_ in setting_sources.describe():
        assert flag in text
