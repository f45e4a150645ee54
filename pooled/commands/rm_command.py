"""`pooled rm ID`: delete a catalog entry's files, finished or partial, and say what that freed.

Through a running server it is the server's POST /v1/models/remove, which refuses (409) the model
it serves or is loading and the entry it is downloading; this command then exits 1 with the
server's message. Without one, the entry's files go from the models folder, unless another process
is downloading it (it holds the folder's lock: pooled/models_folder/downloads.py).

A model put in the folder by hand (`pooled/<name>`) is deleted only when no server runs (a server
could be serving it or switch to it), after `--yes` or a confirmation typed at a terminal, and only
inside the models folder: its path, links resolved, must lie in it; a link is removed, never what
it points to.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pooled.commands.command_io import FAILED, USAGE, CommandFailed, catalog_entry, catalog_of, known_ids, models_dir_of
from pooled.commands.list_command import size_on_disk
from pooled.commands.server_api import PooledServer, ServerRefused, find_server
from pooled.configuration.settings import Settings
from pooled.human_units import human_size
from pooled.models_folder.catalog import CatalogEntry
from pooled.models_folder.model_ids import PREFIX, model_id_for
from pooled.models_folder.models_dir import LOCK, disk_state, folder_models, remove_entry

try:
    import fcntl
except ImportError:  # not POSIX: no lock between processes to respect
    fcntl = None  # type: ignore[assignment]


def rm(arguments: Mapping[str, Any], settings: Settings) -> int:
    target: str = arguments["target"]
    server = find_server(settings)
    if server is not None:
        with contextlib.closing(server):
            return remove_through_server(server, target)
    models_dir = models_dir_of(settings)
    catalog = catalog_of(settings)
    entry = catalog_entry(catalog, target)
    if entry is not None:
        return remove_catalog_entry(entry, models_dir)
    by_id = {model_id_for(path): path for path in folder_models(models_dir, catalog.keys())}
    path = by_id.get(target) or by_id.get(PREFIX + target)
    if path is None:
        raise CommandFailed(
            USAGE,
            f"no model {target!r}: the catalog has {known_ids(catalog)}; "
            f"the models folder {models_dir} has {', '.join(sorted(by_id)) or 'no other models'}",
        )
    return remove_folder_model(path, models_dir, model_id_for(path), arguments["yes"])


def remove_through_server(server: PooledServer, model_id: str) -> int:
    try:
        answer = server.post("/v1/models/remove", {"id": model_id})
    except ServerRefused as refused:
        if refused.status != 404:
            raise CommandFailed(FAILED, f"the server at {server.base} refused: {refused.message}") from None
        listed = {model["id"] for model in server.get("/v1/models").get("data", [])}
        if model_id in listed or PREFIX + model_id in listed:
            raise CommandFailed(
                FAILED,
                f"{model_id} is a model put in the models folder by hand, which the server at {server.base} "
                "serves or may switch to: pooled rm deletes it only while no server runs",
            ) from None
        raise CommandFailed(USAGE, f"the server at {server.base}: {refused.message}") from None
    freed = int(answer["freed_bytes"])
    if freed == 0:
        print(f"{model_id}: nothing to remove (not on the server's disk)")
    else:
        print(f"removed {model_id} on the server at {server.base}: freed {human_size(freed)}")
    return 0


def remove_catalog_entry(entry: CatalogEntry, models_dir: Path) -> int:
    before = disk_state(entry, models_dir)
    with _download_lock(entry.folder(models_dir), entry.id):
        freed = remove_entry(entry, models_dir)
    if before.state == "absent" and freed == 0:
        print(f"{entry.id}: nothing to remove (not in {models_dir})")
    else:
        print(f"removed {entry.id} ({before.state}): freed {human_size(freed)}")
    return 0


def remove_folder_model(path: Path, models_dir: Path, model_id: str, confirmed: bool) -> int:
    root = models_dir.resolve()
    link = path.is_symlink()
    inside = path.parent.resolve().is_relative_to(root) and (
        link or (path.resolve().is_relative_to(root) and path.resolve() != root)
    )
    if not inside:
        raise CommandFailed(FAILED, f"{path} resolves outside the models folder {root}: not deleting it")
    freed = size_on_disk(path, follow_links=False)
    what = f"the link {path} (its target {path.resolve()} is kept)" if link else f"{path} ({human_size(freed)})"
    if not confirmed and not _confirm(f"delete {what}? [y/N] "):
        raise CommandFailed(FAILED, f"{model_id}: nothing deleted (pass --yes to delete {what})")
    if path.is_dir() and not link:
        shutil.rmtree(path)
    else:
        path.unlink()
        if path.parent.resolve() != root:  # a GGUF one folder down: its folder goes too once empty
            with contextlib.suppress(OSError):
                path.parent.rmdir()
    print(f"removed {model_id} ({what}): freed {human_size(freed)}")
    return 0


def _confirm(question: str) -> bool:
    """A yes typed at a terminal; no terminal is a no (a script passes --yes)."""
    if not sys.stdin.isatty():
        return False
    try:
        return input(question).strip().lower() in ("y", "yes")
    except EOFError:
        return False


@contextlib.contextmanager
def _download_lock(folder: Path, entry_id: str) -> Iterator[None]:
    """Hold the entry's download lock while its files go, so that no other process's download of it
    runs meanwhile; CommandFailed while one does."""
    lock = folder / LOCK
    if fcntl is None or not lock.is_file():
        yield
        return
    with lock.open("a") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CommandFailed(
                FAILED, f"{entry_id} is being downloaded by another process (it holds {lock}): stop it first"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
