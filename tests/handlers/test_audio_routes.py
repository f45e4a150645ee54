"""The audio routes through the app (handlers/audio/), the engine a scripted double answering with
segments of a real tokenizer's tokens: every response format, the stream, the form read leniently
as the OpenAI SDK sends it, the request the engine gets, the errors, and /v1/models' speech entry."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from fastapi.testclient import TestClient

from engine.api import Failed, SpeechSegment, SpeechWord, Transcribed, TranscriptionRequest
from handlers.context import FailedPart, SpeechService
from pooled.configuration.settings import Settings
from pooled.web.app import build_app, server_context
from tests.conftest import BASE_URL, StubModel
from tests.fake_engine import FakeEngine
from text import Tokenizer

JFK = Path(__file__).resolve().parents[1] / "data" / "jfk.wav"
PIECES = ((0.0, 4.2, " And so my fellow Americans,"), (4.2, 10.98, " ask not what your country can do for you."))
TEXT = "And so my fellow Americans, ask not what your country can do for you."
TRANSCRIPTIONS, TRANSLATIONS = "/v1/audio/transcriptions", "/v1/audio/translations"


def script(tokenizer: Tokenizer) -> Any:
    def answer(request: TranscriptionRequest) -> list[Any]:
        events: list[Any] = []
        for index, (start, end, text) in enumerate(PIECES):
            tokens = tuple(tokenizer.encode(text))
            words = tuple(
                SpeechWord(start + i * 0.5, start + i * 0.5 + 0.4, tuple(tokenizer.encode(" " + word)), 0.9)
                for i, word in enumerate(text.split())
            )
            events.append(
                SpeechSegment(
                    index,
                    0.0,
                    start,
                    end,
                    tokens,
                    request.temperatures[0],
                    -0.25,
                    1.3,
                    0.01,
                    words if request.word_timestamps else (),
                    tuple(-0.1 for _ in tokens) if request.logprobs else (),
                )  # fmt: skip
            )
        output = sum(len(event.tokens) for event in events)
        return [*events, Transcribed(request.language or "en", 0.98, 11.0, output)]

    return answer


@pytest.fixture
def engine(tokenizer: Tokenizer) -> FakeEngine:
    return FakeEngine(lambda request, row: [], tokenizer.vocab_size, speech=script(tokenizer))


@pytest.fixture
def speech(tokenizer: Tokenizer) -> SpeechService:
    return SpeechService("pooled/whisper-test", tokenizer, frozenset({"en", "de"}), True, 448)


@pytest.fixture
def settings() -> Settings:
    return Settings()


@pytest.fixture
def model(engine: FakeEngine, tokenizer: Tokenizer, speech: SpeechService) -> StubModel:
    return StubModel(engine=engine, tokenizer=tokenizer, speech=speech)


@pytest.fixture
def client(settings: Settings, model: StubModel) -> Iterator[TestClient]:
    app = build_app(settings, server_context(settings, model))
    with TestClient(app, base_url=BASE_URL, raise_server_exceptions=False) as test_client:
        yield test_client


def post(client: TestClient, fields: dict[str, Any], path: str = TRANSCRIPTIONS) -> Any:
    return client.post(path, data=fields, files={"file": ("jfk.wav", JFK.read_bytes(), "audio/wav")})


def sdk(client: TestClient) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{BASE_URL}/v1", api_key="k", http_client=client, max_retries=0)


def test_json_is_the_text_with_token_usage(client: TestClient, engine: FakeEngine, tokenizer: Tokenizer) -> None:
    response = post(client, {"model": "whisper-1"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["text"] == TEXT and "logprobs" not in body
    output = sum(len(tokenizer.encode(text)) for _, _, text in PIECES)
    assert body["usage"] == {
        "type": "tokens",
        "input_tokens": 550,
        "input_token_details": {"text_tokens": 0, "audio_tokens": 550},  # 11 s at 50 a second
        "output_tokens": output,
        "total_tokens": 550 + output,
    }
    (request,) = engine.transcriptions
    assert request.audio.size == 176000 and request.audio.dtype.name == "float32"  # jfk.wav, 11 s at 16 kHz
    assert request.task == "transcribe" and request.language is None and request.prompt_ids == ()
    assert request.temperatures == (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # no temperature: Whisper's fallback
    assert not request.word_timestamps and not request.logprobs


def test_the_form_maps_onto_the_engine_request(client: TestClient, engine: FakeEngine, tokenizer: Tokenizer) -> None:
    fields = {"language": "DE", "prompt": "  Kennedy, Americans. ", "temperature": "0.3", "unknown": "ignored"}
    assert post(client, fields).status_code == 200
    (request,) = engine.transcriptions
    assert request.language == "de" and request.temperatures == (0.3,)
    assert request.prompt_ids == tuple(tokenizer.encode(" Kennedy, Americans."))  # after a space, as Whisper
    # 0 is OpenAI's "increase the temperature until certain thresholds are hit": the fallback ladder.
    assert post(client, {"temperature": "0"}).status_code == 200
    assert engine.transcriptions[-1].temperatures == (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


def test_text_srt_and_vtt_are_plain_text(client: TestClient) -> None:
    text = post(client, {"response_format": "text"})
    assert text.headers["content-type"].startswith("text/plain") and text.text == TEXT + "\n"
    assert post(client, {"response_format": "srt"}).text == (
        "1\n00:00:00,000 --> 00:00:04,200\nAnd so my fellow Americans,\n\n"
        "2\n00:00:04,200 --> 00:00:10,980\nask not what your country can do for you.\n"
    )
    assert post(client, {"response_format": "vtt"}).text == (
        "WEBVTT\n\n00:00:00.000 --> 00:00:04.200\nAnd so my fellow Americans,\n\n"
        "00:00:04.200 --> 00:00:10.980\nask not what your country can do for you.\n"
    )


def test_verbose_json_has_segments_and_on_request_words(client: TestClient, engine: FakeEngine) -> None:
    fields = {"response_format": "verbose_json", "timestamp_granularities[]": ["word", "segment"]}
    body = post(client, fields).json()
    assert (body["task"], body["language"], body["duration"], body["text"]) == ("transcribe", "en", 11.0, TEXT)
    assert body["usage"] == {"type": "duration", "seconds": 11.0}
    first = body["segments"][0]
    assert first["id"] == 0 and first["seek"] == 0 and (first["start"], first["end"]) == (0.0, 4.2)
    assert first["text"] == PIECES[0][2] and first["temperature"] == 0.0
    assert (first["avg_logprob"], first["compression_ratio"], first["no_speech_prob"]) == (-0.25, 1.3, 0.01)
    assert [word["word"] for word in body["words"]] == TEXT.split()
    assert body["words"][1] == {"word": "so", "start": 0.5, "end": 0.9}
    assert engine.transcriptions[0].word_timestamps
    assert "words" not in post(client, {"response_format": "verbose_json"}).json()


def test_logprobs_come_with_json_when_included(client: TestClient, engine: FakeEngine, tokenizer: Tokenizer) -> None:
    body = post(client, {"include[]": ["logprobs"]}).json()
    tokens = [tokenizer.decode([token]) for _, _, text in PIECES for token in tokenizer.encode(text)]
    assert [entry["token"] for entry in body["logprobs"]] == tokens
    assert body["logprobs"][0] == {"token": tokens[0], "logprob": -0.1, "bytes": list(tokens[0].encode())}
    assert engine.transcriptions[0].logprobs


def events(response: Any) -> list[dict[str, Any]]:
    return [json.loads(line[len("data: ") :]) for line in response.text.splitlines() if line.startswith("data: ")]


def test_a_stream_sends_a_delta_a_segment_then_done_with_usage(client: TestClient) -> None:
    response = post(client, {"stream": "true", "include[]": "logprobs"})
    assert response.headers["content-type"].startswith("text/event-stream")
    streamed = events(response)
    assert [event["type"] for event in streamed] == ["transcript.text.delta"] * 2 + ["transcript.text.done"]
    assert "".join(event["delta"] for event in streamed[:2]) == streamed[-1]["text"] == TEXT
    assert streamed[-1]["usage"]["type"] == "tokens" and streamed[-1]["usage"]["input_tokens"] == 550
    assert len(streamed[-1]["logprobs"]) == sum(len(event["logprobs"]) for event in streamed[:2])


def test_a_failure_after_the_stream_started_is_an_error_event(client: TestClient, engine: FakeEngine) -> None:
    engine.speech = lambda request: [Failed("fault", "the device fell over")]
    streamed = events(post(client, {"stream": "true"}))
    assert streamed == [
        {"error": {"message": "the device fell over", "type": "server_error", "param": None, "code": "fault"}}
    ]


def test_the_openai_sdk_reads_every_format(client: TestClient) -> None:
    audio = sdk(client).audio
    with JFK.open("rb") as file:
        assert audio.transcriptions.create(model="whisper-1", file=file).text == TEXT
    for response_format in ("text", "srt", "vtt"):
        with JFK.open("rb") as file:
            answer = audio.transcriptions.create(model="whisper-1", file=file, response_format=response_format)
        assert isinstance(answer, str) and "fellow Americans" in answer
    with JFK.open("rb") as file:
        verbose = audio.transcriptions.create(
            model="whisper-1", file=file, response_format="verbose_json", timestamp_granularities=["word", "segment"]
        )
    assert verbose.text == TEXT and verbose.segments and verbose.words and verbose.words[0].word == "And"
    with JFK.open("rb") as file:
        logged = audio.transcriptions.create(model="whisper-1", file=file, include=["logprobs"])
    assert logged.logprobs and logged.logprobs[0].logprob == -0.1
    with JFK.open("rb") as file:
        stream = audio.transcriptions.create(model="whisper-1", file=file, stream=True)
        kinds = [event.type for event in stream]
    assert kinds == ["transcript.text.delta", "transcript.text.delta", "transcript.text.done"]
    with JFK.open("rb") as file:
        assert audio.translations.create(model="whisper-1", file=file).text == TEXT
    with JFK.open("rb") as file:
        translated = audio.translations.create(model="whisper-1", file=file, response_format="verbose_json")
    assert translated.language == "en" and translated.segments


def test_a_translation_asks_for_the_translate_task(client: TestClient, engine: FakeEngine) -> None:
    assert post(client, {"prompt": "Hello.", "response_format": "srt"}, TRANSLATIONS).text.startswith("1\n00:00:00,000")
    (request,) = engine.transcriptions
    assert request.task == "translate" and request.language is None


def test_an_english_only_model_does_not_translate(client: TestClient, model: StubModel, speech: SpeechService) -> None:
    model.speech = SpeechService(speech.name, speech.tokenizer, frozenset({"en"}), False, 448)
    refused = post(client, {}, TRANSLATIONS)
    assert refused.status_code == 400 and "English-only" in refused.json()["error"]["message"]
    unknown = post(client, {"language": "fr"})
    assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "language"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"response_format": "mp3"}, "response_format"),
        ({"temperature": "warm"}, "temperature"),
        ({"temperature": "1.5"}, "temperature"),
        ({"stream": "maybe"}, "stream"),
        ({"timestamp_granularities[]": "sentence"}, "timestamp_granularities.0"),
    ],
)
def test_a_field_the_spec_does_not_allow_is_a_400_naming_it(
    client: TestClient, fields: dict[str, str], param: str
) -> None:
    response = post(client, fields)
    assert response.status_code == 400 and response.json()["error"]["param"] == param


def test_the_upload_itself_is_checked(client: TestClient) -> None:
    missing = client.post(TRANSCRIPTIONS, data={"model": "whisper-1"}, files={"other": ("x", b"1")})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "file"
    empty = client.post(TRANSCRIPTIONS, files={"file": ("a.wav", b"", "audio/wav")})
    assert empty.status_code == 400 and empty.json()["error"]["code"] == "empty_file"
    corrupt = client.post(TRANSCRIPTIONS, files={"file": ("a.mp3", b"\x00garbage" * 100, "audio/mpeg")})
    assert corrupt.status_code == 400 and corrupt.json()["error"]["code"] == "invalid_audio"
    not_a_form = client.post(TRANSCRIPTIONS, json={"file": "jfk.wav"})
    assert not_a_form.status_code == 400 and "multipart/form-data" in not_a_form.json()["error"]["message"]


@pytest.mark.parametrize("settings", [Settings(max_audio_bytes=1000, max_audio_seconds=5)])
def test_the_audio_limits(client: TestClient) -> None:
    too_big = post(client, {})
    assert too_big.status_code == 413 and too_big.json()["error"]["code"] == "file_too_large"
    assert "--max-audio-bytes" in too_big.json()["error"]["message"]


@pytest.mark.parametrize("settings", [Settings(max_audio_seconds=5)])
def test_audio_over_the_length_limit_is_a_400(client: TestClient) -> None:
    too_long = post(client, {})
    assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "audio_too_long"


def test_an_upload_over_max_body_passes_while_a_speech_model_serves(client: TestClient, model: StubModel) -> None:
    """--max-body's 4 MiB default would refuse a 25 MB upload: the audio limit lifts it."""
    big = JFK.read_bytes() * 30  # 10 MiB; still one wav, its header saying 11 s
    response = client.post(TRANSCRIPTIONS, files={"file": ("jfk.wav", big, "audio/wav")})
    assert response.status_code == 200, response.text
    model.speech = None
    assert client.post(TRANSCRIPTIONS, files={"file": ("jfk.wav", big, "audio/wav")}).status_code == 413


def test_engine_refusals(client: TestClient, engine: FakeEngine) -> None:
    engine.queue_full_after = 0
    busy = post(client, {})
    assert busy.status_code == 429 and busy.headers["retry-after"] == "3"
    engine.queue_full_after = None
    engine.speech = lambda request: [Failed("fault", "the device fell over")]
    assert post(client, {}).status_code == 500


def test_without_a_speech_model_the_routes_name_the_flag(client: TestClient, model: StubModel) -> None:
    model.speech = None
    response = post(client, {})
    assert response.status_code == 400 and "--speech-model" in response.json()["error"]["message"]
    models = client.get("/v1/models").json()
    assert [entry["kind"] for entry in models["data"]] == ["chat"]
    assert models["speech"]["available"] is False and "--speech-model" in models["speech"]["reason"]


def test_a_speech_model_that_did_not_load_takes_down_only_its_routes(client: TestClient, model: StubModel) -> None:
    model.speech = None
    model.failed_parts = [FailedPart("speech", "speech_model", "/models/whisper", "model.bin is truncated")]
    response = post(client, {})
    assert response.status_code == 503 and "model.bin is truncated" in response.json()["error"]["message"]
    models = client.get("/v1/models").json()
    assert models["speech"] == {
        "available": False,
        "reason": "The speech model (--speech-model /models/whisper) did not load: model.bin is truncated",
    }
    assert client.get("/health").json()["failed_parts"][0]["setting"] == "speech_model"
    assert "Speech model /models/whisper did not load (model.bin is truncated)" in client.get("/").text


def test_models_lists_the_speech_model_right_after_the_served_one(client: TestClient) -> None:
    models = client.get("/v1/models").json()
    assert [(entry["id"], entry["kind"]) for entry in models["data"][:2]] == [
        ("pooled/tiny-test", "chat"),
        ("pooled/whisper-test", "speech"),
    ]
    assert models["speech"] == {"available": True}
    assert client.get("/v1/models/pooled/whisper-test").json()["max_model_len"] == 448
    banner = client.get("/").text
    assert f"Speech to text: pooled/whisper-test at {BASE_URL}/v1/audio/transcriptions (and /translations)" in banner
