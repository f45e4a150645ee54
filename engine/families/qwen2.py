"""Qwen2 / Qwen2.5: Llama with q/k/v biases (`ModelConfig.qkv_bias`, read by the shared layout)."""

from engine.families.llama import Llama


class Qwen2(Llama):
    name = "qwen2"
    hf_architectures = ("Qwen2ForCausalLM",)
    gguf_architecture = "qwen2"
