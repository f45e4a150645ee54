"""On-disk cache of prepared (converted, cast) parameter trees, stored with orbax-checkpoint.

An entry is keyed by a fingerprint of the checkpoint files and the dtype. For each file the
fingerprint hashes its name, size, modification time (ns), and the SHA-256 of its first 1 MiB
(the safetensors/GGUF headers, i.e. every tensor's name, shape, dtype and offset) and last 64 KiB.
A changed file therefore misses the cache, short of an edit inside the data region that keeps
size, mtime and the last 64 KiB identical.
"""

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import orbax.checkpoint as ocp

log = logging.getLogger(__name__)

# Bump when the prepared layout changes (parameter tree, transposes), so stale entries miss.
FORMAT_VERSION = 3  # 2: meta.json records the projections' GGUF block type; 3: and its matrices' types
_HEAD_BYTES = 1 << 20
_TAIL_BYTES = 1 << 16
_META = "meta.json"
_PARAMS = "params"


def fingerprint(files: Sequence[Path], dtype: str) -> str:
    digest = hashlib.sha256(f"v{FORMAT_VERSION}:{dtype}".encode())
    for file in files:
        stat = file.stat()
        digest.update(f"|{file.name}:{stat.st_size}:{stat.st_mtime_ns}|".encode())
        with file.open("rb") as f:
            digest.update(hashlib.sha256(f.read(_HEAD_BYTES)).digest())
            f.seek(max(0, stat.st_size - _TAIL_BYTES))
            digest.update(hashlib.sha256(f.read()).digest())
    return digest.hexdigest()[:32]


def _checkpointer() -> "ocp.StandardCheckpointer":
    """orbax, imported on first use: it takes a second or more to import, and a start that restores
    nothing (a GGUF served from its blocks) needs none of it."""
    import orbax.checkpoint as ocp

    return ocp.StandardCheckpointer()


class PreparedCache:
    """`lookup` → metadata of a complete entry; `restore` → params placed with the given shardings."""

    def __init__(self, root: Path, key: str):
        self.entry = root / key

    def lookup(self) -> dict[str, Any] | None:
        meta = self.entry / _META
        return dict(json.loads(meta.read_text())) if meta.exists() else None

    def restore(self, target: Any) -> Any:
        """`target` is a tree of jax.ShapeDtypeStruct carrying the sharding to restore into."""
        with _checkpointer() as checkpointer:
            return checkpointer.restore((self.entry / _PARAMS).absolute(), target)

    def save(self, params: Any, meta: dict[str, Any]) -> None:
        """Writes to a temporary folder and renames it, so readers never see a partial entry."""
        staging = self.entry.with_name(f"{self.entry.name}.staging-{os.getpid()}")
        try:
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            with _checkpointer() as checkpointer:
                checkpointer.save((staging / _PARAMS).absolute(), params)
            (staging / _META).write_text(json.dumps(meta))
            shutil.rmtree(self.entry, ignore_errors=True)
            staging.rename(self.entry)
        except OSError as e:
            log.warning("could not write the prepared-parameter cache at %s: %s", self.entry, e)
            shutil.rmtree(staging, ignore_errors=True)
