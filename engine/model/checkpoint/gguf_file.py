"""Read a GGUF file (llama.cpp's format) into a `RawCheckpoint` with Hugging Face names and layouts.

Tensors are dequantized to float32 lazily, one tensor per lookup, so reading a file costs no memory
until a model family asks for a weight. Only the metadata is parsed eagerly. For
`--quantization gguf` (`GGUFTensors.as_blocks`), a matrix in one of the block formats pooled computes
with comes back as a `BlockMatrix` instead: the file's own rows, never dequantized.
"""

import copy
import itertools
import re
from collections.abc import Callable, Collection, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from engine.errors import CheckpointError
from engine.model import gguf_weights
from engine.model.checkpoint.block_matrix import BlockMatrix
from engine.model.checkpoint.gguf_header import HeaderTensor, open_reader, reader_metadata
from engine.model.checkpoint.raw import RawCheckpoint
from engine.model.family_traits import FamilyTraits

SUPPORTED_TENSOR_TYPES = frozenset(
    {
        GGMLQuantizationType.F32,
        GGMLQuantizationType.F16,
        GGMLQuantizationType.BF16,
        GGMLQuantizationType.Q8_0,
        GGMLQuantizationType.Q4_0,
        GGMLQuantizationType.Q4_1,
        # Q4_K_M files fall back to Q5_0/Q5_1 for tensors whose rows are not a multiple of 256.
        GGMLQuantizationType.Q5_0,
        GGMLQuantizationType.Q5_1,
        GGMLQuantizationType.Q4_K,
        GGMLQuantizationType.Q5_K,
        GGMLQuantizationType.Q6_K,
    }
)

# `{arch}.<key>` metadata -> HF config key; the rest of the config is derived in `_hf_config`.
_ARCH_CONFIG_KEYS = {
    "embedding_length": "hidden_size",
    "block_count": "num_hidden_layers",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "feed_forward_length": "intermediate_size",
    "expert_feed_forward_length": "moe_intermediate_size",
    "expert_count": "num_experts",
    "expert_used_count": "num_experts_per_tok",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "rope.freq_base": "rope_theta",
    "context_length": "max_position_embeddings",
    "attention.key_length": "head_dim",
    "vocab_size": "vocab_size",
}

_REQUIRED_ARCH_KEYS = ("embedding_length", "block_count", "attention.head_count", "attention.layer_norm_rms_epsilon")

_TOKEN_ID_KEYS = {
    "tokenizer.ggml.bos_token_id": "bos_token_id",
    "tokenizer.ggml.eos_token_id": "eos_token_id",
    "tokenizer.ggml.padding_token_id": "pad_token_id",
}

_GLOBAL_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}

BLOCK_TENSORS = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "ffn_gate_inp": "mlp.gate",
}

# Stacked per-expert tensors; HF checkpoints store one tensor per expert.
_EXPERT_TENSORS = {"ffn_gate_exps": "gate_proj", "ffn_up_exps": "up_proj", "ffn_down_exps": "down_proj"}

_BLOCK_NAME = re.compile(r"blk\.(?P<layer>\d+)\.(?P<part>\w+)\.(?P<suffix>weight|bias)")

_Transform = Callable[[np.ndarray], np.ndarray]

# Llama 3.1+ GGUFs carry their rope scaling as one divisor per rotary frequency in this tensor.
ROPE_FACTORS_TENSOR = "rope_freqs.weight"
# The pre-extension context llama.cpp's converter assumes for Llama 3 scaling; the file does not record it.
LLAMA3_ORIGINAL_CONTEXT = 8192


class GgufFamily(Protocol):
    """What the reader needs of the decoder family a GGUF architecture names (the caller's
    registry supplies them: this shared reader knows no family)."""

    @property
    def name(self) -> str: ...  # HF `model_type`

    @property
    def hf_architectures(self) -> tuple[str, ...]: ...  # the first is the one a GGUF file stands for

    @property
    def traits(self) -> FamilyTraits: ...


def read_gguf(path: Path, families: Mapping[str, GgufFamily]) -> RawCheckpoint:
    """Open `path`; raise `CheckpointError` if it is not a complete GGUF file of one of `families`
    (by GGUF `general.architecture`)."""
    reader = open_reader(path)
    metadata = reader_metadata(reader, path)
    arch = metadata.get("general.architecture")
    family = families.get(arch) if isinstance(arch, str) else None
    if family is None:
        raise CheckpointError(f"{path}: GGUF architecture {arch!r} is not supported; supported: {', '.join(families)}")
    hf_config = _hf_config(metadata, family, {tensor.name: tensor for tensor in reader.tensors}, path)
    tensors = GGUFTensors(reader.tensors, hf_config, path, family.traits.gguf_interleaved_qk)
    return RawCheckpoint(
        hf_config=hf_config,
        tensors=tensors,
        source=path,
        tokenizer_dir=None,
        chat_template=metadata.get("tokenizer.chat_template"),
        gguf_metadata=metadata,
        projection_blocks=_projection_blocks(reader.tensors),
        matrix_formats=tuple(sorted({tensor.tensor_type.name for tensor in reader.tensors if _is_matrix(tensor)})),
    )


def _is_matrix(tensor: HeaderTensor) -> bool:
    return len(tensor.shape) == 2 and tensor.name != ROPE_FACTORS_TENSOR


def _projection_blocks(tensors: list[HeaderTensor]) -> str | None:
    """The block type shared by every layer matrix (a `blk.*` tensor of two dimensions), if one is."""
    kinds = {tensor.tensor_type.name for tensor in tensors if tensor.name.startswith("blk.") and len(tensor.shape) == 2}
    return kinds.pop() if len(kinds) == 1 else None


def check_tensor_type(tensor: HeaderTensor, path: Path) -> None:
    """CheckpointError unless `tensor` has a type this reader dequantizes."""
    if tensor.tensor_type not in SUPPORTED_TENSOR_TYPES:
        supported = ", ".join(sorted(t.name for t in SUPPORTED_TENSOR_TYPES))
        raise CheckpointError(
            f"{path}: tensor {tensor.name} has type {tensor.tensor_type.name}; supported: {supported}"
        )


class GGUFTensors(Mapping[str, np.ndarray]):
    """HF-named float32 view of a GGUF file's tensors, dequantized on each lookup (and of another
    file's, `joined`: a projector's)."""

    def __init__(self, tensors: list[HeaderTensor], hf_config: dict, path: Path, interleaved_qk: bool = False) -> None:
        """`interleaved_qk`: the family's `FamilyTraits.gguf_interleaved_qk`."""
        self._block_formats: frozenset[str] = frozenset()
        self._interleaved_qk = interleaved_qk
        self._joined: Mapping[str, np.ndarray] = {}
        self._entries: dict[str, tuple[HeaderTensor, int | None, _Transform | None]] = {}
        for tensor in tensors:
            check_tensor_type(tensor, path)
            self._add(tensor, hf_config, path)

    def _add(self, tensor: HeaderTensor, hf_config: dict, path: Path) -> None:
        if tensor.name == ROPE_FACTORS_TENSOR:  # part of the config, not a weight
            return
        if tensor.name in _GLOBAL_TENSORS:
            self._entries[_GLOBAL_TENSORS[tensor.name]] = (tensor, None, None)
            return
        match = _BLOCK_NAME.fullmatch(tensor.name)
        if match is None or (match["part"] not in BLOCK_TENSORS and match["part"] not in _EXPERT_TENSORS):
            raise CheckpointError(f"{path}: tensor {tensor.name} is not understood by this reader")
        prefix, part, suffix = f"model.layers.{match['layer']}", match["part"], match["suffix"]
        if part in _EXPERT_TENSORS:
            for expert in range(tensor.data.shape[0]):
                name = f"{prefix}.mlp.experts.{expert}.{_EXPERT_TENSORS[part]}.{suffix}"
                self._entries[name] = (tensor, expert, None)
            return
        fix = _rotary_fix(part, hf_config) if self._interleaved_qk else None
        self._entries[f"{prefix}.{BLOCK_TENSORS[part]}.{suffix}"] = (tensor, None, fix)

    def as_blocks(self, formats: Collection[str] = tuple(gguf_weights.FORMATS)) -> "GGUFTensors":
        """These tensors with each matrix in one of `formats` (default: every served block format)
        as a `BlockMatrix` (the joined ones stay float)."""
        view = copy.copy(self)
        view._block_formats = frozenset(formats)
        return view

    def joined(self, other: Mapping[str, np.ndarray]) -> "GGUFTensors":
        """These tensors and `other`'s (names apart)."""
        view = copy.copy(self)
        view._joined = other
        return view

    def __getitem__(self, name: str) -> np.ndarray:
        if name in self._joined:
            return self._joined[name]
        tensor, expert, transform = self._entries[name]
        if expert is None and _is_matrix(tensor) and tensor.tensor_type.name in self._block_formats:
            shape = (int(tensor.shape[1]), int(tensor.shape[0]))  # ggml lists the input dimension first
            return cast(np.ndarray, BlockMatrix(tensor.data, tensor.tensor_type.name, shape, transform))
        data = tensor.data if expert is None else tensor.data[expert]
        # F32 tensors stay read-only views of the memory-mapped file; other types are decoded copies.
        weights = np.asarray(dequantize(data, tensor.tensor_type), dtype=np.float32)
        return weights if transform is None else transform(weights)

    def __iter__(self) -> Iterator[str]:
        return itertools.chain(self._entries, self._joined)

    def __len__(self) -> int:
        return len(self._entries) + len(self._joined)


def _rotary_fix(part: str, hf_config: dict) -> _Transform | None:
    """llama.cpp's converter reorders some families' q/k rows (per head: interleaved rotary pairs,
    `FamilyTraits.gguf_interleaved_qk`); undo it."""
    if part not in ("attn_q", "attn_k"):
        return None
    heads = hf_config["num_attention_heads"] if part == "attn_q" else hf_config["num_key_value_heads"]
    return lambda weights: unpermute_qk_rows(weights, heads)


def unpermute_qk_rows(weights: np.ndarray, heads: int) -> np.ndarray:
    """`weights` [heads · head_dim, ...] (q or k rows, or a LoRA's lora_b for them) back in HF's
    row order from llama.cpp's: each head's interleaved rotary pairs as its two halves again."""
    half_head = weights.shape[0] // heads // 2
    by_head = weights.reshape(heads, half_head, 2, *weights.shape[1:])
    return np.ascontiguousarray(by_head.swapaxes(1, 2).reshape(weights.shape))


def _hf_config(metadata: dict[str, Any], family: GgufFamily, tensors: Mapping[str, HeaderTensor], path: Path) -> dict:
    arch = metadata["general.architecture"]
    missing = [f"{arch}.{key}" for key in _REQUIRED_ARCH_KEYS if f"{arch}.{key}" not in metadata]
    if missing:
        raise CheckpointError(f"{path}: GGUF metadata lacks {', '.join(missing)}")
    config: dict[str, Any] = {"architectures": [family.hf_architectures[0]], "model_type": family.name}
    for gguf_key, hf_key in _ARCH_CONFIG_KEYS.items():
        if f"{arch}.{gguf_key}" in metadata:
            config[hf_key] = metadata[f"{arch}.{gguf_key}"]
    for gguf_key, hf_key in _TOKEN_ID_KEYS.items():
        if gguf_key in metadata:
            config[hf_key] = metadata[gguf_key]
    config.setdefault("num_key_value_heads", config["num_attention_heads"])
    config.setdefault("head_dim", config["hidden_size"] // config["num_attention_heads"])
    config.setdefault("rope_theta", 10000.0)
    config.setdefault("vocab_size", len(metadata.get("tokenizer.ggml.tokens", ())))
    config["tie_word_embeddings"] = "output.weight" not in tensors
    config.update(family.traits.gguf_config)
    if sections := metadata.get(f"{arch}.rope.dimension_sections"):
        # M-RoPE (qwen2vl): llama.cpp pads HF's three sections (time, row, column) to four.
        config["rope_scaling"] = {"rope_type": "mrope", "mrope_section": [int(n) for n in sections[:3]]}
    if ROPE_FACTORS_TENSOR in tensors:
        factors = np.array(dequantize(tensors[ROPE_FACTORS_TENSOR].data, tensors[ROPE_FACTORS_TENSOR].tensor_type))
        rotary_dim = metadata.get(f"{arch}.rope.dimension_count", config["head_dim"])
        rope_scaling = _llama3_rope_scaling(factors, config["rope_theta"], rotary_dim, path)
    else:
        rope_scaling = _rope_scaling(metadata, arch, path)
    if rope_scaling is not None:
        config["rope_scaling"] = rope_scaling
    return config


def _rope_scaling(metadata: dict[str, Any], arch: str, path: Path) -> dict | None:
    kind = metadata.get(f"{arch}.rope.scaling.type", "none")
    if kind == "none":
        return None
    if kind not in ("linear", "yarn"):
        raise CheckpointError(f"{path}: rope scaling type {kind!r} is not supported")
    scaling: dict[str, Any] = {"rope_type": kind, "factor": metadata[f"{arch}.rope.scaling.factor"]}
    if f"{arch}.rope.scaling.original_context_length" in metadata:
        scaling["original_max_position_embeddings"] = metadata[f"{arch}.rope.scaling.original_context_length"]
    return scaling


def _llama3_rope_scaling(factors: np.ndarray, base: float, rotary_dim: int, path: Path) -> dict | None:
    """The HF `llama3` rope parameters that produce llama.cpp's per-frequency divisors.

    Between the two cut-off wavelengths the divisor is 1 / ((1 - s) / factor + s) with
    s = (original / wavelength - low) / (high - low), linear in 1 / wavelength: a straight-line fit
    over those frequencies gives `low` and `high` for the assumed original context.
    """
    factor = float(factors.max())
    if factor <= 1.0:
        return None
    wavelength = 2 * np.pi * base ** (np.arange(0, rotary_dim, 2) / rotary_dim)
    medium = (factors > 1.0 + 1e-6) & (factors < factor * (1 - 1e-6))
    if wavelength.shape != factors.shape or medium.sum() < 2:
        raise CheckpointError(f"{path}: {ROPE_FACTORS_TENSOR} does not follow Llama 3 rope scaling")
    smooth = (1 / factors[medium] - 1 / factor) / (1 - 1 / factor)
    slope, intercept = np.polyfit(1 / wavelength[medium], smooth, 1)
    span = LLAMA3_ORIGINAL_CONTEXT / slope
    low = float(-intercept * span)
    scaling = {
        "rope_type": "llama3",
        "factor": factor,
        "low_freq_factor": low,
        "high_freq_factor": float(low + span),
        "original_max_position_embeddings": LLAMA3_ORIGINAL_CONTEXT,
    }
    ramp = np.clip((LLAMA3_ORIGINAL_CONTEXT / wavelength - low) / span, 0.0, 1.0)
    if not np.allclose(1 / ((1 - ramp) / factor + ramp), factors, rtol=1e-4):
        raise CheckpointError(f"{path}: {ROPE_FACTORS_TENSOR} does not follow Llama 3 rope scaling")
    return scaling
