"""`FolderLibrary`: the models folder (`--models-dir`) and its catalog as the HTTP side sees them:
each entry's state on disk, what a switch could serve, downloads, removal, and switching.

A catalog entry serves as `pooled/<id>`, a model the user put in the folder as `pooled/<name>`
(as `--model` names any path); requests and the routes take either form of a catalog id.

Threads: every method runs on the event loop. A download runs on the Downloader's own thread
(pooled/models_folder/downloads.py), a switch on the model host's (pooled/hosting/model_host.py); `switch` awaits the
host's future, shielded, so a client that goes away never cancels a switch half done, and
concurrent requests for the same switch await the one future.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path

from engine.tasks.encode.encoder_model import is_encoder_checkpoint
from handlers.availability import awake
from handlers.context import CatalogView, DownloadView, LibraryRefused, ModelKind, SwitchTarget
from pooled.configuration.setting_sources import ModelDefaults
from pooled.hosting.model_host import ModelHost, ModelNotFound, SwitchFailed, SwitchRefused, default_model_path
from pooled.models_folder.catalog import CatalogEntry, availability
from pooled.models_folder.checkpoint_context import trained_context
from pooled.models_folder.download_job import DownloadProgress
from pooled.models_folder.downloads import DownloadBusy, Downloader
from pooled.models_folder.model_ids import PREFIX, bare, model_id_for
from pooled.models_folder.models_dir import disk_state, folder_models, remove_entry

ENCODER_FAMILIES = frozenset({"bert", "xlm-roberta"})


def served_id(entry: CatalogEntry) -> str:
    return PREFIX + entry.id


class FolderLibrary:
    def __init__(
        self,
        host: ModelHost,
        catalog: Mapping[str, CatalogEntry],
        models_dir: Path,
        downloader: Downloader,
        implicit_switch: bool,
    ) -> None:
        self._host, self._catalog, self._dir, self._downloader = host, catalog, models_dir, downloader
        self._implicit = implicit_switch
        self._switch: tuple[str, Future[None]] | None = None  # the target id and its future

    @property
    def models_dir(self) -> str:
        return str(self._dir)

    @property
    def implicit_switch(self) -> bool:
        return self._implicit

    def set_implicit_switch(self, allowed: bool) -> None:
        """`--switch-allow-implicit` changed while serving (one assignment; read per request)."""
        self._implicit = allowed

    def catalog(self) -> list[CatalogView]:
        return [self._view(entry) for _, entry in sorted(self._catalog.items())]

    def targets(self) -> list[SwitchTarget]:
        served = self._host.model_id
        entries = [
            _entry_target(entry)
            for _, entry in sorted(self._catalog.items())
            if served_id(entry) != served and disk_state(entry, self._dir).state in ("complete", "verified")
        ]
        files = [_file_target(path) for path in folder_models(self._dir, self._catalog.keys())]
        return entries + [target for target in files if target.id != served]

    def names_model(self, model_id: str) -> bool:
        served = self._host.model_id
        if model_id in (served, bare(served)):  # most requests: no look at the folder
            return False
        found = find_model(model_id, self._catalog, self._dir)
        return found is not None and found[1].id != served

    def download(self) -> DownloadView | None:
        return _download_view(self._downloader.progress())

    def start_download(self, model_id: str) -> CatalogView:
        entry = self._entry(model_id)
        try:
            self._downloader.start(entry)
        except DownloadBusy as busy:
            raise LibraryRefused("busy", str(busy)) from None
        return self._view(entry)

    def cancel_download(self) -> tuple[bool, DownloadView | None]:
        cancelled = self._downloader.cancel(wait_s=0)
        return cancelled, self.download()

    def remove(self, model_id: str) -> int:
        entry = self._entry(model_id)
        if served_id(entry) == self._host.model_id and self._host.state != "dead":
            raise LibraryRefused("busy", f"{served_id(entry)} is the model {self._host.state}: switch to another first")
        running = self._downloader.progress()
        if running is not None and running.state == "running" and running.id == entry.id:
            raise LibraryRefused("busy", f"{entry.id} is being downloaded: cancel the download first")
        return remove_entry(entry, self._dir)

    async def switch(self, model_id: str) -> None:
        if (
            self._switch is not None
            and not self._switch[1].done()
            and model_id in (self._switch[0], bare(self._switch[0]))
        ):
            await _finished(self._switch[1])
            return
        await awake(self._host)  # an idle-unloaded model loads again before it is switched away from
        if self._host.state == "serving" and model_id in (self._host.model_id, bare(self._host.model_id)):
            return
        path, target = self._resolve(model_id)
        if not target.available:
            raise LibraryRefused("unavailable", target.reason or f"{target.id} cannot be served here")
        try:
            done = self._host.switch(path, target.id)
        except SwitchRefused as refused:
            raise LibraryRefused("busy", str(refused)) from None
        self._switch = (target.id, done)
        await _finished(done)

    def _resolve(self, model_id: str) -> tuple[Path, SwitchTarget]:
        """The path and target a switch to `model_id` loads; not_found naming what could be."""
        found = find_model(model_id, self._catalog, self._dir)
        if found is not None:
            return found
        known = ", ".join(target.id for target in self.targets()) or "none"
        raise LibraryRefused("not_found", f"{not_on_disk(model_id, self._catalog)}; a switch can serve: {known}")

    def _entry(self, model_id: str) -> CatalogEntry:
        entry = self._catalog.get(bare(model_id))
        if entry is None:
            known = ", ".join(sorted(self._catalog)) or "none"
            raise LibraryRefused("not_found", f"no catalog entry {model_id!r}; the catalog has: {known}")
        return entry

    def _view(self, entry: CatalogEntry) -> CatalogView:
        disk = disk_state(entry, self._dir)
        available, reason = availability(entry)
        progress = self._downloader.progress()
        return CatalogView(
            id=entry.id,
            family=entry.family,
            format=entry.format,
            size_bytes=entry.size,
            trained_ctx=entry.trained_ctx,
            licence=entry.licence,
            size_class=entry.size_class,
            memory_bytes=entry.memory_bytes,
            state=disk.state,
            bytes_on_disk=disk.bytes,
            available=available,
            reason=reason,
            loaded=served_id(entry) == self._host.model_id,
            download=_download_view(progress) if progress is not None and progress.id == entry.id else None,
        )


def find_model(
    model_id: str, catalog: Mapping[str, CatalogEntry], models_dir: Path
) -> tuple[Path, SwitchTarget] | None:
    """A catalog entry on disk (`id` or `pooled/id`), or a model in the folder by the id
    `/v1/models` gives it; None when neither is there."""
    entry = catalog.get(bare(model_id))
    if entry is not None and disk_state(entry, models_dir).state in ("complete", "verified"):
        return entry.model_path(models_dir), _entry_target(entry)
    for path in folder_models(models_dir, catalog.keys()):
        if model_id_for(path) in (model_id, PREFIX + model_id):
            return path, _file_target(path)
    return None


def model_to_serve(model: str | None, catalog: Mapping[str, CatalogEntry], models_dir: Path) -> tuple[Path, str]:
    """The path and id of `--model`: a path, a catalog id or a model in the folder (None: the default)."""
    path = Path(model).expanduser() if model else default_model_path()
    if path.exists():
        return path, model_id_for(path)
    found = find_model(model, catalog, models_dir) if model else None
    if found is None:
        raise ModelNotFound(
            f"Model '{model or path}' is not a file or directory, and {not_on_disk(model or str(path), catalog)}: "
            "give a GGUF file, a safetensors directory, or a model id (pooled list shows them)."
        )
    return found[0], found[1].id


def serving_defaults(catalog: Mapping[str, CatalogEntry], model_id: str) -> ModelDefaults | None:
    """The settings the served model's catalog entry asks for ([model.serving]); None for a model
    the catalog does not know. The default model is the catalog entry its file is
    (`pooled/smollm2-135m-instruct-q4_1`), as an entry's download is."""
    entry = catalog.get(bare(model_id))
    return entry.serving if entry is not None else None


def not_on_disk(model_id: str, catalog: Mapping[str, CatalogEntry]) -> str:
    """Why `find_model` found nothing, with what to do about it."""
    if bare(model_id) in catalog:
        return f"{model_id!r} is in the catalog but not downloaded (POST /v1/models/download, or pooled pull)"
    return f"no model {model_id!r} in the catalog or the models folder"


async def _finished(done: Future[None]) -> None:
    try:
        await asyncio.shield(asyncio.wrap_future(done))
    except SwitchFailed as failed:
        raise LibraryRefused("switch_failed", str(failed)) from None


def _entry_target(entry: CatalogEntry) -> SwitchTarget:
    available, reason = availability(entry)
    kind: ModelKind = "embedding" if entry.family in ENCODER_FAMILIES else "chat"
    return SwitchTarget(served_id(entry), kind, available, reason, entry.trained_ctx)


def _file_target(path: Path) -> SwitchTarget:
    """A model put in the folder by hand: its memory is not known before it loads."""
    kind: ModelKind = "embedding" if is_encoder_checkpoint(path) else "chat"
    return SwitchTarget(model_id_for(path), kind, True, None, trained_context(path))


def _download_view(progress: DownloadProgress | None) -> DownloadView | None:
    if progress is None:
        return None
    return DownloadView(
        progress.id,
        progress.state,
        progress.bytes,
        progress.total,
        progress.rate_bytes_per_s,
        progress.eta_s,
        progress.error,
    )
