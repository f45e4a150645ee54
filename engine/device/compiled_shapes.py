"""`CompiledShapes`: the shapes a `DeviceRunner` (engine/device/runner.py) compiles at start-up,
and a step's host inputs padded to one of them, so that no request ever compiles.

A step's shape is its rows and its tokens per row. Row counts grow geometrically up to the lanes
(`bucket_growth`); prefill chunks double from SMALLEST_PREFILL_CHUNK up to `prefill_chunk`, and
up to PREFILL_ROWS prompts prefill together in chunks of at most `batched_chunk`; a prompt whose
logprobs are asked for prefills alone in chunks of `prefill_chunk`, through the head at every
position (scored prefill); steps with
drafts take the row counts up to the first that holds `draft_rows`; decode bursts (with
`burst_steps`) take every row count, as decode steps do. Attention loops over the
pages a step's rows have filled, so one block-table width (the whole context) serves every length.

Block tables carry one more column than a row can fill, always the null page: padded prompt
tokens are placed there (`padding_position`), so their keys and values never land in a real page.

A step is padded to the smallest *ready* size of its kind. Every size is ready unless the runner
defers some (`defer`): it serves once the largest of each kind is compiled (`first`: any step fits
them) and marks the others ready (`mark_ready`) as it compiles them while idle. Until a batched
prefill size is ready, `batched_chunk` is 0 and prompts prefill one at a time; until a step with
drafts is ready, `draft_rows` is 0 and rows decode without drafts.

Threads: `plan` and `first` run on the thread that builds the engine; `defer`, `mark_ready` and
the paddings on the engine thread (or on the building thread before the engine thread starts);
`pending` may be read from any thread (a list replaced whole).
"""

import bisect
import math
from collections.abc import Iterable, Sequence

import numpy as np

from engine.device.runner_api import NULL_PAGE, PREFILL_ROWS, DecodeRow, PrefillChunk
from engine.engine_config import EngineConfig
from engine.stats import Bucket

# Pages moved per call between the KV pool and the host (the prefix cache's disk tier): one
# compiled shape, padded with the null page.
PAGE_TRANSFER_GROUP = 16
# Shortest prefill chunk compiled; chunk sizes double up to prefill_chunk. A padded prompt token
# costs as much as a real one, and the new turn of a resent conversation is often a few dozen
# tokens: doubling keeps its padding under half a chunk for one compile per size.
SMALLEST_PREFILL_CHUNK = 8


def geometric_buckets(smallest: int, largest: int, growth: int) -> list[int]:
    """smallest, smallest·growth, ... and largest; a size within 2× of largest is left to largest,
    which costs that little padding and saves a compile."""
    sizes, size = [], max(1, smallest)
    while size * 2 <= largest:
        sizes.append(size)
        size *= growth
    return [*sizes, largest]


class CompiledShapes:
    def __init__(self, config: EngineConfig, max_context: int, tower_sizes: Sequence[int] = ()) -> None:
        """`tower_sizes`: a model that takes images, its vision tower's sizes in patches
        (engine/device/image_embeddings.py)."""
        pages_per_row = math.ceil(max_context / config.page_size)
        self.width = pages_per_row + 1  # block-table columns: the last is always the null page
        self.padding_position = pages_per_row * config.page_size
        self.rows = geometric_buckets(1, config.decode_lanes, config.bucket_growth)
        self.draft_tokens = config.draft_tokens
        self.burst_steps = config.burst_steps
        self.draft_rows = min(config.draft_rows, config.decode_lanes) if config.draft_tokens > 0 else 0
        # Steps with drafts take the row buckets up to the first that holds draft_rows.
        self.verify_rows = self.rows[: bisect.bisect_left(self.rows, self.draft_rows) + 1] if self.draft_rows else []
        self.chunks = geometric_buckets(min(SMALLEST_PREFILL_CHUNK, config.prefill_chunk), config.prefill_chunk, 2)
        self._batched_limit = max((b for b in self.chunks if b * PREFILL_ROWS <= config.prefill_chunk), default=0)
        self._max_context, self._page_size = max_context, config.page_size
        self._adapter_slots, self._adapter_rank = config.max_loras, config.max_lora_rank
        self.pending: list[Bucket] = []  # deferred buckets, not ready yet (see `defer`)
        self._planned = {
            ("prefill", 1): self.chunks,
            ("prefill", PREFILL_ROWS): [b for b in self.chunks if b <= self._batched_limit],
            ("prefill_scored", 0): self.chunks[-1:],
            ("first_tokens", 0): self.rows,
            ("decode", 0): self.rows,
            ("burst", 0): self.rows if config.burst_steps else [],
            ("verify", 0): self.verify_rows,
            ("vision", 0): list(tower_sizes),
        }
        self._ready = dict(self._planned)

    @property
    def batched_chunk(self) -> int:
        """The longest chunk prompts prefill in together (0: none while no batched size is ready)."""
        return max(self._ready["prefill", PREFILL_ROWS], default=0)

    @property
    def scored_ready(self) -> bool:
        """Whether a scored prefill (a prompt whose logprobs are asked for) can run."""
        return bool(self._ready["prefill_scored", 0])

    @property
    def ready_draft_rows(self) -> int:
        """The most rows of a step with drafts (0: none while no such step is ready)."""
        return self.draft_rows if self._ready["verify", 0] else 0

    def ready_sizes(self, kind: str, rows: int = 1) -> list[int]:
        """The ready sizes of a kind, ascending: row counts, or for prefill (one row or
        PREFILL_ROWS) and scored prefill (one row) chunk lengths."""
        return self._ready[kind, rows if kind == "prefill" else 0]

    def _refresh(self) -> None:
        waiting = {(b.kind, b.rows if b.kind == "prefill" else 0, _size(b)) for b in self.pending}
        self._ready = {key: [s for s in sizes if (*key, s) not in waiting] for key, sizes in self._planned.items()}

    def plan(self) -> list[Bucket]:
        """Every shape to compile: one prefill shape per chunk size (and per batched chunk size), one
        scored prefill shape, the longest chunk (a prompt whose logprobs are asked for is padded to
        it: one compile for every size, as scoring serves evaluations rather than chats), one first-token
        and one decode shape (and with bursts one burst shape) per row bucket, one verify shape per
        row bucket of steps with drafts,
        and one each for the lane reset, the page copy, the adapter load and the page transfers."""
        width = self.width
        plan = [Bucket("prefill", 1, tokens, width) for tokens in self.chunks]
        batched = [tokens for tokens in self.chunks if tokens <= self._batched_limit]
        plan += [Bucket("prefill", PREFILL_ROWS, tokens, width) for tokens in batched]
        plan += [Bucket("prefill_scored", 1, self.chunks[-1], width)]
        plan += [Bucket("first_tokens", b, 1, 0) for b in self.rows]
        plan += [Bucket("decode", b, 1, width) for b in self.rows]
        plan += [Bucket("burst", b, self.burst_steps, width) for b in self._planned["burst", 0]]
        plan += [Bucket("verify", b, self.draft_tokens + 1, width) for b in self.verify_rows]
        plan += [Bucket("vision", 1, patches, 0) for patches in self._planned["vision", 0]]
        plan += [Bucket("reset_lane", 1, self._max_context, 0), Bucket("copy_page", 1, self._page_size, 0)]
        if self._adapter_slots:
            plan += [Bucket("load_adapter", 1, self._adapter_rank, 0)]
        plan += [Bucket("read_pages", PAGE_TRANSFER_GROUP, self._page_size, 0)]
        plan += [Bucket("write_pages", PAGE_TRANSFER_GROUP, self._page_size, 0)]
        return plan

    def first(self, plan: Sequence[Bucket]) -> list[Bucket]:
        """What serving needs before anything else: the largest size of each kind (any step fits
        it) and the helpers; neither batched prefill, steps with drafts nor scored prefill, which
        are optional (prompts prefill one at a time, rows decode without drafts, a prompt whose
        logprobs are asked for waits, until they are ready)."""
        optional = {("prefill", PREFILL_ROWS), ("verify", 0), ("prefill_scored", 0)}
        largest: dict[tuple[str, int], Bucket] = {}
        for bucket in plan:
            key = (bucket.kind, bucket.rows if bucket.kind == "prefill" else 0)
            if key not in optional and (key not in largest or _size(bucket) > _size(largest[key])):
                largest[key] = bucket
        return [bucket for bucket in plan if bucket in largest.values()]

    def defer(self, plan: Sequence[Bucket], first: Sequence[Bucket]) -> list[Bucket]:
        """Marks the buckets of `plan` not in `first` pending, in the order they pay off: one-row
        decoding and steps with drafts (a single stream's speed), short prompts' chunks, batched
        prefill (largest first, which turns it on), scored prefill, then the middle row counts.
        Returns them in that order."""
        kinds = {"decode": 0, "burst": 0, "first_tokens": 0, "verify": 0, "prefill": 1}

        def order(bucket: Bucket) -> tuple[int, int]:
            if bucket.kind == "prefill" and bucket.rows == PREFILL_ROWS:
                return (2, -bucket.tokens)
            if bucket.kind == "prefill_scored":
                return (3, 0)
            if bucket.kind in ("decode", "burst", "first_tokens", "verify") and bucket.rows > 1:
                return (4, bucket.rows)
            return (kinds.get(bucket.kind, 0), _size(bucket))

        self.pending = sorted((b for b in plan if b not in first), key=order)
        self._refresh()
        return list(self.pending)

    def mark_ready(self, buckets: Iterable[Bucket]) -> None:
        done = set(buckets)
        self.pending = [bucket for bucket in self.pending if bucket not in done]
        self._refresh()

    def prefill_inputs(
        self, chunks: Sequence[PrefillChunk], kind: str = "prefill"
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """A prefill step's tokens, positions, block tables, last-token indices and adapter slots,
        padded to the smallest ready chunk size of `kind` that holds the longest chunk (one row, or
        PREFILL_ROWS)."""
        rows = 1 if len(chunks) == 1 else PREFILL_ROWS
        longest = max(len(chunk.tokens) for chunk in chunks)
        size = next(b for b in self.ready_sizes(kind, rows) if b >= longest)
        # Padding rows sit at position 0 of the null page: attention reads nothing for them, while
        # the loop over pages runs as far as the row that starts latest.
        tokens = np.zeros((rows, size), np.int32)
        positions = np.zeros((rows, size), np.int32)
        table = np.zeros((rows, self.width), np.int32)
        last = np.zeros(rows, np.int32)
        slots = np.zeros(rows, np.int32)
        for i, chunk in enumerate(chunks):
            length = len(chunk.tokens)
            tokens[i, :length] = chunk.tokens
            positions[i] = self.padding_position
            positions[i, :length] = np.arange(chunk.start, chunk.start + length)
            table[i, : len(chunk.pages)] = chunk.pages
            last[i] = length - 1
            slots[i] = chunk.adapter
        return tokens, positions, table, last, slots

    def verify_inputs(self, rows: Sequence[DecodeRow], bucket: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A step over each row's token and its draft (positions after it), `bucket` rows: its
        tokens, positions and draft lengths. Padding tokens sit in the null page's column,
        padding rows at position 0 (of the spare lane's null pages)."""
        width = self.draft_tokens + 1
        tokens = np.zeros((bucket, width), np.int32)
        positions = np.zeros((bucket, width), np.int32)
        drafts = np.zeros(bucket, np.int32)
        for i, row in enumerate(rows):
            assert len(row.draft) <= self.draft_tokens, "a draft longer than the runner takes"
            length = 1 + len(row.draft)
            tokens[i, 0], tokens[i, 1:length] = row.token, row.draft
            positions[i] = self.padding_position
            positions[i, :length] = np.arange(row.position, row.position + length)
            drafts[i] = len(row.draft)
        return tokens, positions, drafts


def _size(bucket: Bucket) -> int:
    """What a bucket's kind pads: a prefill's chunk length, a tower call's patches, any other step's rows."""
    return bucket.tokens if bucket.kind in ("prefill", "prefill_scored", "vision") else bucket.rows


def page_group(pages: Sequence[int]) -> np.ndarray:
    """Up to PAGE_TRANSFER_GROUP page ids, padded with the null page to the transfers' one shape."""
    group = np.full(PAGE_TRANSFER_GROUP, NULL_PAGE, np.int32)
    group[: len(pages)] = pages
    return group
