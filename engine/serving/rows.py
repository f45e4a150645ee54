"""The scheduler's host records: a request, its rows, and a prompt being prefilled.

A request's `n` rows share its prompt; each row decodes in its own lane. Only the engine thread
changes a row or a prefill; a request's counting fields (`admitted`, `first_token_at`) are also
read under the intake's lock.
"""

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.api import Constraint, EngineEvent, GenerationRequest
from engine.serving.adapter_table import AdapterUse
from engine.serving.admission import Admission
from engine.serving.drafts import PromptLookup
from engine.serving.media import PromptMedia, keyed_prompt

Sink = Callable[[EngineEvent], None]


@dataclass(eq=False)
class Request:
    id: int
    request: GenerationRequest
    sink: Sink
    admission: Admission  # its output budget and how a row that reaches it finishes
    stop_ids: frozenset[int]  # the request's and (unless ignore_eos) the model's
    submitted: float
    adapter: AdapterUse | None = None  # its LoRA adapter's slot, held until it closes
    rows: list["Row"] = field(default_factory=list)
    admitted: float | None = None
    cached_prompt_tokens: int = 0
    first_token_at: float | None = None
    rows_unfinished: int = 0
    prompt_scored: bool = False  # its prompt's logprobs were sent (a recompute sends them no more)
    # Its images' embeddings and positions (engine/serving/media.py); its rows' tokens hold each
    # image's tokens as the image's key.
    media: PromptMedia | None = None
    # The last time the request moved (submission, admission, a prefill chunk, a token): a stall
    # past the request's stall_timeout ends it.
    progress_at: float = field(init=False)

    def __post_init__(self) -> None:
        self.progress_at = self.submitted

    @property
    def max_tokens(self) -> int:
        return self.admission.max_tokens

    def new_rows(self, image_token_id: int | None = None) -> list["Row"]:
        """The request's rows, each with its own seed (derived from the request's seed, if any)
        and its own grammar state. `image_token_id`: the model's, when it takes images."""
        sampling, prompt, factory = self.request.sampling, list(self.request.prompt_ids), self.request.constraint
        if self.request.images:
            assert image_token_id is not None, "images for a model without image tokens"
            prompt, self.media = keyed_prompt(prompt, image_token_id, self.request.images)
        for index in range(self.request.n):
            seed = int.from_bytes(os.urandom(4)) if sampling.seed is None else hash((sampling.seed, index))
            row = Row(self, index, list(prompt), seed & 0xFFFFFFFF, factory() if factory else None)
            row.rope_shift = 0 if self.media is None else self.media.rope.shift
            self.rows.append(row)
        self.rows_unfinished = self.request.n
        return list(self.rows)


@dataclass(eq=False)
class Row:
    request: Request
    index: int
    tokens: list[int]  # prompt + output so far
    seed: int
    constraint: Constraint | None
    generated: int = 0
    lane: int | None = None
    pages: list[int] = field(default_factory=list)
    named_pages: int = 0  # leading full pages already named in the prefix cache
    page_hashes: list[bytes] = field(default_factory=list)  # of its leading full pages, as far as computed
    admitted_seq: int = 0  # admission order, for choosing preemption victims
    last_token_at: float = 0.0
    done: bool = False
    drafts: PromptLookup | None = None  # while it decodes, when its sampling lets drafts be checked
    rope_shift: int = 0  # M-RoPE: its tokens after the prompt turn at their place plus this (images)


@dataclass(eq=False)
class Prefill:
    """Rows sharing one prompt whose KV is being written chunk by chunk."""

    rows: list[Row]
    tokens: list[int]
    pages: list[int]
    next_position: int
    scored: bool = False  # its chunks report the prompt's logprobs (prefilled alone, none from the cache)
