"""Whisper's network in Flax, and the jittable functions the transcribe task runs over it.

The audio encoder (two convolutions, sinusoid positions as a table, pre-norm layers) turns a 30 s
log-mel window into features; each decoder layer's cross-attention keys and values of those
features are computed once a window (`cross_kv`); the decoder then runs over a batch of lanes,
each writing its new tokens' self-attention keys and values at their positions in a cache
(`decode`). Everything is float32; the parameter tree is what `whisper_weights` builds.
"""

from typing import NamedTuple, cast

import flax.linen as nn
import jax
import jax.numpy as jnp

from engine.model.families.whisper.whisper_config import WhisperConfig

LAYER_NORM_EPS = 1e-5


class SelfKV(NamedTuple):
    """The decoder's self-attention cache: [decoder_layers, batch, length, d_model] each."""

    keys: jax.Array
    values: jax.Array


class CrossKV(NamedTuple):
    """Each decoder layer's cross-attention keys and values of a window's audio features:
    [decoder_layers, batch, n_audio_ctx, d_model] each."""

    keys: jax.Array
    values: jax.Array


def _gelu(x: jax.Array) -> jax.Array:
    return nn.gelu(x, approximate=False)


def _heads(x: jax.Array, heads: int) -> jax.Array:
    """[B, T, d] → [B, T, heads, d / heads]."""
    return x.reshape(*x.shape[:-1], heads, x.shape[-1] // heads)


def _attention_weights(q: jax.Array, k: jax.Array, heads: int, mask: jax.Array | None) -> jax.Array:
    """Softmaxed weights [B, heads, T, S] of queries [B, T, d] over keys [B, S, d]."""
    qh, kh = _heads(q, heads), _heads(k, heads)
    scores = jnp.einsum("bthd,bshd->bhts", qh, kh) * (qh.shape[-1] ** -0.5)
    if mask is not None:
        scores = jnp.where(mask[:, None], scores, jnp.finfo(scores.dtype).min)
    return jax.nn.softmax(scores, axis=-1)


def _attend(weights: jax.Array, v: jax.Array, heads: int) -> jax.Array:
    """Weights [B, heads, T, S] over values [B, S, d] → [B, T, d]."""
    out = jnp.einsum("bhts,bshd->bthd", weights, _heads(v, heads))
    return out.reshape(*out.shape[:2], -1)


class Attention(nn.Module):
    """Whisper's multi-head attention projections (the key projection has no bias)."""

    d_model: int

    def setup(self) -> None:
        self.q = nn.Dense(self.d_model)
        self.k = nn.Dense(self.d_model, use_bias=False)
        self.v = nn.Dense(self.d_model)
        self.o = nn.Dense(self.d_model)

    def query(self, x: jax.Array) -> jax.Array:
        return self.q(x)

    def keys_values(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        return self.k(x), self.v(x)

    def out(self, x: jax.Array) -> jax.Array:
        return self.o(x)


class Mlp(nn.Module):
    d_model: int
    ffn_dim: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.Dense(self.d_model, name="fc2")(_gelu(nn.Dense(self.ffn_dim, name="fc1")(x)))


class EncoderLayer(nn.Module):
    config: WhisperConfig

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c = self.config
        attention = Attention(c.d_model, name="attn")
        h = nn.LayerNorm(LAYER_NORM_EPS, name="attn_norm")(x)
        k, v = attention.keys_values(h)
        x = x + attention.out(
            _attend(_attention_weights(attention.query(h), k, c.encoder_heads, None), v, c.encoder_heads)
        )
        return x + Mlp(c.d_model, c.ffn_dim, name="mlp")(nn.LayerNorm(LAYER_NORM_EPS, name="mlp_norm")(x))


class AudioEncoder(nn.Module):
    config: WhisperConfig

    @nn.compact
    def __call__(self, mel: jax.Array) -> jax.Array:
        """mel [B, n_mels, 2 * n_audio_ctx] → features [B, n_audio_ctx, d_model]."""
        c = self.config
        x = jnp.swapaxes(mel, 1, 2)
        x = _gelu(nn.Conv(c.d_model, (3,), padding=[(1, 1)], name="conv1")(x))
        x = _gelu(nn.Conv(c.d_model, (3,), strides=(2,), padding=[(1, 1)], name="conv2")(x))
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
        self.positions = self.param("positions", nn.initializers.zeros, (c.n_text_ctx, c.d_model))
        self.attn = [Attention(c.d_model) for _ in range(c.decoder_layers)]
        self.attn_norm = [nn.LayerNorm(LAYER_NORM_EPS) for _ in range(c.decoder_layers)]
        self.cross = [Attention(c.d_model) for _ in range(c.decoder_layers)]
        self.cross_norm = [nn.LayerNorm(LAYER_NORM_EPS) for _ in range(c.decoder_layers)]
        self.mlp = [Mlp(c.d_model, c.ffn_dim) for _ in range(c.decoder_layers)]
        self.mlp_norm = [nn.LayerNorm(LAYER_NORM_EPS) for _ in range(c.decoder_layers)]
        self.final_norm = nn.LayerNorm(LAYER_NORM_EPS)

    def cross_kv(self, features: jax.Array) -> CrossKV:
        pairs = [cross.keys_values(features) for cross in self.cross]
        return CrossKV(jnp.stack([k for k, _ in pairs]), jnp.stack([v for _, v in pairs]))

    def __call__(
        self, tokens: jax.Array, positions: jax.Array, self_kv: SelfKV, cross: CrossKV, alignment: bool
    ) -> tuple[jax.Array, SelfKV, jax.Array | None]:
        c = self.config
        batch = jnp.arange(tokens.shape[0])[:, None]
        # A row attends to the cache entries at its own positions up to each query's.
        mask = jnp.arange(self_kv.keys.shape[2])[None, None, :] <= positions[:, :, None]
        x = self.embed(tokens) + self.positions[positions]
        keys, values = self_kv.keys, self_kv.values
        alignment_weights = []
        for i in range(c.decoder_layers):
            h = self.attn_norm[i](x)
            k, v = self.attn[i].keys_values(h)
            keys = keys.at[i, batch, positions].set(k)
            values = values.at[i, batch, positions].set(v)
            weights = _attention_weights(self.attn[i].query(h), keys[i], c.decoder_heads, mask)
            x = x + self.attn[i].out(_attend(weights, values[i], c.decoder_heads))
            h = self.cross_norm[i](x)
            weights = _attention_weights(self.cross[i].query(h), cross.keys[i], c.decoder_heads, None)
            x = x + self.cross[i].out(_attend(weights, cross.values[i], c.decoder_heads))
            if alignment:
                alignment_weights += [weights[:, head] for layer, head in c.alignment_heads if layer == i]
            x = x + self.mlp[i](self.mlp_norm[i](x))
        logits = self.embed.attend(self.final_norm(x))
        qk = jnp.stack(alignment_weights, axis=1) if alignment else None
        return logits, SelfKV(keys, values), qk


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
    shape = (config.decoder_layers, batch, length, config.d_model)
    return SelfKV(jnp.zeros(shape, jnp.float32), jnp.zeros(shape, jnp.float32))


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
    at position 0 over an old window's entries. `alignment` and `config` are static under jit.
    """
    out = WhisperModel(config).apply(
        {"params": params}, tokens, positions, self_kv, cross, alignment, method=WhisperModel.decode
    )
    return cast(tuple[jax.Array, SelfKV, jax.Array | None], out)
