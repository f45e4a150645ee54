"""`EncodeTask`: the encode task's runner (engine/tasks/task_registry.py), serving the engine's
embedding and rerank models by name. Encode requests wait in the intake like generation requests;
the engine thread hands them over and runs one encoder batch per iteration, between its prefill
and decode steps, so a running stream waits at most one batch for them.

A request's inputs run shortest first (similar lengths share a batch's padded length); its values
go back in input order once the last batch that holds one of them has run. A request of 2,048
inputs is many batches, each its own iteration.

Threads: `check` runs on handler threads and reads only the runners' limits; `compile` and
`held_arrays` run on the thread that owns the engine; every other method runs on the engine thread.
"""

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from engine.api import Encoded, EncodeRequest, EncoderInput, RequestRefused
from engine.device.runner_api import Report
from engine.stats import HeldArrays
from engine.tasks.task_registry import Done, TaskJob, send

ENCODE = "encode"


class EncodeRunner(Protocol):
    """An encoder's verbs on the engine thread (engine/tasks/encode/encoder_model.py's `EncoderRunner`
    on JAX): a batch of inputs in, their embeddings or relevance logits out."""

    @property
    def max_tokens(self) -> int:
        """The most tokens one input may hold."""
        ...

    @property
    def vocab_size(self) -> int: ...

    def rows_for(self, length: int) -> int:
        """The most inputs of up to `length` tokens one batch holds."""
        ...

    def run(self, inputs: Sequence[EncoderInput]) -> np.ndarray:
        """Embeddings [N, D] or relevance logits [N], float32, for len(inputs) <= rows_for(the longest)."""
        ...

    def compile(self, report: Report, what: str) -> None:
        """Compiles every batch shape, reporting progress as `what`."""
        ...

    def held_arrays(self) -> HeldArrays: ...


@dataclass(eq=False)
class EncodeJob:
    """An encode request's progress through its batches."""

    job: TaskJob[EncodeRequest]
    order: list[int] = field(init=False)  # input indices, shortest first
    done: int = 0  # of `order`, how many have run
    values: np.ndarray | None = None

    def __post_init__(self) -> None:
        inputs = self.job.request.inputs
        self.order = sorted(range(len(inputs)), key=lambda i: len(inputs[i].token_ids))

    @property
    def prompt_tokens(self) -> int:
        return sum(len(i.token_ids) for i in self.job.request.inputs)


class EncodeTask:
    task = ENCODE
    request_type = EncodeRequest

    def __init__(self, runners: Mapping[str, EncodeRunner]) -> None:
        self.runners = dict(runners)
        self._jobs: deque[EncodeJob] = deque()

    def check(self, request: EncodeRequest) -> None:
        check_encode(request, self.runners)

    def compile(self, report: Report) -> None:
        for name, runner in self.runners.items():
            runner.compile(report, f"compiling encoder {name}")

    def held_arrays(self) -> HeldArrays:
        held = HeldArrays((), ())
        for runner in self.runners.values():
            held += runner.held_arrays()
        return held

    @property
    def busy(self) -> bool:
        return bool(self._jobs)

    def add(self, job: TaskJob[EncodeRequest]) -> None:
        self._jobs.append(EncodeJob(job))

    def cancel(self, ids: set[int]) -> list[TaskJob[EncodeRequest]]:
        cancelled = [encode for encode in self._jobs if encode.job.id in ids]
        for encode in cancelled:
            self._jobs.remove(encode)
        return [encode.job for encode in cancelled]

    def run_batch(self) -> list[Done]:
        """One batch of the oldest job's next inputs; sends the job's values if it is complete."""
        encode = self._jobs[0]
        request = encode.job.request
        runner = self.runners[request.encoder]
        inputs = request.inputs
        batch = encode.order[encode.done : encode.done + 1]
        for index in encode.order[encode.done + 1 :]:
            if len(batch) + 1 > runner.rows_for(len(inputs[index].token_ids)):
                break
            batch.append(index)
        values = runner.run([inputs[i] for i in batch])
        if encode.values is None:
            encode.values = np.zeros((len(inputs), *values.shape[1:]), np.float32)
        encode.values[batch] = values
        encode.done += len(batch)
        if encode.done < len(inputs):
            return []
        self._jobs.popleft()
        send(encode.job, Encoded(encode.values, encode.prompt_tokens))
        return [Done(encode.job, encode.prompt_tokens)]

    def drop_all(self) -> list[TaskJob[EncodeRequest]]:
        held, self._jobs = list(self._jobs), deque()
        return [encode.job for encode in held]


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
