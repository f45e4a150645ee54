"""`pooled pull`, `pooled list` and `pooled rm`: their arguments and the dispatch to their modules
(pooled/commands/pull_command.py, list_command.py, rm_command.py).

They take serve's settings that say where models live and how a server is reached (the same
flags, `POOLED_*` variables and defaults: pooled/configuration/settings.py), so a command finds the folder and
the server that `pooled serve` with the same environment uses.

Exit status: 0 done, 1 failed (the reason on stderr), 2 a usage error or an unknown id (naming
the known ones), 130 interrupted. Results go to stdout, notes and the progress bar to stderr.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pooled.commands.command_io import FAILED, INTERRUPTED, CommandFailed, note
from pooled.commands.list_command import list_models
from pooled.commands.pull_command import pull
from pooled.commands.rm_command import rm
from pooled.commands.server_api import ServerGone, ServerRefused
from pooled.configuration import setting_sources
from pooled.configuration.settings import Settings

SHARED_SETTINGS = (
    "models_dir",
    "catalog",
    "host",
    "port",
    "api_key",
    "download_retries",
    "download_stall_timeout",
)


@dataclass(frozen=True)
class ModelCommand:
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[Mapping[str, Any], Settings], int]


def _pull_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "target",
        metavar="ID|URL",
        help="a catalog entry's id (or pooled/<id>), or the http(s) URL of a .gguf file, saved as "
        "<models-dir>/<file name> and served as pooled/<name>",
    )
    parser.add_argument(
        "--sha256",
        metavar="DIGEST",
        help="for a URL: the file's sha256, checked before it is kept; without it the digest is printed",
    )


def _list_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", dest="as_json", action="store_true", help="the rows as JSON")


def _rm_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="ID", help="a catalog entry's id, or pooled/<name> of a model in the folder")
    parser.add_argument(
        "--yes", "-y", action="store_true", help="delete a model put in the folder by hand without asking"
    )


COMMANDS = {
    "pull": ModelCommand("download a catalog model, or a GGUF file by URL", _pull_arguments, pull),
    "list": ModelCommand("the catalog's and the folder's models, with their state", _list_arguments, list_models),
    "rm": ModelCommand("delete a model's files from the models folder", _rm_arguments, rm),
}


def add_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the commands to `pooled`'s subparsers."""
    for name, command in COMMANDS.items():
        parser = commands.add_parser(name, help=command.help, description=command.help)
        command.add_arguments(parser)
        setting_sources.add_arguments(parser, SHARED_SETTINGS)


def run(name: str, arguments: Mapping[str, Any], settings: Settings) -> int:
    _configure_logging()
    try:
        return COMMANDS[name].run(arguments, settings)
    except CommandFailed as failed:
        note(f"pooled {name}: {failed.message}")
        return failed.code
    except ServerRefused as refused:
        note(f"pooled {name}: the server answered {refused.status}: {refused.message}")
        return FAILED
    except ServerGone as gone:
        note(f"pooled {name}: {gone}")
        return FAILED
    except KeyboardInterrupt:  # outside a download (which says what it kept)
        note(f"pooled {name}: interrupted")
        return INTERRUPTED


class _ReportedFailure(logging.Filter):
    """Drops the downloader's warning that a download failed: the command reports it, once."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno == logging.WARNING and str(record.msg).startswith("download of %s failed"))


def _configure_logging() -> None:
    """pooled's own notes (a download's retries) on stderr; not httpx's line per request."""
    logging.basicConfig(level=logging.WARNING, format="pooled: %(message)s")
    logging.getLogger("pooled").setLevel(logging.INFO)
    logging.getLogger("pooled.models_folder.download_job").addFilter(_ReportedFailure())
