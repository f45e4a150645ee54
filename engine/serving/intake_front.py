"""`IntakeFront`: the front door every engine offers other threads over its intake — one `submit`
for every task's requests, cancels, the queue bound, draining, waiting for idleness, its state and
counters — so that `Engine` and `TaskEngine` (engine/engine.py) share one front instead of a copy.

A generation request goes to the engine's lanes (`_generate`: an engine without them refuses it);
any other request goes to the runner of its task (engine/tasks/task_registry.py), is checked on its
face there and waits in the same intake, under the same queue bound and counters.

Threads: handler threads and the host's lifecycle thread call these methods; each takes the
intake's lock briefly (engine/serving/intake.py) and never waits on the device. A subclass runs
the engine thread and adds what only it has (generation, adapters, a KV pool).
"""

from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

from engine.api import EngineState, GenerationRequest, TaskRequest
from engine.serving.intake import Intake
from engine.serving.rows import Sink
from engine.stats import Bucket, EngineStats
from engine.tasks.encode.encode_task import ENCODE
from engine.tasks.task_registry import TaskRegistry, TaskRunner, unserved

GENERATE = "generate"
EventT = TypeVar("EventT")


class IntakeFront:
    def __init__(self, decode_lanes: int, max_queue: int, tasks: Sequence[TaskRunner[Any]]) -> None:
        self.decode_lanes = decode_lanes
        self._intake = Intake(decode_lanes, max_queue)
        self._tasks = TaskRegistry(tasks, self._intake.task_ended)

    @property
    def state(self) -> EngineState:
        return self._intake.state

    @property
    def failure(self) -> tuple[str, str] | None:
        """(cause, reason) once the engine thread has died."""
        return self._intake.failure

    def tasks(self) -> frozenset[str]:
        """The tasks it serves: its task runners' (an engine with lanes adds generation's)."""
        return self._tasks.names()

    def submit(self, request: TaskRequest[EventT], sink: Callable[[EventT], None]) -> int:
        if isinstance(request, GenerationRequest):
            return self._generate(request, cast(Sink, sink))
        runner = self._tasks.runner_for(request, self.tasks())
        return self._intake.enqueue_task(runner.task, request, sink)

    def _generate(self, request: GenerationRequest, sink: Sink) -> int:
        raise unserved(request, self.tasks())

    def cancel(self, request_id: int) -> None:
        self._intake.cancel(request_id)

    def set_max_queue(self, max_queue: int) -> None:
        """How many requests may wait from now on (`--max-queue` changed while serving); past it
        `submit` raises QueueFull. Requests already waiting keep their place."""
        self._intake.set_max_queue(max_queue)

    def drain(self) -> None:
        """Refuses new requests (EngineUnavailable); in-flight ones finish."""
        self._intake.drain()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Blocks until no request is in flight (or the engine is dead); False on timeout."""
        return self._intake.wait_idle(timeout)

    def stats(self) -> EngineStats:
        intake = self._intake
        with intake.lock:
            counters = intake.counters
            pages_total, pages_used = self._kv_pages()
            return EngineStats(
                state=intake.state,
                decode_lanes=self.decode_lanes,
                requests_running=len(intake.running),
                requests_waiting=intake.pending_requests,
                kv_pages_total=pages_total,
                kv_pages_used=pages_used,
                kv_cache_usage=pages_used / pages_total if pages_total else 0.0,
                prefix_cache_queries=counters["prefix_queries"],
                prefix_cache_hits=counters["prefix_hits"],
                prefix_cache_disk_hits=counters["prefix_disk_hits"],
                prompt_tokens=counters["prompt_tokens"],
                generation_tokens=counters["generation_tokens"],
                preemptions=counters["preemptions"],
                refusals=counters["refusals"],
                draft_tokens=counters["draft_tokens"],
                draft_tokens_accepted=counters["draft_accepted"],
                decode_steps=counters["decode_steps"],
                decode_host_seconds=counters["decode_host_ns"] / 1e9,
                encode_requests=intake.task_requests[ENCODE],
                time_to_first_token=intake.ttft.snapshot(),
                inter_token_latency=intake.itl.snapshot(),
                e2e_latency=intake.e2e.snapshot(),
                compiles_after_startup=self._compiles_after_startup(),
                buckets=self._buckets(),
                pending_buckets=self._pending_buckets(),
            )

    # What an engine with a KV pool and compiled steps reports; a task engine has neither.
    def _kv_pages(self) -> tuple[int, int]:
        """(total, used), read under the intake's lock."""
        return 0, 0

    def _compiles_after_startup(self) -> int:
        return 0

    def _buckets(self) -> tuple[Bucket, ...]:
        return ()

    def _pending_buckets(self) -> int:
        return 0
