"""The load step that `ModelHost` runs on its thread: checkpoint → ready model."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from engine.checkpoint.errors import CheckpointError
from pooled.model_host import LoadResult
from pooled.settings import Settings


def _trained_context(path: Path) -> int:
    if path.is_dir():
        config_path = path / "config.json"
        if not config_path.is_file():
            raise CheckpointError(f"{path}: no config.json in the safetensors directory")
        config = json.loads(config_path.read_text(encoding="utf-8"))
    else:
        from engine.checkpoint.gguf_file import read_gguf

        config = read_gguf(path).hf_config
    return int(config["max_position_embeddings"])


def load_model(path: Path, settings: Settings, report: Callable[[str, int, int], None]) -> LoadResult:
    report("reading checkpoint", 0, 1)
    trained = _trained_context(path)
    report("reading checkpoint", 1, 1)
    return LoadResult(ctx=settings.ctx or trained, handle=None)
