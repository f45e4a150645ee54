"""Llama (Llama 2/3.x, SmolLM2, Mistral-style): the base layout, unchanged."""

from engine.families.base import Family


class Llama(Family):
    name = "llama"
    hf_architectures = ("LlamaForCausalLM", "MistralForCausalLM")
    gguf_architecture = "llama"
