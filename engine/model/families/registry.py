"""Every model family, what it serves, and how a checkpoint names it: the one place the loaders ask.

Each family declares the tasks it serves (`Family.serves`: a `Task` — generate, embed, rerank,
transcribe — and for each the `Input`s a request may hold: text, image, audio). A checkpoint names its family by its HF
`architectures[0]` (config.json) or its GGUF `general.architecture`; an encoder's config.json is
told by its `model_type`.

The rule: a family imports shared code, never the reverse. The shared modules (engine/model/layers,
engine/model/checkpoint, model_config, family_traits, image_tower, forward, kernels, int4, int8,
gguf_weights, sharding) never import `engine.model.families`; a checkpoint reader receives what it
needs of a family (e.g. `read_gguf`'s GGUF architecture → family mapping) from its caller, an
orchestration module above it (engine/model/loading/loader.py, engine/tasks/encode/encoder_model.py,
engine/lora/gguf_adapter.py) that looks the family up here.

Adding a family: its package beside the others, and its instance in `FAMILIES`.
"""

from collections.abc import Mapping
from typing import Any, TypeVar

from engine.errors import CheckpointError
from engine.model.families.bert.bert import Bert, EncoderFamily, XlmRoberta
from engine.model.families.family import DecoderFamily, Family
from engine.model.families.llama.llama import Llama
from engine.model.families.qwen2.qwen2 import Qwen2
from engine.model.families.qwen2_vl.qwen2_vl import Qwen2VL, Qwen25VL
from engine.model.families.qwen3.qwen3 import Qwen3
from engine.model.families.qwen3_moe.qwen3_moe import Qwen3Moe
from engine.model.families.whisper.whisper import Whisper

FAMILIES: tuple[Family, ...] = (
    Llama(),
    Qwen2(),
    Qwen3(),
    Qwen3Moe(),
    Qwen2VL(),
    Qwen25VL(),
    Bert(),
    XlmRoberta(),
    Whisper(),
)
DECODERS: tuple[DecoderFamily, ...] = tuple(f for f in FAMILIES if isinstance(f, DecoderFamily))
ENCODERS: tuple[EncoderFamily, ...] = tuple(f for f in FAMILIES if isinstance(f, EncoderFamily))


F = TypeVar("F", bound=Family)


def _first_by_gguf(families: tuple[F, ...]) -> dict[str, F]:
    """GGUF `general.architecture` → family, in the order of `families`; where families share one
    (Qwen2-VL's and Qwen2.5-VL's language model "qwen2vl", BERT's and XLM-RoBERTa's "bert"), the
    first: the projector file, or the vocabulary, tells them apart."""
    by_gguf: dict[str, F] = {}
    for family in families:
        by_gguf.setdefault(family.gguf_architecture, family)
    return by_gguf


# The decoders by GGUF architecture: what engine/model/checkpoint/gguf_file.py's `read_gguf` reads.
GGUF_DECODERS: Mapping[str, DecoderFamily] = _first_by_gguf(DECODERS)
_BY_ARCHITECTURE: dict[str, Family] = {
    **{arch: family for family in FAMILIES for arch in family.hf_architectures},
    **_first_by_gguf(FAMILIES),
}
_ENCODERS_BY_MODEL_TYPE: dict[str, EncoderFamily] = {t: family for family in ENCODERS for t in family.model_types}


def family_for(architecture: str) -> Family:
    """The family of an HF architecture class name or a GGUF architecture string."""
    try:
        return _BY_ARCHITECTURE[architecture]
    except KeyError:
        known = ", ".join(sorted(_BY_ARCHITECTURE))
        raise CheckpointError(f"unknown architecture {architecture!r} (known: {known})") from None


def decoder_for_hf_config(hf_config: dict[str, Any]) -> DecoderFamily:
    """The decoder family of an HF config.json; CheckpointError for an unknown one or another kind's."""
    architectures = hf_config.get("architectures") or []
    if not architectures:
        raise CheckpointError("config.json has no 'architectures' entry, so the model family is unknown")
    family = family_for(architectures[0])
    if not isinstance(family, DecoderFamily):
        raise CheckpointError(
            f"{architectures[0]} is a {family.name} model, which serves {', '.join(family.serves)}, not generate"
        )
    return family


def encoder_for_hf_config(hf_config: Mapping[str, Any]) -> EncoderFamily | None:
    """The encoder family of an HF config.json, by its `model_type`; None for any other model's."""
    return _ENCODERS_BY_MODEL_TYPE.get(str(hf_config.get("model_type", "")))
