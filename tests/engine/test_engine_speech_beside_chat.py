"""A speech model beside a chat model on the one engine thread (`Engine.build` with the transcribe
task, as the host builds it): a transcription and a chat stream run at once, each answered as it
is alone."""

from collections.abc import Callable
from pathlib import Path

import pytest

from engine.api import TranscriptionRequest
from engine.engine import Engine
from engine.engine_config import EngineConfig
from engine.model.families.whisper import load_whisper
from engine.model.loading.loader import load_model
from engine.tasks.transcribe.transcribe_task import SpeechConfig, TranscribeTask
from tests.engine.engine_harness import generate, greedy_request, start
from tests.engine.transcripts import Transcript, assert_same, noise
from tools.whisper_checkpoint import write_hf

pytestmark = pytest.mark.slow  # builds an engine and compiles a speech model


def test_a_transcription_and_a_chat_stream_share_the_engine_thread(
    tiny_checkpoint: Callable[[str], Path], tmp_path: Path
) -> None:
    chat = load_model(tiny_checkpoint("llama_tied"), cache_dir=tmp_path / "prepared", progress=False)
    speech = TranscribeTask(load_whisper(write_hf(tmp_path / "whisper")), SpeechConfig(lanes=2, encoder_batch=1))
    engine = Engine.build(chat, EngineConfig(decode_lanes=2, page_size=8, prefill_chunk=8), lambda *_: None, [speech])
    try:
        assert engine.tasks() == {"generate", "transcribe"}
        request = TranscriptionRequest(noise(4, 11), temperatures=(0.0,))
        transcript = Transcript()
        engine.submit(request, transcript)
        stream = start(engine, greedy_request(list(range(3, 12)), 64))
        transcript.wait()
        tokens = stream.wait().tokens
        assert tokens == generate(engine, greedy_request(list(range(3, 12)), 64)).tokens
        alone = Transcript()
        engine.submit(request, alone)
        alone.wait()
        assert_same(alone.events, transcript.events)
    finally:
        engine.shutdown()
