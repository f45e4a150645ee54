"""`LaneTables`: the tables a step reads for each lane — its block table, its sampling parameters
(with its draw counter and grammar mask) and its LoRA adapter slot.

A step gathers its rows' block tables and adapter slots on the host (`lane_ids`) and hands them to
the device with its inputs. The sampling parameters stay on the device, whole (`params`): a step
gathers its rows' inside, and only the tables that changed since the last step are sent again —
usually the draw counters alone, where gathering every row's logit-bias slots and grammar mask
on the host each step took ~0.2 ms of a 64-row step's host time (0.5 MB to send). `insert`
overwrites everything a lane held, so freeing a lane needs nothing here. Lane `lanes` is the spare
one: padding rows use it, with an all-null block table, an empty lane's parameters and no adapter.

Threads: only the runner (engine/device/runner.py) touches its `LaneTables`: on the thread that
builds the engine while it compiles, then on the engine thread alone.
"""

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import cast

import jax
import numpy as np

from engine.api import MAX_SCORED_IDS
from engine.device.lane_sampling import RowParams
from engine.device.runner_api import NULL_PAGE, DecodeRow, InsertedRow

# Logit-bias entries per row, padded to this many (OpenAI allows up to 300).
LOGIT_BIAS_SLOTS = 300
_TABLES = frozenset(field.name for field in dataclasses.fields(RowParams))


class LaneTables:
    def __init__(self, lanes: int, width: int, vocab_size: int, put: Callable[[np.ndarray], jax.Array]) -> None:
        """`put` places a host table on the device as the steps expect it."""
        spare = lanes + 1
        self._spare_lane = lanes
        self.block_tables = np.zeros((spare, width), np.int32)
        self.mask_words = math.ceil(vocab_size / 32)  # a grammar mask's int32 words
        self._params = _empty_row_params(spare, self.mask_words)
        self._put = put
        self._on_device: dict[str, jax.Array] = {}
        self._stale = set(_TABLES)  # not yet sent as they are
        self.adapters = np.zeros(spare, np.int32)  # each lane's adapter slot; the spare lane's is 0
        self._reporting: set[int] = set()  # lanes whose rows report logprobs (usually none)

    def insert(self, lane: int, row: InsertedRow) -> None:
        """Gives `lane` the row's block table, sampling parameters, seed and adapter slot."""
        sampling = row.sampling
        self.block_tables[lane] = NULL_PAGE
        self.block_tables[lane, : len(row.pages)] = row.pages
        self.adapters[lane] = row.adapter
        p = self._params
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
        if sampling.logprobs is None:
            self._reporting.discard(lane)
        else:
            self._reporting.add(lane)
        p.scored_ids[lane] = -1
        p.scored_ids[lane, : len(sampling.scored_ids)] = sampling.scored_ids
        self._stale.update(_TABLES)

    def add_page(self, lane: int, index: int, page: int) -> None:
        self.block_tables[lane, index] = page

    def lane_ids(self, rows: Sequence[DecodeRow], buckets: Sequence[int]) -> np.ndarray:
        """The rows' lanes padded to the first of `buckets` that holds them (padding rows use the
        spare lane), after writing each row's draw counter and grammar mask into its lane's parameters."""
        bucket = next(b for b in buckets if b >= len(rows))
        lane_ids = np.full(bucket, self._spare_lane, np.int32)
        for i, row in enumerate(rows):
            lane_ids[i] = row.lane
            self._params.counter[row.lane] = row.draws
            if row.constraint is not None:
                row.constraint.fill_mask(cast(np.ndarray, self._params.allowed)[row.lane])
                self._stale.add("allowed")
        return lane_ids

    def params(self) -> RowParams:
        """Every lane's parameters for a step: the draw counters as a host copy (they change every
        step: they travel with the step's own call, not by a `put` of their own), the rest on the
        device, each sent again only after it changed. Copies are sent, never the tables
        themselves: the device may still be using what it was given while the host writes the
        next step's."""
        for name in self._stale - {"counter"}:
            self._on_device[name] = self._put(getattr(self._params, name).copy())
        self._stale.clear()
        return RowParams(**self._on_device, counter=self._params.counter.copy())

    def logprobs(self, lane_ids: np.ndarray) -> bool:
        """Whether any lane of `lane_ids` reports logprobs (no array work while no lane does)."""
        return bool(self._reporting) and bool(self._params.logprobs[lane_ids].any())


def _empty_row_params(lanes: int, mask_words: int) -> RowParams:
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
        allowed=np.full((lanes, mask_words), -1, np.int32),
        seed=zeros(np.uint32),
        counter=zeros(np.int32),
        logprobs=zeros(np.bool_),
        scored_ids=np.full((lanes, MAX_SCORED_IDS), -1, np.int32),
    )
