"""A bidirectional encoder (BERT's post-norm layers) with its pooling: embeddings or one relevance
logit per input, in float32.

Inputs come right-padded to a bucket's length; `mask` marks the real tokens. Padded keys get no
attention weight and padded positions no pooling weight, so an input's numbers do not depend on
what it is batched with beyond rounding. The projections go through `float_matmuls` (on a CPU
with the native kernels, one row never depends on the others).
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from engine.model.families.bert.bert import EncoderConfig
from engine.model.layers.linear import dot_precision, float_matmuls
from engine.model.layers.pooling import Pooling, pool

Array = jax.Array


def _activation(name: str, x: Array) -> Array:
    if name == "relu":
        return jax.nn.relu(x)
    return jax.nn.gelu(x, approximate=name == "gelu_tanh")


class LayerNorm(nn.Module):
    size: int
    eps: float

    @nn.compact
    def __call__(self, x: Array) -> Array:
        scale = self.param("scale", nn.initializers.ones, (self.size,), jnp.float32)
        bias = self.param("bias", nn.initializers.zeros, (self.size,), jnp.float32)
        mean = x.mean(-1, keepdims=True)
        centred = x - mean
        variance = (centred * centred).mean(-1, keepdims=True)
        return centred * jax.lax.rsqrt(variance + self.eps) * scale + bias


class Dense(nn.Module):
    """x @ kernel + bias, the kernel's leading `contracting` axes against x's trailing ones."""

    shape: tuple[int, ...]  # the kernel's
    contracting: int = 1

    @nn.compact
    def __call__(self, x: Array) -> Array:
        kernel = self.param("kernel", nn.initializers.zeros, self.shape, jnp.float32)
        bias = self.param("bias", nn.initializers.zeros, self.shape[self.contracting :], jnp.float32)
        return float_matmuls(x, [kernel], self.contracting)[0] + bias


class EncoderLayer(nn.Module):
    config: EncoderConfig

    @nn.compact
    def __call__(self, x: Array, mask: Array) -> Array:
        c = self.config
        D, N, H = c.hidden_size, c.num_heads, c.head_dim
        q, k, v = (Dense((D, N, H), name=name)(x) for name in ("q", "k", "v"))  # [B, T, N, H]
        attended = _attention(q, k, v, mask)
        x = LayerNorm(D, c.layer_norm_eps, name="attn_norm")(x + Dense((N, H, D), 2, name="o")(attended))
        hidden = _activation(c.activation, Dense((D, c.intermediate_size), name="up")(x))
        return LayerNorm(D, c.layer_norm_eps, name="mlp_norm")(x + Dense((c.intermediate_size, D), name="down")(hidden))


def _attention(q: Array, k: Array, v: Array, mask: Array) -> Array:
    """Each query [B, T, N, H] over the real keys (`mask` [B, T]), heads leading in the products and
    the softmax's sum divided out after the values are summed: XLA's CPU backend ran a 32 × 128-token
    bucket of all-MiniLM-L6-v2's layer in 12 ms so, 110 ms as softmax weights then a sum over
    [B, T, N, H] (docs/BENCHMARKS.md)."""
    heads_first = (0, 2, 1, 3)
    q, k, v = (jnp.transpose(a, heads_first) for a in (q * jax.lax.rsqrt(jnp.float32(q.shape[-1])), k, v))
    scores = jnp.einsum("bnth,bnsh->bnts", q, k, precision=dot_precision(q, k))
    scores = scores + jnp.where(mask, 0.0, -jnp.inf)[:, None, None, :]
    exp = jnp.exp(scores - scores.max(-1, keepdims=True))
    attended = jnp.einsum("bnts,bnsh->bnth", exp, v, precision=dot_precision(exp, v)) / exp.sum(-1)[..., None]
    return jnp.transpose(attended, heads_first)


class Encoder(nn.Module):
    """tokens, types, mask [B, T] → embeddings [B, D] (`pooling`, unit length if `normalize`) for an
    embedding model, or one relevance logit per input [B] for a cross-encoder."""

    config: EncoderConfig
    pooling: Pooling = "mean"
    normalize: bool = False

    @nn.compact
    def __call__(self, tokens: Array, types: Array, mask: Array) -> Array:
        c = self.config
        D = c.hidden_size
        words = self.param("words", nn.initializers.zeros, (c.vocab_size, D), jnp.float32)
        positions = self.param(
            "positions", nn.initializers.zeros, (c.max_positions + c.position_offset, D), jnp.float32
        )
        type_table = self.param("types", nn.initializers.zeros, (c.type_vocab_size, D), jnp.float32)
        offsets = c.position_offset + jnp.arange(tokens.shape[1])
        x = words[tokens] + positions[offsets][None] + type_table[types]
        x = LayerNorm(D, c.layer_norm_eps, name="embed_norm")(x)
        for i in range(c.num_layers):
            x = EncoderLayer(c, name=f"layer_{i}")(x, mask)
        if c.head == "classifier":
            pooled = jnp.tanh(Dense((D, D), name="pool")(x[:, 0]))
            return Dense((D, 1), name="score")(pooled)[:, 0]
        return pool(x, mask, self.pooling, self.normalize)
