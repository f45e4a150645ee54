"""Read a LoRA adapter in PEFT's format (`adapter_config.json` + `adapter_model.safetensors`) and
check it against the served model: which projections it targets, its rank and scale, and each
low-rank pair in the engine's layout. llama.cpp's LoRA GGUF files have their own reader
(engine/lora/gguf_adapter.py), which checks its pairs here; engine/lora/adapter_formats.py picks the
reader for a path.

PEFT adds `scale · B(A(x))` to a targeted linear layer, with A [r, in] and B [out, r] and
`scale = lora_alpha / r` (`/ sqrt(r)` with `use_rslora`). Here each pair is stored as the
engine's projections take their kernels, inputs first: `a` [*in, r], and `b` [r, *out] with the
scale folded in, the projection's own axes split as its kernel's are (q: [D] → [N, H], o: [N, H]
→ [D]). Anything the engine would not compute as PEFT does — DoRA, activated LoRA, trained
biases, extra saved modules, per-module rank or alpha patterns, embedding or expert targets — is
refused by name.
"""

import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file

from engine.errors import CheckpointError
from engine.model.model_config import ModelConfig

# HF module name → (the engine's block, its projection) in a decoder layer.
TARGETS: dict[str, tuple[str, str]] = {
    "q_proj": ("attn", "q"),
    "k_proj": ("attn", "k"),
    "v_proj": ("attn", "v"),
    "o_proj": ("attn", "o"),
    "gate_proj": ("mlp", "gate"),
    "up_proj": ("mlp", "up"),
    "down_proj": ("mlp", "down"),
}
ATTENTION_TARGETS = ("q", "k", "v", "o")
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
_TENSOR = re.compile(
    r"base_model\.model\.model\.layers\.(?P<layer>\d+)\.(?:self_attn|mlp)\.(?P<module>\w+)\.lora_(?P<half>[AB])\.weight"
)


@dataclass(frozen=True)
class LoraPair:
    a: np.ndarray  # float32 [*in, r]
    b: np.ndarray  # float32 [r, *out], times the adapter's scale


@dataclass(frozen=True)
class LoraAdapter:
    path: Path
    rank: int
    alpha: float
    scale: float
    targets: tuple[str, ...]  # engine projection names, in TARGETS' order
    pairs: dict[tuple[int, str], LoraPair]  # (layer, projection) → its pair
    size_bytes: int
    sha256: str  # of the weights file


def projection_shapes(config: ModelConfig, layer: int) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
    """Each projection of decoder layer `layer` an adapter may target: (input axes, output axes)."""
    D, N, K, H, F = config.hidden_size, config.num_heads, config.num_kv_heads, config.head_dim, config.intermediate_size
    shapes = {"q": ((D,), (N, H)), "k": ((D,), (K, H)), "v": ((D,), (K, H)), "o": ((N, H), (D,))}
    if not config.is_moe_layer(layer):
        shapes |= {"gate": ((D,), (F,)), "up": ((D,), (F,)), "down": ((F,), (D,))}
    return shapes


def read_peft_adapter(path: Path, config: ModelConfig) -> LoraAdapter:
    """The adapter in directory `path`, checked against `config`; CheckpointError with the reason."""
    settings = _adapter_settings(path)
    rank, alpha = int(settings.get("r", 8)), float(settings.get("lora_alpha", 8))
    if rank < 1:
        raise CheckpointError(f"{path}: rank r={rank} must be at least 1")
    scale = alpha / math.sqrt(rank) if settings.get("use_rslora") else alpha / rank
    weights_file = path / ADAPTER_WEIGHTS
    try:
        tensors = load_file(str(weights_file))
    except (OSError, SafetensorError) as error:
        raise CheckpointError(f"{weights_file}: not a readable safetensors file ({error})") from error
    halves: dict[tuple[int, str], dict[str, np.ndarray]] = {}
    for name, tensor in tensors.items():
        match = _TENSOR.fullmatch(name)
        if match is None or match["module"] not in TARGETS:
            raise CheckpointError(f"{weights_file}: tensor {name} is not a LoRA pair of a decoder projection")
        key = (int(match["layer"]), TARGETS[match["module"]][1])
        halves.setdefault(key, {})[match["half"]] = np.asarray(tensor, np.float32)
    return build_adapter(path, weights_file, halves, rank, alpha, scale, config)


def build_adapter(
    path: Path,
    weights_file: Path,
    halves: dict[tuple[int, str], dict[str, np.ndarray]],
    rank: int,
    alpha: float,
    scale: float,
    config: ModelConfig,
    half_names: tuple[str, str] = ("lora_A", "lora_B"),
) -> LoraAdapter:
    """The adapter of `halves` ((layer, projection) → {"A": [r, in], "B": [out, r]}, as PEFT
    stores them), each pair checked against `config`; `half_names` as the file names A and B."""
    if not halves:
        raise CheckpointError(f"{weights_file}: no LoRA tensors")
    pairs = {
        key: _pair(weights_file, key, half, rank, scale, config, half_names) for key, half in sorted(halves.items())
    }
    targets = tuple(t for _, t in TARGETS.values() if any(projection == t for _, projection in pairs))
    return LoraAdapter(
        path=path,
        rank=rank,
        alpha=alpha,
        scale=scale,
        targets=targets,
        pairs=pairs,
        size_bytes=weights_file.stat().st_size,
        sha256=file_sha256(weights_file),
    )


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _adapter_settings(path: Path) -> dict[str, Any]:
    config_file = path / ADAPTER_CONFIG
    try:
        settings = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{config_file}: not a readable adapter config ({error})") from error
    if not isinstance(settings, dict) or settings.get("peft_type", "LORA") != "LORA":
        raise CheckpointError(f"{config_file}: not a LoRA adapter (peft_type {settings.get('peft_type')!r})")
    refused = {
        "use_dora": "DoRA",
        "alora_invocation_tokens": "activated LoRA (alora_invocation_tokens)",
        "modules_to_save": "modules saved whole (modules_to_save)",
        "rank_pattern": "per-module ranks (rank_pattern)",
        "alpha_pattern": "per-module alphas (alpha_pattern)",
        "fan_in_fan_out": "fan_in_fan_out weights",
    }
    for key, what in refused.items():
        if settings.get(key):
            raise CheckpointError(f"{config_file}: {what} is not supported")
    if settings.get("bias", "none") != "none":
        raise CheckpointError(f"{config_file}: trained biases (bias {settings['bias']!r}) are not supported")
    return settings


def _pair(
    source: Path,
    key: tuple[int, str],
    half: dict[str, np.ndarray],
    rank: int,
    scale: float,
    config: ModelConfig,
    half_names: tuple[str, str],
) -> LoraPair:
    layer, projection = key
    where = f"{source}: layer {layer} {projection}"
    if layer >= config.num_layers:
        raise CheckpointError(f"{where}: the served model has {config.num_layers} layers")
    shapes = projection_shapes(config, layer)
    if projection not in shapes:
        raise CheckpointError(f"{where}: a mixture-of-experts layer's MLP cannot take a LoRA adapter")
    name_a, name_b = half_names
    if set(half) != {"A", "B"}:
        raise CheckpointError(f"{where}: {name_b if 'A' in half else name_a} is missing")
    inputs, outputs = shapes[projection]
    a, b = half["A"], half["B"]  # [r, in], [out, r]
    expected_a, expected_b = (rank, math.prod(inputs)), (math.prod(outputs), rank)
    if a.shape != expected_a or b.shape != expected_b:
        raise CheckpointError(
            f"{where}: {name_a} {list(a.shape)} and {name_b} {list(b.shape)} do not fit the served model "
            f"(rank {rank}: {list(expected_a)} and {list(expected_b)})"
        )
    return LoraPair(a=a.T.reshape(*inputs, rank), b=(b.T * np.float32(scale)).reshape(rank, *outputs))
