"""`DecodeSteps`: the decoding rows' steps — pipelined, with prompt-lookup drafts — and their tokens.

Each decode step runs every decoding row (and samples, on the device); each row then takes its
new token or tokens, which go to the request's sink in one event, unless a stop token, the end
of its grammar or its output budget ends the row. A row's first token comes from its prompt's
prefill step instead (`begin`), so it costs no decode step.

Decode steps are pipelined: while the same rows keep decoding, step N+1 is dispatched on step N's
sampled tokens, still on the device, before the host takes step N's tokens and calls the sinks,
so the host's share of a step (the dispatch, the sinks, the HTTP side's work they wake) overlaps
the device's. A change of rows, a grammar (its mask needs the token) or a row's last token
settles the step in flight first; a token in flight for a row that ended meanwhile is dropped.

With bursts (the runner's `burst_steps`), a step whose rows have no draft and no grammar runs
that many decode steps in one device call (engine/device/step.py), each row's pages allocated
ahead for the positions it may take (never by preempting: without them the step is a plain one);
the device stops taking a row's tokens after a stop id or its `max_tokens`, and the host takes
each row's tokens as from a step with drafts, checking them again (stop ids past the device's
slots, a stop string's cancel). A burst chains on a burst, a plain step on a plain step: a plain
step in flight settles when the next could be a burst. Bursts run only while the last settled
step took at most `burst_max_step_ms` a token (none before a first step is measured): a request
that arrives during a burst waits for all of its steps before its prompt prefills, which is
short where steps are short (a GPU, a small model), the only place the host's per-call work
weighs, and would be seconds where they are long (a big model's many rows on a CPU).

While few rows decode (the runner's `draft_rows`), a row whose last tokens occurred earlier in
its context brings a prompt-lookup draft (engine/serving/drafts.py) to the step, and takes as
many tokens as the step's draws agreed with; such a step starts from host tokens and is not
chained on, and a row that has a draft keeps the step before it from chaining too.

A row's next position needs a page: when none is left, the most recently admitted row is
preempted (engine/serving/lanes.py) — only between settled steps, since preemption needs the
tokens on the host.

Threads: only the engine thread calls `DecodeSteps` (from the scheduler, engine/serving/scheduler.py)
and touches the rows, the page pool and the runner. It shares only the intake, under the intake's
lock, never held across a runner or sink call (a sink may call `cancel`).
"""

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass

from engine.api import TokenLogprob, Tokens
from engine.device.runner_api import DecodeRow, Drawn, Pending, PromptLogits, Runner
from engine.serving.drafts import PromptLookup
from engine.serving.intake import FinishReason, Intake
from engine.serving.kv_pages import PagePool
from engine.serving.lanes import Lanes
from engine.serving.prefix_cache import PrefixCache
from engine.serving.rows import Row


@dataclass(frozen=True)
class _Flight:
    """A decode step dispatched to the device whose tokens the host has not taken yet, the
    draft tokens its rows brought (a step with drafts is never chained on) and, for a burst, its
    decode steps (0: not a burst)."""

    rows: list[Row]
    step: Pending
    drafted: int = 0
    burst: int = 0
    dispatched_ns: int = dataclasses.field(default_factory=time.perf_counter_ns)

    @property
    def ahead(self) -> int:
        """The positions each row advances by in this step (at most: a burst's row may stop early)."""
        return max(1, self.burst)


class DecodeSteps:
    def __init__(
        self,
        runner: Runner,
        pool: PagePool,
        intake: Intake,
        lanes: Lanes,
        prefix: PrefixCache,
        burst_max_step_ms: float,
    ) -> None:
        self._runner = runner
        self._pool = pool
        self._intake = intake
        self._lanes = lanes
        self._prefix = prefix
        self._page_size = runner.page_size
        self._flight: _Flight | None = None
        self._burst_max_step_ns = burst_max_step_ms * 1e6
        # The last settled step's device time a token-step (None: none yet), and when the host
        # last finished taking a step's tokens.
        self._token_step_ns: float | None = None
        self._taken_at_ns = 0

    @property
    def busy(self) -> bool:
        """Whether a row decodes or a step's tokens are still to be taken."""
        return bool(self._lanes.decoding) or self._flight is not None

    def begin(self, rows: list[Row], logits: PromptLogits, index: int) -> None:
        """Starts `rows` (in their lanes, their prompt's KV written) decoding, each with its first
        token, drawn from the prompt's last logits (chunk `index` of a prefill step's)."""
        for row in rows:
            row.drafts = PromptLookup(row.tokens) if self._may_draft(row) else None
        self._lanes.decoding.extend(rows)
        self._take_tokens(rows, self._runner.first_tokens(logits, index, self._step_rows(rows)))

    def step(self) -> None:
        """Runs one decode step for every decoding row. When the rows are the same as the step in
        flight's, the next step is dispatched on that step's sampled tokens (still on the device)
        before its results are taken. Otherwise the flight is settled first and the step starts
        from host tokens. Counts the step (a burst as its decode steps) and its host time (all but
        the wait in `take`)."""
        started = time.perf_counter_ns()
        waited = self._step()
        steps = 1 if self._flight is None else self._flight.ahead
        self._intake.stepped(time.perf_counter_ns() - started - waited, steps)

    def _step(self) -> int:
        """`step`'s work; returns the nanoseconds spent taking a step's tokens."""
        flight, self._flight = self._flight, None
        if flight is not None and self._chains(flight):
            step_rows = self._step_rows(flight.rows, flight.ahead)
            step = self._runner.generate(step_rows, flight.step, burst=bool(flight.burst))
            self._flight = _Flight(flight.rows, step, burst=flight.burst)
            drawn, waited = self._take(flight)
            self._take_tokens(flight.rows, drawn)
            return waited
        waited = 0
        if flight is not None:
            drawn, waited = self._take(flight)
            self._take_tokens(flight.rows, drawn, flight.drafted)
        self._grow_pages()
        rows = list(self._lanes.decoding)
        if rows:
            drafts = self._drafts(rows)
            drafted = sum(len(draft) for draft in drafts)
            burst = 0 if drafted else self._burst_steps(rows, 0)
            step = self._runner.generate(self._step_rows(rows, drafts=drafts), burst=bool(burst))
            self._flight = _Flight(rows, step, drafted, burst)
        return waited

    def _take(self, flight: _Flight) -> tuple[Drawn, int]:
        """The flight's tokens on the host, and the nanoseconds that took (mostly waiting for them).
        Notes the step's device time a token-step: from its dispatch, or from the last take if it
        was dispatched behind a step still running, to now."""
        started = time.perf_counter_ns()
        drawn = self._runner.take(flight.step)
        now = time.perf_counter_ns()
        self._token_step_ns = (now - max(flight.dispatched_ns, self._taken_at_ns)) / flight.ahead
        self._taken_at_ns = now
        return drawn, now - started

    def _bursting(self) -> bool:
        """Whether steps may be bursts: bursts are on and the last settled step took at most
        `burst_max_step_ms` a token (a request arriving meanwhile waits for a whole burst)."""
        step_ns = self._token_step_ns
        return bool(self._runner.burst_steps) and step_ns is not None and step_ns <= self._burst_max_step_ns

    def _chains(self, flight: _Flight) -> bool:
        """Whether the next step can start from `flight`'s tokens before they reach the host: the
        same rows still decode, with no drafts then or now, none has a grammar (its mask needs the
        token), none ends on its length with those tokens, the step is of the flight's kind (a
        plain flight settles when a burst could follow, a burst when bursts stop), and each row
        has pages for the positions the step may write (allocated here, never by preempting:
        preemption needs the tokens settled; a page allocated before the answer turns out False
        is one the row needs soon anyway)."""
        if flight.drafted or flight.rows != self._lanes.decoding or self._drafting(flight.rows):
            return False
        if bool(flight.burst) != self._bursting():
            return False
        for row in flight.rows:
            if row.constraint is not None or row.generated + flight.ahead >= row.request.max_tokens:
                return False
            if not self._pages_ahead(row, flight.ahead, flight.ahead):
                return False
        return True

    def _burst_steps(self, rows: list[Row], ahead: int) -> int:
        """The runner's burst length if the next step over `rows` can be a burst (`_bursting`, no
        row with a grammar, pages for each row's positions, allocated without preempting); 0 if not."""
        steps = self._runner.burst_steps
        if not self._bursting() or any(row.constraint is not None for row in rows):
            return 0
        return steps if all(self._pages_ahead(row, ahead, steps) for row in rows) else 0

    def _pages_ahead(self, row: Row, ahead: int, steps: int) -> bool:
        """Gives the row the pages a step of `steps` decode steps needs, `ahead` of its tokens still
        in flight, as far as its `max_tokens` allows, allocated without preempting; False if none is left."""
        positions = min(steps, row.request.max_tokens - row.generated - ahead)
        end = len(row.tokens) - 1 + ahead + positions  # the step writes positions below this
        while len(row.pages) * self._page_size < end:
            page = self._pool.allocate()
            if page is None:
                return False
            self._add_page(row, page)
        return True

    def _grow_pages(self) -> None:
        """Gives each decoding row the page its next position needs, preempting the newest rows if none is left."""
        decoding = self._lanes.decoding  # a preemption takes its row out of this very list
        for row in sorted(decoding, key=lambda r: r.admitted_seq):
            while row.lane is not None and len(row.pages) * self._page_size < len(row.tokens):
                page = self._pool.allocate()
                if page is None:
                    self._lanes.preempt(max(decoding, key=lambda r: r.admitted_seq))
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
            budget = row.request.max_tokens - draws
            step_rows.append(
                DecodeRow(
                    row.lane,
                    position,
                    row.tokens[-1],
                    draws,
                    row.constraint,
                    draft,
                    row.rope_shift,
                    budget,
                    row.request.stop_ids,
                )
            )
        return step_rows

    # --- drafts -----------------------------------------------------------------------------

    def _may_draft(self, row: Row) -> bool:
        """Whether a step can check drafts for the row: its grammar's mask and its penalties
        depend on each token before the one drawn, which a step over a draft does not know."""
        penalised = row.request.request.sampling.penalised
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

    # --- tokens -----------------------------------------------------------------------------

    def _take_tokens(self, rows: list[Row], drawn: Drawn, drafted: int = 0) -> None:
        """Hands each row the tokens it takes from the step (one, or more where its draft held or from
        a burst), in
        one event; every row's KV is written up to its last token, and a taken draft token's at
        its position. The step's tokens are counted (one intake call) before any event is sent,
        so a request's counters hold its tokens by the time its sink hears of them."""
        name_full_pages, send = self._prefix.name_full_pages, self._lanes.send
        now = time.monotonic()
        counted: list[tuple[Row, float | None]] = []  # each token taken, for the intake's counters
        outcomes: list[tuple[Row, list[int], list[TokenLogprob], tuple[FinishReason, int | None] | None]] = []
        for i, row in enumerate(rows):
            if row.lane is None:  # ended (cancel, stall timeout, a stop token) while this token was in flight
                continue
            taken: list[int] = []
            logprobs: list[TokenLogprob] = []
            ending: tuple[FinishReason, int | None] | None = None
            for j in range(int(drawn.taken[i])):
                name_full_pages(row, len(row.tokens))
                ending = self._take_token(row, int(drawn.tokens[i, j]), drawn, (i, j), now, taken, logprobs, counted)
                if ending is not None:
                    break
            outcomes.append((row, taken, logprobs, ending))
        self._intake.tokens(counted, now)
        for row, taken, logprobs, ending in outcomes:
            if taken:
                send(row.request, Tokens(row.index, tuple(taken), tuple(logprobs) if logprobs else None))
            if ending is not None:
                self._lanes.finish(row, *ending)
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
        counted: list[tuple[Row, float | None]],
    ) -> tuple[FinishReason, int | None] | None:
        """Adds a drawn token to the row (and to `taken`, with its logprobs to `logprobs`, and with
        its gap since the row's token before to `counted`), unless it is a stop token; returns how
        the row ends, if it does with this token."""
        entry = row.request
        if token in entry.stop_ids:
            return "stop", token
        row.tokens.append(token)
        row.generated += 1
        taken.append(token)
        counted.append((row, now - row.last_token_at if row.generated > 1 else None))
        row.last_token_at = entry.progress_at = now
        top_n = entry.request.sampling.logprobs
        if drawn.logprobs is not None and top_n is not None:
            chosen, top_ids, top_values, scored = drawn.logprobs
            top = tuple((int(t), float(v)) for t, v in zip(top_ids[at][:top_n], top_values[at][:top_n], strict=True))
            scored_count = len(entry.request.sampling.scored_ids)
            logprobs.append(TokenLogprob(token, float(chosen[at]), top, tuple(scored[at][:scored_count].tolist())))
        if row.constraint is not None:
            row.constraint.accept(token)
            if row.constraint.is_finished():
                return "stop", None
        if row.generated >= entry.max_tokens:
            return entry.admission.length_finish, None
        return None
