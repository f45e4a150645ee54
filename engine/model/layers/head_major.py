"""The matmuls attention is made of, head-major.

Queries [K*B, G*T, H] (every query head of a KV head, for every step token) against keys and
values [K*B, S, H], as one batch of plain matmuls: on XLA's CPU backend that runs faster than an
einsum over [B,T,K,G,H] and [B,S,K,H], and much faster than a broadcast multiply-and-sum. The
matmuls take the KV pool's dtype (with a bfloat16 pool, bfloat16 matmuls, faster than float32 ones
on the CPU) and accumulate in float32.
"""

import math

import jax
import jax.numpy as jnp

from engine.model.layers.linear import dot_precision

Array = jax.Array
_MASKED = -1e30


def queries(q: Array, dtype: jnp.dtype) -> Array:
    """[B,T,K,G,H] -> [K*B, G*T, H] in `dtype`, pre-scaled by 1/sqrt(H)."""
    B, T, K, G, H = q.shape
    scaled = (q.astype(jnp.float32) / math.sqrt(H)).astype(dtype)
    return scaled.transpose(2, 0, 3, 1, 4).reshape(K * B, G * T, H)


def kv_heads(x: Array, dtype: jnp.dtype) -> Array:
    """Keys or values [B,S,K,H] -> [K*B, S, H] in `dtype`."""
    B, S, K, H = x.shape
    return x.astype(dtype).transpose(2, 0, 1, 3).reshape(K * B, S, H)


def scores(queries: Array, keys: Array, visible: Array | None) -> Array:
    """[K*B, G*T, S] scores; `visible` [B, T, S] says which key each step token may see (None: all)."""
    dims = (((2,), (2,)), ((0,), (0,)))
    precision = dot_precision(queries, keys)
    scores = jax.lax.dot_general(queries, keys, dims, precision=precision, preferred_element_type=jnp.float32)
    if visible is None:
        return scores
    B, T, S = visible.shape
    grouped = scores.reshape(-1, B, queries.shape[1] // T, T, S)
    return jnp.where(visible[None, :, None], grouped, _MASKED).reshape(scores.shape)


def weighted(probs: Array, values: Array) -> Array:
    """probs [K*B, G*T, S] over values [K*B, S, H] -> [K*B, G*T, H]."""
    dims = (((2,), (1,)), ((0,), (0,)))
    probs = probs.astype(values.dtype)
    precision = dot_precision(probs, values)
    return jax.lax.dot_general(probs, values, dims, precision=precision, preferred_element_type=jnp.float32)


def step_major(attended: Array, B: int, T: int) -> Array:
    """[K*B, G*T, H] -> [B, T, K*G*H] (query heads in checkpoint order)."""
    K, H = attended.shape[0] // B, attended.shape[2]
    return attended.reshape(K, B, -1, T, H).transpose(1, 3, 0, 2, 4).reshape(B, T, -1)
