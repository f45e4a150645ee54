"""Which reader a LoRA adapter's path needs: a directory is a PEFT adapter
(engine/lora/peft_adapter.py), a `.gguf` file a llama.cpp LoRA GGUF (engine/lora/gguf_adapter.py).
Both give the same `LoraAdapter`."""

from pathlib import Path

from engine.errors import CheckpointError
from engine.lora.gguf_adapter import read_gguf_adapter
from engine.lora.peft_adapter import ADAPTER_WEIGHTS, LoraAdapter, read_peft_adapter
from engine.model.model_config import ModelConfig

NEEDED = "a PEFT adapter directory or a llama.cpp LoRA GGUF file is needed"


def is_gguf_adapter(path: Path) -> bool:
    return path.suffix.lower() == ".gguf" and path.is_file()


def adapter_weights_file(path: Path) -> Path:
    """The file holding the weights of the adapter at `path` (a GGUF file is its own), which may
    not exist; CheckpointError where `path` is neither kind of adapter."""
    if path.is_dir():
        return path / ADAPTER_WEIGHTS
    if is_gguf_adapter(path):
        return path
    what = "not a .gguf file" if path.exists() else "no such file or directory"
    raise CheckpointError(f"{path}: {what} ({NEEDED})")


def read_lora_adapter(path: Path, config: ModelConfig) -> LoraAdapter:
    """The adapter at `path`, checked against `config`; CheckpointError with the reason."""
    adapter_weights_file(path)
    return read_gguf_adapter(path, config) if is_gguf_adapter(path) else read_peft_adapter(path, config)
