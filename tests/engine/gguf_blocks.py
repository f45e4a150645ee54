"""Float matrices → GGUF blocks of every format pooled serves, for tests' tiny GGUF files.

gguf-py quantizes the legacy formats (Q4_0 … Q8_0) itself; it only dequantizes the K formats, so
they are quantized here the simple way (each sub-block's range mapped onto its codes, the scales
rounded to their 6 or 8 bits): valid blocks in the file's layout, not llama.cpp's error-minimizing
search, which does not matter to tests that compare a kernel with gguf-py's reading of the same
bytes. `tests/engine/test_gguf_kernels.py` checks these blocks against gguf-py's dequantization.
"""

import gguf
import numpy as np
from gguf import GGMLQuantizationType

LEGACY = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0")
K_QUANTS = ("Q4_K", "Q5_K", "Q6_K")
FORMATS = LEGACY + K_QUANTS


def quantize(weights: np.ndarray, format: str) -> np.ndarray:
    """f32 [N, K] → uint8 [N, row bytes] in `format`'s blocks."""
    weights = np.asarray(weights, np.float32)
    if format in LEGACY:
        return np.asarray(gguf.quants.quantize(weights, GGMLQuantizationType[format]))
    rows, depth = weights.shape
    superblocks = weights.reshape(rows, depth // 256, 256)
    blocks = _six_bit(superblocks) if format == "Q6_K" else _nibble_k(superblocks, fifth_bit=format == "Q5_K")
    return blocks.reshape(rows, -1)


def dequantize(blocks: np.ndarray, format: str) -> np.ndarray:
    """gguf-py's reading of `blocks` (uint8 [N, row bytes]) as f32 [N, K]."""
    return np.asarray(gguf.quants.dequantize(blocks, GGMLQuantizationType[format]), np.float32)


def _half(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float16)


def _nibble_k(x: np.ndarray, fifth_bit: bool) -> np.ndarray:
    """Q4_K / Q5_K blocks of x [N, B, 256]: per 32 inputs a 6-bit scale and minimum."""
    levels = 31 if fifth_bit else 15
    sub = x.reshape(*x.shape[:2], 8, 32)
    low = np.minimum(sub.min(axis=-1), 0.0)
    scale = (sub.max(axis=-1) - low) / levels
    d = _half(scale.max(axis=-1) / 63)
    dmin = _half(-low.min(axis=-1) / 63)
    d32, dmin32 = d.astype(np.float32), dmin.astype(np.float32)
    sc = np.clip(np.round(scale / np.where(d32 == 0, 1, d32)[..., None]), 0, 63).astype(np.uint8)
    mn = np.clip(np.round(-low / np.where(dmin32 == 0, 1, dmin32)[..., None]), 0, 63).astype(np.uint8)
    step = d32[..., None] * sc
    codes = np.round((sub + (dmin32[..., None] * mn)[..., None]) / np.where(step == 0, 1, step)[..., None])
    codes = np.clip(codes, 0, levels).astype(np.uint8).reshape(*x.shape[:2], 256)
    packed = np.zeros((*x.shape[:2], 12), np.uint8)
    packed[..., 0:4] = sc[..., :4] | ((sc[..., 4:] >> 4) << 6)
    packed[..., 4:8] = mn[..., :4] | ((mn[..., 4:] >> 4) << 6)
    packed[..., 8:12] = (sc[..., 4:] & 0x0F) | ((mn[..., 4:] & 0x0F) << 4)
    chunks = codes.reshape(*x.shape[:2], 4, 2, 32)
    nibbles = ((chunks[..., 0, :] & 0x0F) | ((chunks[..., 1, :] & 0x0F) << 4)).reshape(*x.shape[:2], 128)
    parts = [d.view(np.uint8).reshape(*x.shape[:2], 2), dmin.view(np.uint8).reshape(*x.shape[:2], 2), packed]
    if fifth_bit:
        runs = (codes.reshape(*x.shape[:2], 8, 32) >> 4).astype(np.uint8)
        parts.append(np.bitwise_or.reduce(runs << np.arange(8, dtype=np.uint8)[:, None], axis=-2))
    return np.concatenate([*parts, nibbles], axis=-1)


def _six_bit(x: np.ndarray) -> np.ndarray:
    """Q6_K blocks of x [N, B, 256]: per 16 inputs an int8 scale, codes q - 32 in -32..31."""
    sub = x.reshape(*x.shape[:2], 16, 16)
    scale = np.abs(sub).max(axis=-1) / 31
    d = _half(scale.max(axis=-1) / 127)
    d32 = d.astype(np.float32)
    sc = np.clip(np.round(scale / np.where(d32 == 0, 1, d32)[..., None]), -128, 127).astype(np.int8)
    step = d32[..., None] * sc
    codes = np.clip(np.round(sub / np.where(step == 0, 1, step)[..., None]), -32, 31) + 32
    q = codes.astype(np.uint8).reshape(*x.shape[:2], 2, 4, 32)  # [half, quarter, l]
    low = np.concatenate(
        [(q[..., 0, :] & 0x0F) | ((q[..., 2, :] & 0x0F) << 4), (q[..., 1, :] & 0x0F) | ((q[..., 3, :] & 0x0F) << 4)],
        axis=-1,
    )
    high = (q[..., 0, :] >> 4) | ((q[..., 1, :] >> 4) << 2) | ((q[..., 2, :] >> 4) << 4) | ((q[..., 3, :] >> 4) << 6)
    lead = x.shape[:2]
    return np.concatenate(
        [low.reshape(*lead, 128), high.reshape(*lead, 64), sc.view(np.uint8), d.view(np.uint8).reshape(*lead, 2)],
        axis=-1,
    )
