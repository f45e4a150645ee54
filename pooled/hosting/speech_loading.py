"""The speech model served beside the model (`--speech-model`): its runner, which the engine's
one queue runs as a task (on the CPU, whatever device the chat model is on), and its face for the
audio routes (its tokenizer.json read with `tokenizers`, the languages it knows).

One that does not load is a failed part, as an encoder beside the model is
(pooled/hosting/loading.py): the audio routes answer 503 naming why, `/v1/models` says so in its
`speech` object, `/health` lists it, and the chat model serves.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.errors import CheckpointError
from engine.front import SpeechConfig, TaskEngine, TranscribeTask, load_whisper
from handlers.context import FailedPart, SpeechService
from pooled.configuration.settings import Settings
from pooled.hosting.model_host import Loaded, first_line
from pooled.models_folder.model_ids import beside_model_path, model_id_for
from text import Tokenizer

log = logging.getLogger(__name__)

# What an English-only Whisper model (no language tokens) transcribes.
ENGLISH = frozenset({"en"})


@dataclass(frozen=True)
class BesideSpeech:
    """The speech model's runner and face, or the part that failed (each None or empty without one)."""

    runner: TranscribeTask | None = None
    face: SpeechService | None = None
    failed: tuple[FailedPart, ...] = ()


def load_speech(settings: Settings, report: Callable[[str, int, int], None]) -> BesideSpeech:
    """The `--speech-model` folder loaded, with its runner; a failed part when it does not load."""
    if settings.speech_model is None:
        return BesideSpeech()
    path = beside_model_path(settings.speech_model, settings.models_dir)
    report(f"loading --speech-model {settings.speech_model}", 0, 1)
    try:
        return _served(path, settings)
    except Exception as error:  # whatever went wrong, it is this part's failure, not the model's
        reason = first_line(error) if isinstance(error, CheckpointError) else f"{error!r}".splitlines()[0]
        log.error("--speech-model %s did not load, the audio routes answer 503: %s", settings.speech_model, reason)
        return BesideSpeech(failed=(FailedPart("speech", "speech_model", str(path), reason),))


def load_speech_serving(path: Path, settings: Settings, report: Callable[[str, int, int], None]) -> Loaded:
    """A Whisper model as the model itself: its own engine thread, the audio routes only
    (generation is a 400), as an encoder given as `--model` serves its routes alone."""
    if settings.speech_model is not None:
        raise CheckpointError(f"{path} is a speech model: --speech-model goes beside a chat model")
    served = _served(path, settings)
    assert served.runner is not None and served.face is not None
    face = served.face
    engine = TaskEngine([served.runner], face.max_text_tokens, settings.max_queue, report)
    return Loaded(
        face.max_text_tokens,
        face.max_text_tokens,
        None,
        "none",
        face.tokenizer,
        None,
        engine,
        kind="speech",
        speech=face,
    )


def _served(path: Path, settings: Settings) -> BesideSpeech:
    model = load_whisper(path)
    runner = TranscribeTask(model, SpeechConfig(lanes=settings.speech_lanes))
    vocabulary = model.vocabulary
    face = SpeechService(
        name=model_id_for(path),
        tokenizer=Tokenizer.from_directory(path),
        languages=frozenset(vocabulary.languages) or ENGLISH,
        translates=vocabulary.multilingual,
        max_text_tokens=model.config.n_text_ctx,
    )
    return BesideSpeech(runner, face)
