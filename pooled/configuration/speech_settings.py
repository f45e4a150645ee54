"""The speech model's settings: which model serves the audio routes, the uploads they take and how
its runner decodes. `Settings` (pooled/configuration/settings.py) holds them with the others;
every field is documented, parsed and derived like any other setting."""

from __future__ import annotations

from dataclasses import dataclass

from pooled.configuration.engine_settings import EngineSettings
from pooled.configuration.setting_types import MIB, integer, number, setting, text


@dataclass(frozen=True)
class SpeechSettings(EngineSettings):
    speech_model: str | None = setting(
        None,
        text(nullable=True),
        "A Whisper model folder (Hugging Face's safetensors layout, or CTranslate2's model.bin as "
        "faster-whisper ships it, with its tokenizer.json), or the name of one in --models-dir, served "
        "beside the chat model on "
        "/v1/audio/transcriptions and /v1/audio/translations, on the CPU through the engine's one queue. "
        "One that does not load takes down only the audio routes (503 naming why).",
        change="reload",
    )
    max_audio_bytes: int = setting(
        25 * MIB,
        integer(minimum=1),
        "Bytes an uploaded audio file may have (OpenAI's limit); a larger one is a 413, read no further. "
        "While a speech model is served, the body limit (--max-body) is at least this plus 1 MiB.",
        change="live",
    )
    max_audio_seconds: float = setting(
        3600.0,
        number(above=0),
        "Seconds an uploaded audio file may last; a longer one is a 400. Its decoded samples take "
        "64 KiB a second of memory until it is transcribed.",
        change="live",
    )
    speech_lanes: int = setting(
        8,
        integer(minimum=1),
        "30-second windows the speech model decodes at once, across requests (its decoder's lanes).",
        change="reload",
    )
