"""Uploaded audio → mono float32 at 16 kHz (handlers/audio/decoding.py), on files PyAV encodes here:
every container the speech routes take, stereo mixed down, other rates resampled; an empty,
corrupt, silent-stream or over-long file is refused naming the problem."""

from __future__ import annotations

import io

import av
import numpy as np
import pytest

from engine.api import SPEECH_SAMPLE_RATE
from handlers.audio.decoding import AudioRefused, decode_audio
from tests.handlers.audio_files import FORMATS, encode, tone


def _dominant_hz(samples: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(samples))
    return float(np.fft.rfftfreq(samples.size, 1 / SPEECH_SAMPLE_RATE)[int(np.argmax(spectrum))])


@pytest.mark.parametrize("kind", sorted(FORMATS))
def test_every_format_decodes_to_16_khz_mono(kind: str) -> None:
    rate = 48000 if FORMATS[kind][1] == "libopus" else 44100  # opus encodes at 48 kHz only
    samples = decode_audio(encode(tone(2.0, rate, channels=2), rate, kind), max_seconds=60)
    assert samples.dtype == np.float32 and samples.ndim == 1
    assert abs(samples.size - 2 * SPEECH_SAMPLE_RATE) < 0.05 * SPEECH_SAMPLE_RATE  # lossy codecs pad a little
    assert abs(_dominant_hz(samples) - 440) < 2  # the tone survives the resampling
    assert 0.3 < float(np.abs(samples).max()) <= 1.0


def test_stereo_is_mixed_down_as_ffmpeg_mixes_it() -> None:
    """Both channels equal: FFmpeg's downmix (faster-whisper's, openai-whisper's) sums them at -3 dB each."""
    stereo = decode_audio(encode(tone(1.0, SPEECH_SAMPLE_RATE, channels=2), SPEECH_SAMPLE_RATE, "wav"), 60)
    mono = decode_audio(encode(tone(1.0, SPEECH_SAMPLE_RATE, channels=1), SPEECH_SAMPLE_RATE, "wav"), 60)
    np.testing.assert_allclose(stereo, mono * np.sqrt(2), atol=2e-4)


def test_16_khz_mono_pcm_comes_back_sample_for_sample() -> None:
    original = tone(0.5, SPEECH_SAMPLE_RATE)[0]
    decoded = decode_audio(encode(original[None], SPEECH_SAMPLE_RATE, "wav"), 60)
    np.testing.assert_allclose(decoded, np.round(original * 32767) / 32768, atol=1 / 32768)


def test_an_empty_file_is_refused() -> None:
    with pytest.raises(AudioRefused) as refused:
        decode_audio(b"", 60)
    assert refused.value.code == "empty_file" and "empty" in refused.value.message


def test_bytes_that_are_not_audio_are_refused_naming_the_formats() -> None:
    with pytest.raises(AudioRefused) as refused:
        decode_audio(b"this is a text file, not a recording\n" * 20, 60)
    assert refused.value.code == "invalid_audio" and "wav, mp3, flac" in refused.value.message


def test_a_file_without_an_audio_stream_is_refused() -> None:
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="matroska") as container:
        stream = container.add_stream("ffv1", rate=1)
        stream.width, stream.height, stream.pix_fmt = 16, 16, "yuv420p"
        frame = av.VideoFrame.from_ndarray(np.zeros((16, 16, 3), np.uint8), format="rgb24").reformat(format="yuv420p")
        for packet in (*stream.encode(frame), *stream.encode(None)):
            container.mux(packet)
    with pytest.raises(AudioRefused) as refused:
        decode_audio(buffer.getvalue(), 60)
    assert refused.value.code == "invalid_audio" and "no audio stream" in refused.value.message


def test_a_truncated_file_is_refused_or_decodes_what_it_holds() -> None:
    """A cut-off FLAC keeps its header: what was uploaded decodes; a cut inside the header does not."""
    data = encode(tone(2.0, SPEECH_SAMPLE_RATE), SPEECH_SAMPLE_RATE, "flac")
    assert 0 < decode_audio(data[: len(data) // 2], 60).size < 2 * SPEECH_SAMPLE_RATE
    with pytest.raises(AudioRefused):
        decode_audio(data[:20], 60)


def test_audio_over_the_length_limit_is_refused_with_its_length() -> None:
    data = encode(tone(3.0, SPEECH_SAMPLE_RATE), SPEECH_SAMPLE_RATE, "mp3")
    with pytest.raises(AudioRefused) as refused:
        decode_audio(data, max_seconds=2)
    assert refused.value.code == "audio_too_long"
    assert "3.0 s long" in refused.value.message and "--max-audio-seconds" in refused.value.message
    assert decode_audio(data, max_seconds=4).size > 0


def test_a_container_that_does_not_say_its_length_is_cut_off_while_decoding() -> None:
    """Raw ADTS AAC has no duration in its header: the count of decoded samples enforces the limit."""
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="adts") as container:
        stream = container.add_stream("aac", rate=SPEECH_SAMPLE_RATE, layout="mono")
        frame = av.AudioFrame.from_ndarray(tone(3.0, SPEECH_SAMPLE_RATE), format="fltp", layout="mono")
        frame.sample_rate = SPEECH_SAMPLE_RATE
        for packet in (*stream.encode(frame), *stream.encode(None)):
            container.mux(packet)
    with pytest.raises(AudioRefused) as refused:
        decode_audio(buffer.getvalue(), max_seconds=2)
    assert refused.value.code == "audio_too_long"
