"""Grouped-query causal self-attention (the attention block of a decoder layer)."""

import flax.linen as nn
import jax
import jax.numpy as jnp

from engine.model.layers import head_major
from engine.model.layers.kv_cache import AnyCache, BurstSide, CacheOut, LayerCache, NewKV, PagedLayerCache
from engine.model.layers.linear import Projection, project
from engine.model.layers.lora import LoraRows
from engine.model.layers.norms import RMSNorm
from engine.model.layers.paged_attention import paged_attention
from engine.model.layers.rope import Rotation, apply_rope
from engine.model.model_config import ModelConfig

Array = jax.Array


class Attention(nn.Module):
    """Grouped-query causal self-attention over `cache` when given.

    A contiguous cache is written at `positions` and returned. A paged cache (with the rows' block
    tables [B,M]) is only read; the step's keys and values come back as `NewKV`. A `draft_step` is a
    decode step over drafts, `side` a decode burst's earlier keys and values
    (engine/model/layers/paged_attention.py). `lora` adds the rows' adapters to the four projections.
    """

    config: ModelConfig
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(
        self,
        x: Array,
        positions: Array,
        rotation: Rotation,
        cache: AnyCache | None,
        block_tables: Array | None = None,
        draft_step: bool = False,
        lora: LoraRows | None = None,
        side: BurstSide | None = None,
    ) -> tuple[Array, CacheOut | None]:
        c = self.config
        D, N, K, H, G = c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim, c.queries_per_kv_head
        bias_q = ("q_heads", "head_dim") if c.qkv_bias else None
        bias_kv = ("kv_heads", "head_dim") if c.qkv_bias else None

        def projection(
            equation: str, shape: tuple[int, ...], axes: tuple[str, ...], bias: tuple[str, ...] | None, name: str
        ) -> Projection:
            weights = c.weights_at("/".join((*self.path, name, "kernel")))
            return Projection(equation, shape, axes, bias, self.dtype, weights=weights, name=name)

        q, k, v = project(
            x,
            [
                projection("BTD,DNH->BTNH", (D, N, H), ("embed", "q_heads", "head_dim"), bias_q, "q"),
                projection("BTD,DKH->BTKH", (D, K, H), ("embed", "kv_heads", "head_dim"), bias_kv, "k"),
                projection("BTD,DKH->BTKH", (D, K, H), ("embed", "kv_heads", "head_dim"), bias_kv, "v"),
            ],
            lora,
        )
        if c.qk_norm:
            q = RMSNorm(H, c.rms_norm_eps, "head_dim", self.dtype, name="q_norm")(q)
            k = RMSNorm(H, c.rms_norm_eps, "head_dim", self.dtype, name="k_norm")(k)
        q = apply_rope(q, rotation)
        k = apply_rope(k, rotation)

        B, T = x.shape[:2]
        if isinstance(cache, PagedLayerCache):
            assert block_tables is not None, "a paged cache needs block tables"
            attended = paged_attention(q.reshape(B, T, K, G, H), k, v, positions, cache, block_tables, draft_step, side)
            returned_cache: CacheOut | None = NewKV(k, v)
        else:
            returned_cache = None
            if cache is None:
                keys, values, key_positions = k, v, positions
            else:
                rows = jnp.arange(B)[:, None]
                returned_cache = LayerCache(
                    cache.k.at[rows, positions].set(k.astype(cache.k.dtype)),
                    cache.v.at[rows, positions].set(v.astype(cache.v.dtype)),
                )
                keys, values = returned_cache.k, returned_cache.v
                key_positions = jnp.broadcast_to(jnp.arange(keys.shape[1]), (B, keys.shape[1]))
            causal = key_positions[:, None, :] <= positions[:, :, None]  # [B, T, S]
            attended = _dense_attention(q.reshape(B, T, K, G, H), keys, values, causal)
        out = attended.astype(self.dtype).reshape(B, T, N, H)
        o_bias = ("embed",) if c.o_bias else None
        o = Projection(
            "BTNH,NHD->BTD",
            (N, H, D),
            ("q_heads", "head_dim", "embed"),
            o_bias,
            self.dtype,
            merged=2,
            weights=c.weights_at("/".join((*self.path, "o", "kernel"))),
            name="o",
        )
        return o(out, lora), returned_cache


def _dense_attention(q: Array, keys: Array, values: Array, visible: Array) -> Array:
    """Attention of q [B,T,K,G,H] over keys and values [B,S,K,H], each query seeing the keys
    `visible` [B,T,S] marks; the matmuls in the keys' dtype. Returns [B, T, K*G*H] float32."""
    B, T = q.shape[:2]
    dtype = keys.dtype
    scores = head_major.scores(head_major.queries(q, dtype), head_major.kv_heads(keys, dtype), visible)
    probs = jax.nn.softmax(scores, axis=-1)
    return head_major.step_major(head_major.weighted(probs, head_major.kv_heads(values, dtype)), B, T)
