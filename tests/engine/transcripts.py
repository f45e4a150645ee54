"""A transcription request's events, collected from the engine thread, for the transcribe tests."""

import threading

import numpy as np

from engine.api import Failed, SpeechSegment, Transcribed, TranscriptionEvent

# Seconds a transcription may take: a window of a random model draws up to 224 tokens, under the
# tests' unoptimized XLA.
TRANSCRIBE_WAIT_S = 300.0


class Transcript:
    def __init__(self) -> None:
        self.events: list[TranscriptionEvent] = []
        self.ended = threading.Event()

    def __call__(self, event: TranscriptionEvent) -> None:
        self.events.append(event)
        if isinstance(event, Transcribed | Failed):
            self.ended.set()

    def wait(self) -> Transcribed:
        assert self.ended.wait(TRANSCRIBE_WAIT_S), "the transcription did not end"
        last = self.events[-1]
        assert isinstance(last, Transcribed), last
        return last

    @property
    def segments(self) -> list[SpeechSegment]:
        return [e for e in self.events if isinstance(e, SpeechSegment)]


def noise(seconds: float, seed: int) -> np.ndarray:
    """Quiet noise: audio a random model transcribes into something."""
    return (np.random.default_rng(seed).normal(size=int(16000 * seconds)) * 0.05).astype(np.float32)


def assert_same(got: list[TranscriptionEvent], want: list[TranscriptionEvent]) -> None:
    """The same events: tokens and times equal, scores as close as float32 batches of different
    sizes compute them."""
    assert [type(e) for e in got] == [type(e) for e in want]
    for a, b in zip(got, want, strict=True):
        if isinstance(a, SpeechSegment) and isinstance(b, SpeechSegment):
            assert (a.index, a.seek, a.start, a.end, a.tokens, a.temperature) == (
                b.index,
                b.seek,
                b.start,
                b.end,
                b.tokens,
                b.temperature,
            )
            np.testing.assert_allclose(
                [a.avg_logprob, a.compression_ratio, a.no_speech_prob, *a.logprobs],
                [b.avg_logprob, b.compression_ratio, b.no_speech_prob, *b.logprobs],
                rtol=1e-4,
                atol=1e-6,
            )
        elif isinstance(a, Transcribed) and isinstance(b, Transcribed):
            assert (a.language, a.duration, a.output_tokens) == (b.language, b.duration, b.output_tokens)
            assert abs(a.language_probability - b.language_probability) < 1e-4
