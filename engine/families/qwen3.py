"""Qwen3: Llama plus a per-head RMSNorm on queries and keys before RoPE."""

from engine.config import ModelConfig
from engine.families.base import ParamTree, TensorSource
from engine.families.llama import Llama


class Qwen3(Llama):
    name = "qwen3"
    hf_architectures = ("Qwen3ForCausalLM",)
    gguf_architecture = "qwen3"

    def convert_attention(self, get: TensorSource, prefix: str, config: ModelConfig) -> ParamTree:
        attention = super().convert_attention(get, prefix, config)
        attention["q_norm"] = {"scale": get(f"{prefix}.q_norm.weight")}
        attention["k_norm"] = {"scale": get(f"{prefix}.k_norm.weight")}
        return attention
