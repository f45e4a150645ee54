"""A GGUF served from its own blocks (`--quantization gguf`): every format, mixed per tensor, computes
what the same file's float weights compute, to the activations' quantization; no float copy kept."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine.errors import CheckpointError
from engine.model import int4, kernels
from engine.model.loading.loader import LoadedModel, load_model
from tests.engine.gguf_blocks import FORMATS
from tests.engine.tiny_gguf_decoders import Q4_K_M, VOCAB, write_tiny_gguf

pytestmark = [
    pytest.mark.slow,  # a model in every block format through XLA
    pytest.mark.skipif(not kernels.available(), reason="needs the native CPU kernels (a C++ compiler)"),
]

TOKENS = jnp.asarray([[1, 17, 250, 3, 99, 42, 7, 300, 12, 5, 64, 128]], jnp.int32)


def _logits(model: LoadedModel) -> np.ndarray:
    logits, _ = model.forward(TOKENS, jnp.arange(TOKENS.shape[1], dtype=jnp.int32)[None])
    return np.asarray(logits[0])


def _block_bytes(model: LoadedModel) -> int:
    return sum(leaf.nbytes for leaf in jax.tree.leaves(model.params) if leaf.dtype == jnp.uint8)


@pytest.mark.parametrize(
    "formats",
    [{"default": format} for format in FORMATS]
    + [Q4_K_M, {"default": "Q5_K", "token_embd": "Q8_0", "ffn_down": "Q5_0"}],
    ids=[*FORMATS, "Q4_K_M", "mixed"],
)
@pytest.mark.parametrize("tied", [False, True], ids=["head", "tied"])
def test_blocks_compute_what_the_files_floats_compute(tmp_path: Path, formats: dict[str, str], tied: bool) -> None:
    path = write_tiny_gguf(tmp_path / "tiny.gguf", formats, tied)
    blocks = load_model(path, cache_dir=tmp_path / "cache", progress=False, quantization="gguf")
    floats = load_model(path, cache_dir=tmp_path / "cache", progress=False, quantization="none")
    assert blocks.quantization == "gguf" and blocks.config.matmul_weights == "gguf"
    expected = {f for name, f in formats.items() if not (tied and name == "output")}
    assert {format for _, format in blocks.config.block_formats} == expected
    ours, theirs = _logits(blocks), _logits(floats)
    assert ours.shape == (TOKENS.shape[1], VOCAB)
    # Only the activations' rounding (8 bits a block) separates them: far closer than unrelated logits.
    assert np.corrcoef(ours.ravel(), theirs.ravel())[0, 1] > 0.995
    assert np.abs(ours - theirs).max() < 0.1 * np.abs(theirs).max()


def test_the_weights_take_the_files_bytes_and_no_cache_entry(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "tiny.gguf", Q4_K_M)
    model = load_model(path, cache_dir=tmp_path / "cache", progress=False, quantization="gguf")
    total = sum(leaf.nbytes for leaf in jax.tree.leaves(model.params))
    assert _block_bytes(model) <= path.stat().st_size <= 1.05 * total  # the file is its blocks, norms and header
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())
    assert dict(model.config.block_formats)["layer_0/attn/v/kernel"] == "Q6_K"
    assert dict(model.config.block_formats)["layer_1/attn/v/kernel"] == "Q4_K"


def test_auto_keeps_floats_for_unserved_matrices_and_gguf_says_why(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "f32.gguf", {"default": "Q4_K", "ffn_up": "F32"})
    assert load_model(path, cache_dir=tmp_path / "cache", progress=False, quantization="auto").quantization == "none"
    with pytest.raises(CheckpointError, match="--quantization gguf cannot serve this model: its matrices include F32"):
        load_model(path, cache_dir=tmp_path / "cache", progress=False, quantization="gguf")


def test_all_q4_1_projections_keep_w4a8_from_the_files_blocks(tmp_path: Path) -> None:
    """w4a8 moves the file's Q4_1 blocks into its layout: the same bytes packing the file's floats
    gives, and no prepared copy of weights the file holds."""
    path = write_tiny_gguf(tmp_path / "q41.gguf", {"default": "Q4_1", "token_embd": "Q8_0", "output": "Q8_0"})
    model = load_model(path, cache_dir=tmp_path / "cache", progress=False, quantization="auto")
    assert model.quantization == "w4a8" and not model.from_cache
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())
    floats = load_model(path, cache_dir=tmp_path / "floats", progress=False, quantization="none")
    q = floats.params["layer_1"]["attn"]["q"]["kernel"]  # [D, heads, head_dim]: llama's q rows, unpermuted
    expected = int4.pack(jnp.transpose(q, (1, 2, 0)).reshape(*q.shape[1:], -1))
    np.testing.assert_array_equal(np.asarray(model.params["layer_1"]["attn"]["q"]["kernel"]), np.asarray(expected))
    down = floats.params["layer_0"]["mlp"]["down"]["kernel"]  # [F, D]
    np.testing.assert_array_equal(
        np.asarray(model.params["layer_0"]["mlp"]["down"]["kernel"]), np.asarray(int4.pack(down.T))
    )
    assert load_model(path, cache_dir=tmp_path / "cache", progress=False, quantization="gguf").quantization == "gguf"
