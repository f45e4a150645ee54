"""Qwen3: Llama with a per-head RMSNorm on queries and keys."""
