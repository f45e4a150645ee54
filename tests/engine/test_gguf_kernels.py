"""The GGUF block kernels (engine/model/kernels/gguf_matmul.cc) against gguf-py's reading of the same
blocks times the activations quantized as llama.cpp quantizes them: the same sums, to f32 rounding."""

import jax.numpy as jnp
import numpy as np
import pytest

from engine.model import gguf_weights, kernels
from engine.model.gguf_weights import BlockWeight
from tests.engine.gguf_blocks import FORMATS, K_QUANTS, dequantize, quantize

pytestmark = pytest.mark.skipif(not kernels.available(), reason="needs the native CPU kernels (a C++ compiler)")


def _small_activations(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """llama.cpp's Q8_0/Q8_1 blocks of x [M, K]: the dequantized inputs d16 · q, and each block's s."""
    blocks = x.reshape(x.shape[0], -1, 32)
    peak = np.abs(blocks).max(axis=-1, keepdims=True)
    inverse = np.where(peak == 0, np.float32(0), np.float32(127) / np.where(peak == 0, 1, peak)).astype(np.float32)
    q = np.rint(blocks * inverse)
    d = (peak / np.float32(127)).astype(np.float32)
    s = (d[..., 0] * q.sum(axis=-1)).astype(np.float32).astype(np.float16).astype(np.float64)
    return (d.astype(np.float16).astype(np.float64) * q).reshape(x.shape), s


def _super_activations(x: np.ndarray) -> np.ndarray:
    """llama.cpp's Q8_K blocks of x [M, K], dequantized: the input of largest magnitude maps to -127."""
    blocks = x.reshape(x.shape[0], -1, 256)
    extreme = np.take_along_axis(blocks, np.abs(blocks).argmax(axis=-1)[..., None], axis=-1)
    inverse = (np.float32(-127) / np.where(extreme == 0, 1, extreme)).astype(np.float32)
    q = np.minimum(127, np.rint(blocks * inverse))
    d = np.where(extreme == 0, 0, np.float32(1) / inverse).astype(np.float32)
    return (d.astype(np.float64) * q).reshape(x.shape)


def _expected(x: np.ndarray, blocks: np.ndarray, format: str) -> tuple[np.ndarray, np.ndarray]:
    """What the kernel computes, in float64, and a bound on its f32 rounding (per result)."""
    weights = dequantize(blocks, format).astype(np.float64)
    if format in K_QUANTS:
        inputs = _super_activations(x)
        return inputs @ weights.T, np.abs(inputs) @ np.abs(weights).T
    inputs, s = _small_activations(x)
    y = inputs @ weights.T
    if format in ("Q4_1", "Q5_1"):
        # llama.cpp adds m · s with s = f16(d · sum q), not m · d16 · sum q: the same rounding here.
        minimums = blocks.reshape(blocks.shape[0], -1, blocks.shape[1] // (x.shape[1] // 32))[..., 2:4]
        m = minimums.copy().view(np.float16)[..., 0].astype(np.float64)  # [N, blocks]
        d16_sums = inputs.reshape(x.shape[0], -1, 32).sum(axis=-1)  # d16 · sum q per row block
        y += s @ m.T - d16_sums @ m.T
    return y, np.abs(inputs) @ np.abs(weights).T


@pytest.mark.parametrize("format", FORMATS)
@pytest.mark.parametrize("rows", [1, 3, 4, 9, 19])
def test_each_format_matches_its_dequantized_blocks(format: str, rows: int) -> None:
    rng = np.random.default_rng(FORMATS.index(format) * 10 + rows)
    depth, channels = 512, 21  # a chunk of 16 channels and one of 5: whole vectors of channels and the rest
    weights = rng.standard_normal((channels, depth)).astype(np.float32)
    x = (rng.standard_normal((rows, depth)) * rng.uniform(0.1, 4, (rows, 1))).astype(np.float32)
    x[0, :32] = 0.0  # an all-zero block of inputs
    blocks = quantize(weights, format)
    (y,) = gguf_weights.matmuls(jnp.asarray(x), [BlockWeight(jnp.asarray(blocks), format)])
    expected, magnitude = _expected(x, blocks, format)
    assert np.all(np.abs(np.asarray(y, np.float64) - expected) <= 1e-5 * magnitude + 1e-6)


def test_one_call_serves_weights_of_different_formats() -> None:
    """q, k and v of a Q4_K_M file differ in format (v in Q6_K): one call, each weight its own."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((5, 256)).astype(np.float32)
    formats = ["Q4_K", "Q6_K", "Q8_0", "Q5_0"]
    blocks = [quantize(rng.standard_normal((16, 256)).astype(np.float32), format) for format in formats]
    ys = gguf_weights.matmuls(
        jnp.asarray(x), [BlockWeight(jnp.asarray(b), f) for b, f in zip(blocks, formats, strict=True)]
    )
    for y, b, format in zip(ys, blocks, formats, strict=True):
        (alone,) = gguf_weights.matmuls(jnp.asarray(x), [BlockWeight(jnp.asarray(b), format)])
        np.testing.assert_array_equal(np.asarray(y), np.asarray(alone))


@pytest.mark.parametrize("format", FORMATS)
def test_a_rows_result_does_not_depend_on_the_other_rows(format: str) -> None:
    """Bit for bit: rows in groups of eight (the lane path) or in tiles of four, and a row alone."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((19, 512)).astype(np.float32)
    weight = BlockWeight(jnp.asarray(quantize(rng.standard_normal((8, 512)).astype(np.float32), format)), format)
    (together,) = gguf_weights.matmuls(jnp.asarray(x), [weight])
    for row in range(19):
        (alone,) = gguf_weights.matmuls(jnp.asarray(x[row : row + 1]), [weight])
        np.testing.assert_array_equal(np.asarray(alone)[0], np.asarray(together)[row])


@pytest.mark.parametrize("format", FORMATS)
def test_embedding_rows_are_the_dequantized_rows(format: str) -> None:
    rng = np.random.default_rng(11)
    table = quantize(rng.standard_normal((40, 256)).astype(np.float32), format)
    ids = np.array([[0, 39], [7, 7]], np.int32)
    rows = gguf_weights.rows(BlockWeight(jnp.asarray(table), format), jnp.asarray(ids))
    np.testing.assert_array_equal(np.asarray(rows), dequantize(table, format)[ids])
