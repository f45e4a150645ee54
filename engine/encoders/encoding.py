"""`Encoding`: the encoders' share of the engine thread. Encode requests wait in the intake like
generation requests; the engine thread takes them and runs one encoder batch per iteration,
between its prefill and decode steps, so a running stream waits at most one batch for them.

A request's inputs run shortest first (similar lengths share a batch's padded length); its values
go back in input order once the last batch that holds one of them has run. A request of 2,048
inputs is many batches, each its own iteration.

Threads: only the engine thread calls `Encoding`'s methods; it reaches other threads only through
the intake (under its lock) and each request's sink.
"""

import logging
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from engine.api import Encoded, EncodeEvent, EncodeRequest, Failed, RequestRefused
from engine.device.runner_api import EncodeRunner

log = logging.getLogger(__name__)


@dataclass(eq=False)
class EncodeJob:
    id: int
    request: EncodeRequest
    sink: Callable[[EncodeEvent], None]
    submitted: float
    order: list[int] = field(init=False)  # input indices, shortest first
    done: int = 0  # of `order`, how many have run
    values: np.ndarray | None = None

    def __post_init__(self) -> None:
        inputs = self.request.inputs
        self.order = sorted(range(len(inputs)), key=lambda i: len(inputs[i].token_ids))

    @property
    def prompt_tokens(self) -> int:
        return sum(len(i.token_ids) for i in self.request.inputs)


class Encoding:
    def __init__(self, runners: Mapping[str, EncodeRunner], closed: Callable[[EncodeJob], None]) -> None:
        """`closed(job)` is told of each job that ends (the intake's count of pending requests)."""
        self.runners = runners
        self._closed = closed
        self._jobs: deque[EncodeJob] = deque()

    @property
    def busy(self) -> bool:
        return bool(self._jobs)

    def add(self, jobs: list[EncodeJob]) -> None:
        self._jobs.extend(jobs)

    def cancel(self, ids: set[int]) -> None:
        for job in [job for job in self._jobs if job.id in ids]:
            self._jobs.remove(job)
            self._closed(job)

    def run_batch(self) -> None:
        """One batch of the oldest job's next inputs; sends the job's values if it is complete."""
        job = self._jobs[0]
        runner = self.runners[job.request.encoder]
        inputs = job.request.inputs
        batch = job.order[job.done : job.done + 1]
        for index in job.order[job.done + 1 :]:
            if len(batch) + 1 > runner.rows_for(len(inputs[index].token_ids)):
                break
            batch.append(index)
        values = runner.run([inputs[i] for i in batch])
        if job.values is None:
            job.values = np.zeros((len(inputs), *values.shape[1:]), np.float32)
        job.values[batch] = values
        job.done += len(batch)
        if job.done == len(inputs):
            self._jobs.popleft()
            self._send(job, Encoded(job.values, job.prompt_tokens))
            self._closed(job)

    def fail_all(self, failure: Failed, also: list[EncodeJob]) -> None:
        """The engine is ending: every job it holds, and `also` (taken from the intake), fails."""
        held, self._jobs = list(self._jobs), deque()
        for job in held:
            self._send(job, failure)
            self._closed(job)
        for job in also:
            self._send(job, failure)

    def _send(self, job: EncodeJob, event: EncodeEvent) -> None:
        try:
            job.sink(event)
        except Exception:  # a sink that raises costs its own request, not the engine
            log.exception("sink of encode request %d raised", job.id)


def check_encode(request: EncodeRequest, runners: Mapping[str, EncodeRunner]) -> None:
    """Refuses a request invalid on its face (RequestRefused): an unknown encoder, no inputs, an
    empty input, one over the encoder's limit or with a token id outside its vocabulary."""
    runner = runners.get(request.encoder)
    if runner is None:
        loaded = ", ".join(sorted(runners)) or "none"
        raise RequestRefused("model_not_found", f"no encoder named {request.encoder!r} (loaded: {loaded})")
    if not request.inputs:
        raise RequestRefused("invalid_input", "the input is empty")
    for index, item in enumerate(request.inputs):
        if not item.token_ids:
            raise RequestRefused("invalid_input", f"input {index} is empty")
        if len(item.token_ids) > runner.max_tokens:
            raise RequestRefused(
                "context_length_exceeded",
                f"input {index} has {len(item.token_ids)} tokens; this model takes at most {runner.max_tokens}",
            )
        if min(item.token_ids) < 0 or max(item.token_ids) >= runner.vocab_size:
            raise RequestRefused("invalid_input", f"input {index} holds a token id outside 0..{runner.vocab_size - 1}")
