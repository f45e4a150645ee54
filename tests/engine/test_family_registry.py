"""The family registry: every family with the tasks it serves and their inputs, found by its HF or
GGUF architecture name; an unknown name is a one-line CheckpointError."""

import pytest

from engine.errors import CheckpointError
from engine.model.families.bert.bert import EncoderFamily
from engine.model.families.family import DecoderFamily
from engine.model.families.registry import (
    DECODERS,
    ENCODERS,
    FAMILIES,
    GGUF_DECODERS,
    decoder_for_hf_config,
    encoder_for_hf_config,
    family_for,
)
from tests.engine.tiny_checkpoints import TINY_MODELS

TEXT = ("text",)
# name → what it serves, as the issue names today's families.
SERVED = {
    "llama": {"generate": TEXT, "embed": TEXT},
    "qwen2": {"generate": TEXT, "embed": TEXT},
    "qwen3": {"generate": TEXT, "embed": TEXT},
    "qwen3_moe": {"generate": TEXT, "embed": TEXT},
    "qwen2_vl": {"generate": ("text", "image"), "embed": TEXT},
    "qwen2_5_vl": {"generate": ("text", "image"), "embed": TEXT},
    "bert": {"embed": TEXT, "rerank": TEXT},
    "xlm-roberta": {"embed": TEXT, "rerank": TEXT},
    "whisper": {"transcribe": ("audio",)},
}


def test_every_family_is_listed_with_its_tasks_and_inputs() -> None:
    assert {family.name: dict(family.serves) for family in FAMILIES} == SERVED
    assert len({family.name for family in FAMILIES}) == len(FAMILIES)
    assert {family.name for family in DECODERS} == set(SERVED) - {"bert", "xlm-roberta", "whisper"}
    assert {family.name for family in ENCODERS} == {"bert", "xlm-roberta"}


@pytest.mark.parametrize(
    ("architecture", "name"),
    [
        ("LlamaForCausalLM", "llama"),
        ("MistralForCausalLM", "llama"),
        ("Qwen2ForCausalLM", "qwen2"),
        ("Qwen3ForCausalLM", "qwen3"),
        ("Qwen3MoeForCausalLM", "qwen3_moe"),
        ("Qwen2VLForConditionalGeneration", "qwen2_vl"),
        ("Qwen2_5_VLForConditionalGeneration", "qwen2_5_vl"),
        ("BertModel", "bert"),
        ("BertForSequenceClassification", "bert"),
        ("XLMRobertaModel", "xlm-roberta"),
        ("XLMRobertaForSequenceClassification", "xlm-roberta"),
        ("WhisperForConditionalGeneration", "whisper"),
        # GGUF `general.architecture`: a name two families share goes to the first listed.
        ("llama", "llama"),
        ("qwen2", "qwen2"),
        ("qwen3", "qwen3"),
        ("qwen3moe", "qwen3_moe"),
        ("qwen2vl", "qwen2_vl"),
        ("bert", "bert"),
    ],
)
def test_lookup_by_hf_and_gguf_architecture(architecture: str, name: str) -> None:
    assert family_for(architecture).name == name


def test_decoders_by_gguf_architecture_are_what_the_gguf_reader_takes() -> None:
    assert {arch: family.name for arch, family in GGUF_DECODERS.items()} == {
        "llama": "llama",
        "qwen2": "qwen2",
        "qwen3": "qwen3",
        "qwen3moe": "qwen3_moe",
        "qwen2vl": "qwen2_vl",
    }
    assert all(isinstance(family, DecoderFamily) for family in GGUF_DECODERS.values())


def test_an_unknown_architecture_is_a_one_line_error() -> None:
    with pytest.raises(CheckpointError, match=r"unknown architecture 'mamba' \(known: .*LlamaForCausalLM") as raised:
        family_for("mamba")
    assert "\n" not in str(raised.value)
    with pytest.raises(CheckpointError, match="no 'architectures' entry"):
        decoder_for_hf_config({"model_type": "llama"})


def test_config_json_finds_a_decoder_and_an_encoder_by_their_own_keys() -> None:
    assert decoder_for_hf_config(TINY_MODELS["qwen2"]).name == "qwen2"
    with pytest.raises(CheckpointError, match="BertModel is a bert model, which serves embed, rerank, not generate"):
        decoder_for_hf_config({"architectures": ["BertModel"], "model_type": "bert"})
    roberta = encoder_for_hf_config({"model_type": "roberta"})
    assert isinstance(roberta, EncoderFamily) and roberta.name == "xlm-roberta"
    assert encoder_for_hf_config(TINY_MODELS["qwen2"]) is None
