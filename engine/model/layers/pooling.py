"""Pooling a model's hidden states into one embedding per input: an encoder's and a decoder's
embedding pass share it."""

from typing import Literal

import jax
import jax.numpy as jnp

Array = jax.Array
Pooling = Literal["mean", "cls", "last"]


def pool(hidden: Array, mask: Array, pooling: Pooling, normalize: bool) -> Array:
    """hidden [B, T, D] and mask [B, T] → [B, D]: the mean of the real tokens, the first token, or
    the last real one; scaled to unit length if `normalize`."""
    if pooling == "cls":
        pooled = hidden[:, 0]
    elif pooling == "last":
        last = jnp.sum(mask, axis=1) - 1
        pooled = hidden[jnp.arange(hidden.shape[0]), last]
    else:
        weights = mask.astype(jnp.float32)[..., None]
        pooled = jnp.sum(hidden * weights, axis=1) / jnp.maximum(jnp.sum(weights, axis=1), 1.0)
    if normalize:
        pooled = pooled / jnp.maximum(jnp.linalg.norm(pooled, axis=-1, keepdims=True), 1e-12)
    return pooled
