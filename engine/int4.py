"""4-bit weights for `--quantization w4a8`: llama.cpp's Q4_1 blocks, kept as the GGUF holds them.

Why: a one-token decode step streams every weight once. In Q4_1 the default model's projections
are ~66 MB instead of 106 MB in int8: a decode step reads ~95 MB with the output head in int8,
against 135 MB (and 540 MB in float32).

Format: an output-major weight [N, K] (K a multiple of `CHUNK`) in blocks of `BLOCK` inputs, each
with an f16 scale d and minimum m and 4-bit codes c in 0..15, standing for d · c + m. From a GGUF
that is Q4_1 already, `pack` finds the file's own blocks again (each block's smallest and largest
values are its codes 0 and 15), so serving adds no weight error; other weights are quantized the
same way (llama.cpp's reference Q4_1). Codes are packed two per byte, each `CHUNK` inputs in 32
bytes: low nibbles are the chunk's first `BLOCK` inputs, high nibbles the next (the layout the
native kernel expands with one shift and mask). 5 bits per weight.

Two paths compute with these weights (engine/int8.py picks one):
- one-token steps on the CPU: the native kernel (engine/kernels/q4_matmul.cc) against activations
  quantized per block of 32 (llama.cpp's Q8 blocks): the integer dot per block, scaled in float.
- everything else (prompts; other platforms): XLA's int8 dot, the weights expanded and rounded to
  int8 per output channel for the call (`int8.Weight.int8_values`), as `--quantization w8a8`
  computes.
"""

import jax
import jax.numpy as jnp

Array = jax.Array

BLOCK = 32
CHUNK = 2 * BLOCK
LEVELS = 15  # codes 0..15


def packable(depth: int) -> bool:
    return depth % CHUNK == 0


def pack(weights: Array) -> tuple[Array, Array, Array]:
    """Output-major float weights [..., K] → (codes uint8 [..., K/2], scales f16 [..., K/BLOCK], mins
    f16 [..., K/BLOCK])."""
    lead = weights.shape[:-1]
    blocks = weights.astype(jnp.float32).reshape(*lead, -1, BLOCK)
    low = blocks.min(axis=-1)
    scales = ((blocks.max(axis=-1) - low) / LEVELS).astype(jnp.float16)
    mins = low.astype(jnp.float16)
    step = scales.astype(jnp.float32)
    step = jnp.where(step == 0, 1.0, step)
    codes = jnp.clip(jnp.round((blocks - mins[..., None].astype(jnp.float32)) / step[..., None]), 0, LEVELS)
    pairs = codes.astype(jnp.uint8).reshape(*lead, -1, 2, BLOCK)
    packed = pairs[..., 0, :] | (pairs[..., 1, :] << 4)
    return packed.reshape(*lead, -1), scales, mins


def unpack(codes: Array, scales: Array, mins: Array) -> Array:
    """(codes, scales, mins) as `pack` returns them → the f32 weights [..., K] they stand for."""
    lead = codes.shape[:-1]
    chunks = codes.reshape(*lead, -1, BLOCK)
    levels = jnp.stack([chunks & 0x0F, chunks >> 4], axis=-2).reshape(*lead, -1, BLOCK).astype(jnp.float32)
    weights = levels * scales[..., None].astype(jnp.float32) + mins[..., None].astype(jnp.float32)
    return weights.reshape(*lead, -1)
