"""What `pooled pull`, `list` and `rm` share: how a command fails (CommandFailed, caught once by the
dispatcher in pooled/commands/model_commands.py), where notes go (stderr; stdout holds results only), and the
models folder and catalog the settings name.
"""

import sys
from collections.abc import Mapping
from pathlib import Path

from pooled.configuration.settings import Settings
from pooled.models_folder.catalog import CatalogEntry, CatalogError, load_catalog
from pooled.models_folder.model_ids import bare

USAGE = 2  # an unknown id, a bad argument, an unreadable catalog
FAILED = 1  # a download that did not verify, a refusal, a server gone
INTERRUPTED = 130  # Ctrl-C, as a shell reports SIGINT


class CommandFailed(Exception):
    """The command ends with `code`; `message` says why (printed to stderr)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def models_dir_of(settings: Settings) -> Path:
    return Path(settings.models_dir).expanduser()


def catalog_of(settings: Settings) -> dict[str, CatalogEntry]:
    try:
        return load_catalog(Path(settings.catalog).expanduser() if settings.catalog else None)
    except CatalogError as error:
        raise CommandFailed(USAGE, str(error)) from None


def catalog_entry(catalog: Mapping[str, CatalogEntry], model_id: str) -> CatalogEntry | None:
    """The entry `model_id` names, as `id` or `pooled/id`."""
    return catalog.get(bare(model_id))


def known_ids(catalog: Mapping[str, CatalogEntry]) -> str:
    return ", ".join(sorted(catalog)) or "none"
