"""`pooled pull ID|URL`: download a catalog entry, through the running server when one answers
(its catalog and /health then show the download) or into the models folder in this process; or a
GGUF file by URL, always in this process (pooled/models_folder/url_pull.py: the server's API takes catalog ids).

Either way the same progress bar (pooled/commands/progress_bar.py) and the same outcome: exit 0 once every
file's digest matched, 1 with the downloader's reason otherwise, 130 on Ctrl-C, which keeps the
part (through the server: cancels the server's download, whose part is kept too) for the same
command to resume.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

from tqdm.contrib.logging import logging_redirect_tqdm

from pooled.commands.command_io import (
    FAILED,
    INTERRUPTED,
    USAGE,
    CommandFailed,
    catalog_entry,
    catalog_of,
    known_ids,
    models_dir_of,
    note,
)
from pooled.commands.progress_bar import ProgressBar
from pooled.commands.server_api import PooledServer, ServerRefused, find_server
from pooled.configuration.settings import Settings
from pooled.human_units import human_size
from pooled.models_folder.catalog import CatalogEntry
from pooled.models_folder.download_job import DownloadProgress, download
from pooled.models_folder.model_ids import model_id_for
from pooled.models_folder.models_dir import disk_state
from pooled.models_folder.url_pull import UrlFailed, UrlRefused, already_there, fetch, is_url, kept, plan, remote_size

POLL_S = 0.2  # how often a pull through the server reads the catalog row


def pull(arguments: Mapping[str, Any], settings: Settings) -> int:
    target: str = arguments["target"]
    digest: str | None = arguments["sha256"]
    if is_url(target):
        return pull_url(target, digest, models_dir_of(settings), settings)
    if digest is not None:
        raise CommandFailed(USAGE, "--sha256 is for a URL pull: a catalog entry is checked against its catalog digests")
    server = find_server(settings)
    if server is not None:
        with closing(server):
            return pull_through_server(server, target)
    catalog = catalog_of(settings)
    entry = catalog_entry(catalog, target)
    if entry is None:
        raise CommandFailed(USAGE, f"no catalog entry {target!r}; the catalog has: {known_ids(catalog)}")
    return pull_into_folder(entry, models_dir_of(settings), settings)


def pull_into_folder(entry: CatalogEntry, models_dir: Path, settings: Settings) -> int:
    """The download in this process (no server answered)."""
    before = disk_state(entry, models_dir)
    if before.state == "verified":
        print(f"{entry.id}: already downloaded and verified ({human_size(entry.size)}) in {entry.folder(models_dir)}")
        return 0
    if before.bytes:
        note(f"{entry.id}: resuming, {human_size(before.bytes)} of {human_size(entry.size)} already in {models_dir}")
    else:
        note(f"{entry.id}: downloading {human_size(entry.size)} into {models_dir}")
    bar = ProgressBar(entry.id, entry.size)
    try:
        with logging_redirect_tqdm():
            final = download(
                entry,
                models_dir,
                lambda progress: _show(bar, progress),
                retries=settings.download_retries,
                stall_timeout_s=settings.download_stall_timeout,
            )
    except KeyboardInterrupt:
        raise CommandFailed(INTERRUPTED, f"interrupted: {_kept(entry, models_dir)}") from None
    finally:
        bar.close()
    if final.state != "done":
        left = _kept(entry, models_dir) if disk_state(entry, models_dir).bytes else "nothing kept"
        raise CommandFailed(FAILED, f"{entry.id}: the download failed: {final.error} ({left})")
    print(f"{entry.id}: verified ({human_size(entry.size)}) in {entry.folder(models_dir)}; {_serve_hint(entry.id)}")
    return 0


def pull_through_server(server: PooledServer, model_id: str) -> int:
    """The server's download of a catalog entry, followed on its catalog row until it ends."""
    try:
        row = server.post("/v1/models/download", {"id": model_id})
    except ServerRefused as refused:
        code = USAGE if refused.status == 404 else FAILED
        raise CommandFailed(code, f"the server at {server.base} refused the download: {refused.message}") from None
    entry_id: str = row["id"]
    note(f"{entry_id}: downloading through the server at {server.base} ({human_size(row['size_bytes'])})")
    bar = ProgressBar(entry_id, row["size_bytes"])
    try:
        progress = _follow(server, row, bar)
    except KeyboardInterrupt:
        bar.close()
        raise CommandFailed(INTERRUPTED, _cancel_on_server(server, entry_id)) from None
    bar.close()
    if progress["state"] == "done":
        print(
            f"{entry_id}: verified ({human_size(progress['total'])}) by the server at {server.base}; "
            f"{_serve_hint(entry_id)} or POST /v1/models/switch"
        )
        return 0
    if progress["state"] == "failed":
        raise CommandFailed(FAILED, f"{entry_id}: the server's download failed: {progress['error']}")
    raise CommandFailed(
        FAILED,
        f"{entry_id}: the server's download was cancelled (by another client, or the server stopping); "
        f"its part is kept: `pooled pull {entry_id}` resumes it",
    )


def pull_url(url: str, digest: str | None, models_dir: Path, settings: Settings) -> int:
    """A GGUF by URL into `<models_dir>/<file name>`, in this process whether or not a server runs."""
    try:
        where = plan(url, digest, models_dir)
    except UrlRefused as refused:
        raise CommandFailed(USAGE, str(refused)) from None
    if where.final.exists():
        stays, message = already_there(where)
        if not stays:
            raise CommandFailed(FAILED, message)
        print(message)
        return 0
    try:
        size = remote_size(url, settings.download_stall_timeout)
    except UrlFailed as failed:
        raise CommandFailed(FAILED, str(failed)) from None
    note(f"{where.name}: downloading {human_size(size)} into {models_dir}")
    bar = ProgressBar(where.name, size)
    try:
        with logging_redirect_tqdm():
            progress, found = fetch(
                where, size, lambda p: _show(bar, p), settings.download_retries, settings.download_stall_timeout
            )
    except KeyboardInterrupt:
        raise CommandFailed(
            INTERRUPTED,
            f"interrupted: {human_size(kept(where, size))} of {human_size(size)} kept in {where.staging}; "
            "the same `pooled pull URL` resumes it",
        ) from None
    finally:
        bar.close()
    if progress.state != "done":
        raise CommandFailed(FAILED, f"{where.name}: the download failed: {progress.error}")
    model_id = model_id_for(where.final)
    if where.sha256 is not None:
        print(f"{where.final}: verified against --sha256 ({human_size(size)}); {_serve_hint(model_id)}")
    else:
        print(
            f"{where.final}: saved ({human_size(size)}), sha256 {found}: not verified against anything "
            f"(no --sha256 given; compare it with the digest its publisher states); {_serve_hint(model_id)}"
        )
    return 0


def _follow(server: PooledServer, row: dict[str, Any], bar: ProgressBar) -> dict[str, Any]:
    """Poll the entry's catalog row until its download ends; the download's last progress."""
    while True:
        progress = row.get("download")
        if progress is not None:
            bar.show(progress["bytes"], progress["total"], progress["rate_bytes_per_s"], progress["eta_s"])
            if progress["state"] != "running":
                return dict(progress)
        time.sleep(POLL_S)
        row = _catalog_row(server, row["id"])


def _catalog_row(server: PooledServer, entry_id: str) -> dict[str, Any]:
    rows = server.get("/v1/models/catalog")["data"]
    found = next((row for row in rows if row["id"] == entry_id), None)
    if found is None:
        raise CommandFailed(FAILED, f"the server at {server.base} no longer lists {entry_id} in its catalog")
    return dict(found)


def _cancel_on_server(server: PooledServer, entry_id: str) -> str:
    """Cancel the server's download after a Ctrl-C; what to tell the user."""
    answer = server.post("/v1/models/download/cancel")
    download = answer.get("download") or {}
    if answer.get("cancelled") and download.get("id") == entry_id:
        on_disk = human_size(download.get("bytes", 0))
        return (
            f"interrupted: cancelled the server's download of {entry_id} ({on_disk} kept in its models folder); "
            f"`pooled pull {entry_id}` resumes it"
        )
    return f"interrupted: the server's download of {entry_id} had already ended ({download.get('state', 'unknown')})"


def _show(bar: ProgressBar, progress: DownloadProgress) -> None:
    bar.show(progress.bytes, progress.total, progress.rate_bytes_per_s, progress.eta_s)


def _kept(entry: CatalogEntry, models_dir: Path) -> str:
    on_disk = disk_state(entry, models_dir).bytes
    return (
        f"{human_size(on_disk)} of {human_size(entry.size)} kept in {entry.folder(models_dir)}; "
        f"`pooled pull {entry.id}` resumes it"
    )


def _serve_hint(model_id: str) -> str:
    return f"serve it with `pooled serve --model {model_id}`"
