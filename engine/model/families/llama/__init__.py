"""Llama (Llama 2/3.x, SmolLM2, Mistral-style): the base decoder layout."""
