"""Model hyper-parameters, read from a Hugging Face `config.json` dict and the family's traits."""

import logging
from dataclasses import dataclass, field, replace
from typing import Any

from engine.errors import CheckpointError
from engine.model.family_traits import FamilyTraits
from engine.model.image_tower import ImageTower

log = logging.getLogger(__name__)

ROPE_KINDS = ("default", "linear", "dynamic", "yarn", "llama3")
# Kinds `with_context` can apply from a context-length factor alone (llama3 needs tuned band limits).
CONTEXT_EXTENSION_KINDS = ("linear", "dynamic", "yarn")


@dataclass(frozen=True)
class RopeScaling:
    """RoPE frequency scaling, the fields of HF `rope_parameters` / `rope_scaling`."""

    kind: str = "default"
    factor: float = 1.0
    original_max_position_embeddings: int | None = None
    low_freq_factor: float | None = None  # llama3
    high_freq_factor: float | None = None  # llama3
    beta_fast: float | None = None  # yarn
    beta_slow: float | None = None  # yarn
    attention_factor: float | None = None  # yarn
    mscale: float | None = None  # yarn
    mscale_all_dim: float | None = None  # yarn
    truncate: bool = True  # yarn

    @classmethod
    def from_hf(cls, d: dict[str, Any] | None, max_position_embeddings: int) -> "RopeScaling":
        if not d:
            return cls()
        kind = d.get("rope_type", d.get("type", "default"))
        if kind == "mrope":  # M-RoPE's sections are ModelConfig.mrope_section; its frequencies the default
            kind = "default"
        if kind not in ROPE_KINDS:
            raise CheckpointError(f"unsupported RoPE scaling {kind!r} (supported: {', '.join(ROPE_KINDS)})")
        if kind == "default":
            return cls()
        original = d.get("original_max_position_embeddings")
        if original is None and kind in ("yarn", "llama3"):
            original = max_position_embeddings
        return cls(
            kind=kind,
            factor=float(d["factor"]),
            original_max_position_embeddings=original,
            low_freq_factor=d.get("low_freq_factor"),
            high_freq_factor=d.get("high_freq_factor"),
            beta_fast=d.get("beta_fast"),
            beta_slow=d.get("beta_slow"),
            attention_factor=d.get("attention_factor"),
            mscale=d.get("mscale"),
            mscale_all_dim=d.get("mscale_all_dim"),
            truncate=bool(d.get("truncate", True)),
        )


@dataclass(frozen=True)
class ModelConfig:
    """Everything the layers need to know about a decoder-only transformer."""

    model_type: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: RopeScaling
    max_position_embeddings: int
    tie_word_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    qk_norm: bool
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = False
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    # Sliding-window attention is not implemented; within the window it equals full attention.
    sliding_window: int | None = None
    # Longest sequence this server will run; equals the trained length unless `with_context` raised it.
    context_length: int = field(default=0)
    # A serving choice: "float" (the dtype's), or the projections and output head as int8 × int8
    # matmuls (engine/model/int8.py) on int8 weights ("int8") or on int8 weights stored in 4 bits ("int4",
    # engine/model/int4.py), or each matrix in its GGUF file's own block format ("gguf",
    # engine/model/gguf_weights.py; the formats in `block_formats`).
    matmul_weights: str = "float"
    # With "gguf": (parameter path, block format) of every matrix, e.g. ("layer_0/attn/v/kernel", "Q6_K").
    block_formats: tuple[tuple[str, str], ...] = ()
    # M-RoPE (Qwen2-VL): how many of a head's rotary frequencies turn with a token's time, row and
    # column position (engine/model/layers/rope.py); empty: plain RoPE.
    mrope_section: tuple[int, ...] = ()
    # The image tower of a family that takes images (set by the family, engine/model/image_tower.py),
    # and the token id an image's embeddings fill.
    vision: ImageTower | None = None
    image_token_id: int | None = None

    @classmethod
    def from_hf(cls, d: dict[str, Any], traits: FamilyTraits) -> "ModelConfig":
        """The decoder's config of HF config.json `d` for a family with `traits`, which supply what
        HF's modeling code hard-codes; a family that takes images adds its tower (`vision`)."""
        try:
            return cls._from_hf(d, traits)
        except KeyError as missing:
            raise CheckpointError(f"model config lacks required field {missing}") from None

    @classmethod
    def _from_hf(cls, top: dict[str, Any], traits: FamilyTraits) -> "ModelConfig":
        model_type = top.get("model_type", "")
        # A vision-language config may nest its decoder's fields (transformers 5 writes them so).
        d = {**top, **(top.get("text_config") or {})}
        hidden, heads = int(d["hidden_size"]), int(d["num_attention_heads"])
        max_positions = int(d["max_position_embeddings"])
        rope_dict = d.get("rope_scaling") or d.get("rope_parameters") or {}
        rope_theta = d.get("rope_theta", rope_dict.get("rope_theta", 10000.0))
        attention_bias = bool(d.get("attention_bias", False))
        eos = d.get("eos_token_id")
        window = d.get("sliding_window") if d.get("use_sliding_window", True) else None
        if window and window < max_positions:
            log.warning("sliding-window attention is not supported; the context is limited to the window (%d)", window)
        return cls(
            model_type=model_type,
            vocab_size=int(d["vocab_size"]),
            hidden_size=hidden,
            num_layers=int(d["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(d.get("num_key_value_heads") or heads),
            head_dim=int(d.get("head_dim") or hidden // heads),
            intermediate_size=int(d.get("intermediate_size", 0)),  # all-MoE models may omit it
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
            rope_theta=float(rope_theta),
            rope_scaling=RopeScaling.from_hf(rope_dict, max_positions),
            max_position_embeddings=max_positions,
            tie_word_embeddings=bool(d.get("tie_word_embeddings", traits.tie_word_embeddings)),
            qkv_bias=attention_bias or traits.qkv_bias,
            o_bias=attention_bias and not traits.qkv_bias,
            qk_norm=traits.qk_norm,
            num_experts=int(d.get("num_experts", 0) or 0),
            num_experts_per_tok=int(d.get("num_experts_per_tok", 0) or 0),
            moe_intermediate_size=int(d.get("moe_intermediate_size", 0) or 0),
            norm_topk_prob=bool(d.get("norm_topk_prob", False)),
            decoder_sparse_step=int(d.get("decoder_sparse_step", 1) or 1),
            mlp_only_layers=tuple(d.get("mlp_only_layers") or ()),
            bos_token_id=d.get("bos_token_id"),
            eos_token_ids=tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,)),
            sliding_window=window,
            context_length=min(max_positions, window or max_positions),
            mrope_section=tuple(int(n) for n in rope_dict.get("mrope_section") or ()),
        )

    def weights_at(self, path: str) -> str:
        """How the matrix parameter at `path` is stored: `matmul_weights`, or under "gguf" its block format."""
        if self.matmul_weights != "gguf":
            return self.matmul_weights
        formats = dict(self.block_formats)
        if path not in formats:
            raise CheckpointError(f"the GGUF file has no blocks for parameter {path}")
        return formats[path]

    @property
    def queries_per_kv_head(self) -> int:
        return self.num_heads // self.num_kv_heads

    def is_moe_layer(self, layer: int) -> bool:
        """Qwen3-MoE's placement rule for sparse layers."""
        return (
            self.num_experts > 0 and layer not in self.mlp_only_layers and (layer + 1) % self.decoder_sparse_step == 0
        )

    @property
    def trained_context_length(self) -> int:
        scaling = self.rope_scaling
        if scaling.kind in ("yarn", "llama3", "linear") and scaling.original_max_position_embeddings:
            return max(self.max_position_embeddings, int(scaling.original_max_position_embeddings * scaling.factor))
        return self.max_position_embeddings


def with_context(config: ModelConfig, ctx: int, rope_scaling: str | None) -> ModelConfig:
    """Returns `config` serving `ctx` tokens; going past the trained length needs an explicit RoPE override.

    The override replaces any scaling in the checkpoint with `rope_scaling` stretched by ctx / original
    length, where the original length is what the checkpoint was pre-trained on.
    """
    if config.sliding_window and ctx > config.sliding_window:
        raise CheckpointError(
            f"--ctx {ctx} exceeds the sliding attention window {config.sliding_window}, which is not supported"
        )
    trained = config.trained_context_length
    if rope_scaling is None:
        if ctx > trained:
            raise CheckpointError(
                f"--ctx {ctx} exceeds the trained context {trained}; pass --rope-scaling "
                f"({', '.join(CONTEXT_EXTENSION_KINDS)}) to extend it"
            )
        return replace(config, context_length=ctx)
    if rope_scaling not in CONTEXT_EXTENSION_KINDS:
        raise CheckpointError(
            f"RoPE scaling override {rope_scaling!r} is not supported (use one of {', '.join(CONTEXT_EXTENSION_KINDS)})"
        )
    original = config.rope_scaling.original_max_position_embeddings or config.max_position_embeddings
    factor = max(1.0, ctx / original)
    log.warning(
        "extending context to %d tokens with %s RoPE scaling (factor %.3g over %d trained); quality may drop",
        ctx,
        rope_scaling,
        factor,
        original,
    )
    scaling = RopeScaling(kind=rope_scaling, factor=factor, original_max_position_embeddings=original)
    # Dynamic NTK measures growth against max_position_embeddings, so that must stay the original length.
    return replace(config, rope_scaling=scaling, max_position_embeddings=original, context_length=ctx)
