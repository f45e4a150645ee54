"""Qwen3-MoE: Qwen3 attention; sparse layers route each token to its top-k experts."""

from dataclasses import replace

import numpy as np

from engine.model.families.family import ParamTree, TensorSource
from engine.model.families.qwen3.qwen3 import Qwen3
from engine.model.model_config import ModelConfig


class Qwen3Moe(Qwen3):
    name = "qwen3_moe"
    hf_architectures = ("Qwen3MoeForCausalLM",)
    gguf_architecture = "qwen3moe"
    # llama.cpp always renormalises the chosen experts' weights for this family.
    traits = replace(Qwen3.traits, moe=True, gguf_config=(("norm_topk_prob", True),))

    def convert_experts(self, get: TensorSource, prefix: str, config: ModelConfig) -> ParamTree:
        def stacked(name: str) -> np.ndarray:  # per-expert [out, in] → [E, in, out]
            return np.stack([get(f"{prefix}.experts.{e}.{name}.weight").T for e in range(config.num_experts)])

        return {
            "router": get(f"{prefix}.gate.weight").T,
            "gate": stacked("gate_proj"),
            "up": stacked("up_proj"),
            "down": stacked("down_proj"),
        }
