"""A test double of the runner seam (engine/device/runner_api.py) for the scheduler's tests: no device, no model.

Its "model" is a hash of the context: a row's next token depends on every token before it, read
back through the row's block table from the pages where earlier steps wrote them. A scheduler that
hands a row a wrong page, forgets a prefix page, shares a page it should have copied or skips a
position therefore gets different tokens than `reference` computes from the prompt alone. A
seeded row draws from (context, seed, draw counter), so it also catches a wrong counter; a greedy
row (temperature 0) from the context alone.

`gate` holds every step while cleared (`held` is set while a step waits at it), so a test can
make requests arrive together; `delay_s` slows every step; `fail_with` makes a step raise, once
`fail_after` more steps have run; `log` records each step's kind and rows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from engine.api import MAX_SCORED_IDS, MAX_TOP_LOGPROBS, SamplingParams
from engine.device.runner_api import (
    NULL_PAGE,
    PREFILL_ROWS,
    DecodeRow,
    Drawn,
    InsertedRow,
    Pending,
    PrefillChunk,
    PromptLogits,
    PromptScores,
    Report,
)
from engine.engine_config import EngineConfig
from engine.lora.peft_adapter import LoraAdapter
from engine.stats import Bucket, HeldArrays

VOCAB = 1000
TOP = 2  # alternatives reported with logprobs


class FakeDeviceError(RuntimeError):
    """What the fake raises as a device fault."""


Model = Callable[[Sequence[int], SamplingParams, int, int], int]  # (context, sampling, seed, draws) -> token


def next_token(context: Sequence[int], sampling: SamplingParams, seed: int, draws: int) -> int:
    if sampling.temperature == 0:
        return hash(tuple(context)) % VOCAB
    return hash((tuple(context), seed, draws)) % VOCAB


def copying_token(context: Sequence[int], sampling: SamplingParams, seed: int, draws: int) -> int:
    """A model that mostly copies: the token after the latest earlier occurrence of the context's
    last token (or, when it has none, the context's first token), except where `next_token` falls
    on a multiple of 4 (then that token). Drafts from the context hold for a while, then miss."""
    token = next_token(context, sampling, seed, draws)
    if token % 4 == 0:
        return token
    for start in range(len(context) - 2, -1, -1):
        if context[start] == context[-1]:
            return context[start + 1]
    return context[0]


def reference(
    prompt: Sequence[int], count: int, sampling: SamplingParams, seed: int = 0, model: Model = next_token
) -> list[int]:
    """The tokens a row of `prompt` draws, computed without any scheduler (no stop tokens)."""
    tokens = list(prompt)
    for draws in range(count):
        tokens.append(model(tokens, sampling, seed, draws))
    return tokens[len(prompt) :]


@dataclass
class _Lane:
    table: list[int] = field(default_factory=list)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int = 0


class FakeRunner:
    def __init__(self, config: EngineConfig, pages: int, max_context: int) -> None:
        self.lanes = config.decode_lanes
        self.page_size = config.page_size
        self.max_context = max_context
        self.batched_chunk = config.prefill_chunk // PREFILL_ROWS
        self.scored_ready = True
        self.page_bytes = config.page_size * 8  # a page's tokens as int64, -1 for an empty slot
        self.draft_tokens = config.draft_tokens
        self.draft_rows = config.draft_rows if config.draft_tokens > 0 else 0
        self.burst_steps = config.burst_steps
        self.adapter_slots, self.adapter_rank = config.max_loras, config.max_lora_rank
        self.image_token_id: int | None = None  # a text model's
        self.idle_interval: float | None = None
        self.idles = 0  # calls of `idle`
        self.model: Model = next_token
        self.gate = threading.Event()
        self.gate.set()
        self.held = threading.Event()
        self.delay_s = 0.0
        self.fail_with: BaseException | None = None
        self.fail_after = 0
        self.log: list[tuple[str, int]] = []  # (kind, rows): "prefill", "first", "decode", "chained", "verify"
        self.prefilled_tokens = 0
        self._kv: list[list[int | None]] = [[None] * config.page_size for _ in range(pages)]
        self._targets: list[int] = []  # the last prefill's first chunk's (prompt_scores)
        self._lanes = [_Lane() for _ in range(config.decode_lanes + 1)]

    # --- start-up and stats -----------------------------------------------------------------

    def compile(self, report: Report) -> None:
        report("compiled", 1, 1)

    def buckets(self) -> tuple[Bucket, ...]:
        return ()

    def pending_buckets(self) -> int:
        return 0

    def watch_compiles(self, thread: threading.Thread) -> None:
        pass

    def compiles_after_startup(self) -> int:
        return 0

    def failure_kind(self, error: BaseException) -> Literal["fault", "panicked"]:
        return "fault" if isinstance(error, FakeDeviceError) else "panicked"

    def idle(self) -> None:
        self.idles += 1
        self._step("idle", 0)

    def close(self) -> None:
        pass

    def held_arrays(self) -> HeldArrays:
        return HeldArrays((), ())  # it holds no device arrays

    # --- steps ------------------------------------------------------------------------------

    def prefill(self, chunks: Sequence[PrefillChunk]) -> PromptLogits:
        self._step("prefill", len(chunks))
        assert len(chunks) == 1 or (
            len(chunks) <= PREFILL_ROWS and all(len(c.tokens) <= self.batched_chunk for c in chunks)
        )
        contexts = []
        self._targets = list(chunks[0].targets)
        for chunk in chunks:
            for offset, token in enumerate(chunk.tokens):
                self._write(chunk.pages, chunk.start + offset, token)
            self.prefilled_tokens += len(chunk.tokens)
            contexts.append(self._read(chunk.pages, chunk.start + len(chunk.tokens)))
        return PromptLogits(contexts)

    def prompt_scores(self, logits: PromptLogits) -> PromptScores:
        """A scored position's fake logprob is -target / VOCAB; its alternatives the target and the ids after it."""
        targets = np.asarray(self._targets)
        top_ids = (targets[:, None] + np.arange(MAX_TOP_LOGPROBS)[None]) % VOCAB
        return PromptScores(-targets / VOCAB, np.ones(len(targets), np.int32), top_ids, -top_ids / VOCAB)

    def insert(self, lane: int, row: InsertedRow) -> None:
        assert 0 <= lane < self.lanes, "a row in the spare lane"
        self._lanes[lane] = _Lane(list(row.pages), row.sampling, row.seed)

    def add_page(self, lane: int, index: int, page: int) -> None:
        table = self._lanes[lane].table
        assert index == len(table), "pages are added in order"
        table.append(page)

    def copy_page(self, source: int, target: int) -> None:
        self._kv[target] = list(self._kv[source])

    def read_pages(self, pages: Sequence[int]) -> list[bytes]:
        return [np.array([-1 if t is None else t for t in self._kv[p]], np.int64).tobytes() for p in pages]

    def write_pages(self, pages: Sequence[int], contents: Sequence[bytes]) -> None:
        for page, content in zip(pages, contents, strict=True):
            self._kv[page] = [None if t < 0 else int(t) for t in np.frombuffer(content, np.int64)]

    def encode_images(self, images: Sequence[object]) -> list[np.ndarray]:
        raise AssertionError("the fake runner's model takes no images")

    def load_adapter(self, slot: int, adapter: LoraAdapter | None) -> None:
        assert 1 <= slot <= self.adapter_slots, "no such adapter slot"
        self.log.append(("load_adapter" if adapter is not None else "clear_adapter", slot))

    def first_tokens(self, logits: PromptLogits, index: int, rows: Sequence[DecodeRow]) -> Drawn:
        self._step("first", len(rows))
        context = logits[index]  # type: ignore[index]
        return self._drawn(rows, [[self._draw(row, context)] for row in rows], [1] * len(rows))

    def generate(self, rows: Sequence[DecodeRow], chained: Pending | None = None, burst: bool = False) -> Pending:
        drafting = any(row.draft for row in rows)
        assert not (drafting and chained is not None), "a step with drafts chained on a pending step"
        assert not drafting or (
            len(rows) <= self.draft_rows and all(len(row.draft) <= self.draft_tokens for row in rows)
        )
        assert not burst or (self.burst_steps and not drafting and all(row.constraint is None for row in rows))
        kind = "verify" if drafting else "decode" if chained is None else "chained"
        self._step(f"{kind} burst" if burst else kind, len(rows))
        # A chained step's input: the last token of the step before (a burst's last column).
        inputs = [row.token for row in rows] if chained is None else list(chained.tokens[:, -1])  # type: ignore[attr-defined]
        assert len(inputs) == len(rows)
        if burst:
            return Pending(self._burst(rows, inputs))
        drawn, taken = [], []
        for row, token in zip(rows, inputs, strict=True):
            # As the device does: every position of the step is written and drawn at, and the row
            # takes the draws up to the first that disagrees with its draft, that one included.
            table = self._lanes[row.lane].table
            steps = [token, *row.draft]
            draws = []
            for offset, step_token in enumerate(steps):
                self._write(table, row.position + offset, step_token)
                draws.append(self._draw(row, self._read(table, row.position + offset + 1), offset))
            agreed = next((j for j, draft in enumerate(row.draft) if draws[j] != draft), len(row.draft))
            drawn.append(draws + [0] * (self.draft_tokens + 1 - len(draws)) if drafting else draws)
            taken.append(agreed + 1)
        return Pending(self._drawn(rows, drawn, taken))

    def take(self, step: Pending) -> Drawn:
        assert isinstance(step, Drawn)
        return step

    def _burst(self, rows: Sequence[DecodeRow], inputs: Sequence[int]) -> Drawn:
        """As the device does: each row's positions written and drawn at, one step after another,
        as far as its budget (its pages end there: the device sends later steps' keys to the null
        page); the row takes its draws up to the first stop id."""
        drawn, taken = [], []
        for row, token in zip(rows, inputs, strict=True):
            table = self._lanes[row.lane].table
            draws: list[int] = []
            while len(draws) < min(self.burst_steps, row.budget):
                position = row.position + len(draws)
                self._write(table, position, token)
                token = self._draw(row, self._read(table, position + 1), len(draws))
                draws.append(token)
            stop = next((j for j, draw in enumerate(draws) if draw in row.stops), len(draws) - 1)
            drawn.append(draws + [0] * (self.burst_steps - len(draws)))
            taken.append(stop + 1)
        return self._drawn(rows, drawn, taken)

    # --- the fake device --------------------------------------------------------------------

    def _step(self, kind: str, rows: int) -> None:
        if not self.gate.is_set():
            self.held.set()
            assert self.gate.wait(30), "the test never opened the gate"
            self.held.clear()
        time.sleep(self.delay_s)
        if self.fail_with is not None:
            if self.fail_after <= 0:
                raise self.fail_with
            self.fail_after -= 1
        self.log.append((kind, rows))

    def _write(self, table: Sequence[int], position: int, token: int) -> None:
        page = table[position // self.page_size]
        assert page != NULL_PAGE, f"position {position} written to the null page"
        self._kv[page][position % self.page_size] = token

    def _read(self, table: Sequence[int], length: int) -> list[int]:
        context = []
        for position in range(length):
            token = self._kv[table[position // self.page_size]][position % self.page_size]
            assert token is not None, f"position {position} read before it was written"
            context.append(token)
        return context

    def _draw(self, row: DecodeRow, context: list[int], offset: int = 0) -> int:
        lane = self._lanes[row.lane]
        token = self.model(context, lane.sampling, lane.seed, row.draws + offset)
        if row.constraint is None:
            return token
        mask = np.zeros(-(-VOCAB // 32), np.int32)
        row.constraint.fill_mask(mask)
        bits = np.unpackbits(mask.view(np.uint8), bitorder="little")[:VOCAB]
        allowed = np.flatnonzero(bits)
        return int(allowed[token % len(allowed)])

    def _drawn(self, rows: Sequence[DecodeRow], tokens: list[list[int]], taken: list[int]) -> Drawn:
        chosen = np.asarray(tokens, np.int64)
        counts = np.asarray(taken, np.int32)
        if all(self._lanes[row.lane].sampling.logprobs is None for row in rows):
            return Drawn(chosen, counts, None)
        logprobs = -chosen / VOCAB
        top_ids = np.stack([chosen, (chosen + 1) % VOCAB], axis=2)
        # A scored id's fake logprob is -id / VOCAB, at every token of the row.
        scored = np.zeros((*chosen.shape, MAX_SCORED_IDS))
        for i, row in enumerate(rows):
            ids = self._lanes[row.lane].sampling.scored_ids
            scored[i, :, : len(ids)] = -np.asarray(ids) / VOCAB
        return Drawn(chosen, counts, (logprobs, top_ids, np.stack([logprobs, logprobs - 1], axis=2), scored))
