"""`Intake`: what the engine thread shares with every other thread, under one lock.

Every task's requests come through here: generation requests into the inbox, another task's into
the task jobs (engine/tasks/task_registry.py), both under the one queue bound, counters and metrics.

Threads: handler threads enqueue requests, cancels and adapter jobs, drain, wait for idleness,
read stats and change the queue bound (`set_max_queue`, a configuration change); the engine
thread takes the inbox, the task jobs, the adapter jobs, the cancels and the disk tier's
finished loads (`next_work`, which waits on the condition when there is
nothing to do: nothing polls) and records what happened to each request. The disk tier's IO
thread hands over each finished load (`fetched`). Either side holds the lock only for these
exchanges and counters: never across a device call or a sink call.

A generation request is pending from `enqueue` until its rows first hold lanes (`admitted`), then
running until it closes; another task's request is pending until it ends (`task_ended`). A full
queue is refused with a `Retry-After` estimate (engine/serving/retry_after.py).
"""

import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple

from engine.api import EngineState, EngineUnavailable, GenerationRequest, QueueFull, TaskRequest
from engine.serving.adapter_table import AdapterJob, AdapterUse
from engine.serving.admission import Admission
from engine.serving.prefix_disk import Loaded
from engine.serving.retry_after import retry_after_seconds, smoothed_hold
from engine.serving.rows import Request, Row, Sink
from engine.stats import E2E_BUCKETS, ITL_BUCKETS, TTFT_BUCKETS, LatencyHistogram
from engine.tasks.task_registry import TaskJob

FinishReason = Literal["stop", "length", "cancelled", "timeout"]
COUNTERS = (
    "prefix_queries",
    "prefix_hits",
    "prefix_disk_hits",
    "prompt_tokens",
    "generation_tokens",
    "preemptions",
    "refusals",
    "draft_tokens",
    "draft_accepted",
    "decode_steps",
    "decode_host_ns",
)


class Work(NamedTuple):
    """What the engine thread takes from the intake each iteration."""

    inbox: deque[Request]
    cancels: dict[int, FinishReason]
    fetched: list[Loaded]
    task_jobs: list[TaskJob[Any]]
    adapter_jobs: list[AdapterJob]
    stopping: bool


class Intake:
    def __init__(self, lanes: int, max_queue: int) -> None:
        self.max_queue = max_queue
        self.state: EngineState = "serving"
        self.failure: tuple[str, str] | None = None
        self.lock = threading.Lock()
        self._wake = threading.Condition(self.lock)
        self._inbox: deque[Request] = deque()
        self._cancels: dict[int, FinishReason] = {}
        self._fetched: list[Loaded] = []
        self._task_jobs: list[TaskJob[Any]] = []
        self._adapter_jobs: list[AdapterJob] = []
        self._pending_requests = 0  # submitted, not yet holding lanes
        self._pending_rows = 0
        self._free_lane_count = lanes
        self.running: dict[int, Request] = {}
        self._next_id = 0
        self._average_hold: float | None = None
        self._stopping = False
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.task_requests: Counter[str] = Counter()  # another task's requests answered, by task
        self.ttft = LatencyHistogram(TTFT_BUCKETS)
        self.itl = LatencyHistogram(ITL_BUCKETS)
        self.e2e = LatencyHistogram(E2E_BUCKETS)

    # --- any thread -------------------------------------------------------------------------

    def enqueue(
        self,
        request: GenerationRequest,
        sink: Sink,
        admission: Admission,
        stop_ids: frozenset[int],
        adapter: AdapterUse | None = None,
    ) -> int:
        """Queues a request already valid on its face; raises EngineUnavailable or QueueFull."""
        with self.lock:
            if self.state != "serving":
                raise EngineUnavailable(f"the engine is {self.state}")
            starts_now = self._pending_rows + request.n <= self._free_lane_count
            if not starts_now and self._pending_requests >= self.max_queue:
                self.counters["refusals"] += 1
                raise QueueFull(self._retry_after_locked())
            self._next_id += 1
            entry = Request(self._next_id, request, sink, admission, stop_ids, time.monotonic(), adapter)
            self._pending_requests += 1
            self._pending_rows += request.n
            self._inbox.append(entry)
            self._wake.notify_all()  # wait_idle callers share the condition
            return entry.id

    def enqueue_task(self, task: str, request: TaskRequest[Any], sink: Callable[[Any], None]) -> int:
        """Queues a request of `task` (not generation) already valid on its face; raises
        EngineUnavailable or QueueFull. It counts as a pending request until it ends."""
        with self.lock:
            if self.state != "serving":
                raise EngineUnavailable(f"the engine is {self.state}")
            if self._pending_requests >= self.max_queue:
                self.counters["refusals"] += 1
                raise QueueFull(self._retry_after_locked())
            self._next_id += 1
            self._pending_requests += 1
            self._task_jobs.append(TaskJob(self._next_id, task, request, sink, time.monotonic()))
            self._wake.notify_all()
            return self._next_id

    def enqueue_adapter_job(self, job: AdapterJob) -> None:
        with self.lock:
            if self.state != "serving":
                raise EngineUnavailable(f"the engine is {self.state}")
            self._adapter_jobs.append(job)
            self._wake.notify_all()

    def cancel(self, request_id: int) -> None:
        with self.lock:
            self._cancels.setdefault(request_id, "cancelled")
            self._wake.notify_all()  # wait_idle callers share the condition

    def drain(self) -> None:
        with self.lock:
            if self.state == "serving":
                self.state = "draining"

    def stop(self) -> None:
        """Asks the engine thread to cancel everything and end."""
        with self.lock:
            if self.state == "serving":
                self.state = "draining"
            self._stopping = True
            self._wake.notify_all()

    def wait_idle(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            while self.state != "dead" and (self.running or self._pending_requests):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._wake.wait(left)
            return True

    def set_max_queue(self, max_queue: int) -> None:
        """A new bound for requests waiting for lanes; those already waiting stay queued."""
        with self.lock:
            self.max_queue = max_queue

    @property
    def pending_requests(self) -> int:
        return self._pending_requests

    def _retry_after_locked(self) -> int:
        admitted = [entry.admitted for entry in self.running.values() if entry.admitted is not None]
        return retry_after_seconds(time.monotonic(), min(admitted, default=None), self._average_hold)

    # --- the engine thread ------------------------------------------------------------------

    def fetched(self, loaded: Loaded) -> None:
        """A disk-tier load finished (called on its IO thread)."""
        with self.lock:
            self._fetched.append(loaded)
            self._wake.notify_all()

    def next_work(self, busy: bool, timeout: float | None = None) -> Work:
        """The new requests, the cancels (every new request too, when stopping), the finished disk
        loads, the new task jobs and whether the engine is stopping; waits while there is
        none of these and the engine is not `busy`, for at most `timeout` seconds (then all are empty)."""
        with self.lock:
            while (
                not (
                    self._inbox
                    or self._task_jobs
                    or self._cancels
                    or self._fetched
                    or self._adapter_jobs
                    or self._stopping
                )
                and not busy
            ):
                if not self._wake.wait(timeout):
                    break
            inbox, self._inbox = self._inbox, deque()
            cancels, self._cancels = self._cancels, {}
            fetched, self._fetched = self._fetched, []
            task_jobs, self._task_jobs = self._task_jobs, []
            adapter_jobs, self._adapter_jobs = self._adapter_jobs, []
            if self._stopping:
                cancels.update({entry.id: "cancelled" for entry in inbox})
            return Work(inbox, cancels, fetched, task_jobs, adapter_jobs, self._stopping)

    def abandon_task_jobs(self) -> list[TaskJob[Any]]:
        """The task jobs not yet taken, removed (the engine is ending)."""
        with self.lock:
            jobs, self._task_jobs = self._task_jobs, []
            self._pending_requests -= len(jobs)
            self._wake.notify_all()
            return jobs

    def task_ended(self, job: TaskJob[Any], prompt_tokens: int | None) -> None:
        """A task job ended: answered, counting its `prompt_tokens`, or (None) cancelled or failed."""
        now = time.monotonic()
        with self.lock:
            self._pending_requests -= 1
            if prompt_tokens is not None:
                self.counters["prompt_tokens"] += prompt_tokens
                self.task_requests[job.task] += 1
                self.e2e.observe(now - job.submitted)
            self._wake.notify_all()

    def admitted(self, entry: Request, rows: int, prompt_tokens: int, cached_tokens: int, now: float) -> None:
        """`rows` rows of `entry` took lanes; the first time, the request starts running."""
        with self.lock:
            self._free_lane_count -= rows
            if entry.admitted is None:
                entry.admitted = now
                entry.cached_prompt_tokens = cached_tokens
                self._pending_requests -= 1
                self._pending_rows -= rows
                self.running[entry.id] = entry
                self.counters["prompt_tokens"] += prompt_tokens
                self.counters["prefix_queries"] += prompt_tokens
                self.counters["prefix_hits"] += cached_tokens

    def tokens(self, taken: Sequence[tuple[Row, float | None]], now: float) -> None:
        """Counts a step's new tokens and their latencies, under one lock for the whole step: each
        a row's token and its gap since the row's token before (None: the row's first)."""
        with self.lock:
            self.counters["generation_tokens"] += len(taken)
            for row, gap in taken:
                entry = row.request
                if entry.first_token_at is None:
                    entry.first_token_at = now
                    self.ttft.observe(now - entry.submitted)
                elif gap is not None:
                    self.itl.observe(gap)

    def lane_freed(self) -> None:
        with self.lock:
            self._free_lane_count += 1

    def restored(self, tokens: int) -> None:
        with self.lock:
            self.counters["prefix_disk_hits"] += tokens

    def drafted(self, proposed: int, accepted: int) -> None:
        """Counts a step's draft tokens and those its rows' draws agreed with."""
        with self.lock:
            self.counters["draft_tokens"] += proposed
            self.counters["draft_accepted"] += accepted

    def stepped(self, host_ns: int, steps: int = 1) -> None:
        """Counts a decode step (a burst: its `steps`) and the engine thread's time on it outside
        the wait for tokens."""
        with self.lock:
            self.counters["decode_steps"] += steps
            self.counters["decode_host_ns"] += host_ns

    def preempted(self) -> None:
        with self.lock:
            self.counters["preemptions"] += 1

    def closed(self, entry: Request) -> None:
        now = time.monotonic()
        with self.lock:
            if entry.admitted is None:
                self._pending_requests -= 1
                self._pending_rows -= entry.request.n
            else:
                del self.running[entry.id]
                self._average_hold = smoothed_hold(self._average_hold, now - entry.admitted)
                self.e2e.observe(now - entry.submitted)
            self._wake.notify_all()

    def died(self, kind: str, reason: str) -> list[Request]:
        """Marks the engine dead; returns the requests in flight that it knows of (running or in the inbox)."""
        with self.lock:
            self.state = "dead"
            self.failure = (kind, reason)
            doomed = list(self.running.values()) + list(self._inbox)
            self._inbox.clear()
            self.running.clear()
            self._pending_requests = self._pending_rows = 0
            self._wake.notify_all()
        return doomed
