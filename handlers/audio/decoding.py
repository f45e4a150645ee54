"""An uploaded audio file's bytes → mono float32 samples at the speech model's rate, in memory.

PyAV (FFmpeg's demuxers and decoders) reads whatever container and codec the file is (wav, mp3,
flac, ogg/opus, webm, m4a/mp4 …) from the bytes themselves, not its name; FFmpeg's own resampler
mixes the channels down and resamples to SPEECH_SAMPLE_RATE, as faster-whisper's `decode_audio`
does. Nothing is written to disk. A file that is empty, not audio, damaged before any sound, or
longer than the server takes, is an `AudioRefused` naming the problem.
"""

from __future__ import annotations

import io

import av
import numpy as np

from engine.api import SPEECH_SAMPLE_RATE

# PyAV's time unit for a container's duration (FFmpeg's AV_TIME_BASE: microseconds).
_TIME_BASE = 1_000_000


class AudioRefused(Exception):
    """The upload is not audio the server takes; `code` names the rule, `message` says what is wrong."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def decode_audio(data: bytes, max_seconds: float) -> np.ndarray:
    """`data`'s first audio stream as mono float32 samples in [-1, 1] at SPEECH_SAMPLE_RATE."""
    if not data:
        raise AudioRefused("empty_file", "The audio file is empty (0 bytes).")
    try:
        container = av.open(io.BytesIO(data), mode="r")
    except av.error.FFmpegError as error:
        raise AudioRefused(
            "invalid_audio",
            f"The file is not audio the server can read ({_reason(error)}); send wav, mp3, flac, ogg/opus, "
            "webm or m4a/mp4.",
        ) from None
    with container:
        if not container.streams.audio:
            raise AudioRefused("invalid_audio", "The file holds no audio stream.")
        if container.duration is not None and container.duration / _TIME_BASE > max_seconds:
            raise _too_long(container.duration / _TIME_BASE, max_seconds)
        return _samples(container, max_seconds)


def _samples(container: av.container.InputContainer, max_seconds: float) -> np.ndarray:
    """The decoded samples; a file damaged part way keeps what decoded before the damage (as
    faster-whisper's `decode_audio` does: a recording cut off mid-upload still transcribes)."""
    resampler = av.AudioResampler(format="flt", layout="mono", rate=SPEECH_SAMPLE_RATE)
    limit = int(max_seconds * SPEECH_SAMPLE_RATE)
    chunks: list[np.ndarray] = []
    count = 0
    try:
        for frame in container.decode(container.streams.audio[0]):
            for chunk in resampler.resample(frame):
                chunks.append(chunk.to_ndarray().reshape(-1))
                count += chunks[-1].size
            if count > limit:  # a container that did not say its duration, or said too little
                raise _too_long(count / SPEECH_SAMPLE_RATE, max_seconds)
    except av.error.FFmpegError as error:
        if not chunks:
            raise AudioRefused("invalid_audio", f"The audio file is damaged: {_reason(error)}.") from None
    chunks.extend(chunk.to_ndarray().reshape(-1) for chunk in resampler.resample(None))
    samples = np.concatenate(chunks).astype(np.float32, copy=False) if chunks else np.zeros(0, np.float32)
    if samples.size == 0:
        raise AudioRefused("invalid_audio", "The file's audio stream holds no samples.")
    if samples.size > limit:
        raise _too_long(samples.size / SPEECH_SAMPLE_RATE, max_seconds)
    return samples


def _too_long(seconds: float, max_seconds: float) -> AudioRefused:
    return AudioRefused(
        "audio_too_long",
        f"The audio is {seconds:.1f} s long; the server takes at most {max_seconds:g} s (--max-audio-seconds).",
    )


def _reason(error: av.error.FFmpegError) -> str:
    return error.strerror or type(error).__name__
