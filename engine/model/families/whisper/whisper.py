"""The Whisper family and its loader: a Hugging Face `WhisperForConditionalGeneration` folder
(config.json, safetensors, tokenizer.json, generation_config.json) or a CTranslate2 one
(faster-whisper's: model.bin, config.json, tokenizer.json)."""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from engine.errors import CheckpointError
from engine.model.checkpoint.hf_folder import checkpoint_files, read_hf_config
from engine.model.checkpoint.prepared_cache import fingerprint
from engine.model.checkpoint.safetensors_dir import SafetensorsTensors
from engine.model.families.family import Family, Input, ParamTree, Task
from engine.model.families.whisper.model_bin import read_model_bin, read_spec_name
from engine.model.families.whisper.whisper_config import WhisperConfig
from engine.model.families.whisper.whisper_vocabulary import WhisperVocabulary, read_vocabulary
from engine.model.families.whisper.whisper_weights import ct2_params, hf_params

HF_ARCHITECTURE = "WhisperForConditionalGeneration"
CT2_SPEC = "WhisperSpec"
MODEL_BIN = "model.bin"
TOKENIZER = "tokenizer.json"


class Whisper(Family):
    name = "whisper"
    hf_architectures = (HF_ARCHITECTURE,)
    gguf_architecture = "whisper"  # whisper.cpp's name; its files are GGML, which no reader here takes
    serves: ClassVar[Mapping[Task, tuple[Input, ...]]] = {"transcribe": ("audio",)}


@dataclass
class LoadedWhisper:
    config: WhisperConfig
    vocabulary: WhisperVocabulary
    params: ParamTree  # float32 numpy arrays, as encoder_decoder's functions take them
    path: Path
    fingerprint: str  # of the checkpoint's files: a compiled-program or prepared-weights cache key


def _is_ct2(path: Path) -> bool:
    return (path / MODEL_BIN).is_file() and read_spec_name(path / MODEL_BIN) == CT2_SPEC


def is_whisper_checkpoint(path: Path) -> bool:
    """Whether `path` is a Whisper checkpoint folder in either layout (reads headers only)."""
    if not path.is_dir() or not (path / "config.json").is_file():
        return False
    if _is_ct2(path):
        return True
    try:
        architectures = read_hf_config(path).get("architectures") or []
    except CheckpointError:
        return False
    return bool(architectures) and architectures[0] == HF_ARCHITECTURE


def _json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return dict(json.loads(path.read_text()))
    except (json.JSONDecodeError, TypeError, ValueError) as error:
        raise CheckpointError(f"{path} is not a JSON object ({error})") from None


def load_whisper(path: Path) -> LoadedWhisper:
    """The model in folder `path`, its weights converted to float32; CheckpointError naming what is
    wrong otherwise."""
    if not is_whisper_checkpoint(path):
        raise CheckpointError(f"{path} is not a Whisper checkpoint (a {HF_ARCHITECTURE} folder or CTranslate2's)")
    if not (path / TOKENIZER).is_file():
        raise CheckpointError(f"{path} has no {TOKENIZER}, which Whisper's special tokens are read from")
    return _load_ct2(path) if _is_ct2(path) else _load_hf(path)


def _load_hf(path: Path) -> LoadedWhisper:
    hf = read_hf_config(path)
    generation = _json(path / "generation_config.json")
    files = checkpoint_files(path)
    config = WhisperConfig.from_hf(hf, generation.get("alignment_heads"))
    tensors = SafetensorsTensors([f for f in files if f.suffix == ".safetensors"])
    multilingual = generation.get("is_multilingual")
    vocabulary = read_vocabulary(
        path / TOKENIZER,
        config.vocab_size,
        bool(multilingual) if multilingual is not None else None,
        generation.get("suppress_tokens", hf.get("suppress_tokens")) or (),
        generation.get("begin_suppress_tokens", hf.get("begin_suppress_tokens")) or (),
        config.alignment_heads,
    )
    params = hf_params(tensors, config)
    return LoadedWhisper(config, vocabulary, params, path, fingerprint([*files, path / TOKENIZER], "float32"))


def _load_ct2(path: Path) -> LoadedWhisper:
    ct2 = _json(path / "config.json")
    model = read_model_bin(path / MODEL_BIN)
    config = WhisperConfig.from_ct2(model.variables, ct2.get("alignment_heads"))
    vocabulary = read_vocabulary(
        path / TOKENIZER,
        config.vocab_size,
        None,
        ct2.get("suppress_ids") or (),
        ct2.get("suppress_ids_begin") or (),
        config.alignment_heads,
    )
    params = ct2_params(model.variables, config)
    files = [path / "config.json", path / MODEL_BIN, path / TOKENIZER]
    return LoadedWhisper(config, vocabulary, params, path, fingerprint(files, "float32"))
