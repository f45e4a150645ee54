"""Registry of model families, keyed by HF `architectures[0]` and GGUF `general.architecture`."""

from engine.errors import CheckpointError
from engine.model.families.base import Family
from engine.model.families.llama import Llama
from engine.model.families.qwen2 import Qwen2
from engine.model.families.qwen2_vl import Qwen2VL, Qwen25VL
from engine.model.families.qwen3 import Qwen3
from engine.model.families.qwen3_moe import Qwen3Moe

FAMILIES: tuple[Family, ...] = (Llama(), Qwen2(), Qwen3(), Qwen3Moe(), Qwen2VL(), Qwen25VL())
# GGUF `general.architecture` -> family, in the order of FAMILIES; where families share one (Qwen2-VL's
# and Qwen2.5-VL's language model, "qwen2vl"), the first: the projector file tells them apart.
GGUF_FAMILIES: dict[str, Family] = {}
for _family in FAMILIES:
    GGUF_FAMILIES.setdefault(_family.gguf_architecture, _family)

_BY_ARCHITECTURE: dict[str, Family] = {
    **{arch: family for family in FAMILIES for arch in family.hf_architectures},
    **GGUF_FAMILIES,
}


def family_for(architecture: str) -> Family:
    """The family for an HF architecture class name or a GGUF architecture string."""
    try:
        return _BY_ARCHITECTURE[architecture]
    except KeyError:
        known = ", ".join(sorted(_BY_ARCHITECTURE))
        raise CheckpointError(f"unknown architecture {architecture!r} (known: {known})") from None


def family_for_hf_config(hf_config: dict) -> Family:
    architectures = hf_config.get("architectures") or []
    if not architectures:
        raise CheckpointError("config.json has no 'architectures' entry, so the model family is unknown")
    return family_for(architectures[0])


__all__ = ["FAMILIES", "GGUF_FAMILIES", "Family", "family_for", "family_for_hf_config"]
