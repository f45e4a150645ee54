"""The sampling a checkpoint's own files recommend, read without loading it.

A GGUF file carries it as llama.cpp's `general.sampling.*` keys (llama.cpp PR 17120, which
llama-server applies below its own flags; `convert_hf_to_gguf.py` writes them from the model's
generation_config.json); a safetensors folder as its generation_config.json (what vLLM applies).
Of either, the five parameters every API here can default: temperature, top-k, top-p, min-p and
the repetition penalty. Others (llama.cpp's mirostat, XTC, the penalty window; Transformers'
`do_sample`, which vLLM ignores too) are not read. A value that is no number is left out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from gguf import Keys

from engine.errors import CheckpointError
from engine.model.checkpoint.gguf_header import read_gguf_scalars

GENERATION_CONFIG = "generation_config.json"

# SamplingParams' field → the GGUF key (gguf-py's names for llama.cpp's keys).
GGUF_KEYS = {
    "temperature": Keys.General.SAMPLING_TEMP,
    "top_k": Keys.General.SAMPLING_TOP_K,
    "top_p": Keys.General.SAMPLING_TOP_P,
    "min_p": Keys.General.SAMPLING_MIN_P,
    "repetition_penalty": Keys.General.SAMPLING_PENALTY_REPEAT,
}
GGUF_PREFIX = "general.sampling."
# generation_config.json names them as SamplingParams does.
CONFIG_KEYS = {field: field for field in GGUF_KEYS}


@dataclass(frozen=True)
class RecommendedSampling:
    """What a checkpoint recommends: `values` by SamplingParams' field names (a top-k of 0
    or less read as 0, off), from `file`."""

    source: Literal["gguf", "generation_config"]
    file: Path
    values: Mapping[str, float | int]


def recommended_sampling(path: Path) -> RecommendedSampling | None:
    """The recommendation of the GGUF file or safetensors folder at `path`; None where it makes
    none. A GGUF that cannot be read, or a generation_config.json that is no JSON object, is a
    CheckpointError."""
    if path.is_dir():
        config = path / GENERATION_CONFIG
        if not config.is_file():
            return None
        return _recommendation("generation_config", config, _json_object(config), CONFIG_KEYS)
    scalars = read_gguf_scalars(path, GGUF_PREFIX)
    # A GGUF stores them as float32: read back at float32's precision, 0.95 rather than 0.9499999881.
    shortest = {
        key: float(str(np.float32(value))) if isinstance(value, float) else value for key, value in scalars.items()
    }
    return _recommendation("gguf", path, shortest, GGUF_KEYS)


def _recommendation(
    source: Literal["gguf", "generation_config"], file: Path, found: Mapping[str, Any], keys: Mapping[str, str]
) -> RecommendedSampling | None:
    values: dict[str, float | int] = {}
    for field, key in keys.items():
        value = found.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        values[field] = max(int(value), 0) if field == "top_k" else float(value)
    return RecommendedSampling(source, file, values) if values else None


def _json_object(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path} cannot be read as JSON ({error})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} is not a JSON object")
    return data
