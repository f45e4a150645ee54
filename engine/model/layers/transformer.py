"""The decoder layer and the whole model: embedding, layers, final norm and output head."""

from collections.abc import Sequence
from typing import cast

import flax.linen as nn
import jax
import jax.numpy as jnp

from engine.model import gguf_weights, int8
from engine.model.gguf_weights import BlockWeight
from engine.model.layers.attention import Attention
from engine.model.layers.embedding import Embedding
from engine.model.layers.kv_cache import AnyCache, BurstSide, CacheOut, PagedLayerCache
from engine.model.layers.linear import float_matmuls, logical_param, quantized_param
from engine.model.layers.lora import LoraBatch, LoraRows, kept_columns
from engine.model.layers.mlp import GatedMLP, MoE
from engine.model.layers.norms import RMSNorm
from engine.model.layers.rope import Rotation, rope_rotation
from engine.model.model_config import ModelConfig

Array = jax.Array


class DecoderLayer(nn.Module):
    config: ModelConfig
    sparse_mlp: bool
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
        attended, cache_out = Attention(c, self.dtype, name="attn")(
            RMSNorm(c.hidden_size, c.rms_norm_eps, "embed", self.dtype, name="attn_norm")(x),
            positions,
            rotation,
            cache,
            block_tables,
            draft_step,
            lora,
            side,
        )
        x = x + attended
        normed = RMSNorm(c.hidden_size, c.rms_norm_eps, "embed", self.dtype, name="mlp_norm")(x)
        if self.sparse_mlp:  # adapters never reach experts (engine/lora/peft_adapter.py refuses them)
            return x + MoE(c, self.dtype, name="moe")(normed), cache_out
        mlp = GatedMLP(c, self.dtype, name="mlp")
        return x + mlp(normed, lora), cache_out


class Transformer(nn.Module):
    """Embedding, decoder layers, final norm and output head; returns float32 logits [B,T,V] and
    per layer the updated contiguous cache or, for a paged cache, the step's `NewKV`.

    With `logits_at` [B] only that query index of each row goes through the output head (logits
    [B,1,V]): a prefill chunk or decode step needs one row of logits, not T. A `draft_step` is a
    decode step over drafts, whose attention takes the decode kernel's arithmetic for every token.
    With `burst` (a step of a decode burst, engine/device/step.py), each layer's attention reads the
    burst's earlier keys and values from its side buffer ([L, B, N, K, H] each) beside the pool.
    With `hidden`, the final norm's output [B,T,D] (float32) comes back instead of logits: a
    decoder's embedding pass (engine/tasks/encode/decoder_embedding.py). With `lora`, each row adds
    its adapter slot's deltas to the projections the stack holds (engine/model/layers/lora.py).
    """

    config: ModelConfig
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(
        self,
        tokens: Array,
        positions: Array,
        caches: Sequence[AnyCache] | None = None,
        block_tables: Array | None = None,
        logits_at: Array | None = None,
        draft_step: bool = False,
        hidden: bool = False,
        lora: LoraBatch | None = None,
        media: Array | None = None,
        rope_positions: Array | None = None,
        burst: BurstSide | None = None,
    ) -> tuple[Array, tuple[CacheOut, ...] | None]:
        """`media` [B,T,D]: the embeddings of the image tokens, which `tokens` mark below zero (the
        rows of other tokens are ignored); the family's image tower (`config.vision`) makes them."""
        c = self.config
        if c.vision is not None and self.is_initializing():  # the tower's parameters join the model's tree
            tower = c.vision
            tower.module(self.dtype, name="vision")(tower.blank_inputs(tower.patch_multiple))

        def weights_at(path: str) -> str:
            # The embedding (often also the output head) stays int8 under "int4": it is the matrix most
            # sensitive to 4-bit error, and llama.cpp's Q4 files keep it at 8 bits too.
            return "int8" if c.matmul_weights == "int4" else c.weights_at(path)

        embed = Embedding(c.vocab_size, c.hidden_size, self.dtype, weights_at("embed/embedding"), name="embed")
        if media is None:
            x = embed(tokens)
        else:  # a token below zero is an image's: its embedding comes from the vision tower
            x = jnp.where((tokens < 0)[:, :, None], media.astype(self.dtype), embed(jnp.maximum(tokens, 0)))
        # Padded prompt tokens sit in the block table's last column, the null page.
        real = None
        if caches and isinstance(caches[0], PagedLayerCache) and block_tables is not None:
            real = positions < (block_tables.shape[1] - 1) * caches[0].k.shape[2]
        rotation = rope_rotation(c, positions, real, rope_positions)
        new_caches = []
        kept = None if lora is None else kept_columns(lora)
        for i in range(c.num_layers):
            x, layer_cache = DecoderLayer(c, c.is_moe_layer(i), self.dtype, name=f"layer_{i}")(
                x,
                positions,
                rotation,
                None if caches is None else caches[i],
                block_tables,
                draft_step,
                None if lora is None or kept is None else LoraRows(lora.stack.layers[i], kept),
                None if burst is None else BurstSide(burst.k[i], burst.v[i], burst.count),
            )
            new_caches.append(layer_cache)
        if logits_at is not None:
            x = x[jnp.arange(x.shape[0]), logits_at][:, None]
        x = RMSNorm(c.hidden_size, c.rms_norm_eps, "embed", self.dtype, name="final_norm")(x)
        if hidden:
            return x.astype(jnp.float32), None
        if c.tie_word_embeddings:
            logits = embed.attend(x)
        elif c.matmul_weights != "float":
            V, D = c.vocab_size, c.hidden_size
            head = quantized_param(self, "lm_head", (V,), ("vocab",), (D,), ("embed",), weights_at("lm_head"))
            logits = gguf_weights.matmuls(x, [head])[0] if isinstance(head, BlockWeight) else int8.matmul(x, head)
        else:
            lm_head = logical_param(self, "lm_head", (c.hidden_size, c.vocab_size), ("embed", "vocab"), self.dtype)
            logits = float_matmuls(x, [lm_head])[0]
        if caches is None:
            return logits, None
        return logits, tuple(cast(CacheOut, layer_cache) for layer_cache in new_caches)
