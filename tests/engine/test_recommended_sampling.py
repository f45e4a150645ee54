"""engine/checkpoints.py's `recommended_sampling`: a GGUF's `general.sampling.*` keys (written here
as llama.cpp's converter writes them, through gguf-py), a safetensors folder's
generation_config.json, and what neither recommends."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from gguf import GGUFWriter

from engine.checkpoints import read_gguf_metadata, recommended_sampling
from engine.errors import CheckpointError
from engine.model.checkpoint.gguf_header import read_gguf_scalars
from pooled.hosting.model_host import default_model_path
from tests.engine.tiny_checkpoints import build_tiny_checkpoint


def sampling_gguf(path: Path, write: Callable[[GGUFWriter], None]) -> Path:
    """A GGUF of no tensors whose header holds what `write` adds, beside an array (as a vocabulary
    is) that the reader must step over."""
    writer = GGUFWriter(path, "llama")
    writer.add_token_list(["a", "bb", "ccc"])
    write(writer)
    writer.add_array("general.tags", ["x", "y"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_ggufs_sampling_keys_are_read_at_float32s_precision(tmp_path: Path) -> None:
    def keys(writer: GGUFWriter) -> None:
        writer.add_sampling_temp(0.6)
        writer.add_sampling_top_k(20)
        writer.add_sampling_top_p(0.95)
        writer.add_sampling_min_p(0.0)
        writer.add_sampling_penalty_repeat(1.05)
        writer.add_sampling_mirostat(2)  # a key llama.cpp reads and pooled does not
        writer.add_sampling_sequence("penalties;top_k;top_p;temp")

    path = sampling_gguf(tmp_path / "m.gguf", keys)
    recommended = recommended_sampling(path)
    assert recommended is not None and (recommended.source, recommended.file) == ("gguf", path)
    # Stored as float32 (0.949999988…): read back as the value written. A min-p of 0 is a choice too.
    assert recommended.values == {
        "temperature": 0.6,
        "top_k": 20,
        "top_p": 0.95,
        "min_p": 0.0,
        "repetition_penalty": 1.05,
    }
    assert isinstance(recommended.values["top_k"], int)


def test_a_negative_top_k_is_off_and_a_gguf_with_some_keys_recommends_those(tmp_path: Path) -> None:
    def keys(writer: GGUFWriter) -> None:
        writer.add_int32("general.sampling.top_k", -1)
        writer.add_sampling_temp(0.7)

    recommended = recommended_sampling(sampling_gguf(tmp_path / "m.gguf", keys))
    assert recommended is not None and recommended.values == {"top_k": 0, "temperature": 0.7}


def test_a_gguf_without_sampling_keys_recommends_nothing(tmp_path: Path) -> None:
    assert recommended_sampling(sampling_gguf(tmp_path / "none.gguf", lambda writer: None)) is None
    assert recommended_sampling(default_model_path()) is None  # the default model's file has none


def test_a_safetensors_folders_generation_config_is_read(tmp_path: Path) -> None:
    folder = build_tiny_checkpoint("llama_tied", tmp_path / "llama")
    assert recommended_sampling(folder) is None  # no generation_config.json
    config = {"bos_token_id": 1, "do_sample": True, "temperature": 0.6, "top_p": 0.9, "top_k": None, "min_p": "x"}
    (folder / "generation_config.json").write_text(json.dumps(config), encoding="utf-8")
    recommended = recommended_sampling(folder)
    assert recommended is not None
    assert (recommended.source, recommended.file) == ("generation_config", folder / "generation_config.json")
    assert recommended.values == {"temperature": 0.6, "top_p": 0.9}  # a null or a string is no recommendation
    (folder / "generation_config.json").write_text('{"bos_token_id": 1}', encoding="utf-8")
    assert recommended_sampling(folder) is None


def test_an_unreadable_recommendation_is_a_checkpoint_error(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "generation_config.json").write_text("{temperature", encoding="utf-8")
    with pytest.raises(CheckpointError, match="generation_config.json cannot be read as JSON"):
        recommended_sampling(folder)
    (folder / "generation_config.json").write_text("[0.6]", encoding="utf-8")
    with pytest.raises(CheckpointError, match="is not a JSON object"):
        recommended_sampling(folder)
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(default_model_path().read_bytes()[:200_000])  # inside the vocabulary
    with pytest.raises(CheckpointError, match="truncated or corrupt GGUF file"):
        recommended_sampling(truncated)
    with pytest.raises(CheckpointError, match="not a GGUF file"):
        recommended_sampling(folder / "generation_config.json")


def test_the_scalars_reader_reads_what_the_header_reader_reads_skipping_arrays() -> None:
    path = default_model_path()
    every = read_gguf_metadata(path)
    assert read_gguf_scalars(path, "") == {key: value for key, value in every.items() if not isinstance(value, list)}
    assert read_gguf_scalars(path, "tokenizer.") == {
        key: value for key, value in every.items() if key.startswith("tokenizer.") and not isinstance(value, list)
    }
