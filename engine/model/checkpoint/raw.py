"""A checkpoint as read from disk, before any family-specific conversion."""

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class RawCheckpoint:
    """What every checkpoint format (safetensors directory, GGUF file) is read into.

    `tensors` uses Hugging Face parameter names and layouts, so model families only know one
    naming scheme whatever the file format was.
    """

    hf_config: dict
    tensors: Mapping[str, np.ndarray]  # HF tensor names
    source: Path
    tokenizer_dir: Path | None
    chat_template: str | None
    gguf_metadata: dict | None
    # The GGML block type every projection of a GGUF file is stored in, when they share one
    # ("Q4_1"): the quantization the file's own numbers are in. None for safetensors.
    projection_blocks: str | None = None
    # The GGML types of a GGUF file's matrices (every tensor of two dimensions, the embedding and
    # output head included), sorted: whether `--quantization gguf` can serve them. () for safetensors.
    matrix_formats: tuple[str, ...] = ()
    # A vision-language checkpoint's image preprocessing, as preprocessor_config.json gives it
    # (a GGUF pair: its mmproj file's); None: the directory's own file, read at each load, or none.
    image_processor: dict | None = None
