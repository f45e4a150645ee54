"""Whisper's log-mel front end in numpy, as faster-whisper's FeatureExtractor computes it.

A 400-sample Hann window every 160 samples (10 ms at 16 kHz) over the audio with 160 zeros after
it, centred with reflection; the power spectrum through Slaney-style mel filters; log10 clamped at
1e-10, floored 8 below the clip's maximum, then (x + 4) / 4. The frames are those of the audio's
own length (len // 160): the zeros past the end add the one frame faster-whisper never reads, and
a window that runs past the audio is padded with zeros of this scale by whoever cuts windows.
openai-whisper pads 30 s of zeros instead; every frame here is the same, the padding's aside.
"""

from functools import cache

import numpy as np

SAMPLE_RATE = 16000
N_FFT = 400
HOP_LENGTH = 160


@cache
def mel_filters(n_mels: int) -> np.ndarray:
    """[n_mels, N_FFT // 2 + 1]: librosa's Slaney mel filterbank (htk=False, norm="slaney"), 0–8 kHz."""
    fft_freqs = np.fft.rfftfreq(n=N_FFT, d=1.0 / SAMPLE_RATE)
    mels = np.linspace(0.0, 45.245640471924965, n_mels + 2)  # 0 Hz to 8 kHz on Slaney's scale
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, log_step = min_log_hz / f_sp, np.log(6.4) / 27.0
    freqs = f_sp * mels
    log_region = mels >= min_log_mel
    freqs[log_region] = min_log_hz * np.exp(log_step * (mels[log_region] - min_log_mel))
    fdiff = np.diff(freqs)
    ramps = freqs[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    weights *= (2.0 / (freqs[2 : n_mels + 2] - freqs[:n_mels]))[:, None]
    return weights.astype(np.float32)


def log_mel(samples: np.ndarray, n_mels: int) -> np.ndarray:
    """float32 mono 16 kHz samples → log-mel frames [n_mels, len(samples) // 160], float32."""
    audio = np.pad(np.asarray(samples, dtype=np.float32), (0, HOP_LENGTH))
    audio = np.pad(audio, N_FFT // 2, mode="reflect")
    frames = 1 + (len(audio) - N_FFT) // HOP_LENGTH
    windows = np.lib.stride_tricks.as_strided(
        audio, (frames, N_FFT), (HOP_LENGTH * audio.strides[0], audio.strides[0]), writeable=False
    )
    window = np.hanning(N_FFT + 1)[:-1].astype(np.float32)
    spectrum = np.fft.rfft(windows * window, n=N_FFT, axis=-1).astype(np.complex64)
    power = np.abs(spectrum[:-1].T) ** 2
    log_spec = np.log10(np.maximum(mel_filters(n_mels) @ power, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0)[:, : len(samples) // HOP_LENGTH].astype(np.float32)
