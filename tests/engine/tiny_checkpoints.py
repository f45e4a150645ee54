"""Tiny random HF checkpoints, rebuilt bit-for-bit from a fixed seed with numpy (no torch).

`tools/reference/tiny_families.py` builds these, runs them in transformers and stores the logits
as goldens; the engine tests rebuild the same directories without torch and compare.
"""

import json
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from engine.model.families.registry import decoder_for_hf_config

SEED = 1234
PROMPT_SHAPE = (2, 12)

_BASE: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
    "attention_bias": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "float32",
}


def _variant(**overrides: Any) -> dict[str, Any]:
    return {**_BASE, **overrides}


TINY_MODELS: dict[str, dict[str, Any]] = {
    "llama_tied": _variant(tie_word_embeddings=True),
    # Wide enough (256 and 512 inputs) that XLA's CPU dot orders a row's sums by the number of rows.
    "llama_wide": _variant(
        tie_word_embeddings=True, hidden_size=256, intermediate_size=512, max_position_embeddings=128
    ),
    "llama_linear": _variant(rope_scaling={"rope_type": "linear", "factor": 2.0}),
    # max_position_embeddings below the prompt length, so dynamic NTK actually stretches the base.
    "llama_dynamic": _variant(max_position_embeddings=8, rope_scaling={"rope_type": "dynamic", "factor": 2.0}),
    "llama_yarn": _variant(rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}),
    "llama3_scaled": _variant(
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        }
    ),
    "qwen2": _variant(architectures=["Qwen2ForCausalLM"], model_type="qwen2", rope_theta=1e6, rms_norm_eps=1e-6),
    "qwen3": _variant(architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=32, rms_norm_eps=1e-6),
    "qwen3_moe": _variant(
        architectures=["Qwen3MoeForCausalLM"],
        model_type="qwen3_moe",
        head_dim=16,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        norm_topk_prob=True,
        decoder_sparse_step=1,
        mlp_only_layers=[1],
        rms_norm_eps=1e-6,
    ),
}


def hf_tensor_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """HF tensor names and shapes for the families in TINY_MODELS (hub layout, per-expert MoE)."""
    D, V, F = config["hidden_size"], config["vocab_size"], config["intermediate_size"]
    N, K = config["num_attention_heads"], config["num_key_value_heads"]
    H = config.get("head_dim") or D // N
    traits = decoder_for_hf_config(config).traits
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,)}
    if not config["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (V, D)
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}"
        shapes |= {
            f"{p}.input_layernorm.weight": (D,),
            f"{p}.post_attention_layernorm.weight": (D,),
            f"{p}.self_attn.q_proj.weight": (N * H, D),
            f"{p}.self_attn.k_proj.weight": (K * H, D),
            f"{p}.self_attn.v_proj.weight": (K * H, D),
            f"{p}.self_attn.o_proj.weight": (D, N * H),
        }
        if traits.qkv_bias:
            shapes |= {
                f"{p}.self_attn.q_proj.bias": (N * H,),
                f"{p}.self_attn.k_proj.bias": (K * H,),
                f"{p}.self_attn.v_proj.bias": (K * H,),
            }
        if traits.qk_norm:
            shapes |= {f"{p}.self_attn.q_norm.weight": (H,), f"{p}.self_attn.k_norm.weight": (H,)}
        if traits.moe and i not in config["mlp_only_layers"]:
            E, FE = config["num_experts"], config["moe_intermediate_size"]
            shapes[f"{p}.mlp.gate.weight"] = (E, D)
            for e in range(E):
                shapes |= {
                    f"{p}.mlp.experts.{e}.gate_proj.weight": (FE, D),
                    f"{p}.mlp.experts.{e}.up_proj.weight": (FE, D),
                    f"{p}.mlp.experts.{e}.down_proj.weight": (D, FE),
                }
        else:
            shapes |= {
                f"{p}.mlp.gate_proj.weight": (F, D),
                f"{p}.mlp.up_proj.weight": (F, D),
                f"{p}.mlp.down_proj.weight": (D, F),
            }
    return shapes


def random_tensor(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> np.ndarray:
    if name.endswith("norm.weight"):
        return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    if name.endswith(".bias"):
        return (0.1 * rng.standard_normal(shape)).astype(np.float32)
    if name == "model.embed_tokens.weight":
        return (0.5 * rng.standard_normal(shape)).astype(np.float32)
    return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)


def build_tiny_checkpoint(name: str, directory: Path) -> Path:
    """Writes config.json and model.safetensors for TINY_MODELS[name] into `directory`."""
    config = TINY_MODELS[name]
    rng = np.random.default_rng(SEED)
    tensors = {n: random_tensor(rng, n, shape) for n, shape in sorted(hf_tensor_shapes(config).items())}
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    return directory


def tiny_prompt() -> np.ndarray:
    """Token ids [2, 12] shared by the golden generator and the tests."""
    return np.random.default_rng(SEED + 1).integers(3, 256, size=PROMPT_SHAPE).astype(np.int32)
