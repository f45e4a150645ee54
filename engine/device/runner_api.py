"""The seam between the scheduler and the device: the verbs a runner offers, after JetStream's
`prefill / insert / generate / free_resource`.

The scheduler (`engine/serving/scheduler.py`) decides what runs: which prompts are prefilled, which rows
decode, which pages each row holds. A runner (`engine/device/runner.py` on JAX; a fake in the scheduler's
tests) does it: it owns the KV pool, the lanes' block tables and sampling parameters, and the
compiled step functions. The scheduler never sees a device array: a step's results come back as
an opaque handle (`Pending`, `PromptLogits`) that only the runner that made it reads, or as host
numbers (`Drawn`).

A lane is a decode slot: a row holds one from admission to its end. Lane `lanes` is the spare one
that padding rows use. Freeing a lane needs no verb: `insert` overwrites everything a lane holds.

Threads: `compile` and `watch_compiles` run on the thread that builds the engine, before the
engine thread starts; `buckets` and `compiles_after_startup` may be read from any thread (for
stats); every other verb runs on the engine thread only, one at a time, so a runner needs no lock.
"""

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, NewType, Protocol

import numpy as np

from engine.api import Constraint, SamplingParams
from engine.lora.peft_adapter import LoraAdapter
from engine.model.image_tower import PreparedImage
from engine.stats import Bucket, HeldArrays

# Prompts prefilled together in one step when each has a short chunk left (together at most
# prefill_chunk tokens): a burst of short prompts costs one pass over the weights per step
# instead of one per prompt.
PREFILL_ROWS = 8
# The KV pool's page 0: the scheduler's page pool never hands it out; padding rows and unused
# block-table entries point here.
NULL_PAGE = 0

Report = Callable[[str, int, int], None]  # (what, done, total)
# A decode step dispatched to the device whose sampled tokens the host has not taken yet.
Pending = NewType("Pending", object)
# The last-position logits of a prefill step's prompts, kept on the device.
PromptLogits = NewType("PromptLogits", object)


@dataclass(frozen=True, slots=True)
class PrefillChunk:
    """The next chunk of one prompt: `tokens` at positions start.., over the prompt's `pages`."""

    tokens: Sequence[int]
    start: int
    pages: Sequence[int]
    adapter: int = 0  # the prompt's LoRA adapter slot (0: none)
    # The token each position predicts (the prompt's next; -1: none), to score the chunk's prompt
    # (`prompt_scores`); empty: not scored. A scored chunk is prefilled alone.
    targets: Sequence[int] = ()
    # A prompt with images (`tokens` below zero are image tokens): each token's embedding row
    # [len(tokens), D] (zeros but at image tokens) and M-RoPE position [len(tokens), 3]. None: a
    # text prompt, whose tokens turn at their places.
    media: np.ndarray | None = None
    rope: np.ndarray | None = None


@dataclass(frozen=True, slots=True)
class DecodeRow:
    """One row of a decode (or first-token) step: the token at `position` is the step's input.

    `draws` counts the tokens this row has drawn before this step (its sampling counter, so a
    seeded row draws the same alone or batched); `constraint` fills its grammar mask. `draft`
    holds the tokens guessed to follow `token` (engine/serving/drafts.py), at the positions after it: the
    step checks them and the row takes each guess its own draw agrees with, then one token more.
    """

    lane: int
    position: int
    token: int  # ignored when the step chains on a pending step's sampled tokens
    draws: int
    constraint: Constraint | None
    draft: Sequence[int] = ()
    rope_shift: int = 0  # M-RoPE: the row turns at its positions plus this (after a prompt with images)
    # For a burst: the most tokens the row may still take, and its stop ids (a burst stops taking
    # the row's tokens after either).
    budget: int = 1
    stops: frozenset[int] = frozenset()


@dataclass(frozen=True)
class InsertedRow:
    """What a lane holds for its row: its pages (the block table), its sampling parameters and
    seed, and its tokens so far (`output` is non-empty for a row recomputed after preemption)."""

    pages: Sequence[int]
    sampling: SamplingParams
    seed: int
    prompt: Sequence[int]
    output: Sequence[int]
    adapter: int = 0  # the row's LoRA adapter slot (0: none)


@dataclass(frozen=True)
class Drawn:
    """Sampled tokens on the host, [rows, step tokens]: a row takes its first `taken` (one, plus
    the draft tokens its draws agreed with; a burst's, up to its budget or stop id). With
    logprobs, each token's logprob, its best alternatives (ids and logprobs, best first) and the
    logprobs of its row's scored ids, indexed alike."""

    tokens: np.ndarray
    taken: np.ndarray
    logprobs: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None


@dataclass(frozen=True)
class PromptScores:
    """A scored prefill chunk's numbers on the host, a row per position: the logprob of the
    position's target, its rank (1: the likeliest token) and the best MAX_TOP_LOGPROBS
    alternatives (ids and logprobs, best first)."""

    logprobs: np.ndarray
    ranks: np.ndarray
    top_ids: np.ndarray
    top_logprobs: np.ndarray


class Runner(Protocol):
    """What the scheduler asks of the device. Page ids come from the scheduler's `PagePool`."""

    lanes: int
    page_size: int
    max_context: int

    @property
    def batched_chunk(self) -> int:
        """The longest chunk of each prompt in a step of several prompts (0: steps do not batch,
        for now or ever); read before each prefill step, as it may grow while serving."""
        ...

    @property
    def scored_ready(self) -> bool:
        """Whether a prefill chunk with `targets` can run now (its shape may compile while serving)."""
        ...

    # The bytes of one page's keys and values over every layer, as read_pages returns them.
    page_bytes: int
    # The most draft tokens a row may bring to a step (0: steps take no drafts).
    draft_tokens: int
    # The decode steps of a burst (0: no bursts): `generate(..., burst=True)` runs that many.
    burst_steps: int

    @property
    def draft_rows(self) -> int:
        """The most rows of a step with drafts (0: steps take no drafts, for now or ever); read
        before each decode step, as it may become non-zero while serving."""
        ...

    # LoRA adapter slots, numbered 1.. (0: none; no slots: adapters are not served), and their rank.
    adapter_slots: int
    adapter_rank: int
    # The model's image token id when it takes images (None: text only).
    image_token_id: int | None

    def encode_images(self, images: Sequence[PreparedImage]) -> list[np.ndarray]:
        """Each image's embeddings [image.tokens, D] (float32, host), from the vision tower or, for
        an image seen lately, from the runner's own cache of them."""
        ...

    @property
    def idle_interval(self) -> float | None:
        """While the engine has nothing to do, its thread calls `idle` this often (None: never)."""
        ...

    def compile(self, report: Report) -> None:
        """Compiles the shapes the steps will meet, on padding (changes nothing real): every one,
        or, with `EngineConfig.compile_while_serving`, what any step fits, the rest left to `idle`."""
        ...

    def buckets(self) -> tuple[Bucket, ...]:
        """The shapes compiled so far."""
        ...

    def pending_buckets(self) -> int:
        """Shapes still to compile while serving (0 once every one is ready)."""
        ...

    def watch_compiles(self, thread: threading.Thread) -> None:
        """Counts compiles on `thread` (the engine thread, not started yet) from now on."""
        ...

    def compiles_after_startup(self) -> int:
        """XLA compiles on the engine thread since it started: a step met a shape no bucket covered."""
        ...

    def prefill(self, chunks: Sequence[PrefillChunk]) -> PromptLogits:
        """Writes the chunks' keys and values into their pages; one chunk, or up to PREFILL_ROWS of
        at most `batched_chunk` tokens each. Every position before a chunk's start is already in
        its pages. The result holds each chunk's logits at its last token, for `first_tokens`."""
        ...

    def prompt_scores(self, logits: PromptLogits) -> PromptScores:
        """The scores of a prefill step of one chunk with `targets`, on the host."""
        ...

    def insert(self, lane: int, row: InsertedRow) -> None:
        """Gives `lane` a row: its block table, sampling parameters and seed, and the penalty
        state of its tokens so far."""
        ...

    def add_page(self, lane: int, index: int, page: int) -> None:
        """Sets entry `index` of the lane's block table (a decoding row grew a page)."""
        ...

    def copy_page(self, source: int, target: int) -> None:
        """Copies one page's keys and values (a row's private copy of a shared partial page)."""
        ...

    def read_pages(self, pages: Sequence[int]) -> list[bytes]:
        """Each page's keys and values over every layer, on the host (for the disk tier)."""
        ...

    def write_pages(self, pages: Sequence[int], contents: Sequence[bytes]) -> None:
        """Writes contents that `read_pages` returned (in this or an earlier process) into `pages`."""
        ...

    def load_adapter(self, slot: int, adapter: LoraAdapter | None) -> None:
        """Puts `adapter` (of at most `adapter_rank`) in `slot`, or clears the slot with None; no
        row in the lanes or in a step may be using the slot."""
        ...

    def first_tokens(self, logits: PromptLogits, index: int, rows: Sequence[DecodeRow]) -> Drawn:
        """Each row's first token, drawn from chunk `index`'s logits (rows sharing one prompt)."""
        ...

    def generate(self, rows: Sequence[DecodeRow], chained: Pending | None = None, burst: bool = False) -> Pending:
        """Dispatches one decode step and returns without waiting for it. With `chained` (the
        pending step of the same rows, in the same order, none of them with a draft, of the same
        kind: plain or burst), each row's input is that step's last sampled token, still on the
        device; every row's KV is in its pages up to its position. A step with drafts (at most
        `draft_rows` rows, each draft at most `draft_tokens` long, its positions in the row's
        pages) is never chained on. A `burst` (no row with a draft or a grammar) runs
        `burst_steps` decode steps, each row's positions up to its `budget` in its pages, and takes
        each row's tokens up to its budget or a stop id."""
        ...

    def take(self, step: Pending) -> Drawn:
        """Waits for a pending step and brings its tokens to the host, with logprobs when any of
        its rows asked for them."""
        ...

    def idle(self) -> None:
        """Called every `idle_interval` while the engine has nothing to do: a process group's
        keep-alive (engine/device/mirrored_runner.py), or the next deferred shape's compile."""
        ...

    def failure_kind(self, error: BaseException) -> Literal["fault", "panicked"]:
        """ "fault" for an error of the device or its runtime, "panicked" for anything else."""
        ...

    def close(self) -> None:
        """Stops watching compiles; called once the engine thread has ended."""
        ...

    def held_arrays(self) -> HeldArrays:
        """The device arrays it holds: its KV pool, the model's parameters and the LoRA slots."""
        ...
