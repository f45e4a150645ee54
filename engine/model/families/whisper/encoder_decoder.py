"""Whisper's network in Flax, and the jittable functions the transcribe task runs over it.

The audio encoder (two convolutions, sinusoid positions as a table, pre-norm layers) turns a 30 s
log-mel window into features; each decoder layer's cross-attention keys and values of those
features are computed once a window (`cross_kv`); the decoder then runs over a batch of lanes,
each writing its new tokens' self-attention keys and values at their positions in a cache
(`decode`). Everything is float32; the parameter tree is what `whisper_weights` builds.

Every projection runs through `float_matmuls` (on the CPU the native kernel whose rows never
depend on each other), so a lane's projections do not depend on the lanes stepping beside it and
a step may run over only the lanes in use. Its logits may still differ by ~1e-6 with the lanes
beside it (the attention's batched products and the norms are XLA's): a greedy transcription is
the same alone or batched in the tests, a sampled one may flip where two tokens tie.
"""

from typing import NamedTuple, cast

import flax.linen as nn
import jax
import jax.numpy as jnp

from engine.model.families.whisper.whisper_config import WhisperConfig
from engine.model.layers.linear import float_matmuls

LAYER_NORM_EPS = 1e-5
# float32 products in float32 on every backend (XLA runs them as TF32 on NVIDIA GPUs otherwise).
PRECISION = jax.lax.Precision.HIGHEST


# Keys and values are kept a separate array per layer (XLA on the CPU copies a slice of a stacked
# array before its product: several times the step's own work), head-major
# ([batch, heads, positions, head_dim]: the attention's batched products read it as it lies). The
# batch is the first axis of every leaf, so a lane is `tree_map(lambda a: a[lane], kv)`.


class SelfKV(NamedTuple):
    """The decoder's self-attention cache, per decoder layer [batch, heads, length, head_dim]."""

    keys: tuple[jax.Array, ...]
    values: tuple[jax.Array, ...]


class CrossKV(NamedTuple):
    """Each decoder layer's cross-attention keys and values of a window's audio features, per
    layer [batch, heads, n_audio_ctx, head_dim]."""

    keys: tuple[jax.Array, ...]
    values: tuple[jax.Array, ...]


def _gelu(x: jax.Array) -> jax.Array:
    return nn.gelu(x, approximate=False)


def _heads(x: jax.Array, heads: int) -> jax.Array:
    """[B, T, d] → head-major [B, heads, T, d / heads]."""
    return jnp.swapaxes(x.reshape(*x.shape[:-1], heads, x.shape[-1] // heads), 1, 2)


def _attention_weights(q: jax.Array, k: jax.Array, mask: jax.Array | None) -> jax.Array:
    """Softmaxed weights [B, heads, T, S] of queries [B, T, d] over head-major keys [B, heads, S, hd]."""
    qh = _heads(q, k.shape[1])
    scores = jnp.einsum("bhtd,bhsd->bhts", qh, k, precision=PRECISION) * (qh.shape[-1] ** -0.5)
    if mask is not None:
        scores = jnp.where(mask[:, None], scores, jnp.finfo(scores.dtype).min)
    return jax.nn.softmax(scores, axis=-1)


def _attend(weights: jax.Array, v: jax.Array) -> jax.Array:
    """Weights [B, heads, T, S] over head-major values [B, heads, S, hd] → [B, T, d]."""
    out = jnp.swapaxes(jnp.einsum("bhts,bhsd->bhtd", weights, v, precision=PRECISION), 1, 2)
    return out.reshape(*out.shape[:2], -1)


# The encoder attends over its 1500 positions a block of queries at a time: a block's scores
# (heads x 250 x 1500 floats, ~9 MB for tiny) stay in the CPU's cache through the softmax, where the
# whole window's (54 MB) went to memory and back for each of its passes: half the attention's time.
ENCODER_QUERY_BLOCK = 250


def _blocked_attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """Unmasked attention of queries [B, T, d] over head-major keys and values, ENCODER_QUERY_BLOCK
    queries at a time (all at once when T is not a multiple of it) → [B, T, d]."""
    t = q.shape[1]
    block = ENCODER_QUERY_BLOCK if t % ENCODER_QUERY_BLOCK == 0 else t
    blocks = jnp.swapaxes(q.reshape(q.shape[0], t // block, block, q.shape[2]), 0, 1)
    out = jax.lax.map(lambda queries: _attend(_attention_weights(queries, k, None), v), blocks)
    return jnp.swapaxes(out, 0, 1).reshape(q.shape)


class RowDense(nn.Module):
    """nn.Dense's parameters (`kernel` [in, out], `bias`), its product by `float_matmuls`."""

    features: int
    use_bias: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kernel = self.param("kernel", nn.initializers.zeros, (x.shape[-1], self.features))
        y = float_matmuls(x, [kernel])[0]
        return y + self.param("bias", nn.initializers.zeros, (self.features,)) if self.use_bias else y


class Attention(nn.Module):
    """Whisper's multi-head attention projections (the key projection has no bias)."""

    d_model: int

    def setup(self) -> None:
        self.q = RowDense(self.d_model)
        self.k = RowDense(self.d_model, use_bias=False)
        self.v = RowDense(self.d_model)
        self.o = RowDense(self.d_model)

    def query(self, x: jax.Array) -> jax.Array:
        return self.q(x)

    def keys_values(self, x: jax.Array, heads: int) -> tuple[jax.Array, jax.Array]:
        """Head-major keys and values [B, heads, T, hd] of `x` [B, T, d]."""
        return _heads(self.k(x), heads), _heads(self.v(x), heads)

    def out(self, x: jax.Array) -> jax.Array:
        return self.o(x)


class Mlp(nn.Module):
    d_model: int
    ffn_dim: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        hidden = _gelu(RowDense(self.ffn_dim, name="fc1")(x))
        return RowDense(self.d_model, name="fc2")(hidden)


class EncoderLayer(nn.Module):
    config: WhisperConfig

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c = self.config
        attention = Attention(c.d_model, name="attn")
        h = nn.LayerNorm(LAYER_NORM_EPS, name="attn_norm")(x)
        k, v = attention.keys_values(h, c.encoder_heads)
        x = x + attention.out(_blocked_attention(attention.query(h), k, v))
        return x + Mlp(c.d_model, c.ffn_dim, name="mlp")(nn.LayerNorm(LAYER_NORM_EPS, name="mlp_norm")(x))


class AudioEncoder(nn.Module):
    config: WhisperConfig

    @nn.compact
    def __call__(self, mel: jax.Array) -> jax.Array:
        """mel [B, n_mels, 2 * n_audio_ctx] → features [B, n_audio_ctx, d_model]."""
        c = self.config
        x = jnp.swapaxes(mel, 1, 2)
        x = _gelu(nn.Conv(c.d_model, (3,), padding=[(1, 1)], precision=PRECISION, name="conv1")(x))
        x = _gelu(nn.Conv(c.d_model, (3,), strides=(2,), padding=[(1, 1)], precision=PRECISION, name="conv2")(x))
        positions = self.param("positions", nn.initializers.zeros, (c.n_audio_ctx, c.d_model))
        x = x + positions[None, : x.shape[1]]
        for i in range(c.encoder_layers):
            x = EncoderLayer(c, name=f"layer_{i}")(x)
        return nn.LayerNorm(LAYER_NORM_EPS, name="final_norm")(x)


class TextDecoder(nn.Module):
    config: WhisperConfig

    def setup(self) -> None:
        c = self.config
        self.embed = nn.Embed(c.vocab_size, c.d_model)
        # The embedding input-major ([d_model, vocab]): the tied output head as `float_matmuls` takes it.
        self.output = self.param("output", nn.initializers.zeros, (c.d_model, c.vocab_size))
        self.positions = self.param("positions", nn.initializers.zeros, (c.n_text_ctx, c.d_model))
        self.attn = [Attention(c.d_model) for _ in range(c.decoder_layers)]
        self.attn_norm = [nn.LayerNorm(LAYER_NORM_EPS) for _ in range(c.decoder_layers)]
        self.cross = [Attention(c.d_model) for _ in range(c.decoder_layers)]
        self.cross_norm = [nn.LayerNorm(LAYER_NORM_EPS) for _ in range(c.decoder_layers)]
        self.mlp = [Mlp(c.d_model, c.ffn_dim) for _ in range(c.decoder_layers)]
        self.mlp_norm = [nn.LayerNorm(LAYER_NORM_EPS) for _ in range(c.decoder_layers)]
        self.final_norm = nn.LayerNorm(LAYER_NORM_EPS)

    def cross_kv(self, features: jax.Array) -> CrossKV:
        pairs = [cross.keys_values(features, self.config.decoder_heads) for cross in self.cross]
        return CrossKV(tuple(k for k, _ in pairs), tuple(v for _, v in pairs))

    def __call__(
        self, tokens: jax.Array, positions: jax.Array, self_kv: SelfKV, cross: CrossKV, alignment: bool
    ) -> tuple[jax.Array, SelfKV, jax.Array | None]:
        c = self.config
        # Where the T new entries of each row and head go: [B, heads, T] indices into the cache.
        batch = jnp.arange(tokens.shape[0])[:, None, None]
        head = jnp.arange(c.decoder_heads)[None, :, None]
        at = positions[:, None, :]
        # A row attends to the cache entries at its own positions up to each query's.
        mask = jnp.arange(self_kv.keys[0].shape[2])[None, None, :] <= positions[:, :, None]
        x = self.embed(tokens) + self.positions[positions]
        keys, values = list(self_kv.keys), list(self_kv.values)
        cross_weights = []  # each layer's, for the alignment heads
        for i in range(c.decoder_layers):
            h = self.attn_norm[i](x)
            k, v = self.attn[i].keys_values(h, c.decoder_heads)
            keys[i] = keys[i].at[batch, head, at].set(k)
            values[i] = values[i].at[batch, head, at].set(v)
            weights = _attention_weights(self.attn[i].query(h), keys[i], mask)
            x = x + self.attn[i].out(_attend(weights, values[i]))
            h = self.cross_norm[i](x)
            weights = _attention_weights(self.cross[i].query(h), cross.keys[i], None)
            x = x + self.cross[i].out(_attend(weights, cross.values[i]))
            cross_weights.append(weights)
            x = x + self.mlp[i](self.mlp_norm[i](x))
        logits = float_matmuls(self.final_norm(x), [self.output])[0]
        qk = jnp.stack([cross_weights[layer][:, h] for layer, h in c.alignment_heads], axis=1) if alignment else None
        return logits, SelfKV(tuple(keys), tuple(values)), qk


class WhisperModel(nn.Module):
    config: WhisperConfig

    def setup(self) -> None:
        self.encoder = AudioEncoder(self.config)
        self.decoder = TextDecoder(self.config)

    def encode(self, mel: jax.Array) -> jax.Array:
        return self.encoder(mel)

    def cross_kv(self, features: jax.Array) -> CrossKV:
        return self.decoder.cross_kv(features)

    def decode(
        self, tokens: jax.Array, positions: jax.Array, self_kv: SelfKV, cross: CrossKV, alignment: bool
    ) -> tuple[jax.Array, SelfKV, jax.Array | None]:
        return self.decoder(tokens, positions, self_kv, cross, alignment)


def encode(params: dict, config: WhisperConfig, mel: jax.Array) -> jax.Array:
    """Log-mel windows [B, n_mels, 2 * n_audio_ctx] → audio features [B, n_audio_ctx, d_model]."""
    return cast(jax.Array, WhisperModel(config).apply({"params": params}, mel, method=WhisperModel.encode))


def cross_kv(params: dict, config: WhisperConfig, features: jax.Array) -> CrossKV:
    """Every decoder layer's cross-attention keys and values of `features`."""
    return cast(CrossKV, WhisperModel(config).apply({"params": params}, features, method=WhisperModel.cross_kv))


def init_self_kv(config: WhisperConfig, batch: int, length: int) -> SelfKV:
    """An empty self-attention cache of `length` positions for `batch` rows."""
    heads = config.decoder_heads
    shape = (batch, heads, length, config.d_model // heads)
    layers = range(config.decoder_layers)
    return SelfKV(
        tuple(jnp.zeros(shape, jnp.float32) for _ in layers), tuple(jnp.zeros(shape, jnp.float32) for _ in layers)
    )


def decode(
    params: dict,
    config: WhisperConfig,
    tokens: jax.Array,
    positions: jax.Array,
    self_kv: SelfKV,
    cross: CrossKV,
    alignment: bool = False,
) -> tuple[jax.Array, SelfKV, jax.Array | None]:
    """The decoder over tokens [B, T] at positions [B, T] → (logits [B, T, vocab], the cache with
    the T new entries written at `positions`, and with `alignment` the alignment heads'
    cross-attention weights [B, len(alignment_heads), T, n_audio_ctx], softmaxed, else None).

    A query attends to its row's cache entries at positions up to its own, so a row may restart
    at position 0 over an old window's entries. `alignment` and `config` are static under jit;
    donate `self_kv` so the cache is written in place. The alignment weights are softmaxed over
    all n_audio_ctx positions: openai-whisper's find_alignment softmaxes over the window's audio
    alone (its first frames // 2), which is these cut there and each row divided by its sum.
    """
    out = WhisperModel(config).apply(
        {"params": params}, tokens, positions, self_kv, cross, alignment, method=WhisperModel.decode
    )
    return cast(tuple[jax.Array, SelfKV, jax.Array | None], out)
