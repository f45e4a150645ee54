"""The serving engine: continuous batching over a paged KV cache, on one engine thread.

Request path (after JetStream's orchestrator):

1. A handler calls `submit(request, sink)` on any thread. Requests invalid on their face are
   refused there (`RequestRefused`), a full queue raises `QueueFull`, a draining or dead engine
   `EngineUnavailable`; otherwise the request joins the inbox and the engine thread is woken.
2. The engine thread is the only one that touches the device, the page pool and the rows. Each
   iteration it takes the inbox and pending cancels, ends rows past their deadline, admits waiting
   requests while lanes and pages allow (reusing prefix-cached pages), runs at most one prefill
   step (the next chunk of the oldest prompt, or the short last chunks of up to PREFILL_ROWS
   prompts together; a finished prompt's rows draw their first tokens), then one decode step for
   every decoding row (which also samples, on the device), and sends each row's new token or
   finish to the request's sink. Decode steps are pipelined: while the same rows keep decoding,
   step N+1 is dispatched on step N's sampled tokens, still on the device, before the host takes
   step N's tokens and calls the sinks, so the host's share of a step (the dispatch, the sinks,
   the HTTP side's work they wake) overlaps the device's. A change of rows, a grammar (its mask
   needs the token) or a row's last token settles the step in flight first; a token in flight
   for a row that ended meanwhile (cancel, deadline, stop) is dropped.
3. When there is nothing to do, the engine thread waits on the condition variable; `submit`,
   `cancel`, `drain` and `shutdown` notify it. Nothing polls.

Threads: handler threads call `submit`, `cancel`, `stats`, `drain`; they take `_lock` briefly and
never wait on the device. The engine thread holds `_lock` only to exchange the inbox/cancels and
to update counters, never across a device call or a sink call (a sink may call `cancel`).

A request's n rows share its prompt's KV pages: the whole prompt is prefilled once, and each row
draws its own first token from the logits of the prompt's last position (its own key and
parameters), so the first token costs no decode step. When pages run out, the most recently
admitted row is preempted: its pages are released and it waits at the front of the queue to be
recomputed (its full pages usually survive in the prefix cache), never dropped.
"""

import logging
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from engine.admission import retry_after_seconds, smoothed_hold
from engine.api import (
    MAX_TOKENS_CAP,
    Constraint,
    EngineEvent,
    EngineUnavailable,
    Failed,
    Finished,
    GenerationRequest,
    QueueFull,
    RequestRefused,
    TokenLogprob,
    Tokens,
    Usage,
)
from engine.checkpoint.loader import DTYPES, LoadedModel
from engine.compile_watch import CompileWatch
from engine.engine_config import EngineConfig
from engine.kv_pages import NULL_PAGE, PagePool, page_hashes
from engine.layers.kv_cache import init_paged_caches
from engine.layers.paged_attention import PREFILL_ATTENTION_BLOCK_TOKENS
from engine.metrics import (
    E2E_BUCKETS,
    ITL_BUCKETS,
    TTFT_BUCKETS,
    Bucket,
    EngineStats,
    LatencyHistogram,
)
from engine.sampling import Sampled
from engine.step import LaneState, RowParams, StepFunctions

log = logging.getLogger(__name__)

Sink = Callable[[EngineEvent], None]
Report = Callable[[str, int, int], None]  # (what, done, total)
FinishReason = Literal["stop", "length", "cancelled", "timeout"]
# Logit-bias entries per row, padded to this many (OpenAI allows up to 300).
LOGIT_BIAS_SLOTS = 300
# Shortest prefill chunk compiled; chunk sizes double up to prefill_chunk. A padded prompt token
# costs as much as a real one, and the new turn of a resent conversation is often a few dozen
# tokens or fewer: doubling keeps its padding under half a chunk for one compile per size.
# Measured on 2 CPU cores, a resent 1k conversation plus 12 tokens: first token in ~0.12 s with
# chunks from 8, ~0.16 s from 32.
SMALLEST_PREFILL_CHUNK = 8
# Prompts prefilled together in one step when each has a short chunk left (together at most
# prefill_chunk tokens): a burst of short prompts costs one pass over the weights per step
# instead of one per prompt, and the last of them starts that many steps sooner.
PREFILL_ROWS = 8


@dataclass(eq=False)
class _Request:
    id: int
    request: GenerationRequest
    sink: Sink
    max_tokens: int
    stop_ids: frozenset[int]
    submitted: float
    rows: list["_Row"] = field(default_factory=list)
    admitted: float | None = None
    cached_prompt_tokens: int = 0
    first_token_at: float | None = None
    rows_unfinished: int = 0


@dataclass(eq=False)
class _Row:
    request: _Request
    index: int
    tokens: list[int]  # prompt + output so far
    seed: int
    constraint: Constraint | None
    generated: int = 0
    lane: int | None = None
    pages: list[int] = field(default_factory=list)
    named_pages: int = 0  # leading full pages already named in the prefix cache
    admitted_seq: int = 0  # admission order, for choosing preemption victims
    last_token_at: float = 0.0
    done: bool = False


@dataclass(eq=False)
class _Prefill:
    """Rows sharing one prompt whose KV is being written chunk by chunk."""

    rows: list[_Row]
    tokens: list[int]
    pages: list[int]
    next_position: int


@dataclass(frozen=True)
class _Flight:
    """A decode step dispatched to the device whose tokens the host has not taken yet."""

    rows: list[_Row]
    sampled: Sampled


def _geometric_buckets(smallest: int, largest: int, growth: int) -> list[int]:
    """smallest, smallest·growth, ... and largest; a size within 2× of largest is left to largest,
    which costs that little padding and saves a compile."""
    sizes, size = [], max(1, smallest)
    while size * 2 <= largest:
        sizes.append(size)
        size *= growth
    return [*sizes, largest]


class Engine:
    """One engine thread, one queue. submit/cancel/stats are thread-safe and never block on the device."""

    def __init__(self, model: LoadedModel, config: EngineConfig, pages: int) -> None:
        c = model.config
        self.config = config
        self.vocab_size = c.vocab_size
        self.max_context = config.max_context or c.context_length or c.max_position_embeddings
        self.decode_lanes = config.decode_lanes
        self.eos_token_ids = frozenset(c.eos_token_ids) | config.stop_token_ids
        self.state: Literal["serving", "draining", "dead"] = "serving"
        self.failure: tuple[str, str] | None = None

        self._model = model
        self._page_size = config.page_size
        self._pool = PagePool(pages, config.page_size)
        param_leaves, params_tree = jax.tree.flatten(model.params)
        self._param_leaves: list[jax.Array] = param_leaves
        self._steps = StepFunctions(
            model.family.model(c, DTYPES[model.dtype]), params_tree, config.page_size, PREFILL_ROWS
        )
        lanes = config.decode_lanes
        # Placed like the step outputs (replicated on the model's mesh), so the first real step
        # finds the start-up compile instead of compiling again for a different input placement.
        self._replicated = NamedSharding(model.mesh, PartitionSpec())
        kv_pool = init_paged_caches(c, pages, config.page_size, kv_dtype(model.dtype, config.kv_cache_dtype))
        self._kv = jax.device_put(kv_pool, self._replicated)
        self._lane_state = jax.device_put(
            LaneState(jnp.zeros((lanes + 1, c.vocab_size), bool), jnp.zeros((lanes + 1, c.vocab_size), jnp.int32)),
            self._replicated,
        )
        self._pages_per_row = math.ceil(self.max_context / config.page_size)
        self._row_buckets = _geometric_buckets(1, lanes, config.bucket_growth)
        self._chunk_buckets = _geometric_buckets(
            min(SMALLEST_PREFILL_CHUNK, config.prefill_chunk), config.prefill_chunk, 2
        )
        # The longest chunk of each prompt in a batched prefill step (0: steps never batch).
        self._batched_chunk = max(
            (b for b in self._chunk_buckets if b * PREFILL_ROWS <= config.prefill_chunk), default=0
        )
        self._mask_words = math.ceil(c.vocab_size / 32)
        self._block_tables = np.zeros((lanes + 1, self._pages_per_row + 1), np.int32)
        # Padded prompt tokens sit in the block tables' last column, always the null page.
        self._padding_position = self._pages_per_row * config.page_size
        self._row_params = self._empty_row_params(lanes + 1)
        self._buckets: list[Bucket] = []

        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        # Shared with submitters under _lock:
        self._inbox: deque[_Request] = deque()
        self._cancels: dict[int, FinishReason] = {}
        self._pending_requests = 0  # submitted, not yet holding lanes
        self._pending_rows = 0
        self._free_lane_count = lanes
        self._running: dict[int, _Request] = {}
        self._next_id = 0
        self._average_hold: float | None = None
        self._stopping = False
        self._counters = dict.fromkeys(
            ("prefix_queries", "prefix_hits", "prompt_tokens", "generation_tokens", "preemptions", "refusals"), 0
        )
        self._ttft = LatencyHistogram(TTFT_BUCKETS)
        self._itl = LatencyHistogram(ITL_BUCKETS)
        self._e2e = LatencyHistogram(E2E_BUCKETS)
        # Engine thread only:
        self._free_lanes = list(range(lanes - 1, -1, -1))
        self._waiting: deque[list[_Row]] = deque()
        self._prefills: list[_Prefill] = []  # admitted, in admission order
        self._decoding: list[_Row] = []
        self._flight: _Flight | None = None  # the decode step dispatched and not yet taken
        self._admissions = 0
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)
        self._compiles = CompileWatch(self._thread)

    # --- construction -----------------------------------------------------------------------

    @classmethod
    def build(cls, model: LoadedModel, config: EngineConfig, report: Report) -> "Engine":
        """Allocates the KV page pool and compiles every shape bucket (reporting progress), then starts the thread."""
        max_context = config.max_context or model.config.context_length or model.config.max_position_embeddings
        pages_per_row = math.ceil(max_context / config.page_size)
        pages = _pool_pages(model, config, pages_per_row)
        # Every lane may need a private copy of a shared partial page; one row must always fit alone.
        if pages < pages_per_row + config.decode_lanes + 1:
            raise ValueError(
                f"KV pool of {pages} pages cannot hold one full-context row ({pages_per_row} pages) "
                f"plus {config.decode_lanes} lanes; raise the KV memory or lower max_context"
            )
        engine = cls(model, config, pages)
        engine._compile_all(report)
        engine._thread.start()
        return engine

    def _compile_all(self, report: Report) -> None:
        # Attention loops over the pages a step's rows have filled, so one block-table width (the
        # whole context) serves every length: the plan is one prefill shape per chunk size (and per
        # batched chunk size), and one first-token and one decode shape per row bucket.
        width = self._block_tables.shape[1]
        plan = [Bucket("prefill", 1, tokens, width) for tokens in self._chunk_buckets]
        plan += [
            Bucket("prefill", PREFILL_ROWS, tokens, width)
            for tokens in self._chunk_buckets
            if tokens <= self._batched_chunk
        ]
        plan += [Bucket("first_tokens", b, 1, 0) for b in self._row_buckets]
        plan += [Bucket("decode", b, 1, width) for b in self._row_buckets]
        plan += [Bucket("reset_lane", 1, self.max_context, 0), Bucket("copy_page", 1, self._page_size, 0)]
        for done, bucket in enumerate(plan):
            report(
                f"compiling {bucket.kind} rows={bucket.rows} tokens={bucket.tokens} pages={bucket.pages}",
                done,
                len(plan),
            )
            self._run_bucket(bucket)
        report("compiled", len(plan), len(plan))
        jax.block_until_ready(self._kv)
        self._buckets = plan

    def _run_bucket(self, bucket: Bucket) -> None:
        """Runs one bucket on padding (null page, spare lane), which compiles it and changes nothing real.

        Attention's loop over pages runs at least one turn (decode positions start at 1) and a
        prefill's runs two, over one whole block and one partial (each its own branch): on XLA's
        CPU backend the first run of a program's loop body, or of a branch, cost ~0.1 s more than
        later runs (measured: the first resent-conversation request 0.26 s against 0.14 s; with
        the whole-block branch left cold, 171 ms against 96-103 ms), and that belongs here, not
        in a request.
        """
        if bucket.kind == "prefill":
            shape = (bucket.rows, bucket.tokens)
            start = PREFILL_ATTENTION_BLOCK_TOKENS + 1 if self.max_context > PREFILL_ATTENTION_BLOCK_TOKENS + 1 else 1
            tokens, positions = np.zeros(shape, np.int32), np.full(shape, start, np.int32)
            table, last = np.zeros((bucket.rows, bucket.pages), np.int32), np.zeros(bucket.rows, np.int32)
            written, _ = self._steps.prefill(self._param_leaves, self._kv, tokens, positions, table, last)
            self._kv = self._steps.write(self._kv, written)
        elif bucket.kind == "first_tokens":
            lane_ids = np.full(bucket.rows, self.decode_lanes, np.int32)
            logits = jax.device_put(jnp.zeros((PREFILL_ROWS, self.vocab_size), jnp.float32), self._replicated)
            self._lane_state, _ = self._steps.first_tokens(
                self._lane_state, logits, np.int32(0), lane_ids, self._rows(lane_ids)
            )
        elif bucket.kind == "decode":
            lane_ids = np.full(bucket.rows, self.decode_lanes, np.int32)
            tokens = jax.device_put(np.zeros(bucket.rows, np.int32), self._replicated)
            self._decode_call(tokens, np.ones(bucket.rows, np.int32), lane_ids)
        elif bucket.kind == "reset_lane":
            self._reset_lane(self.decode_lanes, [], [])
        else:
            self._kv = self._steps.copy_page(self._kv, np.int32(NULL_PAGE), np.int32(NULL_PAGE))

    # --- public, any thread -----------------------------------------------------------------

    def submit(self, request: GenerationRequest, sink: Sink) -> int:
        prompt_length = len(request.prompt_ids)
        if prompt_length == 0:
            raise RequestRefused("invalid_prompt", "the prompt is empty")
        if prompt_length >= self.max_context:
            raise RequestRefused(
                "context_length_exceeded",
                f"the prompt has {prompt_length} tokens; this model's context is {self.max_context} tokens "
                f"and at least one must be left for the output",
            )
        if not 1 <= request.n <= self.decode_lanes:
            raise RequestRefused("invalid_n", f"n is {request.n}; this engine decodes at most {self.decode_lanes} rows")
        if request.max_tokens < 1:
            raise RequestRefused("invalid_max_tokens", f"max_tokens is {request.max_tokens}; it must be at least 1")
        max_tokens = min(request.max_tokens, MAX_TOKENS_CAP, self.max_context - prompt_length)
        stop_ids = request.stop_token_ids | (frozenset() if request.sampling.ignore_eos else self.eos_token_ids)
        with self._lock:
            if self.state != "serving":
                raise EngineUnavailable(f"the engine is {self.state}")
            starts_now = self._pending_rows + request.n <= self._free_lane_count
            if not starts_now and self._pending_requests >= self.config.max_queue:
                self._counters["refusals"] += 1
                raise QueueFull(self._retry_after_locked())
            self._next_id += 1
            entry = _Request(self._next_id, request, sink, max_tokens, stop_ids, time.monotonic())
            self._pending_requests += 1
            self._pending_rows += request.n
            self._inbox.append(entry)
            self._wake.notify_all()  # wait_idle callers share the condition
            return entry.id

    def cancel(self, request_id: int) -> None:
        with self._lock:
            self._cancels.setdefault(request_id, "cancelled")
            self._wake.notify_all()  # wait_idle callers share the condition

    def drain(self) -> None:
        """Refuses new requests (EngineUnavailable); in-flight ones finish."""
        with self._lock:
            if self.state == "serving":
                self.state = "draining"

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Blocks until no request is in flight (or the engine is dead); False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self.state != "dead" and (self._running or self._pending_requests):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._wake.wait(left)
            return True

    def shutdown(self) -> None:
        """Cancels everything in flight and stops the engine thread."""
        with self._lock:
            if self.state == "serving":
                self.state = "draining"
            self._stopping = True
            self._wake.notify_all()
        self._thread.join()
        self._compiles.close()

    def stats(self) -> EngineStats:
        with self._lock:
            total, used = self._pool.total, self._pool.used
            return EngineStats(
                state=self.state,
                decode_lanes=self.decode_lanes,
                requests_running=len(self._running),
                requests_waiting=self._pending_requests,
                kv_pages_total=total,
                kv_pages_used=used,
                kv_cache_usage=used / total,
                prefix_cache_queries=self._counters["prefix_queries"],
                prefix_cache_hits=self._counters["prefix_hits"],
                prompt_tokens=self._counters["prompt_tokens"],
                generation_tokens=self._counters["generation_tokens"],
                preemptions=self._counters["preemptions"],
                refusals=self._counters["refusals"],
                time_to_first_token=self._ttft.snapshot(),
                inter_token_latency=self._itl.snapshot(),
                e2e_latency=self._e2e.snapshot(),
                compiles_after_startup=self._compiles.count,
                buckets=tuple(self._buckets),
            )

    def _retry_after_locked(self) -> int:
        admitted = [entry.admitted for entry in self._running.values() if entry.admitted is not None]
        return retry_after_seconds(time.monotonic(), min(admitted, default=None), self._average_hold)

    # --- the engine thread ------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                with self._lock:
                    while not (self._inbox or self._cancels or self._stopping or self._busy()):
                        self._wake.wait()
                    if self._stopping:
                        in_flight = [*self._in_flight(), *self._inbox]
                        self._cancels.update({entry.id: "cancelled" for entry in in_flight})
                    inbox, self._inbox = self._inbox, deque()
                    cancels, self._cancels = self._cancels, {}
                    stopping = self._stopping
                self._iterate(inbox, cancels)
                if stopping and not self._busy():
                    return
        except Exception as error:  # the engine thread must never die silently: fail every request
            self._die(error)

    def _busy(self) -> bool:
        return bool(self._waiting or self._prefills or self._decoding or self._flight is not None)

    def _iterate(self, inbox: deque[_Request], cancels: dict[int, FinishReason]) -> None:
        for entry in inbox:
            self._waiting.append(self._new_rows(entry))
        now = time.monotonic()
        for entry in self._in_flight():
            deadline = entry.request.deadline
            if deadline is not None and now >= deadline:
                cancels.setdefault(entry.id, "timeout")
        if cancels:
            self._end_requests(cancels)
        self._admit()
        if self._prefills:
            self._prefill_step()
        if self._decoding or self._flight is not None:
            self._decode_step()

    def _in_flight(self) -> list[_Request]:
        requests = {row.request for unit in self._waiting for row in unit}
        requests.update(row.request for row in self._decoding)
        requests.update(row.request for prefill in self._prefills for row in prefill.rows)
        return list(requests)

    def _new_rows(self, entry: _Request) -> list[_Row]:
        sampling, prompt = entry.request.sampling, list(entry.request.prompt_ids)
        factory = entry.request.constraint
        for index in range(entry.request.n):
            seed = int.from_bytes(os.urandom(4)) if sampling.seed is None else hash((sampling.seed, index))
            entry.rows.append(_Row(entry, index, list(prompt), seed & 0xFFFFFFFF, factory() if factory else None))
        entry.rows_unfinished = entry.request.n
        return list(entry.rows)

    # --- admission and prefill --------------------------------------------------------------

    def _admit(self) -> None:
        while len(self._prefills) < PREFILL_ROWS and self._waiting and len(self._free_lanes) >= len(self._waiting[0]):
            unit = self._waiting[0]
            tokens = unit[0].tokens
            cacheable = page_hashes(tokens[:-1], self._page_size)
            pages = self._pool.lookup(cacheable)
            needed = math.ceil(len(tokens) / self._page_size) - len(pages)
            fresh = [p for p in (self._pool.allocate() for _ in range(needed)) if p is not None]
            if len(fresh) < needed:
                self._pool.release(pages + fresh)
                return
            self._waiting.popleft()
            entry = unit[0].request
            now = time.monotonic()
            first_admission = entry.admitted is None
            with self._lock:
                self._free_lane_count -= len(unit)
                if first_admission:
                    entry.admitted = now
                    entry.cached_prompt_tokens = len(pages) * self._page_size
                    self._pending_requests -= 1
                    self._pending_rows -= len(unit)
                    self._running[entry.id] = entry
                    self._counters["prompt_tokens"] += len(tokens)
                    self._counters["prefix_queries"] += len(tokens)
                    self._counters["prefix_hits"] += entry.cached_prompt_tokens
            for row in unit:
                row.lane = self._free_lanes.pop()
                self._admissions += 1
                row.admitted_seq = self._admissions
            self._prefills.append(_Prefill(unit, tokens, pages + fresh, len(pages) * self._page_size))

    def _prefill_step(self) -> None:
        """Prefills the next chunk of the oldest prompt or, when several have no more than a short
        chunk left, of up to PREFILL_ROWS of them at once. Each chunk holds at least the prompt's
        last token, which no cached page holds; a finished prompt starts decoding."""
        short = [p for p in self._prefills if len(p.tokens) - p.next_position <= self._batched_chunk]
        batch = short[:PREFILL_ROWS] if len(short) > 1 else self._prefills[:1]
        limit = self._batched_chunk if len(batch) > 1 else self.config.prefill_chunk
        chunks = [p.tokens[p.next_position : p.next_position + limit] for p in batch]
        size = next(b for b in self._chunk_buckets if b >= max(map(len, chunks)))
        rows = 1 if len(batch) == 1 else PREFILL_ROWS
        # Padding rows sit at position 0 of the null page: attention reads nothing for them, while
        # the loop over pages runs as far as the row that starts latest.
        tokens = np.zeros((rows, size), np.int32)
        positions = np.zeros((rows, size), np.int32)
        table = np.zeros((rows, self._block_tables.shape[1]), np.int32)
        last = np.zeros(rows, np.int32)
        for i, (prefill, chunk) in enumerate(zip(batch, chunks, strict=True)):
            tokens[i, : len(chunk)] = chunk
            positions[i] = self._padding_position
            positions[i, : len(chunk)] = np.arange(prefill.next_position, prefill.next_position + len(chunk))
            table[i, : len(prefill.pages)] = prefill.pages
            last[i] = len(chunk) - 1
            prefill.next_position += len(chunk)
        written, logits = self._steps.prefill(self._param_leaves, self._kv, tokens, positions, table, last)
        self._kv = self._steps.write(self._kv, written)
        for i, prefill in enumerate(batch):
            if prefill.next_position == len(prefill.tokens):
                self._prefills.remove(prefill)
                self._start_decoding(prefill, logits, i)

    def _start_decoding(self, prefill: _Prefill, logits: jax.Array, logits_row: int) -> None:
        """Gives each row the shared prompt pages (rows after the first copy a partial last page)
        and its first token, drawn from the prompt's last logits (row `logits_row` of the step's)."""
        full_pages = len(prefill.tokens) // self._page_size
        starting = []
        for row in prefill.rows:
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
                    self._kv = self._steps.copy_page(self._kv, np.int32(pages[-1]), np.int32(copy))
                    pages[-1] = copy
            row.pages = pages
            self._set_lane(row)
            self._decoding.append(row)
            starting.append(row)
        if starting:
            lane_ids = self._lane_ids(starting)
            self._lane_state, sampled = self._steps.first_tokens(
                self._lane_state, logits, np.int32(logits_row), lane_ids, self._rows(lane_ids)
            )
            self._take_tokens(starting, sampled)

    def _set_lane(self, row: _Row) -> None:
        """Writes the row's block table and sampling parameters into its lane's host tables."""
        assert row.lane is not None
        lane, sampling = row.lane, row.request.request.sampling
        self._block_tables[lane] = NULL_PAGE
        self._block_tables[lane, : len(row.pages)] = row.pages
        p = self._row_params
        p.temperature[lane] = sampling.temperature
        p.top_k[lane] = sampling.top_k
        p.top_p[lane] = sampling.top_p
        p.min_p[lane] = sampling.min_p
        p.repetition_penalty[lane] = sampling.repetition_penalty
        p.presence_penalty[lane] = sampling.presence_penalty
        p.frequency_penalty[lane] = sampling.frequency_penalty
        p.bias_ids[lane] = 0
        p.bias_values[lane] = 0.0
        bias = list(sampling.logit_bias.items())[:LOGIT_BIAS_SLOTS]
        p.bias_ids[lane, : len(bias)] = [token for token, _ in bias]
        p.bias_values[lane, : len(bias)] = [value for _, value in bias]
        p.allowed[lane] = -1
        p.seed[lane] = row.seed
        p.logprobs[lane] = sampling.logprobs is not None
        penalised = (sampling.repetition_penalty, sampling.presence_penalty, sampling.frequency_penalty) != (
            1.0,
            0.0,
            0.0,
        )
        if penalised:
            prompt_length = len(row.request.request.prompt_ids)
            self._reset_lane(lane, row.tokens[:prompt_length], row.tokens[prompt_length:])

    def _reset_lane(self, lane: int, prompt: list[int], output: list[int]) -> None:
        padded_prompt = np.full(self.max_context, -1, np.int32)
        padded_output = np.full(self.max_context, -1, np.int32)
        padded_prompt[: len(prompt)] = prompt
        padded_output[: len(output)] = output
        self._lane_state = self._steps.reset_lane(self._lane_state, np.int32(lane), padded_prompt, padded_output)

    def _empty_row_params(self, lanes: int) -> RowParams:
        def zeros(dtype: type, *shape: int) -> np.ndarray:
            return np.zeros((lanes, *shape), dtype)

        return RowParams(
            temperature=zeros(np.float32),
            top_k=zeros(np.int32),
            top_p=np.ones(lanes, np.float32),
            min_p=zeros(np.float32),
            repetition_penalty=np.ones(lanes, np.float32),
            presence_penalty=zeros(np.float32),
            frequency_penalty=zeros(np.float32),
            bias_ids=zeros(np.int32, LOGIT_BIAS_SLOTS),
            bias_values=zeros(np.float32, LOGIT_BIAS_SLOTS),
            allowed=np.full((lanes, self._mask_words), -1, np.int32),
            seed=zeros(np.uint32),
            counter=zeros(np.int32),
            logprobs=zeros(np.bool_),
        )

    def _name_full_pages(self, row: _Row, kv_written: int) -> None:
        full = kv_written // self._page_size
        if full > row.named_pages:
            hashes = page_hashes(row.tokens[: full * self._page_size], self._page_size)
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
                self._block_tables[row.lane, len(row.pages)] = page
                row.pages.append(page)

    def _rows(self, lane_ids: np.ndarray) -> RowParams:
        return RowParams(**{name: table[lane_ids] for name, table in vars(self._row_params).items()})

    def _lane_ids(self, rows: list[_Row], ahead: int = 0) -> np.ndarray:
        """The rows' lanes padded to a row bucket (padding rows use the spare lane), after refreshing
        each row's draw counter (`ahead` tokens still in flight) and grammar mask in its lane's
        parameters."""
        lane_ids = np.full(next(b for b in self._row_buckets if b >= len(rows)), self.decode_lanes, np.int32)
        for i, row in enumerate(rows):
            assert row.lane is not None
            lane_ids[i] = row.lane
            self._row_params.counter[row.lane] = row.generated + ahead
            if row.constraint is not None:
                row.constraint.fill_mask(self._row_params.allowed[row.lane])
        return lane_ids

    def _decode_call(self, tokens: jax.Array, positions: np.ndarray, lane_ids: np.ndarray) -> Sampled:
        """`tokens` are on the device, placed like a step's sampled tokens: a step started from host
        tokens and one chained on the last step's run the same compiled program."""
        written, self._lane_state, sampled = self._steps.decode(
            self._param_leaves,
            self._kv,
            self._lane_state,
            tokens,
            positions,
            self._block_tables[lane_ids],
            lane_ids,
            self._rows(lane_ids),
        )
        self._kv = self._steps.write(self._kv, written)
        return sampled

    def _decode_step(self) -> None:
        """Runs one decode step for every decoding row. When the rows are the same as the step in
        flight's, the next step is dispatched on that step's sampled tokens (still on the device)
        before its results are taken: the host's share of a step (dispatch, sinks) overlaps the
        device's work. Otherwise the flight is settled first and the step starts from host tokens."""
        flight, self._flight = self._flight, None
        if flight is not None and self._chains(flight):
            lane_ids = self._lane_ids(flight.rows, ahead=1)
            positions = np.zeros(len(lane_ids), np.int32)
            positions[: len(flight.rows)] = [len(row.tokens) for row in flight.rows]
            self._flight = _Flight(flight.rows, self._decode_call(flight.sampled.token, positions, lane_ids))
            self._take_tokens(flight.rows, flight.sampled)
            return
        if flight is not None:
            self._take_tokens(flight.rows, flight.sampled)
        self._grow_pages()
        rows = list(self._decoding)
        if not rows:
            return
        lane_ids = self._lane_ids(rows)
        tokens = np.zeros(len(lane_ids), np.int32)
        positions = np.zeros(len(lane_ids), np.int32)
        for i, row in enumerate(rows):
            tokens[i], positions[i] = row.tokens[-1], len(row.tokens) - 1
        self._flight = _Flight(rows, self._decode_call(jax.device_put(tokens, self._replicated), positions, lane_ids))

    def _chains(self, flight: _Flight) -> bool:
        """Whether the next step can start from `flight`'s tokens before they reach the host: the
        same rows still decode, none has a grammar (its mask needs the token), none ends on its
        length with that token, and each has a page for the position after it (allocated here,
        never by preempting: preemption needs the tokens settled; a page allocated before the
        answer turns out False is one the row needs next step anyway)."""
        if flight.rows != self._decoding:
            return False
        for row in flight.rows:
            assert row.lane is not None
            if row.constraint is not None or row.generated + 1 >= row.request.max_tokens:
                return False
            if len(row.pages) * self._page_size <= len(row.tokens):
                page = self._pool.allocate()
                if page is None:
                    return False
                self._block_tables[row.lane, len(row.pages)] = page
                row.pages.append(page)
        return True

    def _take_tokens(self, rows: list[_Row], sampled: Sampled) -> None:
        """Hands each row its sampled token; every row's KV is written up to its last token."""
        chosen = np.asarray(sampled.token)
        logprobs = None
        if any(row.request.request.sampling.logprobs is not None for row in rows):
            logprobs = tuple(np.asarray(a) for a in (sampled.logprob, sampled.top_ids, sampled.top_logprobs))
        now = time.monotonic()
        for i, row in enumerate(rows):
            if row.lane is None:  # ended (cancel, deadline, a stop token) while this token was in flight
                continue
            self._name_full_pages(row, len(row.tokens))
            self._take_token(row, int(chosen[i]), None if logprobs is None else (i, *logprobs), now)

    def _take_token(self, row: _Row, token: int, logprobs: tuple | None, now: float) -> None:
        entry = row.request
        if token in entry.stop_ids:
            self._finish_row(row, "stop", token)
            return
        row.tokens.append(token)
        row.generated += 1
        with self._lock:
            self._counters["generation_tokens"] += 1
            if entry.first_token_at is None:
                entry.first_token_at = now
                self._ttft.observe(now - entry.submitted)
            elif row.generated > 1:
                self._itl.observe(now - row.last_token_at)
        row.last_token_at = now
        top_n = entry.request.sampling.logprobs
        token_logprobs = None
        if logprobs is not None and top_n is not None:
            i, chosen, top_ids, top_values = logprobs
            top = tuple((int(t), float(v)) for t, v in zip(top_ids[i, :top_n], top_values[i, :top_n], strict=True))
            token_logprobs = (TokenLogprob(token, float(chosen[i]), top),)
        self._send(entry, Tokens(row.index, (token,), token_logprobs))
        if row.constraint is not None:
            row.constraint.accept(token)
            if row.constraint.is_finished():
                self._finish_row(row, "stop", None)
                return
        if row.generated >= entry.max_tokens:
            self._finish_row(row, "length", None)

    def _send(self, entry: _Request, event: EngineEvent) -> None:
        """Calls the request's sink; a sink that raises costs its own request (cancelled), not the engine."""
        try:
            entry.sink(event)
        except Exception:
            log.exception("sink of request %d raised; cancelling the request", entry.id)
            with self._lock:
                self._cancels.setdefault(entry.id, "cancelled")

    # --- row and request endings ------------------------------------------------------------

    def _release_lane(self, row: _Row) -> None:
        self._pool.release(row.pages)
        row.pages, row.named_pages = [], 0
        if row in self._decoding:
            self._decoding.remove(row)
        if row.lane is not None:
            self._free_lanes.append(row.lane)
            row.lane = None
            with self._lock:
                self._free_lane_count += 1

    def _preempt(self, row: _Row) -> None:
        self._release_lane(row)
        self._waiting.appendleft([row])
        with self._lock:
            self._counters["preemptions"] += 1

    def _finish_row(self, row: _Row, reason: FinishReason, stop_token_id: int | None) -> None:
        self._release_lane(row)
        row.done = True
        entry = row.request
        entry.rows_unfinished -= 1
        usage = Usage(len(entry.request.prompt_ids), entry.cached_prompt_tokens, row.generated)
        self._send(entry, Finished(row.index, reason, stop_token_id, usage))
        if entry.rows_unfinished == 0:
            self._close_request(entry)

    def _close_request(self, entry: _Request) -> None:
        now = time.monotonic()
        with self._lock:
            if entry.admitted is None:
                self._pending_requests -= 1
                self._pending_rows -= entry.request.n
            else:
                del self._running[entry.id]
                self._average_hold = smoothed_hold(self._average_hold, now - entry.admitted)
                self._e2e.observe(now - entry.submitted)
            self._wake.notify_all()

    def _end_requests(self, reasons: dict[int, FinishReason]) -> None:
        """Ends every unfinished row of the given requests (cancel or deadline); unknown ids are ignored."""
        with self._lock:
            ending = {entry for entry in self._running.values() if entry.id in reasons}
        ending.update(row.request for unit in self._waiting for row in unit if row.request.id in reasons)
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
        kind = failure_kind(error)
        reason = f"{type(error).__name__}: {error}"
        log.error("engine thread died (%s): %s", kind, reason, exc_info=error)
        with self._lock:
            self.state = "dead"
            self.failure = (kind, reason)
            doomed = list(self._running.values()) + list(self._inbox)
            self._inbox.clear()
            self._running.clear()
            self._pending_requests = self._pending_rows = 0
            self._wake.notify_all()
        doomed += [row.request for unit in self._waiting for row in unit if row.request.admitted is None]
        for entry in dict.fromkeys(doomed):
            self._send(entry, Failed("fault", f"the engine failed: {reason}"))


def failure_kind(error: BaseException) -> Literal["fault", "panicked"]:
    """A device/XLA runtime error is a fault; anything else that kills the engine thread is a panic."""
    return "fault" if isinstance(error, jax.errors.JaxRuntimeError) else "panicked"


def kv_dtype(model_dtype: str, kv_cache_dtype: str) -> jnp.dtype:
    """The KV pool's dtype: the model's unless `kv_cache_dtype` names one."""
    return jnp.dtype(DTYPES[model_dtype if kv_cache_dtype == "auto" else kv_cache_dtype])


def kv_bytes_per_token(model: LoadedModel, kv_cache_dtype: str) -> int:
    """Bytes of keys and values one token holds in the KV pool, over every layer."""
    c = model.config
    return 2 * c.num_layers * c.num_kv_heads * c.head_dim * kv_dtype(model.dtype, kv_cache_dtype).itemsize


def _pool_pages(model: LoadedModel, config: EngineConfig, pages_per_row: int) -> int:
    """Pages in the KV pool (plus the null page), from the first size setting given."""
    if config.kv_pages:
        return config.kv_pages + 1
    page_bytes = config.page_size * kv_bytes_per_token(model, config.kv_cache_dtype)
    budget = config.kv_memory_bytes
    if not budget:
        memory = model.mesh.devices.flat[0].memory_stats() or {}
        free = memory.get("bytes_limit", 0) - memory.get("bytes_in_use", 0)
        budget = int(free * config.kv_memory_fraction)
    if not budget:  # no device memory figures (CPU): room for every lane's full context
        return pages_per_row * config.decode_lanes + config.decode_lanes + 1
    return budget // page_bytes + 1
