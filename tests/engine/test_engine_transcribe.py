"""The transcribe task on a tiny random Whisper through the engine's front door: concurrent
requests share the decoder's lanes and each gets what it gets alone, segments come in order and
`Transcribed` last, a cancel frees its lane, and requests invalid on their face are refused."""

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from engine.api import RequestRefused, SpeechSegment, Transcribed, TranscriptionRequest
from engine.engine import TaskEngine
from engine.model.families.whisper import LoadedWhisper, load_whisper
from engine.tasks.transcribe.transcribe_task import SpeechConfig, TranscribeTask
from tests.engine.engine_harness import WAIT_S
from tests.engine.transcripts import Transcript, assert_same, noise
from tools.whisper_checkpoint import write_hf

pytestmark = pytest.mark.slow  # compiles a speech model

CONFIG = SpeechConfig(lanes=3, encoder_batch=2, steps_per_batch=4, best_of=2)


class CountingTask(TranscribeTask):
    """The real runner, noting the most lanes one decode step ran."""

    most_lanes = 0

    def _step(self, done):  # type: ignore[no-untyped-def]
        self.most_lanes = max(self.most_lanes, sum(lane is not None for lane in self._busy))
        super()._step(done)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> LoadedWhisper:
    return load_whisper(write_hf(tmp_path_factory.mktemp("whisper") / "hf"))


@pytest.fixture(scope="module")
def task(model: LoadedWhisper) -> CountingTask:
    return CountingTask(model, CONFIG)


@pytest.fixture(scope="module")
def engine(task: CountingTask) -> Iterator[TaskEngine]:
    progress: list[str] = []
    built = TaskEngine([task], 448, 8, lambda what, done, total: progress.append(what))
    assert progress and set(progress) == {"compiling the speech model"}
    yield built
    built.shutdown()


def transcribe(engine: TaskEngine, request: TranscriptionRequest) -> Transcript:
    transcript = Transcript()
    engine.submit(request, transcript)
    return transcript


def test_concurrent_requests_share_the_lanes_and_each_gets_what_it_gets_alone(
    engine: TaskEngine, task: CountingTask
) -> None:
    requests = [
        TranscriptionRequest(noise(8, 1), temperatures=(0.0, 1.0), seed=3, logprobs=True),  # falls back
        TranscriptionRequest(noise(35, 2), language="de", temperatures=(0.0,)),  # two windows
        TranscriptionRequest(noise(12, 3), task="translate", prompt_ids=(400, 500), temperatures=(0.5,), seed=5),
    ]
    together = [transcribe(engine, request) for request in requests]
    for transcript in together:
        transcript.wait()
    assert task.most_lanes > 1, "the requests' windows should share decode steps"
    for request, transcript in zip(requests, together, strict=True):
        done = transcript.wait()
        assert isinstance(transcript.events[-1], Transcribed)
        segments = transcript.segments
        assert segments and [s.index for s in segments] == list(range(len(segments)))
        assert all(isinstance(e, SpeechSegment) for e in transcript.events[:-1])
        assert [s.seek for s in segments] == sorted(s.seek for s in segments)
        assert all(s.temperature in request.temperatures for s in segments)
        assert done.duration == len(request.audio) / 16000
        assert done.output_tokens == sum(len(s.tokens) for s in segments)
        assert done.language == (request.language or done.language) and 0 < done.language_probability <= 1
        if request.logprobs:
            assert all(len(s.logprobs) == len(s.tokens) for s in segments)
        alone = transcribe(engine, request)
        alone.wait()
        assert_same(alone.events, transcript.events)
    assert any(s.seek > 0 for s in together[1].segments), "the long request should have a second window"
    assert any(s.temperature == 1.0 for s in together[0].segments), "the random model's first attempt should fail"


def test_a_cancelled_transcription_ends_without_an_answer_and_frees_its_lane(engine: TaskEngine) -> None:
    transcript = Transcript()
    request_id = engine.submit(TranscriptionRequest(noise(300, 7), temperatures=(0.0,)), transcript)
    engine.cancel(request_id)
    assert engine.wait_idle(WAIT_S)
    assert not any(isinstance(e, Transcribed) for e in transcript.events)
    after = transcribe(engine, TranscriptionRequest(noise(3, 8), temperatures=(0.0,)))
    assert after.wait().duration == 3.0


def test_requests_invalid_on_their_face_are_refused(engine: TaskEngine, tmp_path: Path) -> None:
    for request, code in (
        (TranscriptionRequest(np.zeros(100, np.float32)), "invalid_input"),
        (TranscriptionRequest(np.zeros((2, 16000), np.float32)), "invalid_input"),
        (TranscriptionRequest(np.zeros(16000, np.float64)), "invalid_input"),
        (TranscriptionRequest(noise(1, 0), language="xx"), "invalid_language"),
        (TranscriptionRequest(noise(1, 0), prompt_ids=(50257,)), "invalid_prompt"),
        (TranscriptionRequest(noise(1, 0), temperatures=()), "invalid_input"),
        (TranscriptionRequest(noise(1, 0), temperatures=(0.0, -1.0)), "invalid_input"),
    ):
        with pytest.raises(RequestRefused) as refused:
            engine.submit(request, Transcript())
        assert refused.value.code == code
    english = TranscribeTask(load_whisper(write_hf(tmp_path / "en", english_only=True)), CONFIG)
    with pytest.raises(RequestRefused) as refused:
        english.check(TranscriptionRequest(noise(1, 0), task="translate"))
    assert refused.value.code == "model_not_supported"
    english.check(TranscriptionRequest(noise(1, 0), language="en"))
