"""The model and adapter paths a start names, checked before the listener opens: `--model` (once
resolved), `--mmproj`, `--embedding-model`, `--rerank-model`, `--speech-model` and each
`--lora NAME=PATH`. A wrong one is refused at once, naming the flag and what is wrong, for
`pooled serve` to exit with status 2; found by the load thread after the listener opened, it left
the whole server answering 503.

Only what the names and first bytes of the files tell is checked here; a checkpoint that passes
and still does not load is the load's to report.
"""

from __future__ import annotations

from pathlib import Path

from engine.checkpoints import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    GGUF_MAGIC,
    LANGUAGE_ARCHITECTURE,
    checkpoint_files,
    gguf_architecture,
    is_projector_file,
)
from engine.errors import CheckpointError
from pooled.configuration.settings import Settings
from pooled.models_folder.model_ids import beside_model_path

MODEL_KINDS = "a GGUF file or a safetensors model folder"
SPEECH_KINDS = (
    "a Whisper model folder (config.json and tokenizer.json, with model.safetensors or CTranslate2's model.bin)"
)
ADAPTER_KINDS = "a PEFT adapter folder or a llama.cpp LoRA GGUF file"


def model_path_problems(model: Path, settings: Settings) -> list[str]:
    """What is wrong with the paths the settings name (`model` is --model resolved); empty when
    nothing is."""
    named = [("--model", model)]
    named += [
        (flag, Path(value).expanduser())
        for flag, value in (("--embedding-model", settings.embedding_model), ("--rerank-model", settings.rerank_model))
        if value is not None
    ]
    problems = [f"{flag} {path}: {problem}" for flag, path in named if (problem := checkpoint_problem(path))]
    if problems and problems[0].startswith("--model") and speech_problem(model) is None:
        problems.pop(0)  # a speech model folder (CTranslate2's has no safetensors) served as the model
    speech = settings.speech_model
    if speech is not None and (problem := speech_problem(beside_model_path(speech, settings.models_dir))):
        problems.append(f"--speech-model {settings.speech_model}: {problem}")
    if settings.mmproj is not None and (problem := _projector_problem(model, Path(settings.mmproj).expanduser())):
        problems.append(f"--mmproj {settings.mmproj}: {problem}")
    for name, value in settings.lora:
        if (problem := adapter_problem(Path(value).expanduser())) is not None:
            problems.append(f"--lora {name}={value}: {problem}")
    if settings.lora and settings.max_loras == 0:
        problems.append("--lora needs adapter slots: set --max-loras (0, the default, serves no adapter)")
    return problems


def projector_for(model: Path, settings: Settings) -> Path | None:
    """The mmproj GGUF served with `model`: none unless it is a Qwen2-VL family's language GGUF
    (llama.cpp's "qwen2vl"); then --mmproj, else the one `mmproj*.gguf` file in its folder."""
    if model.suffix != ".gguf" or gguf_architecture(model) != LANGUAGE_ARCHITECTURE:
        return None
    if settings.mmproj is not None:
        return Path(settings.mmproj).expanduser()
    beside = [path for path in model.parent.glob("*.gguf") if is_projector_file(path)]
    return beside[0] if len(beside) == 1 else None


def _projector_problem(model: Path, projector: Path) -> str | None:
    if (problem := _gguf_problem(projector, "llama.cpp's mmproj GGUF")) is not None:
        return problem
    if model.suffix != ".gguf" or (arch := gguf_architecture(model)) != LANGUAGE_ARCHITECTURE:
        kind = "a safetensors folder (its vision tower is in it)" if model.is_dir() else f"of architecture {arch!r}"
        return f"a projector goes with a {LANGUAGE_ARCHITECTURE} GGUF (Qwen2-VL, Qwen2.5-VL); --model {model} is {kind}"
    return None


def checkpoint_problem(path: Path) -> str | None:
    """Why `path` is not a checkpoint the loaders read, or None."""
    if path.is_dir():
        try:
            checkpoint_files(path)
        except CheckpointError as error:
            return f"not a model folder ({error}); a model is {MODEL_KINDS}"
        return None
    if path.exists() and path.suffix != ".gguf":  # the loaders tell a GGUF by its name
        return f"a file whose name does not end in .gguf; a model is {MODEL_KINDS}"
    return _gguf_problem(path, MODEL_KINDS)


def speech_problem(path: Path) -> str | None:
    """Why `path` is not a speech model folder, or None."""
    if not path.is_dir():
        return f"{'not a folder' if path.exists() else 'no such folder'}; give {SPEECH_KINDS}"
    weights = (path / "model.bin").is_file() or any(path.glob("*.safetensors"))
    missing = [name for name in ("config.json", "tokenizer.json") if not (path / name).is_file()]
    missing += [] if weights else ["model.safetensors or model.bin"]
    return f"a folder without {', '.join(missing)}; give {SPEECH_KINDS}" if missing else None


def adapter_problem(path: Path) -> str | None:
    """Why `path` is not an adapter the LoRA readers take, or None."""
    if path.is_dir():
        missing = [name for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS) if not (path / name).is_file()]
        return f"a folder without {' or '.join(missing)}; an adapter is {ADAPTER_KINDS}" if missing else None
    if path.exists() and path.suffix.lower() != ".gguf":
        return f"a file whose name does not end in .gguf; an adapter is {ADAPTER_KINDS}"
    return _gguf_problem(path, ADAPTER_KINDS)


def _gguf_problem(path: Path, kinds: str) -> str | None:
    if not path.exists():
        return f"no such file or folder; give {kinds}"
    try:
        with path.open("rb") as file:
            magic = file.read(len(GGUF_MAGIC))
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    return None if magic == GGUF_MAGIC else f"not a GGUF file (it starts {magic!r}, not {GGUF_MAGIC!r})"
