"""The second load restores prepared parameters from the orbax cache without parsing the checkpoint."""

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from engine.model.checkpoint.hf_folder import checkpoint_files
from engine.model.checkpoint.prepared_cache import fingerprint
from engine.model.loading import loader
from engine.model.loading.loader import load_model
from tests.engine.tiny_checkpoints import build_tiny_checkpoint

pytestmark = pytest.mark.slow  # loads and converts checkpoints


def test_second_load_comes_from_cache_with_identical_logits(
    tiny_checkpoint: Callable[[str], Path],
    cache_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    golden: Callable[[str], dict],
) -> None:
    expected = golden("qwen3_moe")
    tokens, positions = expected["tokens"], expected["positions"]
    first = load_model(tiny_checkpoint("qwen3_moe"), cache_dir=cache_dir, progress=False)
    assert not first.from_cache

    def must_not_parse(path: Path) -> None:
        raise AssertionError(f"checkpoint {path} was parsed despite a cache entry")

    monkeypatch.setattr(loader, "read_safetensors_dir", must_not_parse)
    second = load_model(tiny_checkpoint("qwen3_moe"), cache_dir=cache_dir, progress=False)
    assert second.from_cache
    np.testing.assert_array_equal(
        np.asarray(first.forward(tokens, positions)[0]), np.asarray(second.forward(tokens, positions)[0])
    )


def test_a_chat_template_edited_after_caching_is_the_one_served(tmp_path: Path, cache_dir: Path) -> None:
    """The cache holds prepared parameters; the template beside them is read at every load."""
    checkpoint = build_tiny_checkpoint("llama_tied", tmp_path / "model")
    (checkpoint / "tokenizer_config.json").write_text(json.dumps({"chat_template": "first {{ messages }}"}))
    assert load_model(checkpoint, cache_dir=cache_dir, progress=False).chat_template == "first {{ messages }}"
    (checkpoint / "chat_template.jinja").write_text("second {{ messages }}")
    again = load_model(checkpoint, cache_dir=cache_dir, progress=False)
    assert again.from_cache and again.chat_template == "second {{ messages }}"


def test_cache_dir_comes_from_environment(
    tiny_checkpoint: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POOLED_CACHE_DIR", str(tmp_path / "from_env"))
    load_model(tiny_checkpoint("llama_tied"), progress=False)
    assert any((tmp_path / "from_env").iterdir())


def test_fingerprint_depends_on_dtype_and_file_state(tmp_path: Path, tiny_checkpoint: Callable[[str], Path]) -> None:
    source = tiny_checkpoint("llama_tied")
    files = checkpoint_files(source)
    assert fingerprint(files, "float32") != fingerprint(files, "bfloat16")
    copy = tmp_path / "copy"
    copy.mkdir()
    for file in files:
        (copy / file.name).write_bytes(file.read_bytes())
    copied = checkpoint_files(copy)
    before = fingerprint(copied, "float32")
    weights = copy / "model.safetensors"
    stat = weights.stat()
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert fingerprint(copied, "float32") != before


def test_damaged_cache_entry_falls_back_to_the_checkpoint(
    tiny_checkpoint: Callable[[str], Path], cache_dir: Path
) -> None:
    load_model(tiny_checkpoint("llama_tied"), cache_dir=cache_dir, progress=False)
    (entry,) = cache_dir.iterdir()
    shutil.rmtree(entry / "params")
    (entry / "params").mkdir()
    reloaded = load_model(tiny_checkpoint("llama_tied"), cache_dir=cache_dir, progress=False)
    assert not reloaded.from_cache
    assert load_model(tiny_checkpoint("llama_tied"), cache_dir=cache_dir, progress=False).from_cache
