"""Qwen3: Llama plus a per-head RMSNorm on queries and keys before RoPE."""

from engine.model.families.llama.llama import Llama
from engine.model.family_traits import FamilyTraits


class Qwen3(Llama):
    name = "qwen3"
    hf_architectures = ("Qwen3ForCausalLM",)
    gguf_architecture = "qwen3"
    traits = FamilyTraits(qk_norm=True)
