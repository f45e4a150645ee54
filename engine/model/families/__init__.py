"""Model families, one package each: everything one family is (its config, its weight names and
conversion from safetensors and GGUF, its own layers and towers, its preprocessing).

`registry` lists every family with the tasks it serves and their inputs, and finds one by its HF or
GGUF architecture name; `family` holds what the families share. This package imports nothing, so
that a family's host-side module (e.g. its image preprocessing) imports without jax.
"""
