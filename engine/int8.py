"""W8A8 matmuls: int8 weights with one scale per output channel, activations quantized per row on
the fly, int32 accumulation (`--quantization w8a8`).

Why: on XLA's CPU backend an int8 × int8 → int32 dot runs a much faster kernel than an f32 dot
and reads a quarter of the weight bytes. Measured on this project's 2-core CPU machine, the 30
SmolLM2-135M layers' projections took 17 ms at 2 rows and 27 ms at 32 rows, against 30 ms and
77 ms in f32. With a single row XLA takes a slow path (142 ms), so one row is padded to two.

The price is accuracy: one scale per row of activations is coarse where a few channels are much
larger than the rest. On SmolLM2-135M perplexity rose 3–4 % and the most likely next token
matched float32's at 85–88 % of positions (`tools/quantization_quality.py`, docs/BENCHMARKS.md);
per-group scales (as llama.cpp's Q8 blocks) would cost less accuracy but ran no faster than f32
on XLA.

int8 weights are stored output-major ([N, K]: each output channel's weights contiguous), as the
embedding table already is. The 30 layers' projections as [N, K] against [K, N] (scratch timing,
jitted, best of 10): 10.4 against 12.5 ms at 2 rows, 14.0 against 17.6 at 32, 78 against 83 at 256.
"""

import math

import jax
import jax.numpy as jnp

Array = jax.Array

LEVELS = 127.0  # symmetric int8: -127..127


def quantize(weight: Array, channel_axes: int, channels_last: bool = True) -> tuple[Array, Array]:
    """`weight` → (output-major int8 weight, f32 scale per output channel).

    The output channels are the trailing `channel_axes` axes (a kernel [K..., N...], returned as
    [N..., K...]), or the leading ones when `channels_last` is False (an embedding table [V, D],
    also the tied output head, returned as it is).
    """
    if channels_last:
        inputs = weight.ndim - channel_axes
        weight = jnp.transpose(weight, (*range(inputs, weight.ndim), *range(inputs)))
    reduce = tuple(range(channel_axes, weight.ndim))
    scale = jnp.max(jnp.abs(weight.astype(jnp.float32)), axis=reduce, keepdims=True) / LEVELS
    scale = jnp.where(scale == 0, 1.0, scale)
    values = jnp.round(weight / scale).astype(jnp.int8)
    return values, jnp.squeeze(scale, reduce)


def matmul(x: Array, weight: Array, scale: Array) -> Array:
    """x [..., K] · weightᵀ → f32 [..., N]; `weight` is int8 [N, K] and `scale` its f32 [N]
    output-channel scales."""
    rows = x.reshape(-1, x.shape[-1]).astype(jnp.float32)
    count = rows.shape[0]
    if count == 1:
        rows = jnp.pad(rows, ((0, 1), (0, 0)))
    row_scale = jnp.max(jnp.abs(rows), axis=1, keepdims=True) / LEVELS
    row_scale = jnp.where(row_scale == 0, 1.0, row_scale)
    quantized = jnp.round(rows / row_scale).astype(jnp.int8)
    dims = (((1,), (1,)), ((), ()))
    accumulated = jax.lax.dot_general(quantized, weight, dims, preferred_element_type=jnp.int32)
    y = accumulated.astype(jnp.float32) * row_scale * scale
    return y[:count].reshape(*x.shape[:-1], y.shape[-1])


def flat_matmul(x: Array, kernel: Array, scale: Array, contracting: int) -> Array:
    """A projection's contraction: x's last `contracting` axes with the output-major kernel's last
    ones ([N..., K...]), as one flat axis; the result has the kernel's output axes."""
    flat_x = x.reshape(*x.shape[: x.ndim - contracting], -1)
    outputs = kernel.shape[: kernel.ndim - contracting]
    y = matmul(flat_x, kernel.reshape(math.prod(outputs), -1), scale.reshape(-1))
    return y.reshape(*flat_x.shape[:-1], *outputs)
