"""W8A8 matmuls: int8 weights with one scale per output channel, activations quantized per row on
the fly, int32 accumulation (`--quantization w8a8`).

Why: an int8 × int8 → int32 dot reads a quarter of an f32 weight's bytes, and on XLA's CPU
backend it also runs a much faster kernel than an f32 dot once there are many rows: the 30
SmolLM2-135M layers' projections took 27 ms at 32 rows against 77 ms in f32. With few rows XLA's
int8 dot moves weights slowly (~6 GB/s; one row takes a slow path, so XLA gets it padded to two),
so up to `KERNEL_MAX_ROWS` rows the native kernel of engine/kernels runs instead (the same
function, bit for bit). A whole decode step of the default model, measured alternating: one row
9.6 against 15.2 ms, four 14.6 against 19.2, eight 21.6 against 24.0, twelve 28.9 against 28.3.

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
from collections.abc import Sequence

import jax
import jax.numpy as jnp

from engine import kernels

Array = jax.Array

LEVELS = 127.0  # symmetric int8: -127..127
KERNEL_MAX_ROWS = 8


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
    return matmuls(x, [(weight, scale)])[0]


def matmuls(x: Array, weights: Sequence[tuple[Array, Array]]) -> list[Array]:
    """`matmul` of one x by each (weight, scale), x quantized once. Up to `KERNEL_MAX_ROWS` rows on
    a CPU one native call quantizes x and streams all the weights (q, k and v; gate and up)."""
    rows = x.reshape(-1, x.shape[-1]).astype(jnp.float32)
    if rows.shape[0] <= KERNEL_MAX_ROWS and kernels.available():
        ys = jax.lax.platform_dependent(rows, weights, cpu=kernels.int8_matmul, default=xla_matmuls)
    else:
        ys = xla_matmuls(rows, weights)
    return [y.reshape(*x.shape[:-1], y.shape[-1]) for y in ys]


def quantize_rows(rows: Array) -> tuple[Array, Array]:
    """f32 [M, K] → (int8 [M, K], f32 scale [M]): one symmetric scale per row."""
    row_scale = jnp.max(jnp.abs(rows), axis=1) / LEVELS
    row_scale = jnp.where(row_scale == 0, 1.0, row_scale)
    return jnp.round(rows / row_scale[:, None]).astype(jnp.int8), row_scale


def xla_matmuls(rows: Array, weights: Sequence[tuple[Array, Array]]) -> list[Array]:
    """XLA's int8 dots, the same function as `kernels.int8_matmul`."""
    quantized, row_scale = quantize_rows(rows)
    return [_xla_matmul(quantized, row_scale, weight, scale) for weight, scale in weights]


def _xla_matmul(x: Array, x_scale: Array, weight: Array, weight_scale: Array) -> Array:
    """int8 x [M, K] · weight [N, K]ᵀ · x_scale [M] · weight_scale [N] → f32 [M, N] with XLA's dot."""
    count = x.shape[0]
    if count == 1:
        x, x_scale = jnp.pad(x, ((0, 1), (0, 0))), jnp.pad(x_scale, (0, 1))
    dims = (((1,), (1,)), ((), ()))
    accumulated = jax.lax.dot_general(x, weight, dims, preferred_element_type=jnp.int32)
    return (accumulated.astype(jnp.float32) * x_scale[:, None] * weight_scale)[:count]


def flat_matmuls(x: Array, kernels_and_scales: Sequence[tuple[Array, Array]], contracting: int) -> list[Array]:
    """Projections of one x: its last `contracting` axes with each output-major kernel's last ones
    ([N..., K...]), as one flat axis; each result has its kernel's output axes."""
    flat_x = x.reshape(*x.shape[: x.ndim - contracting], -1)
    outputs = [kernel.shape[: kernel.ndim - contracting] for kernel, _ in kernels_and_scales]
    flat = [
        (kernel.reshape(math.prod(shape), -1), scale.reshape(-1))
        for (kernel, scale), shape in zip(kernels_and_scales, outputs, strict=True)
    ]
    ys = matmuls(flat_x, flat)
    return [y.reshape(*flat_x.shape[:-1], *shape) for y, shape in zip(ys, outputs, strict=True)]
