"""Tasks as the engine's seam (engine/tasks/task_registry.py), against a test double of a task
runner beside the fake device runner: a task's requests come through the one front door and the
one intake (its queue bound, its counters and latencies, its cancels), run one batch per engine
iteration between the prefill and the decode step, and fail with the engine."""

import math
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from engine.api import (
    EngineEvent,
    EngineUnavailable,
    Failed,
    GenerationRequest,
    QueueFull,
    RequestRefused,
    SamplingParams,
    TaskRequest,
    Tokens,
)
from engine.device.runner_api import Report
from engine.engine import Engine, TaskEngine
from engine.engine_config import EngineConfig
from engine.stats import HeldArrays
from engine.tasks.task_registry import Done, TaskJob, send
from tests.engine.engine_harness import WAIT_S, Collected, start
from tests.engine.fake_runner import FakeDeviceError, FakeRunner

CONTEXT = 64
CONFIG = EngineConfig(decode_lanes=4, max_queue=2, page_size=4, prefill_chunk=16)
GREEDY = SamplingParams(temperature=0.0, ignore_eos=True)


@dataclass(frozen=True)
class Echoed:
    values: tuple[int, ...]


EchoEvent = Echoed | Failed


@dataclass(frozen=True)
class EchoRequest(TaskRequest[EchoEvent]):
    values: tuple[int, ...]


class EchoTask:
    """A task runner that answers a request with its values after one batch per value; `gate`
    holds every batch while cleared (`held` is set while one waits at it)."""

    task = "echo"
    request_type = EchoRequest

    def __init__(self) -> None:
        self.jobs: deque[list] = deque()  # [job, values done]
        self.batches = 0
        self.compiled: list[str] = []
        self.gate = threading.Event()
        self.gate.set()
        self.held = threading.Event()

    def check(self, request: EchoRequest) -> None:
        if not request.values:
            raise RequestRefused("invalid_input", "nothing to echo")

    def compile(self, report: Report) -> None:
        report("compiling echo", 1, 1)
        self.compiled.append("echo")

    def held_arrays(self) -> HeldArrays:
        return HeldArrays((), ("echo weights",))

    @property
    def busy(self) -> bool:
        return bool(self.jobs)

    def add(self, job: TaskJob[EchoRequest]) -> None:
        self.jobs.append([job, 0])

    def cancel(self, ids: set[int]) -> list[TaskJob[EchoRequest]]:
        cancelled = [entry for entry in self.jobs if entry[0].id in ids]
        for entry in cancelled:
            self.jobs.remove(entry)
        return [entry[0] for entry in cancelled]

    def run_batch(self) -> list[Done]:
        if not self.gate.is_set():
            self.held.set()
            assert self.gate.wait(WAIT_S), "the test never opened the gate"
            self.held.clear()
        self.batches += 1
        entry = self.jobs[0]
        entry[1] += 1
        job = entry[0]
        if entry[1] < len(job.request.values):
            return []
        self.jobs.popleft()
        send(job, Echoed(job.request.values))
        return [Done(job, len(job.request.values))]

    def drop_all(self) -> list[TaskJob[EchoRequest]]:
        held, self.jobs = [entry[0] for entry in self.jobs], deque()
        return held


class Answer:
    def __init__(self) -> None:
        self.events: list[EchoEvent] = []
        self.done = threading.Event()

    def __call__(self, event: EchoEvent) -> None:
        self.events.append(event)
        self.done.set()

    def wait(self) -> EchoEvent:
        assert self.done.wait(WAIT_S), "the request got no answer"
        assert len(self.events) == 1, self.events
        return self.events[0]


def build(echo: EchoTask | None) -> Engine:
    pages = math.ceil(CONTEXT / CONFIG.page_size) * CONFIG.decode_lanes + CONFIG.decode_lanes + 1
    tasks = [] if echo is None else [echo]
    return Engine(FakeRunner(CONFIG, pages, CONTEXT), pages, CONFIG, frozenset(), lambda *_: None, None, tasks)


@pytest.fixture
def echo() -> EchoTask:
    return EchoTask()


@pytest.fixture
def engine(echo: EchoTask) -> Iterator[Engine]:
    built = build(echo)
    yield built
    echo.gate.set()
    built.shutdown()


def generation(length: int, max_tokens: int) -> GenerationRequest:
    return GenerationRequest(tuple(range(3, 3 + length)), GREEDY, max_tokens)


def test_a_task_is_served_through_the_one_front_door_and_counted_once(engine: Engine, echo: EchoTask) -> None:
    assert engine.tasks() == {"generate", "echo"} and echo.compiled == ["echo"]
    assert engine.held_arrays().weights[-1] == "echo weights"
    before = engine.stats()
    answer = Answer()
    engine.submit(EchoRequest((7, 8, 9)), answer)
    assert answer.wait() == Echoed((7, 8, 9)) and echo.batches == 3
    assert engine.wait_idle(WAIT_S)
    after = engine.stats()
    assert after.prompt_tokens - before.prompt_tokens == 3
    assert after.e2e_latency.count - before.e2e_latency.count == 1
    assert (after.requests_waiting, after.requests_running, after.encode_requests) == (0, 0, 0)


def test_refusals_on_the_face_come_from_the_task_and_from_tasks_not_served(engine: Engine) -> None:
    with pytest.raises(RequestRefused) as empty:
        engine.submit(EchoRequest(()), Answer())
    assert empty.value.code == "invalid_input"
    plain = build(None)
    try:
        assert plain.tasks() == {"generate"}
        with pytest.raises(RequestRefused) as unserved:
            plain.submit(EchoRequest((1,)), Answer())
        assert unserved.value.code == "model_not_supported" and "EchoRequest" in unserved.value.message
    finally:
        plain.shutdown()
    assert engine.stats().refusals == 0  # a refusal on the face is no full queue


def test_a_tasks_requests_count_against_the_one_queue_bound(engine: Engine, echo: EchoTask) -> None:
    echo.gate.clear()
    answers = [Answer() for _ in range(2)]
    for answer in answers:
        engine.submit(EchoRequest((1, 2)), answer)
    with pytest.raises(QueueFull) as full:
        engine.submit(EchoRequest((3,)), Answer())
    assert full.value.retry_after_s >= 1 and engine.stats().refusals == 1
    assert engine.stats().requests_waiting == 2
    echo.gate.set()
    assert [answer.wait() for answer in answers] == [Echoed((1, 2))] * 2
    assert engine.wait_idle(WAIT_S) and engine.stats().requests_waiting == 0


def test_a_cancelled_task_request_ends_without_an_answer_and_frees_its_place(engine: Engine, echo: EchoTask) -> None:
    echo.gate.clear()
    answer = Answer()
    before = engine.stats()
    request_id = engine.submit(EchoRequest(tuple(range(50))), answer)
    assert echo.held.wait(WAIT_S)
    engine.cancel(request_id)
    echo.gate.set()
    assert engine.wait_idle(WAIT_S)
    after = engine.stats()
    assert answer.events == [] and echo.batches < 50
    assert (after.requests_waiting, after.prompt_tokens) == (0, before.prompt_tokens)


def test_a_running_stream_waits_at_most_one_batch_of_a_task(engine: Engine, echo: EchoTask) -> None:
    """The task's request holds the engine thread at its first batch while a stream arrives, so
    the two overlap: between two of the stream's tokens the thread runs at most one batch."""
    batches_at_token: list[int] = []

    class Stream(Collected):
        def __call__(self, event: EngineEvent) -> None:
            if isinstance(event, Tokens):
                batches_at_token.extend([echo.batches] * len(event.token_ids))
            super().__call__(event)

    echo.gate.clear()
    answer = Answer()
    engine.submit(EchoRequest(tuple(range(30))), answer)
    assert echo.held.wait(WAIT_S)
    stream = Stream(1)
    engine.submit(generation(5, 40), stream)
    echo.gate.set()
    assert answer.wait() == Echoed(tuple(range(30)))
    assert len(stream.wait().tokens[0]) == 40
    # From the second token on: the first comes with the prefill, the second from the first decode
    # step, taken an iteration later (the steps are pipelined), so one more batch runs between them.
    gaps = [b - a for a, b in zip(batches_at_token[1:], batches_at_token[2:], strict=False)]
    assert max(gaps) <= 1 and sum(gaps) > 0, gaps


def test_a_dying_engine_fails_its_tasks_requests(engine: Engine, echo: EchoTask) -> None:
    fake = engine.runner
    assert isinstance(fake, FakeRunner)
    fake.gate.clear()
    blocker = start(engine, generation(3, 4))
    assert fake.held.wait(WAIT_S)
    answer = Answer()
    engine.submit(EchoRequest((1, 2, 3)), answer)
    fake.fail_with = FakeDeviceError("device lost")
    fake.gate.set()
    failed = answer.wait()
    assert isinstance(failed, Failed) and failed.kind == "fault" and "device lost" in failed.message
    assert blocker.wait().failed is not None and engine.state == "dead"


def test_a_task_engine_serves_its_tasks_alone_and_fails_them_when_it_stops(echo: EchoTask) -> None:
    progress: list[str] = []
    engine = TaskEngine([echo], 128, 4, lambda what, done, total: progress.append(what))
    try:
        assert engine.tasks() == {"echo"} and progress == ["compiling echo"] and engine.vision is None
        answer = Answer()
        engine.submit(EchoRequest((4, 5)), answer)
        assert answer.wait() == Echoed((4, 5)) and engine.stats().prompt_tokens == 2
        with pytest.raises(RequestRefused) as refused:
            engine.submit(generation(3, 4), Collected(1))
        assert refused.value.code == "model_not_supported" and "GenerationRequest" in refused.value.message
        echo.gate.clear()
        ran = echo.batches
        held = Answer()
        engine.submit(EchoRequest((1, 2)), held)
        assert echo.held.wait(WAIT_S)
        stopping = threading.Thread(target=engine.shutdown)
        stopping.start()
        while engine.state == "serving":  # shutdown asks the thread to stop before it waits for it
            time.sleep(0.001)
        with pytest.raises(EngineUnavailable):
            engine.submit(EchoRequest((3,)), Answer())
        echo.gate.set()  # the held batch ends; the second never runs
        stopping.join(WAIT_S)
        failed = held.wait()
        assert isinstance(failed, Failed) and failed.kind == "unavailable" and echo.batches == ran + 1
        assert engine.wait_idle(WAIT_S)
    finally:
        echo.gate.set()
        engine.shutdown()
