"""Fixtures for engine tests: tiny checkpoints rebuilt from `tests.engine.tiny_checkpoints`."""

import json
from collections.abc import Callable
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from tests.engine.tiny_checkpoints import build_tiny_checkpoint

GOLDENS = Path(__file__).resolve().parent.parent / "goldens" / "tiny"


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """name → a freshly built (once per session) tiny checkpoint directory; treat it as read-only."""
    built: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in built:
            built[name] = build_tiny_checkpoint(name, tmp_path_factory.mktemp("checkpoints") / name)
        return built[name]

    return get


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "prepared"


Golden = dict[str, jnp.ndarray]


@pytest.fixture(scope="session")
def golden() -> Callable[[str], Golden]:
    """name → tokens, positions (device arrays) and transformers' float32 logits (numpy)."""

    def get(name: str) -> Golden:
        data = json.loads((GOLDENS / f"{name}.json").read_text(encoding="utf-8"))
        tokens = np.asarray(data["tokens"], dtype=np.int32)
        logits = np.asarray(data["logits"], dtype=np.float32)
        positions = np.broadcast_to(np.arange(tokens.shape[1], dtype=np.int32), tokens.shape)
        return {"tokens": jnp.asarray(tokens), "positions": jnp.asarray(positions), "logits": logits}

    return get
