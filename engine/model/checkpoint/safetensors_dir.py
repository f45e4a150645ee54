"""Reads a Hugging Face model directory (config.json + one or sharded `.safetensors` files).

Tensors are memory-mapped and only materialised when a family converts them. The safetensors
header is parsed here rather than with the `safetensors` package because its numpy API cannot
return bfloat16, the dtype most published checkpoints use.
"""

import json
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from engine.errors import CheckpointError
from engine.model.checkpoint.hf_folder import checkpoint_files, read_hf_config
from engine.model.checkpoint.raw import RawCheckpoint

_DTYPES: dict[str, Any] = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "BF16": ml_dtypes.bfloat16,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U8": np.uint8,
    "BOOL": np.bool_,
}


@dataclass(frozen=True)
class _TensorEntry:
    file: Path
    dtype: Any
    shape: tuple[int, ...]
    start: int  # absolute byte offset in the file
    end: int


def _read_header(path: Path) -> dict[str, _TensorEntry]:
    size = path.stat().st_size
    with path.open("rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            raise CheckpointError(f"{path} is truncated (no safetensors header)")
        (header_len,) = struct.unpack("<Q", prefix)
        if 8 + header_len > size:
            raise CheckpointError(f"{path} is truncated (header needs {8 + header_len} bytes, file has {size})")
        try:
            header = json.loads(f.read(header_len))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise CheckpointError(f"{path} is not a safetensors file (unreadable header)") from None
    entries = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in _DTYPES:
            raise CheckpointError(f"{path}: tensor {name!r} has unsupported dtype {info['dtype']}")
        begin, end = info["data_offsets"]
        entry = _TensorEntry(
            path, _DTYPES[info["dtype"]], tuple(info["shape"]), 8 + header_len + begin, 8 + header_len + end
        )
        if entry.end > size:
            raise CheckpointError(f"{path} is truncated (tensor {name!r} ends at byte {entry.end}, file has {size})")
        entries[name] = entry
    return entries


class SafetensorsTensors(Mapping[str, np.ndarray]):
    """Lazy, memory-mapped view of the tensors in one or more safetensors files."""

    def __init__(self, files: list[Path], prefix: str = ""):
        """With `prefix`, each name is read as `prefix` + the name in the files."""
        self._entries: dict[str, _TensorEntry] = {}
        for file in files:
            self._entries.update({prefix + name: entry for name, entry in _read_header(file).items()})

    def __getitem__(self, name: str) -> np.ndarray:
        e = self._entries[name]
        count = e.end - e.start
        data = (
            np.memmap(e.file, dtype=np.uint8, mode="r", offset=e.start, shape=(count,))
            if count
            else np.empty(0, np.uint8)
        )
        return data.view(e.dtype).reshape(e.shape)

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def read_chat_template(directory: Path) -> str | None:
    template_file = directory / "chat_template.jinja"
    if template_file.exists():
        return template_file.read_text()
    tokenizer_config = directory / "tokenizer_config.json"
    if tokenizer_config.exists():
        template = json.loads(tokenizer_config.read_text()).get("chat_template")
        return template if isinstance(template, str) else None
    return None


def read_image_processor(directory: Path) -> dict[str, Any] | None:
    """A vision-language checkpoint's preprocessor_config.json, or None where it has none."""
    config_file = directory / "preprocessor_config.json"
    if not config_file.is_file():
        return None
    try:
        return dict(json.loads(config_file.read_text()))
    except (json.JSONDecodeError, TypeError, ValueError) as error:
        raise CheckpointError(f"{config_file} is not a JSON object ({error})") from None


def read_safetensors_dir(directory: Path) -> RawCheckpoint:
    hf_config = read_hf_config(directory)
    files = [f for f in checkpoint_files(directory) if f.suffix == ".safetensors"]
    has_tokenizer = (directory / "tokenizer.json").exists() or (directory / "tokenizer_config.json").exists()
    tensors = SafetensorsTensors(files)
    if "embed_tokens.weight" in tensors and "model.embed_tokens.weight" not in tensors:
        # Saved as the base model (Qwen3-Embedding, gte-Qwen): the decoder without "model." or a head.
        tensors = SafetensorsTensors(files, prefix="model.")
    return RawCheckpoint(
        hf_config=hf_config,
        tensors=tensors,
        source=directory,
        tokenizer_dir=directory if has_tokenizer else None,
        chat_template=read_chat_template(directory),
        gguf_metadata=None,
    )
