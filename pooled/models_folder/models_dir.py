"""The models folder: where catalog entries are downloaded to, and what state each is in on disk.

Layout: `<models_dir>/<id>/<file name>` (a name may have folders, `1_Pooling/config.json`). A file
being downloaded is `<name>.part`; it takes its final name only after its sha256 matched the
catalog's (a rename), so a file under its final name is never half written. After each file's
check its digest is recorded in the folder's `.verified` (JSON, `{"files": {name: sha256}}`,
replaced whole, never half written).

An entry's state on disk:
- absent: none of its files, finished or partial, is there;
- partial: some bytes are there (`.part` files, finished files, or a file under its final name
  of the wrong size) but not every file at its catalog size;
- complete: every file is there under its final name at its catalog size, but not every one is
  recorded as checked against the catalog's digest: copied in by hand, or from an older catalog
  (a download hashes such a file once and keeps it if it matches, pooled/models_folder/downloads.py);
- verified: every file there at its size and recorded with the catalog's digest.
Sizes are checked on every call; digests only when a file is written (hashing a large model on
every listing would cost a full read).

Anything else in the folder, a `.gguf` file or a safetensors directory put there by hand, is a
model too: `folder_models` lists those, outside the catalog's folders.
"""

import contextlib
import hashlib
import json
import os
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from engine.model.families.qwen2_vl.gguf_mmproj import is_projector_file
from pooled.models_folder.catalog import RESERVED_SUFFIX, CatalogEntry, CatalogFile

VERIFIED = ".verified"
LOCK = ".lock"  # held by a running download (pooled/models_folder/downloads.py)
HASH_CHUNK = 1 << 20


@dataclass(frozen=True)
class DiskState:
    state: Literal["absent", "partial", "complete", "verified"]
    bytes: int  # on disk now, partial files included
    total: int  # the entry's size


def file_path(entry: CatalogEntry, models_dir: Path, file: CatalogFile) -> Path:
    return entry.folder(models_dir) / file.name


def part_path(entry: CatalogEntry, models_dir: Path, file: CatalogFile) -> Path:
    return entry.folder(models_dir) / (file.name + RESERVED_SUFFIX)


def read_verified(folder: Path) -> dict[str, str]:
    """The digests recorded as checked in `folder`: name → sha256; empty when none or unreadable
    (an unreadable record only costs a re-hash)."""
    try:
        record = json.loads((folder / VERIFIED).read_text(encoding="utf-8"))
        files = record["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    if not isinstance(files, dict):
        return {}
    return {str(name): str(digest) for name, digest in files.items()}


def record_verified(folder: Path, name: str, sha256: str) -> None:
    """Add one checked file to the folder's record (written to a temporary file, then renamed)."""
    files = read_verified(folder)
    files[name] = sha256
    temporary = folder / (VERIFIED + ".tmp")
    temporary.write_text(json.dumps({"files": dict(sorted(files.items()))}, indent=1) + "\n", encoding="utf-8")
    os.replace(temporary, folder / VERIFIED)


def is_verified(entry: CatalogEntry, models_dir: Path, file: CatalogFile, record: dict[str, str]) -> bool:
    """Whether `file` is there at its size and recorded with the catalog's digest."""
    return recorded(file, record) and _size(file_path(entry, models_dir, file)) == file.size


def recorded(file: CatalogFile, record: dict[str, str]) -> bool:
    """Whether the folder's record holds `file` as checked: with its known digest, or with any
    for a file whose digest was not known before it was fetched."""
    digest = record.get(file.name)
    return digest is not None and file.sha256 in (None, digest)


def disk_state(entry: CatalogEntry, models_dir: Path) -> DiskState:
    record = read_verified(entry.folder(models_dir))
    on_disk = 0
    sized = 0
    verified = 0
    for file in entry.files:
        final = _size(file_path(entry, models_dir, file))
        partial = _size(part_path(entry, models_dir, file))
        on_disk += (final or 0) + (partial or 0)
        if final == file.size:
            sized += 1
            verified += recorded(file, record)
    count = len(entry.files)
    state: Literal["absent", "partial", "complete", "verified"]
    if verified == count:
        state = "verified"
    elif sized == count:
        state = "complete"
    elif on_disk or _any_present(entry, models_dir):
        state = "partial"
    else:
        state = "absent"
    return DiskState(state=state, bytes=on_disk, total=entry.size)


def remove_entry(entry: CatalogEntry, models_dir: Path) -> int:
    """Delete the entry's finished and partial files and its record; bytes freed. The folder (and
    the folders its file names made) goes too once empty; anything else put in it stays. A caller
    cancels a running download of the entry first (pooled/models_folder/downloads.py)."""
    folder = entry.folder(models_dir)
    freed = 0
    for file in entry.files:
        for path in (file_path(entry, models_dir, file), part_path(entry, models_dir, file)):
            size = _size(path)
            if size is None:
                continue
            path.unlink()
            freed += size
    for name in (VERIFIED, VERIFIED + ".tmp", LOCK):
        with contextlib.suppress(FileNotFoundError):
            (folder / name).unlink()
    parents = {
        parent for file in entry.files for parent in (folder / file.name).parents if parent.is_relative_to(folder)
    }
    for parent in sorted(parents, key=lambda path: len(path.parts), reverse=True):
        with contextlib.suppress(OSError):  # not empty, or not there
            parent.rmdir()
    return freed


def folder_models(models_dir: Path, catalog_ids: Collection[str] = ()) -> list[Path]:
    """Models in the folder that are not catalog entries' folders: `.gguf` files at the top or one
    folder down (not llama.cpp's projector files, mmproj*.gguf: they go with a model), and folders
    holding `.safetensors` weights (what `--model` takes). Folders named
    by `catalog_ids`, and any folder with a download's record or partial files in it (an entry of
    a catalog the caller did not pass), are left out; so are hidden names."""
    if not models_dir.is_dir():
        return []
    found: list[Path] = []
    for path in sorted(models_dir.iterdir()):
        if path.name.startswith("."):
            continue
        if path.is_file() and path.suffix == ".gguf" and not is_projector_file(path):
            found.append(path)
        elif path.is_dir() and path.name not in catalog_ids and not _managed(path):
            children = sorted(child for child in path.iterdir() if child.is_file() and not child.name.startswith("."))
            if any(child.suffix == ".safetensors" for child in children):
                found.append(path)
            else:
                found.extend(child for child in children if child.suffix == ".gguf" and not is_projector_file(child))
    return found


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _managed(folder: Path) -> bool:
    return (folder / VERIFIED).exists() or (folder / LOCK).exists() or any(folder.glob("*" + RESERVED_SUFFIX))


def _any_present(entry: CatalogEntry, models_dir: Path) -> bool:
    """Whether an empty (zero-byte) file of the entry is there: still partial, not absent."""
    return any(
        file_path(entry, models_dir, file).exists() or part_path(entry, models_dir, file).exists()
        for file in entry.files
    )


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size if path.is_file() else None
    except OSError:
        return None
