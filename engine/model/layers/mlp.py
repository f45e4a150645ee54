"""The feed-forward blocks: the gated (SwiGLU) MLP and the sparse mixture of experts."""

import flax.linen as nn
import jax
import jax.numpy as jnp

from engine.model.layers.linear import Projection, einsum, logical_param, project
from engine.model.layers.lora import LoraRows
from engine.model.model_config import ModelConfig

Array = jax.Array


class GatedMLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    config: ModelConfig
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x: Array, lora: LoraRows | None = None) -> Array:
        D, F = self.config.hidden_size, self.config.intermediate_size

        def weights(name: str) -> str:  # ModelConfig.weights_at: a GGUF's down may differ from gate and up
            return self.config.weights_at("/".join((*self.path, name, "kernel")))

        gate, up = project(
            x,
            [
                Projection("BTD,DF->BTF", (D, F), ("embed", "ffn"), dtype=self.dtype, weights=weights(name), name=name)
                for name in ("gate", "up")
            ],
            lora,
        )
        down = Projection(
            "BTF,FD->BTD", (F, D), ("ffn", "embed"), dtype=self.dtype, weights=weights("down"), name="down"
        )
        return down(nn.silu(gate) * up, lora)


class MoE(nn.Module):
    """Qwen3-MoE sparse block: softmax over experts, keep the top k, optionally renormalise.

    Every expert runs on every token and unselected experts get weight zero: exact and simple, and
    fine for tiny and mid-size models; a gather-based dispatch can replace it without changing params.
    """

    config: ModelConfig
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x: Array) -> Array:
        c = self.config
        D, E, F = c.hidden_size, c.num_experts, c.moe_intermediate_size

        router = logical_param(self, "router", (D, E), ("embed", "router"), self.dtype)
        gate = logical_param(self, "gate", (E, D, F), ("experts", "embed", "expert_ffn"), self.dtype)
        up = logical_param(self, "up", (E, D, F), ("experts", "embed", "expert_ffn"), self.dtype)
        down = logical_param(self, "down", (E, F, D), ("experts", "expert_ffn", "embed"), self.dtype)

        router_logits = einsum("BTD,DE->BTE", x, router, dtype=self.dtype)
        probs = jax.nn.softmax(router_logits.astype(jnp.float32), axis=-1)
        top_probs, top_experts = jax.lax.top_k(probs, c.num_experts_per_tok)
        if c.norm_topk_prob:
            top_probs = top_probs / jnp.sum(top_probs, axis=-1, keepdims=True)
        weights = einsum("BTX,BTXE->BTE", top_probs, jax.nn.one_hot(top_experts, E), dtype=self.dtype)

        gated = nn.silu(einsum("BTD,EDF->BTEF", x, gate, dtype=self.dtype))
        hidden = gated * einsum("BTD,EDF->BTEF", x, up, dtype=self.dtype)
        return einsum("BTEF,EFD,BTE->BTD", hidden, down, weights, dtype=self.dtype)
