"""Qwen3-MoE: Qwen3 attention; sparse layers route each token to its top-k experts."""

import numpy as np

from engine.config import ModelConfig
from engine.families.base import ParamTree, TensorSource
from engine.families.qwen3 import Qwen3


class Qwen3Moe(Qwen3):
    name = "qwen3_moe"
    hf_architectures = ("Qwen3MoeForCausalLM",)
    gguf_architecture = "qwen3moe"

    def convert_mlp(self, get: TensorSource, prefix: str, index: int, config: ModelConfig) -> ParamTree:
        if not config.is_moe_layer(index):
            return super().convert_mlp(get, prefix, index, config)

        def stacked(name: str) -> np.ndarray:  # per-expert [out, in] → [E, in, out]
            return np.stack([get(f"{prefix}.experts.{e}.{name}.weight").T for e in range(config.num_experts)])

        return {
            "moe": {
                "router": get(f"{prefix}.gate.weight").T,
                "gate": stacked("gate_proj"),
                "up": stacked("up_proj"),
                "down": stacked("down_proj"),
            }
        }
