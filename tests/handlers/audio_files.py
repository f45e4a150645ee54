"""Audio files for the speech tests, encoded in memory by PyAV itself (FFmpeg's own encoders)."""

from __future__ import annotations

import io

import av
import numpy as np

# (container, codec) of each format the speech routes take.
FORMATS = {
    "wav": ("wav", "pcm_s16le"),
    "flac": ("flac", "flac"),
    "mp3": ("mp3", "libmp3lame"),
    "ogg": ("ogg", "libopus"),
    "webm": ("webm", "libopus"),
    "m4a": ("mp4", "aac"),
}


def tone(seconds: float, rate: int, channels: int = 1, amplitude: float = 0.5) -> np.ndarray:
    """A 440 Hz sine, [channels, samples] float32, the same in every channel."""
    times = np.arange(int(seconds * rate)) / rate
    return np.repeat((amplitude * np.sin(2 * np.pi * 440 * times))[None].astype(np.float32), channels, axis=0)


def encode(samples: np.ndarray, rate: int, kind: str) -> bytes:
    """`samples` ([channels, samples] float32) as a file of `kind` (a key of FORMATS)."""
    container_format, codec = FORMATS[kind]
    layout = "stereo" if samples.shape[0] == 2 else "mono"
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format=container_format) as container:
        stream = container.add_stream(codec, rate=rate, layout=layout)
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(samples), format="fltp", layout=layout)
        frame.sample_rate = rate
        for packet in (*stream.encode(frame), *stream.encode(None)):
            container.mux(packet)
    return buffer.getvalue()
