"""Tiny random Qwen2-VL and Qwen2.5-VL checkpoints (hub layout), rebuilt bit-for-bit from a seed.

`tools/reference/tiny_vision.py` runs them in transformers on `tiny_vision_prompt()` and stores
the logits and a greedy continuation as goldens; the engine tests rebuild the same directories
without torch and compare.
"""

import json
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from tests.engine.tiny_checkpoints import SEED, hf_tensor_shapes, random_tensor

IMAGE_TOKEN, VISION_START, VISION_END = 250, 251, 252
# Two images: (t, h, w) in patches. The second's merged grid (5 × 3) does not divide into the
# tiny tower's 2 × 2 windows, so windows of several sizes are exercised.
IMAGE_GRIDS = ((1, 4, 6), (1, 10, 6))
MERGE = 2

_DECODER: dict[str, Any] = {
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    # head_dim 16: 8 rotary frequencies, 2 turned by time, 3 by row, 3 by column
    "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
    "tie_word_embeddings": False,
    "hidden_act": "silu",
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "float32",
    "image_token_id": IMAGE_TOKEN,
    "video_token_id": 253,
    "vision_start_token_id": VISION_START,
    "vision_end_token_id": VISION_END,
}

_VISION_COMMON: dict[str, Any] = {
    "depth": 2,
    "num_heads": 2,
    "patch_size": 14,
    "spatial_merge_size": MERGE,
    "temporal_patch_size": 2,
    "in_channels": 3,
}

TINY_VISION_MODELS: dict[str, dict[str, Any]] = {
    "qwen2_5_vl": {
        **_DECODER,
        "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "model_type": "qwen2_5_vl",
        "vision_config": {
            **_VISION_COMMON,
            "model_type": "qwen2_5_vl",
            "hidden_size": 32,
            "intermediate_size": 48,
            "out_hidden_size": 64,
            "window_size": 56,  # 2 × 2 merged tokens
            "fullatt_block_indexes": [1],
            "tokens_per_second": 2,
            "hidden_act": "silu",
        },
    },
    "qwen2_vl": {
        **_DECODER,
        "architectures": ["Qwen2VLForConditionalGeneration"],
        "model_type": "qwen2_vl",
        "vision_config": {
            **_VISION_COMMON,
            "model_type": "qwen2_vl",
            "embed_dim": 32,
            "hidden_size": 64,
            "mlp_ratio": 2,
            "hidden_act": "quick_gelu",
        },
    },
}


def vision_tensor_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    v = config["vision_config"]
    v1 = config["model_type"] == "qwen2_vl"
    width = v["embed_dim"] if v1 else v["hidden_size"]
    out = v["hidden_size"] if v1 else v["out_hidden_size"]
    mlp = int(width * v["mlp_ratio"]) if v1 else v["intermediate_size"]
    P, T, C = v["patch_size"], v["temporal_patch_size"], v["in_channels"]
    merged = width * v["spatial_merge_size"] ** 2
    shapes: dict[str, tuple[int, ...]] = {
        "visual.patch_embed.proj.weight": (width, C, T, P, P),
        "visual.merger.ln_q.weight": (width,),
        "visual.merger.mlp.0.weight": (merged, merged),
        "visual.merger.mlp.0.bias": (merged,),
        "visual.merger.mlp.2.weight": (out, merged),
        "visual.merger.mlp.2.bias": (out,),
    }
    if v1:
        shapes["visual.merger.ln_q.bias"] = (width,)
    for i in range(v["depth"]):
        p = f"visual.blocks.{i}"
        shapes |= {
            f"{p}.norm1.weight": (width,),
            f"{p}.norm2.weight": (width,),
            f"{p}.attn.qkv.weight": (3 * width, width),
            f"{p}.attn.qkv.bias": (3 * width,),
            f"{p}.attn.proj.weight": (width, width),
            f"{p}.attn.proj.bias": (width,),
        }
        if v1:
            shapes |= {
                f"{p}.norm1.bias": (width,),
                f"{p}.norm2.bias": (width,),
                f"{p}.mlp.fc1.weight": (mlp, width),
                f"{p}.mlp.fc1.bias": (mlp,),
                f"{p}.mlp.fc2.weight": (width, mlp),
                f"{p}.mlp.fc2.bias": (width,),
            }
        else:
            for name, shape in (("gate_proj", (mlp, width)), ("up_proj", (mlp, width)), ("down_proj", (width, mlp))):
                shapes[f"{p}.mlp.{name}.weight"] = shape
                shapes[f"{p}.mlp.{name}.bias"] = (shape[0],)
    return shapes


def _random_vision_tensor(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> np.ndarray:
    if name.endswith(("norm1.weight", "norm2.weight", "ln_q.weight")):
        return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    if name.endswith(".bias"):
        return (0.1 * rng.standard_normal(shape)).astype(np.float32)
    fan_in = int(np.prod(shape[1:]))
    return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)


def build_tiny_vision_checkpoint(name: str, directory: Path) -> Path:
    """Writes config.json and model.safetensors for TINY_VISION_MODELS[name] into `directory`."""
    return write_vision_checkpoint(TINY_VISION_MODELS[name], directory, SEED)


def write_vision_checkpoint(config: dict[str, Any], directory: Path, seed: int) -> Path:
    """config.json and random weights (numpy, `seed`) for a vision-language `config`, hub layout."""
    rng = np.random.default_rng(seed)
    decoder = {**config, "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}
    tensors = {n: random_tensor(rng, n, shape) for n, shape in sorted(hf_tensor_shapes(decoder).items())}
    tensors |= {n: _random_vision_tensor(rng, n, s) for n, s in sorted(vision_tensor_shapes(config).items())}
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    return directory


def tiny_image_patches() -> list[np.ndarray]:
    """Each image's processor patches [t·h·w, 3·2·14·14] (random: the tower's numbers, not a picture's)."""
    rng = np.random.default_rng(SEED + 2)
    return [rng.standard_normal((int(np.prod(grid)), 3 * 2 * 14 * 14)).astype(np.float32) for grid in IMAGE_GRIDS]


def tiny_vision_prompt() -> list[int]:
    """Text, the first image, text, the second image, text: token ids with each image's tokens."""
    rng = np.random.default_rng(SEED + 3)

    def text(n: int) -> list[int]:
        return [int(t) for t in rng.integers(3, 240, size=n)]

    def image(grid: tuple[int, int, int]) -> list[int]:
        return [VISION_START, *[IMAGE_TOKEN] * (int(np.prod(grid)) // MERGE**2), VISION_END]

    return [*text(5), *image(IMAGE_GRIDS[0]), *text(3), *image(IMAGE_GRIDS[1]), *text(4)]
