"""`.gguf` paths go to engine.model.checkpoint.gguf_file.read_gguf, and its RawCheckpoint loads like any other."""

from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pytest

from engine.model.checkpoint import gguf_file
from engine.model.checkpoint.raw import RawCheckpoint
from engine.model.checkpoint.safetensors_dir import read_safetensors_dir
from engine.model.loading.loader import load_model

pytestmark = pytest.mark.slow  # runs the default model's GGUF through XLA


def test_gguf_path_is_read_by_the_gguf_reader(
    tiny_checkpoint: Callable[[str], Path],
    tmp_path: Path,
    cache_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    golden: Callable[[str], dict],
) -> None:
    fake_gguf = tmp_path / "model.gguf"
    fake_gguf.write_bytes(b"GGUF stand-in")
    read: list[Path] = []

    def read_gguf(path: Path, families: Mapping[str, object]) -> RawCheckpoint:
        assert "llama" in families
        read.append(path)
        return read_safetensors_dir(tiny_checkpoint("qwen3"))

    monkeypatch.setattr(gguf_file, "read_gguf", read_gguf)
    model = load_model(fake_gguf, cache_dir=cache_dir, progress=False)
    assert read == [fake_gguf]
    expected = golden("qwen3")
    logits, _ = model.forward(expected["tokens"], expected["positions"])
    np.testing.assert_allclose(np.asarray(logits), expected["logits"], atol=1e-4, rtol=0)
