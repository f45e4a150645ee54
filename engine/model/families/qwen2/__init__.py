"""Qwen2 / Qwen2.5: Llama with q/k/v biases."""
