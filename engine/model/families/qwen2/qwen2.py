"""Qwen2 / Qwen2.5: Llama with q/k/v biases (and none on o), whatever config.json says."""

from engine.model.families.llama.llama import Llama
from engine.model.family_traits import FamilyTraits


class Qwen2(Llama):
    name = "qwen2"
    hf_architectures = ("Qwen2ForCausalLM",)
    gguf_architecture = "qwen2"
    traits = FamilyTraits(qkv_bias=True)
