"""ModelConfig from HF config dicts and context extension."""

import pytest

from engine.errors import CheckpointError
from engine.model.families.registry import decoder_for_hf_config
from engine.model.model_config import ModelConfig, with_context
from tests.engine.tiny_checkpoints import TINY_MODELS


def hf_config(d: dict) -> ModelConfig:
    return decoder_for_hf_config(d).config(d)


def test_architecture_traits() -> None:
    qwen2 = hf_config(TINY_MODELS["qwen2"])
    assert qwen2.qkv_bias and not qwen2.o_bias and not qwen2.qk_norm
    qwen3 = hf_config(TINY_MODELS["qwen3"])
    assert qwen3.qk_norm and not qwen3.qkv_bias and qwen3.head_dim == 32
    llama = hf_config({**TINY_MODELS["llama_tied"], "attention_bias": True})
    assert llama.qkv_bias and llama.o_bias


def test_moe_layer_placement() -> None:
    moe = hf_config(TINY_MODELS["qwen3_moe"])
    assert [moe.is_moe_layer(i) for i in range(moe.num_layers)] == [True, False]
    assert moe.num_experts_per_tok == 2 and moe.norm_topk_prob


def without_rope_theta(name: str) -> dict:
    return {k: v for k, v in TINY_MODELS[name].items() if k != "rope_theta"}


def test_rope_parameters_in_transformers_v5_form() -> None:
    rope = {"rope_type": "yarn", "rope_theta": 5e5, "factor": 2.0}
    config = hf_config({**without_rope_theta("llama_tied"), "rope_parameters": rope})
    assert config.rope_theta == 5e5
    assert config.rope_scaling.kind == "yarn"
    assert config.rope_scaling.original_max_position_embeddings == 64


def test_default_rope_parameters_mean_no_scaling() -> None:
    rope = {"rope_type": "default", "rope_theta": 1e6}
    config = hf_config({**without_rope_theta("llama_tied"), "rope_parameters": rope})
    assert config.rope_scaling.kind == "default" and config.rope_theta == 1e6


def test_eos_list_and_missing_field() -> None:
    assert hf_config({**TINY_MODELS["qwen3"], "eos_token_id": [2, 7]}).eos_token_ids == (2, 7)
    incomplete = {k: v for k, v in TINY_MODELS["qwen3"].items() if k != "hidden_size"}
    with pytest.raises(CheckpointError, match="hidden_size"):
        hf_config(incomplete)


def test_context_within_trained_length() -> None:
    config = hf_config(TINY_MODELS["llama_tied"])
    assert with_context(config, 32, None).context_length == 32


def test_context_beyond_trained_length_needs_override() -> None:
    config = hf_config(TINY_MODELS["llama_tied"])
    with pytest.raises(CheckpointError, match="exceeds the trained context 64"):
        with_context(config, 256, None)
    with pytest.raises(CheckpointError, match="not supported"):
        with_context(config, 256, "llama3")


def test_context_extension_applies_yarn(caplog: pytest.LogCaptureFixture) -> None:
    config = hf_config(TINY_MODELS["llama_tied"])
    extended = with_context(config, 256, "yarn")
    assert extended.context_length == 256
    assert extended.rope_scaling.kind == "yarn"
    assert extended.rope_scaling.factor == 4.0
    assert extended.rope_scaling.original_max_position_embeddings == 64
    assert "yarn" in caplog.text


def test_sliding_window_limits_the_context() -> None:
    mistral = hf_config({**TINY_MODELS["llama_tied"], "sliding_window": 16})
    assert mistral.context_length == 16
    with pytest.raises(CheckpointError, match="sliding attention window 16"):
        with_context(mistral, 32, None)
    qwen2 = hf_config({**TINY_MODELS["qwen2"], "sliding_window": 16, "use_sliding_window": False})
    assert qwen2.context_length == 64
