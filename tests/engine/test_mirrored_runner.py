"""The leader's runner and a follower's, in one process (engine/device/mirrored_runner.py): what crosses
the wire for each scheduler call, and that a follower makes the leader's calls in the leader's
order, on its own results, with a grammar's mask filled in. The wire and the device runners are
test doubles; tests/e2e/test_process_group.py runs the real thing over two processes."""

from __future__ import annotations

import pickle
import time
from typing import Any

import numpy as np
import pytest

from engine.api import SamplingParams
from engine.device import mirrored_runner
from engine.device.mirrored_runner import FilledMask, LeaderRunner, _Follower
from engine.device.process_group import Call, Calls, Kept, Lead, Message, Release
from engine.device.runner_api import DecodeRow, Drawn, InsertedRow, PrefillChunk


class RecordingRunner:
    """Records each call (verb, arguments) and returns a fresh result object for the verbs that return one."""

    lanes, page_size, max_context, batched_chunk, page_bytes = 4, 4, 64, 2, 8
    draft_tokens = draft_rows = adapter_slots = adapter_rank = 0
    burst_steps = 4
    image_token_id = None  # a text model's
    mask_words = 2

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.results: list[object] = []

    def _record(self, verb: str, *args: Any) -> object:
        self.calls.append((verb, args))
        result = object()
        self.results.append(result)
        return result

    def compile(self, report: Any) -> None:
        report("compiled", 1, 1)
        self._record("compile")

    def insert(self, lane: int, row: InsertedRow) -> None:
        self._record("insert", lane, row)

    def add_page(self, lane: int, index: int, page: int) -> None:
        self._record("add_page", lane, index, page)

    def prefill(self, chunks: list[PrefillChunk]) -> object:
        return self._record("prefill", chunks)

    def first_tokens(self, logits: object, index: int, rows: list[DecodeRow]) -> Drawn:
        self._record("first_tokens", logits, index, rows)
        return Drawn(np.zeros((len(rows), 1), np.int32), np.ones(len(rows), np.int32), None)

    def generate(self, rows: list[DecodeRow], chained: object | None = None, burst: bool = False) -> object:
        return self._record("generate", rows, chained, burst)

    def close(self) -> None:
        pass

    def take(self, step: object) -> Drawn:
        self._record("take", step)
        return Drawn(np.zeros((1, 1), np.int32), np.ones(1, np.int32), None)


class Wire:
    """Keeps each message as a follower would receive it (pickled and back)."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    def send(self, message: Message) -> None:
        self.messages.append(pickle.loads(pickle.dumps(message)))


class EvenTokens:
    def fill_mask(self, out: np.ndarray) -> None:
        out[:] = np.int32(0x55555555)

    def accept(self, token_id: int) -> None:
        pass

    def is_finished(self) -> bool:
        return False


def test_calls_cross_in_order_with_their_results_named_and_masks_filled() -> None:
    local, wire, hangs = RecordingRunner(), Wire(), list[str]()
    leader = LeaderRunner(local, Lead(wire, 60.0, hangs.append), 2)  # type: ignore[arg-type]
    reports: list[str] = []
    leader.compile(lambda what, done, total: reports.append(what))
    row = InsertedRow([1, 2], SamplingParams(temperature=0), 7, [3, 4, 5], [])
    leader.insert(0, row)
    leader.add_page(0, 1, 2)
    assert len(wire.messages) == 1 and local.calls == [("compile", ())]  # table changes wait for a step

    logits = leader.prefill([PrefillChunk([3, 4, 5], 0, [1, 2])])
    grammar = EvenTokens()
    leader.first_tokens(logits, 0, [DecodeRow(0, 3, 0, 0, grammar)])
    step = leader.generate([DecodeRow(0, 3, 9, 1, None)])
    chained = leader.generate([DecodeRow(0, 4, 0, 2, None)], step, burst=True)  # a burst, mirrored alike
    leader.take(step)
    leader.idle()

    leader.close()
    assert reports == ["compiled"] and hangs == []
    sent = [call for message in wire.messages if isinstance(message, Calls) for call in message.calls]
    assert [call.verb for call in sent] == [
        "compile",
        "insert",
        "add_page",
        "prefill",
        "first_tokens",
        "generate",
        "generate",
        "forget",
    ]
    prefill, first, plain, on_step, forget = sent[3:]
    assert isinstance(prefill.keep, int) and first.args[0] == Kept(prefill.keep)
    mask = first.args[2][0].constraint
    assert isinstance(mask, FilledMask) and (mask.words == np.int32(0x55555555)).all()
    assert on_step.args[1] == Kept(plain.keep) and forget.args == (plain.keep,)
    assert (plain.args[2], on_step.args[2]) == (False, True)

    # The leader made the same calls, on its own results (and the same filled mask).
    assert [verb for verb, _ in local.calls] == [
        "compile",
        "insert",
        "add_page",
        "prefill",
        "first_tokens",
        "generate",
        "generate",
        "take",
    ]
    assert local.calls[4][1][0] is local.results[3] and isinstance(local.calls[4][1][2][0].constraint, FilledMask)
    assert local.calls[6][1][1] is local.results[5]
    assert chained.local is local.results[6]  # type: ignore[attr-defined]

    follower = RecordingRunner()
    _Follower(follower).make(sent)  # type: ignore[arg-type]
    assert [verb for verb, _ in follower.calls] == [verb for verb, _ in local.calls[:-1]]  # no take
    assert follower.calls[1][1] == (0, row) and follower.calls[2][1] == (0, 1, 2)
    assert follower.calls[4][1][0] is follower.results[3]  # its own prompt logits
    assert follower.calls[6][1][1] is follower.results[5]  # chained on its own step
    assert follower.calls[6][1][2] is True  # a burst, as the leader's
    assert isinstance(follower.calls[4][1][2][0].constraint, FilledMask)


def test_a_follower_refuses_a_call_it_does_not_know() -> None:
    follower = _Follower(RecordingRunner())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="__init__"):
        follower.make([Call("__init__", ())])


class SlowRunner(RecordingRunner):
    """Each call takes `delay_s`: a follower that stopped answering holds the leader's collective so."""

    delay_s = 0.4

    def compile(self, report: Any) -> None:
        time.sleep(self.delay_s)

    def prefill(self, chunks: list[PrefillChunk]) -> object:
        time.sleep(self.delay_s)
        return super().prefill(chunks)


def test_a_call_past_the_step_timeout_is_a_hung_group_and_compiling_is_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mirrored_runner, "WATCH_INTERVAL_S", 0.02)
    wire, hangs = Wire(), list[str]()
    leader = LeaderRunner(SlowRunner(), Lead(wire, 0.1, hangs.append), 2)  # type: ignore[arg-type]
    leader.compile(lambda *_: None)
    assert hangs == []  # a long compile is not a hang
    leader.prefill([PrefillChunk([1], 0, [1])])
    assert len(hangs) == 1 and "has not returned in 0.1 s" in hangs[0]
    leader.close()
    assert isinstance(wire.messages[-1], Release)
