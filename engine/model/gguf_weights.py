"""Weights served in a GGUF's own blocks (`--quantization gguf`): each matrix keeps the file's bytes
and its own format (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K; engine/model/kernels/gguf_blocks.h).

Why: a Q4_K_M file holds 4.5 to 6.6 bits per weight; dequantized to float32 it took 7.5× llama.cpp's
memory and ran at half its speed (issue 40). Kept as the file has them, the weights take the file's
size in memory, a load is a copy of the file's bytes (no conversion, nothing for the prepared
cache to hold), and every matmul streams the fewest bytes the file allows.

Layout: one uint8 array per matrix, [*output channels, bytes of a row's blocks]: the file's rows are
already output-major (ggml's first dimension is the input), so a row is one output channel's
blocks, in the file's order. The input axis is never split across devices.

The matmuls run on the native CPU kernel (engine/model/kernels/gguf_matmul.cc): activations quantized
per block as llama.cpp quantizes them for each format, an integer dot per block, scaled in f32.
Without the kernels (another platform, or no compiler) nothing serves these weights: the loader then
serves the file's floats (`engine/model/loading/loader.py`).
"""

import math
from collections.abc import Sequence
from typing import NamedTuple

import jax

from engine.model import kernels

Array = jax.Array

# ggml's type number, inputs per block and bytes per block of each format served.
FORMATS: dict[str, tuple[int, int, int]] = {
    "Q4_0": (2, 32, 18),
    "Q4_1": (3, 32, 20),
    "Q5_0": (6, 32, 22),
    "Q5_1": (7, 32, 24),
    "Q8_0": (8, 32, 34),
    "Q4_K": (12, 256, 144),
    "Q5_K": (13, 256, 176),
    "Q6_K": (14, 256, 210),
}


def row_bytes(format: str, depth: int) -> int:
    """Bytes of one output channel's blocks over `depth` inputs."""
    _, inputs, size = FORMATS[format]
    return depth // inputs * size


def fits(format: str, depth: int) -> bool:
    """Whether `depth` inputs are whole blocks of `format`."""
    return format in FORMATS and depth % FORMATS[format][1] == 0


class BlockWeight(NamedTuple):
    """An output-major matrix in GGUF blocks: `values` uint8 [*channels, row bytes] of `format`."""

    values: Array
    format: str

    @property
    def channels(self) -> tuple[int, ...]:
        return tuple(self.values.shape[:-1])

    def flat(self) -> "BlockWeight":
        return BlockWeight(self.values.reshape(math.prod(self.channels), -1), self.format)


def matmuls(x: Array, weights: Sequence[BlockWeight], contracting: int = 1) -> list[Array]:
    """x's last `contracting` axes (as one) times each weight → f32 with the weight's output axes, in
    one native call (q, k and v; gate and up): x is quantized once per block size."""
    rows = x.reshape(-1, math.prod(x.shape[x.ndim - contracting :])).astype("float32")
    flat = [weight.flat() for weight in weights]
    ys = kernels.gguf_matmul(rows, [(weight.values, FORMATS[weight.format][0]) for weight in flat])
    lead = x.shape[: x.ndim - contracting]
    return [y.reshape(*lead, *weight.channels) for y, weight in zip(ys, weights, strict=True)]


def rows(table: BlockWeight, indices: Array) -> Array:
    """f32 rows of a table [V, row bytes] (an embedding) at `indices` (any shape) → [*indices, D]."""
    number, inputs, size = FORMATS[table.format]
    depth = table.values.shape[-1] // size * inputs
    flat = kernels.gguf_rows(table.values, indices.reshape(-1).astype("int32"), number, depth)
    return flat.reshape(*indices.shape, depth)
