"""Schemathesis fuzzes every operation of the served spec in-process against the ASGI app.

Checks: no server error, only documented status codes, content types and
headers, every response body matches its schema (response schemas are closed, so an
extra or missing field fails here), and a request the schema does not allow (a string or a
boolean for a number, a null where the field takes none) is refused with a 4xx.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.specs.openapi.checks import negative_data_rejection

from engine.api import SpeechSegment, Transcribed, TranscriptionRequest, Vision
from engine.model.families.qwen2_vl.image_processing import ImageRules
from engine.tasks.encode.encoder_model import EncoderRunner, load_encoder
from handlers.context import SpeechService
from pooled.configuration.settings import Settings
from pooled.hosting.loading import encoder_service
from pooled.web.app import build_app, server_context
from tests.conftest import BASE_URL, StubModel
from tests.engine.tiny_encoders import build_tiny_encoder, encoder_tokenizer
from tests.engine.tiny_vision_server_model import (
    CHAT_TEMPLATE,
    MAX_PIXELS,
    MIN_PIXELS,
    build_tiny_vision_server_model,
    token_ids,
)
from tests.fake_engine import FakeEngine
from text import ChatTemplate, Tokenizer

# The model routes run for real (tokenizer, chat template, the whole generation layer; tiny real
# encoders for embeddings and rerank; the audio routes' form, decoding and formats); only the
# engine's queue is a scripted double, so fuzzed requests reach every check a real request meets.
# The model takes images (the tiny Qwen2.5-VL's tokenizer, chat template and image rules), so fuzzed
# image parts go through the image path.
_encoders_dir = Path(tempfile.mkdtemp(prefix="schemathesis-encoders-"))
atexit.register(shutil.rmtree, _encoders_dir, ignore_errors=True)
_vlm = build_tiny_vision_server_model(_encoders_dir / "vlm")
_tokenizer = Tokenizer.from_directory(_vlm)
_encoders = {
    f"pooled/{name}": load_encoder(build_tiny_encoder(name, _encoders_dir / name))
    for name in ("bert_mean", "bert_cross_encoder")
}


def _transcript(request: TranscriptionRequest) -> list[SpeechSegment | Transcribed]:
    tokens = tuple(_tokenizer.encode(" Hi there."))
    logprobs = tuple(-0.5 for _ in tokens) if request.logprobs else ()
    segment = SpeechSegment(0, 0.0, 0.0, 1.0, tokens, request.temperatures[0], -0.5, 1.2, 0.1, (), logprobs)
    return [segment, Transcribed(request.language or "en", 1.0, request.audio.size / 16000, len(tokens))]


_engine = FakeEngine(
    lambda request, row: _tokenizer.encode("Hi there."),
    _tokenizer.vocab_size,
    encoders={name: EncoderRunner.for_encoder(encoder, 1024) for name, encoder in _encoders.items()},
    speech=_transcript,
)
_engine.vision = Vision(token_ids()["<|image_pad|>"], ImageRules(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS))
_model = StubModel(
    engine=_engine,
    tokenizer=_tokenizer,
    chat_template=ChatTemplate(CHAT_TEMPLATE, _tokenizer),
    encoders={name: encoder_service(encoder, encoder_tokenizer(encoder)) for name, encoder in _encoders.items()},
    speech=SpeechService("pooled/whisper-test", _tokenizer, frozenset({"en"}), True, 448),
)
app = build_app(Settings(), server_context(Settings(), _model))
pytestmark = pytest.mark.slow  # hundreds of generated requests

schema = schemathesis.openapi.from_asgi("/v1/openapi.json", app, headers={"host": "127.0.0.1:8080"})


@schemathesis.check
def no_server_error(ctx: schemathesis.CheckContext, response: schemathesis.Response, case: schemathesis.Case) -> None:
    """Any 5xx fails."""
    if response.status_code >= 500:
        raise AssertionError(f"server error {response.status_code}: {response.text[:500]}")


CHECKS = [
    no_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
    negative_data_rejection,
]


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_conforms(case: schemathesis.Case) -> None:
    case.call_and_validate(base_url=BASE_URL, checks=CHECKS)
