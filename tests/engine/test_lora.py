"""LoRA adapters in the forward pass: each family with a tiny random PEFT adapter against
transformers + peft (goldens by tools/reference/tiny_lora.py), and the same adapter converted to
a llama.cpp LoRA GGUF (tests/engine/test_lora_gguf.py checks its reader); an adapter whose B is
zero against the base model, rows of different adapters in one batch against each row alone, and
the adapters the reader refuses."""

import json
from collections.abc import Callable
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from engine.errors import CheckpointError
from engine.lora.adapter_formats import read_lora_adapter
from engine.lora.adapter_stack import stack_adapters
from engine.lora.peft_adapter import LoraAdapter, read_peft_adapter
from engine.model.layers.lora import LoraBatch
from engine.model.loading.loader import LoadedModel, load_model
from tests.engine.tiny_checkpoints import TINY_MODELS
from tests.engine.tiny_gguf_lora import write_lora_gguf
from tests.engine.tiny_lora import TINY_ADAPTERS, build_tiny_adapter

pytestmark = pytest.mark.slow  # runs LoRA'd models through XLA

GOLDENS = Path(__file__).parent.parent / "goldens"


def golden_logits(name: str) -> np.ndarray:
    return np.asarray(json.loads((GOLDENS / "tiny_lora" / f"{name}.json").read_text())["logits"], np.float32)


def base(tiny_checkpoint: Callable[[str], Path], cache_dir: Path, name: str) -> LoadedModel:
    return load_model(tiny_checkpoint(TINY_ADAPTERS[name][0]), cache_dir=cache_dir, progress=False)


def rows(slots: list[int]) -> jnp.ndarray:
    return jnp.asarray(slots, jnp.int32)


def read_as(form: str, name: str, tmp_path: Path, model: LoadedModel) -> LoraAdapter:
    """Tiny adapter `name` as a PEFT directory ("peft") or converted to a llama.cpp GGUF ("gguf")."""
    directory = build_tiny_adapter(name, tmp_path / name)
    if form == "gguf":
        directory = write_lora_gguf(directory, TINY_MODELS[TINY_ADAPTERS[name][0]], tmp_path / f"{name}.gguf")
    return read_lora_adapter(directory, model.config)


# Every adapter as PEFT; as GGUF, a Llama one (its q/k rows permuted by the converter) and a Qwen3
# one (head_dim apart from hidden / heads). rsLoRA is scaled otherwise by llama.cpp.
@pytest.mark.parametrize(
    ("form", "name"),
    [("peft", name) for name in sorted(TINY_ADAPTERS)] + [("gguf", "llama_all"), ("gguf", "qwen3_all")],
)
def test_adapter_logits_match_peft(
    form: str,
    name: str,
    tiny_checkpoint: Callable[[str], Path],
    cache_dir: Path,
    golden: Callable[[str], dict],
    tmp_path: Path,
) -> None:
    model = base(tiny_checkpoint, cache_dir, name)
    adapter = read_as(form, name, tmp_path, model)
    expected, prompt = golden_logits(name), golden(TINY_ADAPTERS[name][0])
    assert np.abs(expected - prompt["logits"]).max() > 1e-2  # the adapter does change the model
    # Slot 2 of three, at twice the adapter's rank: padding columns and other slots add nothing.
    stack = stack_adapters(model.config, [None, adapter, None], 2 * adapter.rank)
    tokens = prompt["tokens"]
    logits, _ = model.forward(tokens, prompt["positions"], lora=LoraBatch(stack, rows([2, 2])))
    np.testing.assert_allclose(np.asarray(logits), expected, atol=1e-4, rtol=0)


def test_an_adapter_whose_b_is_zero_gives_the_base_models_logits_exactly(
    tiny_checkpoint: Callable[[str], Path], cache_dir: Path, golden: Callable[[str], dict], tmp_path: Path
) -> None:
    model = base(tiny_checkpoint, cache_dir, "llama_all")
    adapter = read_peft_adapter(build_tiny_adapter("llama_all", tmp_path / "zero", zero_b=True), model.config)
    prompt = golden("llama_tied")
    plain, _ = model.forward(prompt["tokens"], prompt["positions"])
    stack = stack_adapters(model.config, [adapter], adapter.rank)
    adapted, _ = model.forward(prompt["tokens"], prompt["positions"], lora=LoraBatch(stack, rows([1, 1])))
    np.testing.assert_array_equal(np.asarray(adapted), np.asarray(plain))


def test_rows_of_three_adapters_and_none_each_get_what_they_get_alone(
    tiny_checkpoint: Callable[[str], Path], cache_dir: Path, golden: Callable[[str], dict], tmp_path: Path
) -> None:
    names = ["llama_all", "llama_qv_rslora", "llama_mlp"]
    model = base(tiny_checkpoint, cache_dir, names[0])
    adapters = [read_peft_adapter(build_tiny_adapter(n, tmp_path / n), model.config) for n in names]
    stack = stack_adapters(model.config, adapters, max(a.rank for a in adapters))
    prompt = golden("llama_tied")
    tokens = jnp.concatenate([prompt["tokens"], prompt["tokens"]])  # four rows: slots 1, 2, 3 and none
    positions = jnp.concatenate([prompt["positions"], prompt["positions"]])
    slots = [1, 2, 3, 0]
    together, _ = model.forward(tokens, positions, lora=LoraBatch(stack, rows(slots)))
    for row, slot in enumerate(slots):
        alone, _ = model.forward(tokens[row : row + 1], positions[row : row + 1], lora=LoraBatch(stack, rows([slot])))
        np.testing.assert_array_equal(np.asarray(together[row]), np.asarray(alone[0]))
        if slot:
            expected = golden_logits(names[slot - 1])[row % 2]
            np.testing.assert_allclose(np.asarray(alone[0]), expected, atol=1e-4, rtol=0)
    plain, _ = model.forward(tokens[3:], positions[3:])
    np.testing.assert_array_equal(np.asarray(together[3]), np.asarray(plain[0]))


def _rewrite_config(directory: Path, **changes: object) -> None:
    path = directory / "adapter_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"use_dora": True}, "DoRA is not supported"),
        ({"alora_invocation_tokens": [5, 6]}, r"activated LoRA \(alora_invocation_tokens\) is not supported"),
        ({"bias": "all"}, "trained biases"),
        ({"modules_to_save": ["lm_head"]}, "modules_to_save"),
        ({"rank_pattern": {"q_proj": 2}}, "rank_pattern"),
        ({"peft_type": "IA3"}, "not a LoRA adapter"),
        ({"r": 8}, "do not fit the served model"),
    ],
)
def test_an_adapter_the_engine_would_not_compute_as_peft_does_is_refused(
    tiny_checkpoint: Callable[[str], Path], cache_dir: Path, tmp_path: Path, changes: dict, reason: str
) -> None:
    model = base(tiny_checkpoint, cache_dir, "llama_all")
    directory = build_tiny_adapter("llama_all", tmp_path / "adapter")
    _rewrite_config(directory, **changes)
    with pytest.raises(CheckpointError, match=reason):
        read_peft_adapter(directory, model.config)


def test_an_adapter_for_another_model_is_refused_naming_the_mismatch(
    tiny_checkpoint: Callable[[str], Path], cache_dir: Path, tmp_path: Path
) -> None:
    qwen3 = base(tiny_checkpoint, cache_dir, "qwen3_all")  # head_dim 32: k_proj is 64 -> 64, not 32
    with pytest.raises(CheckpointError, match=r"layer 0 k: lora_A \[4, 64\] and lora_B \[32, 4\] do not fit"):
        read_peft_adapter(build_tiny_adapter("llama_all", tmp_path / "llama"), qwen3.config)
    moe = base(tiny_checkpoint, cache_dir, "qwen3_moe_attention")
    with pytest.raises(CheckpointError, match="layer 0 down: a mixture-of-experts layer's MLP"):
        read_peft_adapter(build_tiny_adapter("llama_all", tmp_path / "llama"), moe.config)
