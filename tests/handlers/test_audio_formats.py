"""Subtitle timestamps (handlers/audio/formats.py): SRT's `HH:MM:SS,mmm` and VTT's `HH:MM:SS.mmm`,
rounded to the millisecond, past an hour and never negative."""

from __future__ import annotations

import pytest

from handlers.audio.formats import timestamp


@pytest.mark.parametrize(
    ("seconds", "srt", "vtt"),
    [
        (0.0, "00:00:00,000", "00:00:00.000"),
        (4.2, "00:00:04,200", "00:00:04.200"),
        (59.9996, "00:01:00,000", "00:01:00.000"),  # rounds up into the next minute
        (3661.25, "01:01:01,250", "01:01:01.250"),
        (36000.0, "10:00:00,000", "10:00:00.000"),
        (-0.01, "00:00:00,000", "00:00:00.000"),
    ],
)
def test_timestamps(seconds: float, srt: str, vtt: str) -> None:
    assert timestamp(seconds, ",") == srt and timestamp(seconds, ".") == vtt
