"""A transcription request checked on its face, on the caller's thread (RequestRefused): audio
the model can hear, a language it knows, a task it can do, text tokens for the prompt and a
temperature ladder it can decode at."""

import math

import numpy as np

from engine.api import SPEECH_SAMPLE_RATE, RequestRefused, TranscriptionRequest
from engine.model.families.whisper import WhisperVocabulary
from engine.tasks.transcribe.segmenting import FRAMES_PER_SECOND

MIN_SAMPLES = SPEECH_SAMPLE_RATE // FRAMES_PER_SECOND  # one mel frame: 10 ms


def check_transcription(request: TranscriptionRequest, vocabulary: WhisperVocabulary) -> None:
    audio = request.audio
    if not isinstance(audio, np.ndarray) or audio.ndim != 1 or audio.dtype != np.float32:
        raise RequestRefused("invalid_input", "the audio must be mono float32 samples", "audio")
    if len(audio) < MIN_SAMPLES:
        raise RequestRefused("invalid_input", "the audio is shorter than 10 ms", "audio")
    if request.language is not None:
        known = vocabulary.languages if vocabulary.multilingual else {"en": vocabulary.sot}
        if request.language not in known:
            raise RequestRefused(
                "invalid_language", f"this speech model does not know the language {request.language!r}", "language"
            )
    if request.task == "translate" and not vocabulary.multilingual:
        raise RequestRefused("model_not_supported", "this speech model is English-only: it does not translate", "task")
    if any(not 0 <= token < vocabulary.eot for token in request.prompt_ids):
        raise RequestRefused("invalid_prompt", f"the prompt holds a token id outside 0..{vocabulary.eot - 1}", "prompt")
    temperatures = request.temperatures
    if not temperatures or any(not (math.isfinite(t) and t >= 0) for t in temperatures):
        raise RequestRefused("invalid_input", "the temperatures must be one or more finite numbers >= 0", "temperature")
