"""`Lanes`: the decode lanes — who waits for one, who decodes in one, and how a row leaves it.

A request's rows wait as one unit at the back of the queue (a preempted row at its front) until
the scheduler admits them together; each then holds a lane of its own through its prefill and
decode. A row leaves its lane by finishing (its request closes with its last row, releasing its
LoRA adapter's slot) or by preemption: when pages run out, the most recently admitted row gives
its pages back and waits at the front of the queue to be recomputed (its full pages usually
survive in the prefix cache), never dropped.

Every event reaches its request through `send`: a sink that raises costs its own request
(cancelled), not the engine.

Threads: only the engine thread calls `Lanes` (from the scheduler, engine/serving/scheduler.py,
and its decode steps, engine/serving/decode_steps.py) and touches the queue, the rows and the page
pool. It shares only the intake, whose counters it updates under the intake's lock, never held
across a sink call (a sink may call `cancel`, which takes it).
"""

import logging
from collections import deque
from collections.abc import Collection

from engine.api import EngineEvent, Finished, Usage
from engine.serving.adapter_table import AdapterTable
from engine.serving.intake import FinishReason, Intake
from engine.serving.kv_pages import PagePool
from engine.serving.rows import Request, Row

log = logging.getLogger(__name__)


class Lanes:
    def __init__(self, lanes: int, pool: PagePool, intake: Intake, adapters: AdapterTable) -> None:
        self._pool = pool
        self._intake = intake
        self._adapters = adapters
        self._free = list(range(lanes - 1, -1, -1))
        self._seated = 0  # rows seated so far: the next row's admission order
        # Units of rows waiting for lanes, the next first; the scheduler queues and admits them.
        self.waiting: deque[list[Row]] = deque()
        # Rows decoding in their lanes, in the order they started; their decode steps add them.
        self.decoding: list[Row] = []

    def fit(self, unit: list[Row]) -> bool:
        """Whether a lane is free for each row of `unit`."""
        return len(self._free) >= len(unit)

    def seat(self, unit: list[Row]) -> None:
        """Gives each row of an admitted `unit` a lane, and its place in the admission order."""
        for row in unit:
            row.lane = self._free.pop()
            self._seated += 1
            row.admitted_seq = self._seated

    def unqueue(self, requests: Collection[Request]) -> None:
        """Takes the waiting rows of `requests` out of the queue."""
        for unit in self.waiting:
            unit[:] = [row for row in unit if row.request not in requests]
        kept = [unit for unit in self.waiting if unit]
        self.waiting.clear()  # in place: the queue is the same deque for its whole life
        self.waiting.extend(kept)

    def _release(self, row: Row) -> None:
        self._pool.release(row.pages)
        row.pages, row.named_pages = [], 0
        if row in self.decoding:
            self.decoding.remove(row)
        if row.lane is not None:
            self._free.append(row.lane)
            row.lane = None
            self._intake.lane_freed()

    def preempt(self, row: Row) -> None:
        """Releases the row's pages and lane; it waits at the front of the queue to be recomputed."""
        self._release(row)
        self.waiting.appendleft([row])
        self._intake.preempted()

    def finish(self, row: Row, reason: FinishReason, stop_token_id: int | None) -> None:
        """Ends the row (releasing its pages and lane) and tells its request; the request's last
        row closes it."""
        self._release(row)
        row.done = True
        entry = row.request
        entry.rows_unfinished -= 1
        usage = Usage(len(entry.request.prompt_ids), entry.cached_prompt_tokens, row.generated)
        self.send(entry, Finished(row.index, reason, stop_token_id, usage))
        if entry.rows_unfinished == 0:
            if entry.adapter is not None:
                self._adapters.release(entry.adapter.slot)
            self._intake.closed(entry)

    def send(self, entry: Request, event: EngineEvent) -> None:
        """Calls the request's sink; a sink that raises costs its own request (cancelled), not the engine."""
        try:
            entry.sink(event)
        except Exception:
            log.exception("sink of request %d raised; cancelling the request", entry.id)
            self._intake.cancel(entry.id)
