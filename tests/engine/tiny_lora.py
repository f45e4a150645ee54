"""Tiny random LoRA adapters in PEFT's format for the tiny checkpoints (tests/engine/tiny_checkpoints.py),
rebuilt bit for bit from a fixed seed with numpy (no torch, no peft).

`tools/reference/tiny_lora.py` loads each into transformers + peft and stores the logits as
goldens; the engine tests rebuild the same adapters and compare. B is random, not PEFT's zero
initialisation, so that every adapted projection changes the logits.
"""

import json
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from tests.engine.tiny_checkpoints import TINY_MODELS

SEED = 2468
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
ALL = (*ATTENTION, "gate_proj", "up_proj", "down_proj")

# name → (base checkpoint in TINY_MODELS, adapter_config.json fields)
TINY_ADAPTERS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama_all": ("llama_tied", {"r": 4, "lora_alpha": 8, "target_modules": list(ALL)}),
    "llama_qv_rslora": (
        "llama_tied",
        {"r": 8, "lora_alpha": 4, "target_modules": ["q_proj", "v_proj"], "use_rslora": True},
    ),
    "llama_mlp": ("llama_tied", {"r": 2, "lora_alpha": 2, "target_modules": ["gate_proj", "up_proj", "down_proj"]}),
    "qwen2_all": ("qwen2", {"r": 4, "lora_alpha": 16, "target_modules": list(ALL)}),
    "qwen3_all": ("qwen3", {"r": 4, "lora_alpha": 8, "target_modules": list(ALL)}),
    # Attention only: PEFT would also wrap the experts' projections, which the engine refuses.
    "qwen3_moe_attention": ("qwen3_moe", {"r": 4, "lora_alpha": 8, "target_modules": list(ATTENTION)}),
}


def module_shapes(config: dict[str, Any], module: str) -> tuple[int, int]:
    """(in, out) features of a decoder layer's `module`."""
    D, F = config["hidden_size"], config["intermediate_size"]
    N, K = config["num_attention_heads"], config["num_key_value_heads"]
    H = config.get("head_dim", D // N)
    return {
        "q_proj": (D, N * H),
        "k_proj": (D, K * H),
        "v_proj": (D, K * H),
        "o_proj": (N * H, D),
        "gate_proj": (D, F),
        "up_proj": (D, F),
        "down_proj": (F, D),
    }[module]


def adapter_tensors(name: str, seed: int = SEED, zero_b: bool = False) -> dict[str, np.ndarray]:
    base, settings = TINY_ADAPTERS[name]
    return random_lora_tensors(TINY_MODELS[base], settings, seed, zero_b)


def random_lora_tensors(
    config: dict[str, Any], settings: dict[str, Any], seed: int = SEED, zero_b: bool = False
) -> dict[str, np.ndarray]:
    """PEFT's tensors of a random adapter with `settings` (adapter_config.json fields) for a model
    with the Hugging Face `config`."""
    rank = settings["r"]
    rng = np.random.default_rng(seed)
    sparse = set(config.get("mlp_only_layers", [])) ^ set(range(config["num_hidden_layers"]))
    moe_layers = sparse if config.get("num_experts") else set()
    tensors = {}
    for layer in range(config["num_hidden_layers"]):
        for module in settings["target_modules"]:
            if module in ALL[4:] and layer in moe_layers:
                continue
            block = "self_attn" if module in ATTENTION else "mlp"
            prefix = f"base_model.model.model.layers.{layer}.{block}.{module}"
            inputs, outputs = module_shapes(config, module)
            tensors[f"{prefix}.lora_A.weight"] = (rng.standard_normal((rank, inputs)) / np.sqrt(inputs)).astype(
                np.float32
            )
            b = (0.5 * rng.standard_normal((outputs, rank)) / np.sqrt(rank)).astype(np.float32)
            tensors[f"{prefix}.lora_B.weight"] = np.zeros_like(b) if zero_b else b
    return tensors


def build_tiny_adapter(name: str, directory: Path, seed: int = SEED, zero_b: bool = False) -> Path:
    """Writes adapter_config.json and adapter_model.safetensors for TINY_ADAPTERS[name]."""
    base, settings = TINY_ADAPTERS[name]
    return write_peft_adapter(directory, TINY_MODELS[base], settings, seed, zero_b)


def write_peft_adapter(
    directory: Path, config: dict[str, Any], settings: dict[str, Any], seed: int = SEED, zero_b: bool = False
) -> Path:
    """A random adapter for the model with the Hugging Face `config`, as PEFT saves one."""
    directory.mkdir(parents=True, exist_ok=True)
    adapter_config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": None,
        "lora_dropout": 0.0,
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "init_lora_weights": True,
        **settings,
    }
    (directory / "adapter_config.json").write_text(json.dumps(adapter_config, indent=2))
    save_file(random_lora_tensors(config, settings, seed, zero_b), str(directory / "adapter_model.safetensors"))
    return directory
