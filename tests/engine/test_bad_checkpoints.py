"""Unusable checkpoints fail with a one-line CheckpointError, never a traceback from deep inside."""

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from safetensors.numpy import load_file, save_file

from engine.errors import CheckpointError
from engine.model.loading.loader import load_model


@pytest.fixture
def writable_copy(tiny_checkpoint: Callable[[str], Path], tmp_path: Path) -> Path:
    copy = tmp_path / "checkpoint"
    shutil.copytree(tiny_checkpoint("llama_tied"), copy)
    return copy


def load_error(path: Path, cache_dir: Path) -> str:
    with pytest.raises(CheckpointError) as caught:
        load_model(path, cache_dir=cache_dir, progress=False)
    message = str(caught.value)
    assert message and "\n" not in message
    return message


def test_truncated_safetensors(writable_copy: Path, cache_dir: Path) -> None:
    weights = writable_copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    assert "truncated" in load_error(writable_copy, cache_dir)


def test_missing_tensor(writable_copy: Path, cache_dir: Path) -> None:
    weights = writable_copy / "model.safetensors"
    tensors = load_file(weights)
    del tensors["model.layers.1.mlp.down_proj.weight"]
    save_file(tensors, weights, metadata={"format": "pt"})
    assert "model.layers.1.mlp.down_proj.weight" in load_error(writable_copy, cache_dir)


def edit_config(checkpoint: Path, **changes: object) -> None:
    config_path = checkpoint / "config.json"
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), **changes}))


@pytest.mark.parametrize("change", [{"intermediate_size": 96}, {"num_key_value_heads": 4}])
def test_config_that_does_not_fit_the_tensors(writable_copy: Path, cache_dir: Path, change: dict) -> None:
    edit_config(writable_copy, **change)
    assert "shape" in load_error(writable_copy, cache_dir)


def test_unknown_architecture(writable_copy: Path, cache_dir: Path) -> None:
    edit_config(writable_copy, architectures=["GPTNeoXForCausalLM"])
    message = load_error(writable_copy, cache_dir)
    assert "GPTNeoXForCausalLM" in message and "LlamaForCausalLM" in message and "qwen3moe" in message


def test_missing_config(writable_copy: Path, cache_dir: Path) -> None:
    (writable_copy / "config.json").unlink()
    assert "config.json" in load_error(writable_copy, cache_dir)


def test_missing_path(tmp_path: Path, cache_dir: Path) -> None:
    assert "does not exist" in load_error(tmp_path / "nowhere", cache_dir)


def test_unknown_dtype(writable_copy: Path, cache_dir: Path) -> None:
    with pytest.raises(CheckpointError, match="float16"):
        load_model(writable_copy, dtype="float16", cache_dir=cache_dir, progress=False)


def test_plain_file_that_is_not_gguf(tmp_path: Path, cache_dir: Path) -> None:
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"\0" * 16)
    assert "neither a model directory nor a .gguf file" in load_error(weights, cache_dir)
