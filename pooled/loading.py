"""The load step that `ModelHost` runs on its thread: checkpoint → model, tokenizer, template.

The weight dtype `auto` resolves per backend: float32 on the CPU (XLA's CPU
backend ran the batch-1 decode step several times slower with bf16 weights; see
docs/BENCHMARKS.md) and bfloat16 on accelerators.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import jax

from engine.checkpoint.errors import CheckpointError
from engine.checkpoint.loader import LoadedModel, load_model
from engine.tokenizer import ChatTemplate, Tokenizer
from pooled.model_host import Loaded
from pooled.settings import Settings


def resolve_dtype(requested: str, backend: str) -> str:
    if requested != "auto":
        return requested
    return "float32" if backend == "cpu" else "bfloat16"


def _devices(count: int | None) -> list[jax.Device]:
    devices = jax.devices()
    if count is None:
        return devices
    if not 1 <= count <= len(devices):
        raise CheckpointError(f"--devices {count} asked for, but this machine has {len(devices)}")
    return devices[:count]


def _tokenizer(model: LoadedModel) -> Tokenizer:
    if model.source.suffix == ".gguf":
        return Tokenizer.from_gguf_file(model.source)
    if model.tokenizer_dir is None:
        raise CheckpointError(f"{model.source}: no tokenizer.json next to the weights")
    return Tokenizer.from_directory(model.tokenizer_dir)


def load_serving(path: Path, settings: Settings, report: Callable[[str, int, int], None]) -> Loaded:
    report("loading weights", 0, 2)
    model = load_model(
        path,
        dtype=resolve_dtype(settings.dtype, jax.default_backend()),
        devices=_devices(settings.devices),
        context_length=settings.ctx,
        rope_scaling=settings.rope_scaling,
    )
    report("loading tokenizer", 1, 2)
    tokenizer = _tokenizer(model)
    template = ChatTemplate(model.chat_template, tokenizer) if model.chat_template else None
    report("ready", 2, 2)
    return Loaded(ctx=model.config.context_length, tokenizer=tokenizer, chat_template=template, engine=None)
