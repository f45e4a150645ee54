"""Tasks as the engine's seam. A request of any task comes through the engine's one front door
(`submit(request, sink)`, engine/serving/intake_front.py), waits in the one intake (its queue limit,
its counters and metrics, its cancels: engine/serving/intake.py) and runs on the one engine thread.
Generation is the engine's own task (`generate`), run in lanes by the scheduler
(engine/serving/scheduler.py); every other task is a `TaskRunner`'s work. The engine thread hands a
runner its new jobs and the cancels, and each iteration, between the prefill and the decode step,
runs one batch of every task that has work: a running stream waits at most one batch of each.

Adding a task (a transcription, an image): its request and event types in engine/api.py (the
request a `TaskRequest` of its event); its runner in a folder of its own here
(`engine/tasks/<task>/`), meeting `TaskRunner` — the host-side work between two steps, over device
work it compiles before serving; its route in handlers/. The host hands the runner to the engine
it builds (pooled/hosting/loading.py). The intake, the scheduler and the front door stay as they are.

Threads: `TaskRegistry.runner_for` (a request checked on its face) runs on handler threads and reads
only what never changes; `compile` and `held_arrays` run on the thread that owns the engine; every
other method runs on the engine thread alone.
"""

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from engine.api import Failed, RequestRefused, TaskRequest
from engine.device.runner_api import Report
from engine.stats import HeldArrays

log = logging.getLogger(__name__)

RequestT = TypeVar("RequestT", bound=TaskRequest[Any])


@dataclass(eq=False)
class TaskJob(Generic[RequestT]):
    """One request of a task, from the intake to its runner."""

    id: int
    task: str
    request: RequestT
    sink: Callable[[Any], None]  # takes the events of the request's type
    submitted: float  # time.monotonic()


@dataclass(frozen=True)
class Done:
    """A job whose answer was sent, with the input tokens it counts in the engine's metrics."""

    job: TaskJob[Any]
    prompt_tokens: int


class TaskRunner(Protocol[RequestT]):
    """The host-side work of one task between two steps of the engine thread."""

    @property
    def task(self) -> str:
        """The task's name, as the engine's `tasks()` lists it."""
        ...

    @property
    def request_type(self) -> type[RequestT]: ...

    def check(self, request: RequestT) -> None:
        """Raises RequestRefused for a request invalid on its face (on the caller's thread)."""
        ...

    def compile(self, report: Report) -> None:
        """Compiles every shape the task runs, before serving, reporting progress."""
        ...

    def held_arrays(self) -> HeldArrays: ...

    @property
    def busy(self) -> bool:
        """Whether a job it holds has work left."""
        ...

    def add(self, job: TaskJob[RequestT]) -> None: ...

    def cancel(self, ids: set[int]) -> list[TaskJob[RequestT]]:
        """Drops the jobs it holds with these ids; returns them."""
        ...

    def run_batch(self) -> list[Done]:
        """Runs one batch (the device's work between two steps) and sends the answer of each job
        that batch completes; returns those jobs."""
        ...

    def drop_all(self) -> list[TaskJob[RequestT]]:
        """Every job it holds, removed (the engine is ending)."""
        ...


def send(job: TaskJob[Any], event: object) -> None:
    """Calls the job's sink; a sink that raises costs its own request, not the engine."""
    try:
        job.sink(event)
    except Exception:
        log.exception("sink of %s request %d raised", job.task, job.id)


class TaskRegistry:
    """An engine's task runners, by request type and by task name."""

    def __init__(self, runners: Sequence[TaskRunner[Any]], ended: Callable[[TaskJob[Any], int | None], None]):
        """`ended(job, prompt_tokens)` is told of each job that ends: its prompt tokens once its
        answer was sent, None when it was cancelled or failed (the intake's counts)."""
        self._by_type = {runner.request_type: runner for runner in runners}
        self._by_name = {runner.task: runner for runner in runners}
        if len(self._by_type) != len(runners) or len(self._by_name) != len(runners):
            raise ValueError(f"one runner a task: {[runner.task for runner in runners]}")
        self._ended = ended

    def names(self) -> frozenset[str]:
        return frozenset(self._by_name)

    def runner_for(self, request: TaskRequest[Any], served: frozenset[str]) -> TaskRunner[Any]:
        """The runner of `request`'s task, the request checked on its face; RequestRefused when
        no runner takes it (`served`: the engine's tasks, for the refusal)."""
        runner = self._by_type.get(type(request))
        if runner is None:
            raise unserved(request, served)
        runner.check(request)
        return runner

    def compile(self, report: Report) -> None:
        for runner in self._by_name.values():
            runner.compile(report)

    def held_arrays(self) -> HeldArrays:
        held = HeldArrays((), ())
        for runner in self._by_name.values():
            held += runner.held_arrays()
        return held

    # --- the engine thread ------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return any(runner.busy for runner in self._by_name.values())

    def add(self, jobs: list[TaskJob[Any]]) -> None:
        for job in jobs:
            self._by_name[job.task].add(job)

    def cancel(self, ids: set[int]) -> None:
        for runner in self._by_name.values():
            for job in runner.cancel(ids):
                self._ended(job, None)

    def run_batches(self) -> None:
        """One batch of each task with work, in turn."""
        for runner in self._by_name.values():
            if runner.busy:
                for done in runner.run_batch():
                    self._ended(done.job, done.prompt_tokens)

    def fail_all(self, failure: Failed, abandoned: list[TaskJob[Any]]) -> None:
        """The engine is ending: every job the runners hold, and `abandoned` (taken back from the
        intake, which counted them out), fails."""
        for runner in self._by_name.values():
            for job in runner.drop_all():
                send(job, failure)
                self._ended(job, None)
        for job in abandoned:
            send(job, failure)


def unserved(request: TaskRequest[Any], served: frozenset[str]) -> RequestRefused:
    """The refusal of a request whose task the engine does not serve (`served`: those it does)."""
    tasks = ", ".join(sorted(served)) or "nothing"
    return RequestRefused("model_not_supported", f"this model serves {tasks}: it takes no {type(request).__name__}")
