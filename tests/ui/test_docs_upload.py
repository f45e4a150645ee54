"""The API reference (/v1/docs/, Swagger UI) uploads an audio file with "Try it out", in a real
browser (Debian's chromium, driven by Playwright): the spec's multipart form gives it a file picker,
and its prefilled fields make a request the server takes. The server is the app in-process under
uvicorn, its engine the scripted double of tests/handlers/test_audio_routes.py (the page, not the
model, is under test). Skipped, saying why, where chromium or Playwright is missing (as
tests/ui/test_playground.py)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from engine.checkpoints import read_gguf_metadata
from handlers.context import SpeechService
from pooled.configuration.settings import Settings
from pooled.web.app import build_app, server_context
from tests.conftest import StubModel
from tests.fake_engine import FakeEngine
from tests.handlers.conftest import SMOLLM2_GGUF
from tests.handlers.test_audio_routes import JFK, TEXT, script
from tests.ui import test_playground as playground
from tests.ui.test_playground import sync_api
from text import Tokenizer

browser = playground.browser  # test_playground's fixture: chromium


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, FakeEngine]]:
    tokenizer = Tokenizer.from_gguf_metadata(read_gguf_metadata(SMOLLM2_GGUF, prefix="tokenizer."))
    engine = FakeEngine(lambda request, row: [], tokenizer.vocab_size, speech=script(tokenizer))
    speech = SpeechService("pooled/whisper-test", tokenizer, frozenset({"en"}), True, 448)
    settings = Settings(port=_free_port())
    app = build_app(settings, server_context(settings, StubModel(engine=engine, tokenizer=tokenizer, speech=speech)))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=settings.port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{settings.port}", engine
    server.should_exit = True
    thread.join(timeout=10)


def test_try_it_out_uploads_an_audio_file(browser: Any, served: tuple[str, FakeEngine]) -> None:
    base, engine = served
    page = browser.new_page()
    page.set_default_timeout(60_000)  # the 2 shared cores may be busy: Swagger UI is a large bundle
    answers: list[tuple[int, str]] = []
    page.on(
        "response", lambda response: "/v1/audio/" in response.url and answers.append((response.status, response.text()))
    )
    page.goto(f"{base}/v1/docs/")
    operation = page.locator("#operations-OpenAI-createTranscription")
    operation.locator(".opblock-summary").click()
    operation.locator(".try-out__btn").click()
    operation.locator("input[type=file]").set_input_files(str(JFK))
    operation.locator(".execute").click()
    sync_api.expect(operation.locator(".live-responses-table tbody .response-col_status")).to_have_text(
        "200", timeout=60_000
    )
    page.close()
    ((status, body),) = answers
    assert status == 200 and TEXT in body
    (request,) = engine.transcriptions
    assert request.audio.size == 176000 and request.language == "en"  # the whole file, the field's example
