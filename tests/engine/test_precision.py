"""Precision that means what it says (issue 41): the model's dots lowered for a GPU — on this CPU, by
JAX's cross-platform lowering — ask for HIGHEST wherever an operand is float32 (XLA's default runs
float32 dots as TF32 on NVIDIA GPUs), and a dense model's bfloat16 dots for the default (a MoE's
three-operand expert sum contracts through a float32 intermediate: all its dots are HIGHEST)."""

import re
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from engine.model.loading.loader import load_model
from tests.engine.tiny_checkpoints import build_tiny_checkpoint

_OPERANDS = re.compile(r":\s*\((tensor<[^>]*>), (tensor<[^>]*>)\)")


def _gpu_dots(model_name: str, dtype: str, directory: Path) -> list[str]:
    model = load_model(build_tiny_checkpoint(model_name, directory), dtype=dtype, progress=False)
    tokens = jnp.zeros((2, 5), jnp.int32)
    cache = model.init_kv_cache(2, 8)
    lowered = jax.jit(model.apply).trace(model.params, tokens, tokens, cache).lower(lowering_platforms=("cuda",))
    return [line for line in lowered.as_text().splitlines() if "stablehlo.dot_general" in line]


@pytest.mark.parametrize("model_name", ["llama_tied", "qwen3_moe"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gpu_dots_are_float32_exactly_where_an_operand_is(model_name: str, dtype: str, tmp_path: Path) -> None:
    dots = _gpu_dots(model_name, dtype, tmp_path)
    assert dots
    for line in dots:
        operands = _OPERANDS.search(line)
        assert operands is not None, line
        if any(kind.endswith("xf32>") for kind in operands.groups()):
            assert "precision = [HIGHEST, HIGHEST]" in line, line
        elif model_name != "qwen3_moe":
            assert all(kind.endswith("xbf16>") for kind in operands.groups()), line
            assert "HIGHEST" not in line, line
    if dtype == "bfloat16":
        assert any("xbf16>" in line for line in dots)
