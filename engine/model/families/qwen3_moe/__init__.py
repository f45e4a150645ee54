"""Qwen3-MoE: Qwen3 attention with sparse expert layers."""
