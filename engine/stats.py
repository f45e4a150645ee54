"""`EngineStats`: a plain snapshot of the engine's counters, with vLLM's meanings.

The engine thread records into `LatencyHistogram`s and counters under the engine lock; `stats()`
copies them into frozen dataclasses, so readers on other threads never see a half-updated value.
"""

import bisect
from dataclasses import dataclass
from typing import Any

# Seconds; vLLM's buckets for time to first token, inter-token latency and end-to-end latency.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)


@dataclass(frozen=True)
class Histogram:
    bounds: tuple[float, ...]  # upper bounds; an implicit +Inf bucket follows
    counts: tuple[int, ...]  # per bucket (not cumulative), len(bounds) + 1
    sum: float
    count: int


class LatencyHistogram:
    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self._counts = [0] * (len(bounds) + 1)
        self._sum = 0.0

    def observe(self, seconds: float) -> None:
        self._counts[bisect.bisect_left(self._bounds, seconds)] += 1
        self._sum += seconds

    def snapshot(self) -> Histogram:
        return Histogram(self._bounds, tuple(self._counts), self._sum, sum(self._counts))


@dataclass(frozen=True)
class Bucket:
    """One compiled shape: `kind` is "prefill", "decode" or a helper; rows × tokens × KV pages per row."""

    kind: str
    rows: int
    tokens: int
    pages: int


@dataclass(frozen=True)
class EngineStats:
    state: str
    decode_lanes: int
    requests_running: int  # requests holding lanes (prefilling or decoding)
    requests_waiting: int  # requests submitted and not yet holding lanes (preempted rows count as running)
    kv_pages_total: int
    kv_pages_used: int  # pages held by rows; idle prefix-cache pages count as free
    kv_cache_usage: float  # kv_pages_used / kv_pages_total
    prefix_cache_queries: int  # prompt tokens looked up in the prefix cache
    prefix_cache_hits: int  # of those, tokens served from it
    prefix_cache_disk_hits: int  # tokens of cached pages read back from the disk tier
    prompt_tokens: int  # prompt tokens of finished or running requests
    generation_tokens: int
    preemptions: int
    refusals: int  # QueueFull raised by submit
    draft_tokens: int  # prompt-lookup draft tokens brought to decode steps
    draft_tokens_accepted: int  # of those, tokens the rows' draws agreed with (taken without a step of their own)
    decode_steps: int
    # The engine thread's time in decode steps outside the wait for their tokens: scheduling, a
    # step's arguments, dispatch, taking tokens, the sinks. The host path's cost (issue 41).
    decode_host_seconds: float
    encode_requests: int  # encode requests answered (embeddings, rerank); their tokens count in prompt_tokens
    time_to_first_token: Histogram
    inter_token_latency: Histogram
    e2e_latency: Histogram
    compiles_after_startup: int
    buckets: tuple[Bucket, ...]  # compiled so far
    pending_buckets: int  # shapes still compiling while serving (EngineConfig.compile_while_serving)


@dataclass(frozen=True)
class HeldArrays:
    """The device arrays (jax.Array) an engine holds, by what they are: what freeing it gives back
    (pooled/hosting/released_memory.py)."""

    kv_cache: tuple[Any, ...]
    weights: tuple[Any, ...]  # the model's parameters, its encoders' and its LoRA slots'

    def __add__(self, other: "HeldArrays") -> "HeldArrays":
        return HeldArrays(self.kv_cache + other.kv_cache, self.weights + other.weights)
