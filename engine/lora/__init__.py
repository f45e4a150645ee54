"""LoRA adapters: reading PEFT and llama.cpp GGUF adapters, checking them against the model, and the
engine's slot table."""
