"""What a model family is: its architecture names, the tasks it serves on which inputs, and for a
decoder its traits, its config, its Flax model and its HF-tensor layout.

Every family subclasses `Family` and is listed in engine/model/families/registry.py. Decoders
subclass `DecoderFamily` (the Llama layout) and override only what differs.
"""

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from engine.errors import CheckpointError
from engine.model.checkpoint.block_matrix import BlockMatrix
from engine.model.checkpoint.raw import RawCheckpoint
from engine.model.family_traits import FamilyTraits
from engine.model.layers.transformer import Transformer
from engine.model.model_config import ModelConfig

ParamTree = dict[str, Any]
# What a family's model is run for.
Task = Literal["generate", "embed", "rerank", "transcribe"]
# What a request to it may hold.
Input = Literal["text", "image", "audio"]
TEXT: tuple[Input, ...] = ("text",)


class TensorSource:
    """HF-named tensors with a one-line error for the first missing name."""

    def __init__(self, tensors: Mapping[str, np.ndarray]):
        self._tensors = tensors

    def __call__(self, name: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
        """The tensor, checked against `shape` where the caller is about to reshape it."""
        if name not in self._tensors:
            raise CheckpointError(f"checkpoint is missing tensor {name!r}")
        found = self._tensors[name]
        # A matrix in its file's blocks passes through as it is (the float layout ops are no-ops on it).
        tensor = found if isinstance(found, BlockMatrix) else np.asarray(found)
        if shape is not None and tensor.shape != shape:
            raise CheckpointError(f"tensor {name!r} has shape {tensor.shape} but the config implies {shape}")
        return tensor

    def __contains__(self, name: str) -> bool:
        return name in self._tensors


class Family:
    """A family as the registry lists it."""

    name: ClassVar[str]  # also the HF config.json `model_type`
    hf_architectures: ClassVar[tuple[str, ...]]  # HF `architectures[0]`; the first is the one a GGUF file stands for
    gguf_architecture: ClassVar[str]  # llama.cpp's `general.architecture`
    # Each task the family serves, with the inputs a request for it may hold.
    serves: ClassVar[Mapping[Task, tuple[Input, ...]]]


class DecoderFamily(Family):
    """A causal decoder: the Llama layout. Subclasses declare their `traits` and override only the
    conversions whose HF tensors differ. Every decoder generates, and embeds through its embedding
    pass where its checkpoint declares a pooling (engine/tasks/encode/decoder_embedding.py)."""

    traits: ClassVar[FamilyTraits] = FamilyTraits()
    serves: ClassVar[Mapping[Task, tuple[Input, ...]]] = {"generate": TEXT, "embed": TEXT}

    def config(self, hf: dict[str, Any]) -> ModelConfig:
        """The decoder's config from HF config.json `hf`."""
        return ModelConfig.from_hf(hf, self.traits)

    def with_projector(self, raw: RawCheckpoint, projector: Path) -> RawCheckpoint:
        """`raw` (a language GGUF of this family) joined with llama.cpp's projector file for it."""
        raise CheckpointError(
            f"{projector} is a projector for a language model that takes images; "
            f"{raw.source} is {self.gguf_architecture}"
        )

    def model(self, config: ModelConfig, dtype: jnp.dtype) -> nn.Module:
        return Transformer(config, dtype)

    def convert(self, tensors: Mapping[str, np.ndarray], config: ModelConfig) -> Iterator[tuple[str, Any]]:
        """HF tensors (HF layouts) → the top-level entries of the Flax parameter tree, one at a time.

        Yielding entry by entry (a layer at a time) lets the loader place each on the devices and
        drop its host copy before the next is read, so host memory holds about one layer.
        """
        get = TensorSource(tensors)
        yield "embed", {"embedding": get("model.embed_tokens.weight")}
        for i in range(config.num_layers):
            yield f"layer_{i}", self.convert_layer(get, f"model.layers.{i}", i, config)
        yield "final_norm", {"scale": get("model.norm.weight")}
        if not config.tie_word_embeddings:
            yield "lm_head", get("lm_head.weight").T

    def convert_layer(self, get: TensorSource, prefix: str, index: int, config: ModelConfig) -> ParamTree:
        layer: ParamTree = {
            "attn_norm": {"scale": get(f"{prefix}.input_layernorm.weight")},
            "attn": self.convert_attention(get, f"{prefix}.self_attn", config),
            "mlp_norm": {"scale": get(f"{prefix}.post_attention_layernorm.weight")},
        }
        layer.update(self.convert_mlp(get, f"{prefix}.mlp", index, config))
        return layer

    def convert_attention(self, get: TensorSource, prefix: str, config: ModelConfig) -> ParamTree:
        D, N, K, H = config.hidden_size, config.num_heads, config.num_kv_heads, config.head_dim

        def projection(name: str, heads: int) -> ParamTree:
            out: ParamTree = {"kernel": get(f"{prefix}.{name}.weight", (heads * H, D)).T.reshape(D, heads, H)}
            if config.qkv_bias:
                out["bias"] = get(f"{prefix}.{name}.bias", (heads * H,)).reshape(heads, H)
            return out

        o: ParamTree = {"kernel": get(f"{prefix}.o_proj.weight", (D, N * H)).T.reshape(N, H, D)}
        if config.o_bias:
            o["bias"] = get(f"{prefix}.o_proj.bias")
        attention = {"q": projection("q_proj", N), "k": projection("k_proj", K), "v": projection("v_proj", K), "o": o}
        if config.qk_norm:
            attention["q_norm"] = {"scale": get(f"{prefix}.q_norm.weight")}
            attention["k_norm"] = {"scale": get(f"{prefix}.k_norm.weight")}
        return attention

    def convert_mlp(self, get: TensorSource, prefix: str, index: int, config: ModelConfig) -> ParamTree:
        if self.traits.moe and config.is_moe_layer(index):
            return {"moe": self.convert_experts(get, prefix, config)}
        return {
            "mlp": {
                "gate": {"kernel": get(f"{prefix}.gate_proj.weight").T},
                "up": {"kernel": get(f"{prefix}.up_proj.weight").T},
                "down": {"kernel": get(f"{prefix}.down_proj.weight").T},
            }
        }

    def convert_experts(self, get: TensorSource, prefix: str, config: ModelConfig) -> ParamTree:
        """A sparse layer's router and experts (the `MoE` block's parameters), for `traits.moe` families."""
        raise NotImplementedError(f"family {self.name} declares no expert layout")
