"""`Scheduler`: continuous batching over a paged KV cache, on the engine thread.

Each iteration the engine thread takes the new requests and cancels from the intake, ends the
requests that made no progress for their stall timeout (waiting counts; admission, a prefill
chunk and a token are progress), admits waiting requests while lanes and pages allow (reusing prefix-cached
pages), runs at most one prefill step (the next chunk of the oldest prompt, or the short last
chunks of up to PREFILL_ROWS prompts together; a finished prompt's rows draw their first tokens),
then one decode step for every decoding row (which also samples, on the device), and sends each
row's new token or finish to the request's sink. When there is nothing to do it waits in the
intake; `submit`, `cancel`, `drain` and `shutdown` wake it (and, for a runner that asks, its
`idle_interval`: a process group's keep-alive).

The scheduler composes three helpers, each owning its state: the lanes, their waiting queue and
how rows leave them (finish, preemption; engine/serving/lanes.py), the prefix cache's page names
and disk tier (engine/serving/prefix_cache.py), and the pipelined decode steps with their
prompt-lookup drafts (engine/serving/decode_steps.py). It keeps the prompts being prefilled and
the adapter jobs, serves the engine's other tasks (engine/tasks/task_registry.py: one batch of each
between the prefill and the decode step), and ends requests (cancels, stall timeouts, its own death).

A request's n rows share its prompt's KV pages: the prompt is prefilled once, and each row draws
its own first token from the logits of the prompt's last position (its own key and parameters),
so the first token costs no decode step. A row after the first that finds no page for its own
copy of a partial last page is preempted.

Threads: only the engine thread runs this class's methods (after `start`) and touches the rows,
the page pool and the runner. It shares only the intake, under the intake's lock, never held
across a runner or sink call (a sink may call `cancel`).
"""

import logging
import math
import threading
import time
from collections import deque

import numpy as np

from engine.api import Failed, Prefilled, TokenLogprob
from engine.device.runner_api import PREFILL_ROWS, InsertedRow, PrefillChunk, PromptLogits, Runner
from engine.serving.adapter_table import AdapterJob, AdapterTable
from engine.serving.decode_steps import DecodeSteps
from engine.serving.intake import FinishReason, Intake
from engine.serving.kv_pages import PagePool
from engine.serving.lanes import Lanes
from engine.serving.prefix_cache import PrefixCache
from engine.serving.prefix_disk import Loaded, PrefixDisk
from engine.serving.rows import Prefill, Request, Row
from engine.tasks.task_registry import TaskRegistry

log = logging.getLogger(__name__)


class Scheduler:
    def __init__(
        self,
        runner: Runner,
        pool: PagePool,
        intake: Intake,
        prefill_chunk: int,
        tasks: TaskRegistry,
        disk: PrefixDisk | None,
        adapters: AdapterTable | None,
        burst_max_step_ms: float,
    ) -> None:
        """`tasks`: the engine's other tasks, whose batches run on this thread too;
        `burst_max_step_ms`: the longest decode step a token after which bursts still run."""
        self._runner = runner
        self._adapters = adapters or AdapterTable(0, 0)
        self._adapter_jobs: list[AdapterJob] = []
        self._tasks = tasks
        self._pool = pool
        self._intake = intake
        self._page_size = runner.page_size
        self._prefill_chunk = prefill_chunk
        self._lanes = Lanes(runner.lanes, pool, intake, self._adapters)
        self._prefix = PrefixCache(runner, pool, intake, disk)
        self._decode_steps = DecodeSteps(runner, pool, intake, self._lanes, self._prefix, burst_max_step_ms)
        self._prefills: list[Prefill] = []  # admitted, in admission order
        self.thread = threading.Thread(target=self._run, name="engine", daemon=True)

    def _run(self) -> None:
        try:
            while True:
                busy = self._busy()
                work = self._intake.next_work(busy, self._runner.idle_interval)
                if not busy and not any(work):
                    self._runner.idle()
                    continue
                inbox, cancels, fetched, task_jobs, adapter_jobs, stopping = work
                self._tasks.add(task_jobs)
                self._adapter_jobs += adapter_jobs
                if stopping:
                    cancels.update({entry.id: "cancelled" for entry in self._in_flight()})
                    self._tasks.fail_all(Failed("unavailable", "the engine stopped"), self._intake.abandon_task_jobs())
                self._iterate(inbox, cancels, fetched)
                if stopping and not self._busy():
                    return
        except Exception as error:  # the engine thread must never die silently: fail every request
            self._die(error)

    def _busy(self) -> bool:
        """Whether there is work for the next iteration (a fetch in progress wakes the thread itself)."""
        return bool(
            self._lanes.waiting or self._prefills or self._decode_steps.busy or self._tasks.busy or self._adapter_jobs
        )

    def _iterate(self, inbox: deque[Request], cancels: dict[int, FinishReason], fetched: list[Loaded]) -> None:
        for entry in inbox:
            unit = entry.new_rows(self._runner.image_token_id)
            if not self._prefix.fetch(unit):
                self._lanes.waiting.append(unit)
        for loaded in fetched:
            fetched_unit = self._prefix.fetched(loaded)
            if fetched_unit is not None:  # else the request ended while its pages were read
                self._lanes.waiting.append(fetched_unit)
        now = time.monotonic()
        for entry in self._in_flight():
            stall_timeout = entry.request.stall_timeout
            if stall_timeout is not None and now - entry.progress_at >= stall_timeout:
                cancels.setdefault(entry.id, "timeout")
        if cancels:
            self._tasks.cancel(set(cancels))
            self._end_requests(cancels)
        if self._adapter_jobs:
            self._run_adapter_jobs()
        self._admit()
        if self._prefills:
            self._prefill_step()
        self._tasks.run_batches()
        if self._decode_steps.busy:
            self._decode_steps.step()

    def _in_flight(self) -> list[Request]:
        requests = {row.request for unit in self._lanes.waiting for row in unit}
        requests.update(self._prefix.fetching())
        requests.update(row.request for row in self._lanes.decoding)
        requests.update(row.request for prefill in self._prefills for row in prefill.rows)
        return list(requests)

    # --- admission and prefill --------------------------------------------------------------

    def _admit(self) -> None:
        waiting = self._lanes.waiting
        while len(self._prefills) < PREFILL_ROWS and waiting and self._lanes.fit(waiting[0]):
            unit = waiting[0]
            tokens, entry = unit[0].tokens, unit[0].request
            scored = entry.request.prompt_logprobs is not None and not entry.prompt_scored
            pages = [] if scored else self._pool.lookup(self._prefix.prompt_hashes(unit[0], tokens[:-1]))
            needed = math.ceil(len(tokens) / self._page_size) - len(pages)
            fresh = [p for p in (self._pool.allocate() for _ in range(needed)) if p is not None]
            if len(fresh) < needed:
                self._pool.release(pages + fresh)
                return
            waiting.popleft()
            cached = len(pages) * self._page_size
            now = time.monotonic()
            entry.progress_at = now
            self._intake.admitted(entry, len(unit), len(tokens), cached, now)
            self._lanes.seat(unit)
            self._prefills.append(Prefill(unit, tokens, pages + fresh, cached, scored))

    def _prefill_step(self) -> None:
        """Prefills the next chunk of the oldest prompt or, when several have no more than a short
        chunk left, of up to PREFILL_ROWS of them at once. Each chunk holds at least the prompt's
        last token, which no cached page holds; a finished prompt starts decoding."""
        runnable = [p for p in self._prefills if not p.scored or self._runner.scored_ready]
        if not runnable:  # only prompts to score, whose shape compiles while serving: on with it
            self._runner.idle()
            return
        batched = self._runner.batched_chunk
        short = [p for p in runnable if not p.scored and len(p.tokens) - p.next_position <= batched]
        batch = short[:PREFILL_ROWS] if len(short) > 1 else runnable[:1]
        limit = batched if len(batch) > 1 else self._prefill_chunk
        chunks = []
        for prefill in batch:
            start = prefill.next_position
            chunk = prefill.tokens[start : start + limit]
            # A scored chunk's positions each predict the prompt's next token; the last prompt
            # position predicts the answer's first, which is no prompt token.
            targets = [*prefill.tokens[start + 1 : start + len(chunk) + 1], -1][: len(chunk)] if prefill.scored else []
            media, rope = self._media(prefill.rows[0].request, start, len(chunk))
            chunks.append(PrefillChunk(chunk, start, prefill.pages, _slot(prefill.rows[0]), targets, media, rope))
            prefill.next_position += len(chunk)
        logits = self._runner.prefill(chunks)
        now = time.monotonic()
        for i, prefill in enumerate(batch):
            entry = prefill.rows[0].request
            entry.progress_at = now
            logprobs = self._prompt_logprobs(entry, chunks[i], logits) if prefill.scored else ()
            self._lanes.send(entry, Prefilled(prefill.next_position, len(prefill.tokens), logprobs))
            if prefill.next_position == len(prefill.tokens):
                self._prefills.remove(prefill)
                self._start_decoding(prefill, logits, i)

    def _media(self, entry: Request, start: int, length: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        """A chunk's image embeddings and M-RoPE positions (None, None: a text prompt). The
        prompt's images go through the vision tower here, on the engine thread, when its first
        chunk with an image token comes (a resent conversation whose image pages are cached
        needs none)."""
        media = entry.media
        if media is None:
            return None, None
        if media.needs_embeddings(start, length):
            media.embeddings = np.concatenate(self._runner.encode_images(media.images))
        return media.chunk(start, length)

    def _prompt_logprobs(self, entry: Request, chunk: PrefillChunk, logits: PromptLogits) -> tuple[TokenLogprob, ...]:
        """The chunk's scored prompt tokens with their logprobs and the request's top alternatives."""
        scores, top = self._runner.prompt_scores(logits), entry.request.prompt_logprobs or 0
        entry.prompt_scored = chunk.targets[-1] < 0  # the prompt's last chunk
        return tuple(
            TokenLogprob(
                target,
                float(scores.logprobs[i]),
                tuple(zip(scores.top_ids[i, :top].tolist(), scores.top_logprobs[i, :top].tolist(), strict=True)),
                rank=int(scores.ranks[i]),
            )
            for i, target in enumerate(chunk.targets)
            if target >= 0
        )

    def _start_decoding(self, prefill: Prefill, logits: PromptLogits, index: int) -> None:
        """Gives each row the shared prompt pages (rows after the first copy a partial last page)
        and its first token, drawn from the prompt's last logits (chunk `index` of the step's)."""
        full_pages = len(prefill.tokens) // self._page_size
        hashes = list(self._prefix.prompt_hashes(prefill.rows[0], prefill.tokens))
        self._prefix.save_prompt(prefill.pages, hashes)
        starting = []
        for row in prefill.rows:
            row.page_hashes = list(hashes)
            pages = list(prefill.pages)
            if row is not prefill.rows[0]:
                for page in pages[:full_pages]:
                    self._pool.hold(page)
                if len(pages) > full_pages:
                    copy = self._pool.allocate()
                    if copy is None:
                        self._pool.release(pages[:full_pages])
                        self._lanes.preempt(row)
                        continue
                    self._runner.copy_page(pages[-1], copy)
                    pages[-1] = copy
            row.pages = pages
            self._insert(row)
            starting.append(row)
        if starting:
            self._decode_steps.begin(starting, logits, index)

    def _insert(self, row: Row) -> None:
        assert row.lane is not None
        entry = row.request.request
        prompt_length = len(entry.prompt_ids)
        prompt, output = row.tokens[:prompt_length], row.tokens[prompt_length:]
        self._runner.insert(row.lane, InsertedRow(row.pages, entry.sampling, row.seed, prompt, output, _slot(row)))

    def _run_adapter_jobs(self) -> None:
        """Loads wait for nothing; an unload waits until no request using its adapter is in flight
        (none can start: new requests naming it are refused)."""
        waiting = []
        for job in self._adapter_jobs:
            if job.adapter is not None:
                self._runner.load_adapter(job.slot, job.adapter)
                self._adapters.loaded(job)
            elif self._adapters.idle(job.name):
                self._runner.load_adapter(job.slot, None)
                self._adapters.unloaded(job)
            else:
                waiting.append(job)
                continue
            job.done.set_result(None)
        self._adapter_jobs = waiting

    # --- request endings --------------------------------------------------------------------

    def _end_requests(self, reasons: dict[int, FinishReason]) -> None:
        """Ends every unfinished row of the given requests (cancel or stall timeout); unknown ids are ignored."""
        with self._intake.lock:
            ending = {entry for entry in self._intake.running.values() if entry.id in reasons}
        ending.update(row.request for unit in self._lanes.waiting for row in unit if row.request.id in reasons)
        ending.update(self._prefix.drop(reasons))
        for prefill in [p for p in self._prefills if p.rows[0].request in ending]:
            self._pool.release(prefill.pages)
            self._prefills.remove(prefill)
        self._lanes.unqueue(ending)
        for entry in ending:
            for row in entry.rows:
                if not row.done:
                    self._lanes.finish(row, reasons[entry.id], None)

    def _die(self, error: Exception) -> None:
        kind = self._runner.failure_kind(error)
        reason = f"{type(error).__name__}: {error}"
        log.error("engine thread died (%s): %s", kind, reason, exc_info=error)
        self._tasks.fail_all(Failed("fault", f"the engine failed: {reason}"), self._intake.abandon_task_jobs())
        for job in self._adapter_jobs:
            job.done.set_exception(RuntimeError(f"the engine failed: {reason}"))
        doomed = self._intake.died(kind, reason)
        doomed += [row.request for unit in self._lanes.waiting for row in unit if row.request.admitted is None]
        doomed += self._prefix.fetching()
        for entry in dict.fromkeys(doomed):
            self._lanes.send(entry, Failed("fault", f"the engine failed: {reason}"))


def _slot(row: Row) -> int:
    adapter = row.request.adapter
    return 0 if adapter is None else adapter.slot
