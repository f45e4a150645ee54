"""The server's checkpoint load on the default model: context, rope scaling, dtype, clear refusals.

The engine built on top is tested in tests/engine and end to end in tests/e2e.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import CheckpointError
from pooled.configuration.context_policy import AGENT_CONTEXT, served_context
from pooled.configuration.settings import Settings
from pooled.hosting.loading import Checkpoint, engine_config, load_checkpoint, resolve_dtype
from pooled.hosting.model_host import default_model_path


def load(tmp_path: Path, **overrides: object) -> tuple[int, Checkpoint]:
    checkpoint = load_checkpoint(default_model_path(), Settings(**overrides))  # type: ignore[arg-type]
    return checkpoint.model.config.context_length, checkpoint


@pytest.mark.slow  # loads the default model
def test_the_checkpoint_loads_at_its_trained_length(tmp_path: Path) -> None:
    ctx, serving = load(tmp_path)
    assert ctx == 8192
    assert serving.chat_template is not None
    assert serving.tokenizer.encode("Hello") != []


@pytest.mark.slow  # loads the default model
def test_without_ctx_the_default_model_serves_agents_a_32k_context(tmp_path: Path) -> None:
    settings = Settings()
    _, checkpoint = load(tmp_path)
    context = served_context(checkpoint.model, settings, engine_config(settings, checkpoint))
    assert (context.trained, context.rope_scaling) == (8192, "dynamic")
    assert context.model.config.context_length == AGENT_CONTEXT == 32768


@pytest.mark.slow  # loads the default model
def test_context_beyond_training_needs_rope_scaling(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="--rope-scaling"):
        load(tmp_path, ctx=32768)
    ctx, _ = load(tmp_path, ctx=32768, rope_scaling="yarn")
    assert ctx == 32768


def test_auto_dtype_per_backend() -> None:
    assert resolve_dtype("auto", "cpu") == "float32"
    assert resolve_dtype("auto", "gpu") == "bfloat16"
    assert resolve_dtype("bfloat16", "cpu") == "bfloat16"


def test_too_many_devices_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="--devices 64"):
        load(tmp_path, devices=64)
