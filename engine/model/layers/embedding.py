"""The token embedding, whose matrix may also be the (tied) output head."""

from typing import cast

import flax.linen as nn
import jax
import jax.numpy as jnp

from engine.model import gguf_weights, int8
from engine.model.gguf_weights import BlockWeight
from engine.model.layers.linear import einsum, logical_param, quantized_param

Array = jax.Array


class Embedding(nn.Module):
    vocab_size: int
    hidden_size: int
    dtype: jnp.dtype = jnp.float32
    # ModelConfig.weights_at: "float", int8 (one scale per token) or a GGUF block format
    weights: str = "float"

    def setup(self) -> None:
        if self.weights == "float":
            shape = (self.vocab_size, self.hidden_size)
            self.embedding = logical_param(self, "embedding", shape, ("vocab", "embed"), self.dtype)
        else:
            self.quantized = quantized_param(
                self, "embedding", (self.vocab_size,), ("vocab",), (self.hidden_size,), ("embed",), self.weights
            )

    def __call__(self, tokens: Array) -> Array:
        if self.weights in gguf_weights.FORMATS:
            return gguf_weights.rows(cast(BlockWeight, self.quantized), tokens).astype(self.dtype)
        if self.weights != "float":
            return int8.rows(cast(int8.Weight, self.quantized), tokens).astype(self.dtype)
        return jnp.take(self.embedding, tokens, axis=0)

    def attend(self, x: Array) -> Array:
        """Logits against the embedding matrix (tied output head)."""
        if self.weights in gguf_weights.FORMATS:
            return gguf_weights.matmuls(x, [cast(BlockWeight, self.quantized)])[0]
        if self.weights != "float":
            return int8.matmul(x, cast(int8.Weight, self.quantized))
        return einsum("BTD,VD->BTV", x, self.embedding, dtype=jnp.float32)
