"""`pooled list`: the catalog's entries with their state on disk, and the models put in the folder
by hand, as a table or (`--json`) as JSON rows.

Through a running server the catalog rows are the server's (GET /v1/models/catalog: its catalog
and folder, its running download) and the model it serves is marked `serving` (GET /v1/models'
first row, listed once the model serves: not while it loads). The folder's own models are read
from the folder the server reports when this machine can read it, else taken from the server's
switch targets (no size then).
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

from pooled.commands.command_io import catalog_of, models_dir_of, note
from pooled.commands.server_api import PooledServer, find_server
from pooled.configuration.settings import Settings
from pooled.human_units import human_size
from pooled.models_folder.catalog import CatalogEntry
from pooled.models_folder.checkpoint_context import trained_context
from pooled.models_folder.model_ids import PREFIX, bare, model_id_for
from pooled.models_folder.models_dir import disk_state, folder_models


@dataclass(frozen=True)
class ModelRow:
    id: str
    source: Literal["catalog", "folder", "served"]  # served: the server's model, neither of the others
    size_bytes: int | None  # None: not known
    state: str  # absent, partial, complete, verified (catalog); on disk (folder); serving (served)
    bytes_on_disk: int | None
    context: int | None  # the trained context (a served model's: the context it serves)
    serving: bool = False
    path: str | None = None

    def state_text(self) -> str:
        text = self.state
        if self.state == "partial" and self.size_bytes and self.bytes_on_disk is not None:
            text = f"partial {100 * self.bytes_on_disk // self.size_bytes}%"
        return f"{text}, serving" if self.serving and self.state != "serving" else text


def list_models(arguments: Mapping[str, Any], settings: Settings) -> int:
    server = find_server(settings)
    if server is None:
        models_dir = models_dir_of(settings)
        note(f"models folder {models_dir} (no server on {settings.host}:{settings.port})")
        rows = folder_mode_rows(catalog_of(settings), models_dir)
    else:
        note(f"through the server at {server.base}")
        try:
            rows = server_rows(server)
        finally:
            server.close()
    print(json.dumps([asdict(row) for row in rows], indent=2) if arguments["as_json"] else table(rows))
    return 0


def folder_mode_rows(catalog: Mapping[str, CatalogEntry], models_dir: Path) -> list[ModelRow]:
    return [catalog_row(entry, models_dir) for _, entry in sorted(catalog.items())] + folder_rows(
        models_dir, catalog.keys()
    )


def catalog_row(entry: CatalogEntry, models_dir: Path) -> ModelRow:
    disk = disk_state(entry, models_dir)
    return ModelRow(entry.id, "catalog", entry.size, disk.state, disk.bytes, entry.trained_ctx)


def folder_rows(models_dir: Path, catalog_ids: Collection[str]) -> list[ModelRow]:
    """The models put in the folder by hand (pooled/models_folder/models_dir.py's folder_models)."""
    return [
        ModelRow(model_id_for(path), "folder", size, "on disk", size, trained_context(path), path=str(path))
        for path in folder_models(models_dir, catalog_ids)
        for size in [size_on_disk(path)]
    ]


def server_rows(server: PooledServer) -> list[ModelRow]:
    catalog = server.get("/v1/models/catalog")
    listed: list[dict[str, Any]] = server.get("/v1/models").get("data", [])
    served = listed[0]["id"] if listed and listed[0].get("active") else None
    rows = [
        ModelRow(
            row["id"],
            "catalog",
            row["size_bytes"],
            row["state"],
            row["bytes_on_disk"],
            row["trained_ctx"],
            serving=PREFIX + row["id"] == served,
        )
        for row in catalog["data"]
    ]
    catalog_ids = {row.id for row in rows}
    models_dir = Path(catalog["models_dir"])
    if models_dir.is_dir():
        folder = folder_rows(models_dir, catalog_ids)
    else:  # a server on another machine: its switch targets, by id only
        folder = [
            ModelRow(model["id"], "folder", None, "on disk", None, model.get("max_model_len"))
            for model in listed[1:]
            if model.get("available") is not None and bare(model["id"]) not in catalog_ids
        ]
    folder = [replace(row, serving=True) if row.id == served else row for row in folder]
    rows += folder
    if served is not None and not any(row.serving for row in rows):  # --model PATH outside the folder
        rows.append(ModelRow(served, "served", None, "serving", None, listed[0].get("max_model_len"), serving=True))
    return rows


def table(rows: list[ModelRow]) -> str:
    cells = [("ID", "SIZE", "STATE", "CONTEXT")] + [
        (
            row.id,
            human_size(row.size_bytes) if row.size_bytes is not None else "-",
            row.state_text(),
            str(row.context) if row.context else "-",
        )
        for row in rows
    ]
    widths = [max(len(line[column]) for line in cells) for column in range(3)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line[:3], widths, strict=True)) + "  " + line[3]
        for line in cells
    )


def size_on_disk(path: Path, follow_links: bool = True) -> int:
    """Bytes of a file, or of the files under a directory (its linked folders not entered). With
    `follow_links` a linked file counts its target's bytes (a listing's size); without, the
    link's own (what deleting it frees)."""

    def size(item: Path) -> int:
        try:
            return item.stat().st_size if follow_links else item.lstat().st_size
        except OSError:  # a dangling link
            return 0

    if path.is_symlink() or not path.is_dir():
        return size(path)
    return sum(size(Path(folder) / name) for folder, _, names in os.walk(path) for name in names)
