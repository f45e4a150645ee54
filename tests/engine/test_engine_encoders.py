"""Encoders beside a chat model on the one engine thread: requests through the intake's queue, one
encoder batch per iteration between decode steps, values in input order, refusals on their face."""

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from engine.api import Encoded, EncodeEvent, EncodeRequest, EngineEvent, Failed, RequestRefused, Tokens
from engine.engine import Engine
from engine.engine_config import EngineConfig
from engine.model.loading.loader import load_model
from engine.tasks.encode.encode_task import EncodeTask
from engine.tasks.encode.encoder_model import EncoderRunner, LoadedEncoder, load_encoder
from tests.engine.engine_harness import WAIT_S, Collected, greedy_request
from tests.engine.tiny_encoders import QUERY, SENTENCES, build_tiny_encoder, encoder_tokenizer

pytestmark = pytest.mark.slow  # builds an engine

CONFIG = EngineConfig(decode_lanes=8, max_queue=24, page_size=8, prefill_chunk=8)
BATCH_TOKENS = 256  # so a request of many inputs takes several batches


class CountingRunner(EncoderRunner):
    """The real encoder runner, counting the batches it ran."""

    batches = 0

    def run(self, inputs):  # type: ignore[no-untyped-def]
        self.batches += 1
        return super().run(inputs)


class Answer:
    def __init__(self) -> None:
        self.event: EncodeEvent | None = None
        self.done = threading.Event()

    def __call__(self, event: EncodeEvent) -> None:
        self.event = event
        self.done.set()

    def wait(self) -> EncodeEvent:
        assert self.done.wait(WAIT_S), "encode request did not finish"
        assert self.event is not None
        return self.event


@pytest.fixture(scope="module")
def encoders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, LoadedEncoder]:
    root = tmp_path_factory.mktemp("encoders")
    return {
        name: load_encoder(build_tiny_encoder(tiny, root / tiny))
        for name, tiny in (("embed", "bert_mean"), ("rerank", "bert_cross_encoder"))
    }


@pytest.fixture(scope="module")
def runners(encoders: dict[str, LoadedEncoder]) -> dict[str, CountingRunner]:
    return {name: CountingRunner.for_encoder(encoder, BATCH_TOKENS) for name, encoder in encoders.items()}


@pytest.fixture(scope="module")
def engine(
    tiny_checkpoint: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory, runners: dict[str, CountingRunner]
) -> Iterator[Engine]:
    model = load_model(tiny_checkpoint("llama_tied"), cache_dir=tmp_path_factory.mktemp("prepared"), progress=False)
    progress: list[str] = []
    built = Engine.build(model, CONFIG, lambda what, done, total: progress.append(what), [EncodeTask(runners)])
    assert "compiling encoder embed" in progress and "compiling encoder rerank" in progress
    yield built
    built.shutdown()


def encode(engine: Engine, request: EncodeRequest) -> Encoded:
    answer = Answer()
    engine.submit(request, answer)
    event = answer.wait()
    assert isinstance(event, Encoded), event
    return event


def test_values_come_back_in_input_order_as_the_encoder_computes_them(
    engine: Engine, encoders: dict[str, LoadedEncoder], runners: dict[str, CountingRunner]
) -> None:
    encoder = encoders["embed"]
    rng = np.random.default_rng(3)
    texts = [" ".join(rng.choice(SENTENCES, rng.integers(1, 3)))[:120] for _ in range(40)]
    tokenizer = encoder_tokenizer(encoder)
    inputs = tuple(i for i in (tokenizer.encode_text(t) for t in texts) if len(i.token_ids) <= encoder.max_tokens)
    before = runners["embed"].batches
    answer = encode(engine, EncodeRequest("embed", inputs))
    assert runners["embed"].batches - before > 1, "the request should take several batches"
    alone = np.concatenate([runners["embed"].run([item]) for item in inputs])
    np.testing.assert_allclose(answer.values, alone, atol=1e-6)
    assert answer.prompt_tokens == sum(len(i.token_ids) for i in inputs)

    rerank = encoders["rerank"]
    pairs = tuple(encoder_tokenizer(rerank).encode_pair(QUERY, s) for s in SENTENCES)
    scores = encode(engine, EncodeRequest("rerank", pairs)).values
    assert scores.shape == (len(SENTENCES),)
    np.testing.assert_allclose(scores, runners["rerank"].run(pairs), atol=1e-6)


class Stream(Collected):
    """A generation request's events, with the encoder batches run so far at each of its tokens."""

    def __init__(self, runner: CountingRunner) -> None:
        super().__init__(1)
        self.runner = runner
        self.batches_at_token: list[int] = []

    def __call__(self, event: EngineEvent) -> None:
        if isinstance(event, Tokens):
            self.batches_at_token.append(self.runner.batches)
        super().__call__(event)


def test_a_burst_of_encode_requests_waits_its_turn_between_decode_steps(
    engine: Engine, encoders: dict[str, LoadedEncoder], runners: dict[str, CountingRunner]
) -> None:
    """Eight streams decode while 12 encode requests of several batches each arrive: between two
    tokens of a stream the engine thread runs at most one encoder batch."""
    runner = runners["embed"]
    long_inputs = tuple(encoder_tokenizer(encoders["embed"]).encode_text(SENTENCES[-1]) for _ in range(20))
    streams = [Stream(runner) for _ in range(8)]
    for i, stream in enumerate(streams):
        engine.submit(greedy_request(list(range(3 + i, 12 + i)), 40), stream)
    while not all(stream.batches_at_token for stream in streams):
        time.sleep(0.001)
    before = engine.stats()
    answers = [Answer() for _ in range(12)]
    for answer in answers:
        engine.submit(EncodeRequest("embed", long_inputs), answer)
    assert all(isinstance(answer.wait(), Encoded) for answer in answers)
    for stream in streams:
        stream.wait()
    after = engine.stats()
    gaps = [int(np.diff(stream.batches_at_token).max()) for stream in streams]
    assert max(gaps) <= 1, gaps
    assert sum(stream.batches_at_token[-1] - stream.batches_at_token[0] for stream in streams) > 0, "no overlap"
    assert after.encode_requests - before.encode_requests == 12
    assert after.prompt_tokens - before.prompt_tokens >= 12 * sum(len(i.token_ids) for i in long_inputs)


def test_requests_invalid_on_their_face_are_refused(engine: Engine, encoders: dict[str, LoadedEncoder]) -> None:
    assert engine.tasks() == {"generate", "encode"}
    encoder = encoders["embed"]
    too_long = encoder_tokenizer(encoder).token_input([5] * (encoder.max_tokens + 1))
    for request, code in (
        (EncodeRequest("nope", (encoder_tokenizer(encoder).encode_text("a"),)), "model_not_found"),
        (EncodeRequest("embed", ()), "invalid_input"),
        (EncodeRequest("embed", (encoder_tokenizer(encoder).token_input([]),)), "invalid_input"),
        (EncodeRequest("embed", (too_long,)), "context_length_exceeded"),
        (EncodeRequest("embed", (encoder_tokenizer(encoder).token_input([10**6]),)), "invalid_input"),
    ):
        with pytest.raises(RequestRefused) as refused:
            engine.submit(request, Answer())
        assert refused.value.code == code


def test_a_cancelled_encode_request_fails_nothing_and_frees_its_place(
    engine: Engine, encoders: dict[str, LoadedEncoder]
) -> None:
    """Cancelled while its batches run (or, in a race, just after its last), it ends without a
    failure, and the engine goes idle: its place in the queue is given back."""
    encoder_input = encoder_tokenizer(encoders["embed"]).encode_text(SENTENCES[0])
    answer = Answer()
    request_id = engine.submit(EncodeRequest("embed", (encoder_input,) * 200), answer)
    engine.cancel(request_id)
    assert engine.wait_idle(WAIT_S)
    assert answer.event is None or isinstance(answer.event, Encoded)
    assert not isinstance(answer.event, Failed)
