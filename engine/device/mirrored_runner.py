"""The runner seam over a process group (engine/device/process_group.py): the leader's `LeaderRunner`
sends each call to the followers before making it on its own `DeviceRunner`; `follow` is a
follower's whole life, making the same calls on its own `DeviceRunner`.

Calls that return nothing the scheduler reads (`insert`, `add_page`, `copy_page`,
`write_pages`) are queued, and travel with the next call that returns something: one message
per step, however many rows joined or grew a page before it. The leader makes the queued
calls at that point too, so every process starts the same device programs in the same order.

A step's result stays on the device (`PromptLogits`, `Pending`): the leader hands the scheduler
a handle numbered in its calls, and a follower keeps its own result under the same number until
the leader says to forget it (a pending step once taken; a prompt's logits at the next prefill).

A grammar's mask is filled on the leader, where the grammar lives; every runner gets the mask.

A collective that fails (a follower died) raises `GroupBroken` on the leader's engine thread,
which ends the engine as a device fault: requests fail, `/health` says dead with the cause.
While the engine is idle its thread sends an empty message every KEEPALIVE_S, so a follower that
died is found then too, and the followers' links never sit idle past a transport's timeout. A
follower that stops answering without dying (stopped, or its link dropping packets) fails no
collective: the leader's call just never returns. A watchdog, as NCCL's in PyTorch, counts a call
that runs past the lead's `step_timeout_s` as a hung group and calls its `on_hang` (the server
logs the cause and exits 1, for a supervisor to restart the group).

Threads: `LeaderRunner` follows `engine.device.runner_api`'s rules (its calls on the engine thread;
`compile` on the building thread, `close` once the engine thread has ended); its watchdog thread
only reads when the call in progress began. `follow` runs on a follower's main thread.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import jax
import numpy as np

from engine.device.process_group import (
    Build,
    Call,
    Calls,
    Channel,
    GroupLoadFailed,
    Kept,
    Lead,
    Load,
    Release,
    Stop,
    agree,
)
from engine.device.runner import DeviceRunner, failure_kind
from engine.device.runner_api import (
    DecodeRow,
    Drawn,
    InsertedRow,
    Pending,
    PrefillChunk,
    PromptLogits,
    PromptScores,
    Report,
)
from engine.lora.peft_adapter import LoraAdapter
from engine.model.image_tower import PreparedImage
from engine.model.loading.loader import LoadedModel
from engine.stats import Bucket, HeldArrays

log = logging.getLogger(__name__)
T = TypeVar("T")

KEEPALIVE_S = 5.0
WATCH_INTERVAL_S = 1.0
# The verbs a follower makes on its runner; "forget" drops a kept result.
MIRRORED = frozenset(
    {
        "compile",
        "prefill",
        "insert",
        "add_page",
        "copy_page",
        "read_pages",
        "write_pages",
        "load_adapter",
        "first_tokens",
        "generate",
        "encode_images",
    }
)


class GroupBroken(RuntimeError):
    """A collective of the process group failed: a process died or its link broke."""


@dataclass(frozen=True)
class _Handle:
    """What the leader's scheduler holds for a result on the device: its number, and the leader's own."""

    number: int
    local: Any


@dataclass(frozen=True)
class FilledMask:
    """A grammar's mask for one step, filled on the leader (a follower's runner only reads it)."""

    words: np.ndarray

    def fill_mask(self, out: np.ndarray) -> None:
        out[:] = self.words

    def accept(self, token_id: int) -> None:
        raise AssertionError("a follower's mask is only read")

    def is_finished(self) -> bool:
        raise AssertionError("a follower's mask is only read")


class LeaderRunner:
    """Process 0's runner: the scheduler's calls, mirrored to every follower (engine.device.runner_api.Runner)."""

    def __init__(self, local: DeviceRunner, lead: Lead, processes: int) -> None:
        self._local, self._lead, self._channel, self._processes = local, lead, lead.channel, processes
        self.lanes, self.page_size, self.max_context = local.lanes, local.page_size, local.max_context
        self.batched_chunk, self.page_bytes = local.batched_chunk, local.page_bytes
        self.draft_tokens, self.draft_rows = local.draft_tokens, local.draft_rows
        self.burst_steps = local.burst_steps
        self.adapter_slots, self.adapter_rank = local.adapter_slots, local.adapter_rank
        self.image_token_id = local.image_token_id
        self.idle_interval: float | None = KEEPALIVE_S
        self._queued: list[Call] = []
        self._numbers = 0
        self._prompt_logits: int | None = None
        self._mask_words = local.mask_words
        self._call_began: float | None = None  # when the call in progress began (None: none)
        self._closed = threading.Event()
        threading.Thread(target=self._watch, name="group-watchdog", daemon=True).start()

    # --- start-up and stats: the building thread, or any thread --------------------------------

    @property
    def scored_ready(self) -> bool:
        return self._local.scored_ready

    def compile(self, report: Report) -> None:
        self._call(Call("compile", ()), local_args=(report,))

    def buckets(self) -> tuple[Bucket, ...]:
        return self._local.buckets()

    def pending_buckets(self) -> int:
        return self._local.pending_buckets()  # a group compiles every shape at start-up

    def watch_compiles(self, thread: threading.Thread) -> None:
        self._local.watch_compiles(thread)

    def compiles_after_startup(self) -> int:
        return self._local.compiles_after_startup()

    def failure_kind(self, error: BaseException) -> Literal["fault", "panicked"]:
        return "fault" if isinstance(error, GroupBroken) else failure_kind(error)

    def held_arrays(self) -> HeldArrays:
        return self._local.held_arrays()

    def close(self) -> None:
        self._closed.set()
        self._local.close()
        try:
            self._channel.send(Release())
        except jax.errors.JaxRuntimeError as error:  # the group broke first: nobody is left to tell
            log.warning("could not tell the followers to release the model: %s", error)

    # --- calls that travel with the next step ---------------------------------------------------

    def insert(self, lane: int, row: InsertedRow) -> None:
        self._queued.append(Call("insert", (lane, row)))

    def add_page(self, lane: int, index: int, page: int) -> None:
        self._queued.append(Call("add_page", (lane, index, page)))

    def copy_page(self, source: int, target: int) -> None:
        self._queued.append(Call("copy_page", (source, target)))

    def write_pages(self, pages: Sequence[int], contents: Sequence[bytes]) -> None:
        self._queued.append(Call("write_pages", (list(pages), list(contents))))

    # --- calls sent at once ---------------------------------------------------------------------

    def prefill(self, chunks: Sequence[PrefillChunk]) -> PromptLogits:
        if self._prompt_logits is not None:
            self._queued.append(Call("forget", (self._prompt_logits,)))
        number = self._prompt_logits = self._number()
        return PromptLogits(_Handle(number, self._call(Call("prefill", (list(chunks),), number))))

    def prompt_scores(self, logits: PromptLogits) -> PromptScores:
        """The leader's own: every process computed the same scores."""
        with self._group_errors(), self._watched():
            return self._local.prompt_scores(PromptLogits(_handle(logits).local))

    def first_tokens(self, logits: PromptLogits, index: int, rows: Sequence[DecodeRow]) -> Drawn:
        handle, sent = _handle(logits), self._sent_rows(rows)
        drawn: Drawn = self._call(Call("first_tokens", (Kept(handle.number), index, sent)), (handle.local, index, sent))
        return drawn

    def generate(self, rows: Sequence[DecodeRow], chained: Pending | None = None, burst: bool = False) -> Pending:
        number = self._number()
        previous = None if chained is None else _handle(chained)
        sent = self._sent_rows(rows)
        call = Call("generate", (sent, None if previous is None else Kept(previous.number), burst), number)
        local = (sent, None if previous is None else previous.local, burst)
        return Pending(_Handle(number, self._call(call, local)))

    def take(self, step: Pending) -> Drawn:
        handle = _handle(step)
        self._queued.append(Call("forget", (handle.number,)))
        with self._group_errors(), self._watched():
            return self._local.take(handle.local)

    def read_pages(self, pages: Sequence[int]) -> list[bytes]:
        contents: list[bytes] = self._call(Call("read_pages", (list(pages),)))
        return contents

    def load_adapter(self, slot: int, adapter: LoraAdapter | None) -> None:
        self._call(Call("load_adapter", (slot, adapter)))

    def encode_images(self, images: Sequence[PreparedImage]) -> list[np.ndarray]:
        """Every process runs the tower (its program spans the group's devices); the leader's
        embeddings join the prefill chunks that every runner then gets."""
        embeddings: list[np.ndarray] = self._call(Call("encode_images", (list(images),)))
        return embeddings

    def idle(self) -> None:
        """Sends what is queued, or an empty message: a dead follower is found while idle too."""
        self._call(None)

    # --- the mechanism --------------------------------------------------------------------------

    def _number(self) -> int:
        self._numbers += 1
        return self._numbers

    def _sent_rows(self, rows: Sequence[DecodeRow]) -> list[DecodeRow]:
        """The rows as every process's runner gets them: a grammar's mask filled once, here."""
        sent = []
        for row in rows:
            if row.constraint is not None:
                words = np.empty(self._mask_words, np.int32)
                row.constraint.fill_mask(words)
                row = dataclasses.replace(row, constraint=FilledMask(words))
            sent.append(row)
        return sent

    def _call(self, call: Call | None, local_args: tuple[Any, ...] | None = None) -> Any:
        """Sends the queued calls and `call`, then makes them here (`call` with `local_args` when
        given: the leader's own results in place of their numbers)."""
        queued, self._queued = self._queued, []
        compiling = call is not None and call.verb == "compile"  # minutes, on a big model: not a hang
        with self._group_errors(), self._watched(not compiling):
            self._channel.send(Calls(tuple(queued) if call is None else (*queued, call)))
            for earlier in queued:
                if earlier.verb != "forget":
                    getattr(self._local, earlier.verb)(*earlier.args)
            if call is None:
                return None
            return getattr(self._local, call.verb)(*(call.args if local_args is None else local_args))

    @contextmanager
    def _watched(self, watched: bool = True) -> Iterator[None]:
        self._call_began = time.monotonic() if watched else None
        try:
            yield
        finally:
            self._call_began = None

    def _watch(self) -> None:
        while not self._closed.wait(WATCH_INTERVAL_S):
            began = self._call_began
            if began is not None and time.monotonic() - began > self._lead.step_timeout_s:
                self._lead.on_hang(
                    f"a call of the group of {self._processes} processes has not returned in "
                    f"{self._lead.step_timeout_s:g} s: a process stopped answering"
                )
                return

    @contextmanager
    def _group_errors(self) -> Iterator[None]:
        try:
            yield
        except jax.errors.JaxRuntimeError as error:
            raise GroupBroken(f"the group of {self._processes} processes broke: {error}") from error


def _handle(result: object) -> _Handle:
    assert isinstance(result, _Handle), "a result of another runner"
    return result


class _Follower:
    """A follower's runner and the results it keeps for the leader's later calls."""

    def __init__(self, runner: DeviceRunner) -> None:
        self.runner = runner
        self._kept: dict[int, Any] = {}

    def make(self, calls: Sequence[Call]) -> None:
        for call in calls:
            if call.verb == "forget":
                del self._kept[call.args[0]]
                continue
            if call.verb not in MIRRORED:
                raise ValueError(f"the leader sent an unknown call {call.verb!r}")
            args = [self._kept[arg.number] if isinstance(arg, Kept) else arg for arg in call.args]
            if call.verb == "compile":
                args = [_quiet]  # the leader reports the compile plan's progress
            result = getattr(self.runner, call.verb)(*args)
            if call.keep is not None:
                self._kept[call.keep] = result


def _quiet(what: str, done: int, total: int) -> None:
    pass


def follow(channel: Channel, load: Callable[[Any], LoadedModel]) -> None:
    """A follower's life: loads each model the leader loads (`load` turns the leader's spec into
    the same LoadedModel), builds its runner and makes the leader's calls, until `Stop`. Raises
    when the group breaks (the leader died)."""
    model: LoadedModel | None = None
    follower: _Follower | None = None
    loaded: LoadedModel | None = None
    while True:
        message = channel.receive()
        if isinstance(message, Load):
            model, follower = None, None
            error = None
            try:
                loaded = load(message.spec)
            except Exception as failure:  # every process must reach the agreement, failed or not
                error = _reason(failure)
                log.error("loading failed: %s", error)
            try:
                agree(error)
            except GroupLoadFailed as failure:
                log.error("the group does not serve this model: %s", failure)
                continue
            model = loaded
        elif isinstance(message, Build):
            assert model is not None, "a build without a loaded model"
            follower = _Follower(DeviceRunner(model, message.config, message.pages))
            log.info("serving %s as process of the group", model.source)
        elif isinstance(message, Calls):
            assert follower is not None, "runner calls without a runner"
            follower.make(message.calls)
        elif isinstance(message, Release):
            if follower is not None:
                follower.runner.close()
            model, follower = None, None
        elif isinstance(message, Stop):
            return


def lead_load(channel: Channel, spec: Any, load: Callable[[], T]) -> T:
    """Tells the followers to load `spec`, loads it here with `load` and returns what it returned
    once every process has loaded; raises GroupLoadFailed (naming the processes) otherwise."""
    channel.send(Load(spec))
    try:
        result = load()
    except Exception as failure:
        agree(_reason(failure))  # raises, on every process: the followers wait for this either way
        raise
    agree(None)
    return result


def _reason(error: Exception) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__
