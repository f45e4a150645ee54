"""Llama (Llama 2/3.x, SmolLM2, Mistral-style): the base layout, unchanged."""

from typing import ClassVar

from engine.model.families.family import DecoderFamily
from engine.model.family_traits import FamilyTraits


class Llama(DecoderFamily):
    name = "llama"
    hf_architectures: ClassVar[tuple[str, ...]] = ("LlamaForCausalLM", "MistralForCausalLM")
    gguf_architecture = "llama"
    traits = FamilyTraits(gguf_interleaved_qk=True)
