"""A decoder's embedding pass: the final norm's hidden states of a causal decoder, pooled (the last
token by default, unit length, as Qwen3-Embedding and gte-Qwen do; the mean where the
checkpoint's sentence-transformers files say so), served like an encoder on /v1/embeddings.

The pass has shapes of its own rather than the prefill's: a prefill chunk writes the paged KV
cache, which an embedding does not need. Inputs are padded on the right, so under causal
attention no real token sees padding. The rows × tokens buckets compile at start-up like an
encoder's (engine/tasks/encode/encoder_model.py's `EncoderRunner`), over the decoder's own parameters (no copy).

Threads: as for `EncoderRunner`, only the engine thread runs batches.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from engine.model.checkpoint.hf_folder import read_hf_config
from engine.model.layers.pooling import Pooling, pool
from engine.model.loading.loader import DTYPES, LoadedModel
from engine.tasks.encode.encoder_model import (
    EncoderKind,
    EncoderRunner,
    declared_max_tokens,
    declared_pooling,
    declares_matryoshka,
    declares_pooling,
    is_encoder_checkpoint,
)


@dataclass(frozen=True)
class DecoderEmbedding:
    """What a decoder served as an embedding model is, as requests see it (the peer of
    engine/tasks/encode/encoder_model.py's `LoadedEncoder`)."""

    pooling: Pooling
    normalize: bool
    max_tokens: int
    dimensions: int
    matryoshka: bool
    source: Path

    @property
    def kind(self) -> EncoderKind:
        return "embedding"

    @property
    def token_types(self) -> int:
        """How many segment types the model embeds: a decoder embeds none but the first."""
        return 1


def is_embedding_decoder(path: Path) -> bool:
    """Whether `path` is a decoder checkpoint directory that declares itself an embedding model."""
    return declares_pooling(path) and not is_encoder_checkpoint(path)


def decoder_embedding(model: LoadedModel, max_tokens: int) -> DecoderEmbedding:
    """`model`'s embedding pass for inputs of up to `max_tokens` tokens (and no more than its
    context or its declared longest input), pooling as its checkpoint declares."""
    source = model.source
    pooling, normalize = declared_pooling(source) if declares_pooling(source) else ("last", True)
    longest = min(max_tokens, model.config.context_length, declared_max_tokens(source) or max_tokens)
    return DecoderEmbedding(
        pooling=pooling,
        normalize=normalize,
        max_tokens=longest,
        dimensions=model.config.hidden_size,
        matryoshka=source.is_dir() and declares_matryoshka(read_hf_config(source)),
        source=source,
    )


def decoder_embedding_runner(model: LoadedModel, embedding: DecoderEmbedding, batch_tokens: int) -> EncoderRunner:
    transformer = model.family.model(model.config, DTYPES[model.dtype])

    def forward(params: Any, tokens: jax.Array, types: jax.Array, mask: jax.Array) -> jax.Array:
        del types  # a decoder embeds no segment types
        positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
        hidden, _ = transformer.apply({"params": params}, tokens, positions, hidden=True)
        return pool(hidden, mask, embedding.pooling, embedding.normalize)

    return EncoderRunner(jax.jit(forward), model.params, embedding.max_tokens, model.config.vocab_size, batch_tokens)
