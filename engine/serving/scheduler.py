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

Decode steps are pipelined: while the same rows keep decoding, step N+1 is dispatched on step N's
sampled tokens, still on the device, before the host takes step N's tokens and calls the sinks,
so the host's share of a step (the dispatch, the sinks, the HTTP side's work they wake) overlaps
the device's. A change of rows, a grammar (its mask needs the token) or a row's last token
settles the step in flight first; a token in flight for a row that ended meanwhile is dropped.

While few rows decode (the runner's `draft_rows`), a row whose last tokens occurred earlier in
its context brings a prompt-lookup draft (engine/serving/drafts.py) to the step, and takes as many tokens
as the step's draws agreed with; such a step starts from host tokens and is not chained on, and a
row that has a draft keeps the step before it from chaining too.

With a disk tier (engine/serving/prefix_disk.py), a new request whose prompt continues past the pages
cached on the device with pages the disk holds waits, unadmitted, while the disk's IO thread
reads them; the engine thread then writes them into free pages, named like prefilled ones, and
queues the request, whose admission finds them as cached pages. A finished prompt's full pages
that the disk lacks are read back from the device and queued for the IO thread to write.

A request's n rows share its prompt's KV pages: the prompt is prefilled once, and each row draws
its own first token from the logits of the prompt's last position (its own key and parameters),
so the first token costs no decode step. When pages run out, the most recently admitted row is
preempted: its pages are released and it waits at the front of the queue to be recomputed (its
full pages usually survive in the prefix cache), never dropped.

Threads: only the engine thread runs this class's methods (after `start`) and touches the rows,
the page pool and the runner. It shares only the intake, under the intake's lock, never held
across a runner or sink call (a sink may call `cancel`).
"""

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from engine.api import EngineEvent, Failed, Finished, Prefilled, TokenLogprob, Tokens, Usage
from engine.device.runner_api import (
    PREFILL_ROWS,
    DecodeRow,
    Drawn,
    EncodeRunner,
    InsertedRow,
    Pending,
    PrefillChunk,
    PromptLogits,
    Runner,
)
from engine.encoders.encoding import Encoding
from engine.lora.adapter_table import AdapterJob, AdapterTable
from engine.serving.drafts import PromptLookup
from engine.serving.intake import FinishReason, Intake
from engine.serving.kv_pages import PagePool, extend_page_hashes
from engine.serving.prefix_disk import Loaded, PrefixDisk
from engine.serving.rows import Prefill, Request, Row

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Fetch:
    """A request waiting for pages from the disk tier: the loaded run starts at page `start` of
    its prompt's `hashes` (the pages before it were cached on the device)."""

    unit: list[Row]
    hashes: list[bytes]
    start: int


@dataclass(frozen=True)
class _Flight:
    """A decode step dispatched to the device whose tokens the host has not taken yet, and the
    draft tokens its rows brought (a step with drafts is never chained on)."""

    rows: list[Row]
    step: Pending
    drafted: int = 0


class Scheduler:
    def __init__(
        self,
        runner: Runner,
        pool: PagePool,
        intake: Intake,
        prefill_chunk: int,
        disk: PrefixDisk | None = None,
        encoders: Mapping[str, EncodeRunner] | None = None,
        adapters: AdapterTable | None = None,
    ) -> None:
        self._runner = runner
        self._adapters = adapters or AdapterTable(0, 0)
        self._adapter_jobs: list[AdapterJob] = []
        self._encoding = Encoding(encoders or {}, intake.encoded)
        self._disk = disk
        self._fetching: dict[int, _Fetch] = {}  # by request id
        self._pool = pool
        self._intake = intake
        self._page_size = runner.page_size
        self._prefill_chunk = prefill_chunk
        self._free_lanes = list(range(runner.lanes - 1, -1, -1))
        self._waiting: deque[list[Row]] = deque()
        self._prefills: list[Prefill] = []  # admitted, in admission order
        self._decoding: list[Row] = []
        self._flight: _Flight | None = None
        self._admissions = 0
        self.thread = threading.Thread(target=self._run, name="engine", daemon=True)

    def _run(self) -> None:
        try:
            while True:
                busy = self._busy()
                work = self._intake.next_work(busy, self._runner.idle_interval)
                if not busy and not any(work):
                    self._runner.idle()
                    continue
                inbox, cancels, fetched, encodes, adapter_jobs, stopping = work
                self._encoding.add(encodes)
                self._adapter_jobs += adapter_jobs
                if stopping:
                    cancels.update({entry.id: "cancelled" for entry in self._in_flight()})
                    self._encoding.fail_all(Failed("unavailable", "the engine stopped"), self._intake.abandon_encodes())
                self._iterate(inbox, cancels, fetched)
                if stopping and not self._busy():
                    return
        except Exception as error:  # the engine thread must never die silently: fail every request
            self._die(error)

    def _busy(self) -> bool:
        """Whether there is work for the next iteration (a fetch in progress wakes the thread itself)."""
        return bool(
            self._waiting
            or self._prefills
            or self._decoding
            or self._flight is not None
            or self._encoding.busy
            or self._adapter_jobs
        )

    def _iterate(self, inbox: deque[Request], cancels: dict[int, FinishReason], fetched: list[Loaded]) -> None:
        for entry in inbox:
            unit = entry.new_rows()
            if not self._fetch(unit):
                self._waiting.append(unit)
        for loaded in fetched:
            fetch = self._fetching.pop(loaded.ticket, None)
            if fetch is not None:  # else the request ended while its pages were read
                self._restore(fetch, loaded)
                self._waiting.append(fetch.unit)
        now = time.monotonic()
        for entry in self._in_flight():
            stall_timeout = entry.request.stall_timeout
            if stall_timeout is not None and now - entry.progress_at >= stall_timeout:
                cancels.setdefault(entry.id, "timeout")
        if cancels:
            self._encoding.cancel(set(cancels))
            self._end_requests(cancels)
        if self._adapter_jobs:
            self._run_adapter_jobs()
        self._admit()
        if self._prefills:
            self._prefill_step()
        if self._encoding.busy:
            self._encoding.run_batch()
        if self._decoding or self._flight is not None:
            self._decode_step()

    def _in_flight(self) -> list[Request]:
        requests = {row.request for unit in self._waiting for row in unit}
        requests.update(fetch.unit[0].request for fetch in self._fetching.values())
        requests.update(row.request for row in self._decoding)
        requests.update(row.request for prefill in self._prefills for row in prefill.rows)
        return list(requests)

    # --- the disk tier ----------------------------------------------------------------------

    def _fetch(self, unit: list[Row]) -> bool:
        """Starts reading the pages of `unit`'s prompt that follow its device-cached pages from the
        disk tier, if it holds any; the unit waits for them (True) or is not fetching (False)."""
        if self._disk is None:
            return False
        hashes = self._prompt_hashes(unit[0], unit[0].tokens[:-1])
        start = self._pool.cached_run(hashes)
        found = self._disk.has_run(hashes[start:])
        if found == 0:
            return False
        entry = unit[0].request
        self._fetching[entry.id] = _Fetch(unit, hashes, start)
        self._disk.load(entry.id, hashes[start : start + found])
        return True

    def _restore(self, fetch: _Fetch, loaded: Loaded) -> None:
        """Writes the loaded pages into free pages, named for the prefix cache. The device-cached
        pages before them are held meanwhile, so that no allocation here evicts them."""
        held = self._pool.lookup(fetch.hashes[: fetch.start])
        if len(held) < fetch.start:  # evicted since: the loaded run no longer joins the prefix
            self._pool.release(held)
            return
        pages = []
        for _ in loaded.contents:
            page = self._pool.allocate()
            if page is None:
                break
            pages.append(page)
        self._runner.write_pages(pages, loaded.contents[: len(pages)])
        for page, content_hash in zip(pages, loaded.hashes, strict=False):
            self._pool.name(page, content_hash)
        self._pool.release(held + pages)
        self._intake.restored(len(pages) * self._page_size)

    def _save_prompt(self, prefill: Prefill, hashes: list[bytes]) -> None:
        """Queues the prompt's full pages that the disk tier lacks to be written there."""
        assert self._disk is not None
        missing = self._disk.missing(hashes)
        if missing:
            contents = self._runner.read_pages([prefill.pages[i] for i in missing])
            self._disk.save([hashes[i] for i in missing], contents)

    # --- admission and prefill --------------------------------------------------------------

    def _admit(self) -> None:
        while len(self._prefills) < PREFILL_ROWS and self._waiting and len(self._free_lanes) >= len(self._waiting[0]):
            unit = self._waiting[0]
            tokens = unit[0].tokens
            pages = self._pool.lookup(self._prompt_hashes(unit[0], tokens[:-1]))
            needed = math.ceil(len(tokens) / self._page_size) - len(pages)
            fresh = [p for p in (self._pool.allocate() for _ in range(needed)) if p is not None]
            if len(fresh) < needed:
                self._pool.release(pages + fresh)
                return
            self._waiting.popleft()
            cached = len(pages) * self._page_size
            entry, now = unit[0].request, time.monotonic()
            entry.progress_at = now
            self._intake.admitted(entry, len(unit), len(tokens), cached, now)
            for row in unit:
                row.lane = self._free_lanes.pop()
                self._admissions += 1
                row.admitted_seq = self._admissions
            self._prefills.append(Prefill(unit, tokens, pages + fresh, cached))

    def _prefill_step(self) -> None:
        """Prefills the next chunk of the oldest prompt or, when several have no more than a short
        chunk left, of up to PREFILL_ROWS of them at once. Each chunk holds at least the prompt's
        last token, which no cached page holds; a finished prompt starts decoding."""
        batched = self._runner.batched_chunk
        short = [p for p in self._prefills if len(p.tokens) - p.next_position <= batched]
        batch = short[:PREFILL_ROWS] if len(short) > 1 else self._prefills[:1]
        limit = batched if len(batch) > 1 else self._prefill_chunk
        chunks = []
        for prefill in batch:
            chunk = prefill.tokens[prefill.next_position : prefill.next_position + limit]
            chunks.append(PrefillChunk(chunk, prefill.next_position, prefill.pages, _slot(prefill.rows[0])))
            prefill.next_position += len(chunk)
        logits = self._runner.prefill(chunks)
        now = time.monotonic()
        for i, prefill in enumerate(batch):
            entry = prefill.rows[0].request
            entry.progress_at = now
            self._send(entry, Prefilled(prefill.next_position, len(prefill.tokens)))
            if prefill.next_position == len(prefill.tokens):
                self._prefills.remove(prefill)
                self._start_decoding(prefill, logits, i)

    def _start_decoding(self, prefill: Prefill, logits: PromptLogits, index: int) -> None:
        """Gives each row the shared prompt pages (rows after the first copy a partial last page)
        and its first token, drawn from the prompt's last logits (chunk `index` of the step's)."""
        full_pages = len(prefill.tokens) // self._page_size
        hashes = list(self._prompt_hashes(prefill.rows[0], prefill.tokens))
        if self._disk is not None:
            self._save_prompt(prefill, hashes)
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
                        self._preempt(row)
                        continue
                    self._runner.copy_page(pages[-1], copy)
                    pages[-1] = copy
            row.pages = pages
            row.drafts = PromptLookup(row.tokens) if self._may_draft(row) else None
            self._insert(row)
            self._decoding.append(row)
            starting.append(row)
        if starting:
            self._take_tokens(starting, self._runner.first_tokens(logits, index, self._step_rows(starting)))

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

    def _prompt_hashes(self, row: Row, tokens: list[int]) -> list[bytes]:
        """The hashes of the full pages of `tokens` (the row's own, or their start), kept on the row
        so that a long prompt is hashed once from its fetch to its decode."""
        # The row may hold more (a row preempted before its first token hashed its whole prompt).
        hashes = extend_page_hashes(row.page_hashes, tokens, self._page_size, _root(row))
        return hashes[: len(tokens) // self._page_size]

    def _insert(self, row: Row) -> None:
        assert row.lane is not None
        entry = row.request.request
        prompt_length = len(entry.prompt_ids)
        prompt, output = row.tokens[:prompt_length], row.tokens[prompt_length:]
        self._runner.insert(row.lane, InsertedRow(row.pages, entry.sampling, row.seed, prompt, output, _slot(row)))

    def _name_full_pages(self, row: Row, kv_written: int) -> None:
        full = kv_written // self._page_size
        if full > row.named_pages:
            hashes = extend_page_hashes(
                row.page_hashes, row.tokens[: full * self._page_size], self._page_size, _root(row)
            )
            for page, content_hash in zip(row.pages[row.named_pages : full], hashes[row.named_pages :], strict=True):
                self._pool.name(page, content_hash)
            row.named_pages = full

    # --- decode -----------------------------------------------------------------------------

    def _grow_pages(self) -> None:
        """Gives each decoding row the page its next position needs, preempting the newest rows if none is left."""
        for row in sorted(self._decoding, key=lambda r: r.admitted_seq):
            while row.lane is not None and len(row.pages) * self._page_size < len(row.tokens):
                page = self._pool.allocate()
                if page is None:
                    self._preempt(max(self._decoding, key=lambda r: r.admitted_seq))
                    continue
                self._add_page(row, page)

    def _add_page(self, row: Row, page: int) -> None:
        assert row.lane is not None
        self._runner.add_page(row.lane, len(row.pages), page)
        row.pages.append(page)

    @staticmethod
    def _step_rows(rows: list[Row], ahead: int = 0, drafts: list[Sequence[int]] | None = None) -> list[DecodeRow]:
        """The rows as a step sees them, with their `drafts`; `ahead` tokens of each are still in
        flight (not in `tokens`)."""
        step_rows = []
        for i, row in enumerate(rows):
            assert row.lane is not None
            position = len(row.tokens) - 1 + ahead
            draft = drafts[i] if drafts else ()
            draws = row.generated + ahead
            step_rows.append(DecodeRow(row.lane, position, row.tokens[-1], draws, row.constraint, draft))
        return step_rows

    # --- drafts -----------------------------------------------------------------------------

    def _may_draft(self, row: Row) -> bool:
        """Whether a step can check drafts for the row: its grammar's mask and its penalties
        depend on each token before the one drawn, which a step over a draft does not know."""
        sampling = row.request.request.sampling
        penalised = (sampling.repetition_penalty, sampling.presence_penalty, sampling.frequency_penalty) != (
            1.0,
            0.0,
            0.0,
        )
        return self._runner.draft_tokens > 0 and row.constraint is None and not penalised

    def _drafts(self, rows: list[Row]) -> list[Sequence[int]]:
        """Each row's draft for the next step (empty for most rows: no match, or too many rows),
        cut to the tokens it may still draw and to the pages it holds or can get without preempting."""
        if len(rows) > self._runner.draft_rows:
            return [() for _ in rows]
        drafts: list[Sequence[int]] = []
        for row in rows:
            limit = min(self._runner.draft_tokens, row.request.max_tokens - row.generated - 1)
            draft = row.drafts.draft(limit) if row.drafts is not None else ()
            while draft and len(row.pages) * self._page_size < len(row.tokens) + len(draft):
                page = self._pool.allocate()
                if page is None:
                    draft = draft[: len(row.pages) * self._page_size - len(row.tokens)]
                    break
                self._add_page(row, page)
            drafts.append(draft)
        return drafts

    def _drafting(self, rows: list[Row]) -> bool:
        """Whether any row has a draft now: then the next step should not chain (a step with
        drafts starts from the host's tokens)."""
        if len(rows) > self._runner.draft_rows:
            return False
        return any(row.drafts is not None and row.drafts.draft(1) for row in rows)

    def _decode_step(self) -> None:
        """Runs one decode step for every decoding row. When the rows are the same as the step in
        flight's, the next step is dispatched on that step's sampled tokens (still on the device)
        before its results are taken. Otherwise the flight is settled first and the step starts
        from host tokens."""
        flight, self._flight = self._flight, None
        if flight is not None and self._chains(flight):
            self._flight = _Flight(flight.rows, self._runner.generate(self._step_rows(flight.rows, 1), flight.step))
            self._take_tokens(flight.rows, self._runner.take(flight.step))
            return
        if flight is not None:
            self._take_tokens(flight.rows, self._runner.take(flight.step), flight.drafted)
        self._grow_pages()
        rows = list(self._decoding)
        if rows:
            drafts = self._drafts(rows)
            step = self._runner.generate(self._step_rows(rows, drafts=drafts))
            self._flight = _Flight(rows, step, sum(len(draft) for draft in drafts))

    def _chains(self, flight: _Flight) -> bool:
        """Whether the next step can start from `flight`'s tokens before they reach the host: the
        same rows still decode, with no drafts then or now, none has a grammar (its mask needs the
        token), none ends on its length with that token, and each has a page for the position after it (allocated here,
        never by preempting: preemption needs the tokens settled; a page allocated before the
        answer turns out False is one the row needs next step anyway)."""
        if flight.drafted or flight.rows != self._decoding or self._drafting(flight.rows):
            return False
        for row in flight.rows:
            if row.constraint is not None or row.generated + 1 >= row.request.max_tokens:
                return False
            if len(row.pages) * self._page_size <= len(row.tokens):
                page = self._pool.allocate()
                if page is None:
                    return False
                self._add_page(row, page)
        return True

    def _take_tokens(self, rows: list[Row], drawn: Drawn, drafted: int = 0) -> None:
        """Hands each row the tokens it takes from the step (one, or more where its draft held), in
        one event; every row's KV is written up to its last token, and a taken draft token's at
        its position."""
        now = time.monotonic()
        for i, row in enumerate(rows):
            if row.lane is None:  # ended (cancel, stall timeout, a stop token) while this token was in flight
                continue
            taken: list[int] = []
            logprobs: list[TokenLogprob] = []
            ending: tuple[FinishReason, int | None] | None = None
            for j in range(int(drawn.taken[i])):
                self._name_full_pages(row, len(row.tokens))
                ending = self._take_token(row, int(drawn.tokens[i, j]), drawn, (i, j), now, taken, logprobs)
                if ending is not None:
                    break
            if taken:
                self._send(row.request, Tokens(row.index, tuple(taken), tuple(logprobs) if logprobs else None))
            if ending is not None:
                self._finish_row(row, *ending)
        if drafted:
            self._intake.drafted(drafted, int(drawn.taken[: len(rows)].sum()) - len(rows))

    def _take_token(
        self,
        row: Row,
        token: int,
        drawn: Drawn,
        at: tuple[int, int],
        now: float,
        taken: list[int],
        logprobs: list[TokenLogprob],
    ) -> tuple[FinishReason, int | None] | None:
        """Adds a drawn token to the row (and to `taken`, with its logprobs to `logprobs`), unless it
        is a stop token; returns how the row ends, if it does with this token."""
        entry = row.request
        if token in entry.stop_ids:
            return "stop", token
        row.tokens.append(token)
        row.generated += 1
        taken.append(token)
        self._intake.token(row, now)
        row.last_token_at = entry.progress_at = now
        top_n = entry.request.sampling.logprobs
        if drawn.logprobs is not None and top_n is not None:
            chosen, top_ids, top_values = drawn.logprobs
            top = tuple((int(t), float(v)) for t, v in zip(top_ids[at][:top_n], top_values[at][:top_n], strict=True))
            logprobs.append(TokenLogprob(token, float(chosen[at]), top))
        if row.constraint is not None:
            row.constraint.accept(token)
            if row.constraint.is_finished():
                return "stop", None
        if row.generated >= entry.max_tokens:
            return entry.admission.length_finish, None
        return None

    def _send(self, entry: Request, event: EngineEvent) -> None:
        """Calls the request's sink; a sink that raises costs its own request (cancelled), not the engine."""
        try:
            entry.sink(event)
        except Exception:
            log.exception("sink of request %d raised; cancelling the request", entry.id)
            self._intake.cancel(entry.id)

    # --- row and request endings ------------------------------------------------------------

    def _release_lane(self, row: Row) -> None:
        self._pool.release(row.pages)
        row.pages, row.named_pages = [], 0
        if row in self._decoding:
            self._decoding.remove(row)
        if row.lane is not None:
            self._free_lanes.append(row.lane)
            row.lane = None
            self._intake.lane_freed()

    def _preempt(self, row: Row) -> None:
        self._release_lane(row)
        self._waiting.appendleft([row])
        self._intake.preempted()

    def _finish_row(self, row: Row, reason: FinishReason, stop_token_id: int | None) -> None:
        self._release_lane(row)
        row.done = True
        entry = row.request
        entry.rows_unfinished -= 1
        usage = Usage(len(entry.request.prompt_ids), entry.cached_prompt_tokens, row.generated)
        self._send(entry, Finished(row.index, reason, stop_token_id, usage))
        if entry.rows_unfinished == 0:
            if entry.adapter is not None:
                self._adapters.release(entry.adapter.slot)
            self._intake.closed(entry)

    def _end_requests(self, reasons: dict[int, FinishReason]) -> None:
        """Ends every unfinished row of the given requests (cancel or stall timeout); unknown ids are ignored."""
        with self._intake.lock:
            ending = {entry for entry in self._intake.running.values() if entry.id in reasons}
        ending.update(row.request for unit in self._waiting for row in unit if row.request.id in reasons)
        for request_id in [i for i in self._fetching if i in reasons]:
            ending.add(self._fetching.pop(request_id).unit[0].request)
        for prefill in [p for p in self._prefills if p.rows[0].request in ending]:
            self._pool.release(prefill.pages)
            self._prefills.remove(prefill)
        for unit in self._waiting:
            unit[:] = [row for row in unit if row.request not in ending]
        self._waiting = deque(unit for unit in self._waiting if unit)
        for entry in ending:
            for row in entry.rows:
                if not row.done:
                    self._finish_row(row, reasons[entry.id], None)

    def _die(self, error: Exception) -> None:
        kind = self._runner.failure_kind(error)
        reason = f"{type(error).__name__}: {error}"
        log.error("engine thread died (%s): %s", kind, reason, exc_info=error)
        self._encoding.fail_all(Failed("fault", f"the engine failed: {reason}"), self._intake.abandon_encodes())
        for job in self._adapter_jobs:
            job.done.set_exception(RuntimeError(f"the engine failed: {reason}"))
        doomed = self._intake.died(kind, reason)
        doomed += [row.request for unit in self._waiting for row in unit if row.request.admitted is None]
        doomed += [fetch.unit[0].request for fetch in self._fetching.values()]
        for entry in dict.fromkeys(doomed):
            self._send(entry, Failed("fault", f"the engine failed: {reason}"))


def _slot(row: Row) -> int:
    adapter = row.request.adapter
    return 0 if adapter is None else adapter.slot


def _root(row: Row) -> bytes:
    adapter = row.request.adapter
    return b"" if adapter is None else adapter.root
