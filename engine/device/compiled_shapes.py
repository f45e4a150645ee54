"""`CompiledShapes`: the shapes a `DeviceRunner` (engine/device/runner.py) compiles at start-up,
and a step's host inputs padded to one of them, so that no request ever compiles.

A step's shape is its rows and its tokens per row. Row counts grow geometrically up to the lanes
(`bucket_growth`); prefill chunks double from SMALLEST_PREFILL_CHUNK up to `prefill_chunk`, and
up to PREFILL_ROWS prompts prefill together in chunks of at most `batched_chunk`; steps with
drafts take the row counts up to the first that holds `draft_rows`. Attention loops over the
pages a step's rows have filled, so one block-table width (the whole context) serves every length.

Block tables carry one more column than a row can fill, always the null page: padded prompt
tokens are placed there (`padding_position`), so their keys and values never land in a real page.

Threads: nothing here changes after construction; the runner calls it on the thread that builds
the engine (`plan`) and then on the engine thread.
"""

import bisect
import math
from collections.abc import Sequence

import numpy as np

from engine.device.runner_api import PREFILL_ROWS, DecodeRow, PrefillChunk
from engine.engine_config import EngineConfig
from engine.serving.kv_pages import NULL_PAGE
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
    def __init__(self, config: EngineConfig, max_context: int) -> None:
        pages_per_row = math.ceil(max_context / config.page_size)
        self.width = pages_per_row + 1  # block-table columns: the last is always the null page
        self.padding_position = pages_per_row * config.page_size
        self.rows = geometric_buckets(1, config.decode_lanes, config.bucket_growth)
        self.draft_tokens = config.draft_tokens
        self.draft_rows = min(config.draft_rows, config.decode_lanes) if config.draft_tokens > 0 else 0
        # Steps with drafts take the row buckets up to the first that holds draft_rows.
        self.verify_rows = self.rows[: bisect.bisect_left(self.rows, self.draft_rows) + 1] if self.draft_rows else []
        self.chunks = geometric_buckets(min(SMALLEST_PREFILL_CHUNK, config.prefill_chunk), config.prefill_chunk, 2)
        self.batched_chunk = max((b for b in self.chunks if b * PREFILL_ROWS <= config.prefill_chunk), default=0)
        self._max_context, self._page_size = max_context, config.page_size
        self._adapter_slots, self._adapter_rank = config.max_loras, config.max_lora_rank

    def plan(self) -> list[Bucket]:
        """Every shape to compile: one prefill shape per chunk size (and per batched chunk size),
        one first-token and one decode shape per row bucket, one verify shape per row bucket of
        steps with drafts, and one each for the lane reset, the page copy, the adapter load and
        the page transfers."""
        width = self.width
        plan = [Bucket("prefill", 1, tokens, width) for tokens in self.chunks]
        batched = [tokens for tokens in self.chunks if tokens <= self.batched_chunk]
        plan += [Bucket("prefill", PREFILL_ROWS, tokens, width) for tokens in batched]
        plan += [Bucket("first_tokens", b, 1, 0) for b in self.rows]
        plan += [Bucket("decode", b, 1, width) for b in self.rows]
        plan += [Bucket("verify", b, self.draft_tokens + 1, width) for b in self.verify_rows]
        plan += [Bucket("reset_lane", 1, self._max_context, 0), Bucket("copy_page", 1, self._page_size, 0)]
        if self._adapter_slots:
            plan += [Bucket("load_adapter", 1, self._adapter_rank, 0)]
        plan += [Bucket("read_pages", PAGE_TRANSFER_GROUP, self._page_size, 0)]
        plan += [Bucket("write_pages", PAGE_TRANSFER_GROUP, self._page_size, 0)]
        return plan

    def prefill_inputs(
        self, chunks: Sequence[PrefillChunk]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """A prefill step's tokens, positions, block tables, last-token indices and adapter slots,
        padded to the smallest chunk size that holds the longest chunk (one row, or PREFILL_ROWS)."""
        size = next(b for b in self.chunks if b >= max(len(chunk.tokens) for chunk in chunks))
        rows = 1 if len(chunks) == 1 else PREFILL_ROWS
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


def page_group(pages: Sequence[int]) -> np.ndarray:
    """Up to PAGE_TRANSFER_GROUP page ids, padded with the null page to the transfers' one shape."""
    group = np.full(PAGE_TRANSFER_GROUP, NULL_PAGE, np.int32)
    group[: len(pages)] = pages
    return group
