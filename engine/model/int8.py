"""W8A8 matmuls: int8 weights with one scale per output channel, activations quantized per row on
the fly, int32 accumulation (`--quantization w8a8`); and the matmuls of weights kept in Q4_1 blocks
(`--quantization w4a8`, engine/model/int4.py), which run on their own native kernel on CPUs.

Why: an int8 × int8 → int32 dot reads a quarter of an f32 weight's bytes. On a CPU every call
runs the native kernel of engine/model/kernels, whatever its rows: with few rows XLA's int8 dot streams
weights far below the memory's bandwidth, with many it was no faster (Zen 3, 2026-12-03), and
with one implementation a row's numbers never depend on how many rows a step has. Two would
not round alike: XLA fuses the last scale multiply with the add after it (a residual) into one
fused multiply-add on some CPUs, a 7-row chunk on the kernel and a 23-row one on XLA's dot then
rounded apart, and the w8a8 model's activations, rounded to int8, carried that into its logits.

The price is accuracy: one scale per row of activations is coarse where a few channels are much
larger than the rest (what it costs: `tools/quantization_quality.py`, docs/BENCHMARKS.md).
Per-group scales (as llama.cpp's Q8 blocks) would cost less accuracy but run no faster than f32
on XLA.

int8 weights are stored output-major ([N, K]: each output channel's weights contiguous), as the
embedding table already is: XLA's dot runs faster on them than on [K, N] ones.
"""

import math
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp

from engine.model import int4, kernels

Array = jax.Array

LEVELS = 127.0  # symmetric int8: -127..127


class Weight(NamedTuple):
    """An output-major weight for int8 matmuls: `values` int8 [N..., K...] with f32 `scale` [N...]
    per output channel; or packed (Q4_1, engine/model/int4.py): `values` uint8 [N..., bytes] and no scale
    (XLA's path derives the scale of its int8 rounding from the values when it runs)."""

    values: Array
    scale: Array | None = None

    @property
    def packed(self) -> bool:
        return self.scale is None

    @property
    def channels(self) -> tuple[int, ...]:
        """The output axes."""
        return tuple(self.values.shape[:-1] if self.scale is None else self.scale.shape)

    def flat(self) -> "Weight":
        """This weight as [N, K] (its output axes as one, and its input axes as one)."""
        channels = math.prod(self.channels)
        scale = None if self.scale is None else self.scale.reshape(-1)
        return Weight(self.values.reshape(channels, -1), scale)

    def floats(self) -> Array | None:
        """A packed weight's f32 values (None for an int8 one)."""
        return int4.unpack(self.values) if self.scale is None else None

    def int8(self) -> tuple[Array, Array]:
        """int8 values and their scale per output channel; a packed weight's values rounded to them."""
        floats = self.floats()
        if floats is None:
            assert self.scale is not None
            return self.values, self.scale
        scale = _channel_scale(floats, floats.ndim - 1)
        return jnp.round(floats / scale[..., None]).astype(jnp.int8), scale


def _channel_scale(weight: Array, channel_axes: int) -> Array:
    """The symmetric int8 scale of each output channel (the leading `channel_axes` axes). A product,
    not a quotient, as in `quantize_rows`: a packed weight's XLA path computes it in every step, and
    XLA would rewrite a division into this product in some fusions only (prompt and decode graphs
    could then round a channel's scale apart)."""
    reduce = tuple(range(channel_axes, weight.ndim))
    scale = jnp.max(jnp.abs(weight.astype(jnp.float32)), axis=reduce) * jnp.float32(1 / LEVELS)
    return jnp.where(scale == 0, 1.0, scale)


def quantize(weight: Array, channel_axes: int, channels_last: bool = True, packed: bool = False) -> Weight:
    """`weight` → its output-major `Weight`, int8 or packed (Q4_1; its input axes become one).

    The output channels are the trailing `channel_axes` axes (a kernel [K..., N...], returned as
    [N..., K...]), or the leading ones when `channels_last` is False (an embedding table [V, D],
    also the tied output head, returned as it is).
    """
    if channels_last:
        inputs = weight.ndim - channel_axes
        weight = jnp.transpose(weight, (*range(inputs, weight.ndim), *range(inputs)))
    if packed:
        return Weight(int4.pack(weight.reshape(*weight.shape[:channel_axes], -1)))
    scale = _channel_scale(weight, channel_axes)
    expanded = scale.reshape(*scale.shape, *(1,) * (weight.ndim - channel_axes))
    return Weight(jnp.round(weight / expanded).astype(jnp.int8), scale)


def matmul(x: Array, weight: Weight) -> Array:
    """x [..., K] · weightᵀ → f32 [..., N] for an [N, K] `weight`."""
    return matmuls(x, [weight])[0]


def matmuls(x: Array, weights: Sequence[Weight]) -> list[Array]:
    """`matmul` of one x by each [N, K] weight, x quantized once. On a CPU one native call quantizes
    x and streams all the weights (q, k and v; gate and up): for int8 weights the function of XLA's
    path; for packed ones the Q4 function (engine/model/int4.py), whose rows never depend on each other
    (XLA's path, on other platforms or without a compiler, rounds the weights to int8)."""
    rows = x.reshape(-1, x.shape[-1]).astype(jnp.float32)
    if not kernels.available():
        ys = xla_matmuls(rows, weights)
    elif weights[0].packed:
        ys = jax.lax.platform_dependent(rows, weights, cpu=_q4_kernel_matmuls, default=xla_matmuls)
    else:
        ys = jax.lax.platform_dependent(rows, weights, cpu=_int8_kernel_matmuls, default=xla_matmuls)
    return [y.reshape(*x.shape[:-1], y.shape[-1]) for y in ys]


def rows(weight: Weight, indices: Array) -> Array:
    """f32 rows of an int8 table (an embedding; never packed, see `engine.model.layers.transformer`) at
    `indices`."""
    assert weight.scale is not None
    return jnp.take(weight.values, indices, axis=0) * jnp.take(weight.scale, indices, axis=0)[..., None]


def quantize_rows(rows: Array) -> tuple[Array, Array]:
    """f32 [M, K] → (int8 [M, K], f32 scale [M]): one symmetric scale per row."""
    # A product, not a quotient: XLA rewrites division by a constant into this product anyway (in some
    # fusions only), and the native kernel must get the same bits.
    row_scale = jnp.max(jnp.abs(rows), axis=1) * jnp.float32(1 / LEVELS)
    row_scale = jnp.where(row_scale == 0, 1.0, row_scale)
    # Times the reciprocal, not divided by the scale: XLA turns a division by a broadcast row scale
    # into this product on some CPUs (a Zen 3 build did, a Zen 4 one did not), and an x / scale of
    # exactly k + 0.5 then rounds apart from the native kernel's.
    inverse = 1.0 / row_scale
    return jnp.round(rows * inverse[:, None]).astype(jnp.int8), row_scale


def xla_matmuls(rows: Array, weights: Sequence[Weight]) -> list[Array]:
    """XLA's int8 dots, the same function as `kernels.int8_matmul`."""
    quantized, row_scale = quantize_rows(rows)
    return [_xla_matmul(quantized, row_scale, *weight.int8()) for weight in weights]


def _int8_kernel_matmuls(rows: Array, weights: Sequence[Weight]) -> list[Array]:
    return kernels.int8_matmul(rows, [weight.int8() for weight in weights])


def _q4_kernel_matmuls(rows: Array, weights: Sequence[Weight]) -> list[Array]:
    return kernels.q4_matmul(rows, [weight.values for weight in weights])


def _xla_matmul(x: Array, x_scale: Array, weight: Array, weight_scale: Array) -> Array:
    """int8 x [M, K] · weight [N, K]ᵀ · x_scale [M] · weight_scale [N] → f32 [M, N] with XLA's dot."""
    count = x.shape[0]
    if count == 1:
        x, x_scale = jnp.pad(x, ((0, 1), (0, 0))), jnp.pad(x_scale, (0, 1))
    dims = (((1,), (1,)), ((), ()))
    accumulated = jax.lax.dot_general(x, weight, dims, preferred_element_type=jnp.int32)
    return (accumulated.astype(jnp.float32) * x_scale[:, None] * weight_scale)[:count]


def flat_matmuls(x: Array, weights: Sequence[Weight], contracting: int) -> list[Array]:
    """Projections of one x: its last `contracting` axes with each output-major weight's input
    axes, as one flat axis; each result has its weight's output axes."""
    flat_x = x.reshape(*x.shape[: x.ndim - contracting], -1)
    ys = matmuls(flat_x, [weight.flat() for weight in weights])
    return [y.reshape(*flat_x.shape[:-1], *weight.channels) for y, weight in zip(ys, weights, strict=True)]
