"""How llama.cpp's split form of Qwen2-VL is recognised from file names and the language GGUF's
architecture alone: host facts with no tensor reading, for the models folder and the path checks
before a load (engine.checkpoints exposes them; gguf_mmproj.py reads the files)."""

from pathlib import Path

# The `general.architecture` of the language GGUF that a projector goes with (Qwen2-VL and Qwen2.5-VL).
LANGUAGE_ARCHITECTURE = "qwen2vl"


def is_projector_file(path: Path) -> bool:
    """Whether `path` is named as llama.cpp's projector files are (mmproj-<model>-<type>.gguf)."""
    return path.name.lower().startswith("mmproj") and path.suffix == ".gguf"
