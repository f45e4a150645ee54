"""`IntakeFront`: what every engine offers other threads over its intake — its state, encode
requests, cancels, the queue bound, draining, waiting for idleness, and its counters — so that
`Engine` and `EncoderEngine` share one front instead of a copy.

Threads: handler threads and the host's lifecycle thread call these methods; each takes the
intake's lock briefly (engine/serving/intake.py) and never waits on the device. A subclass runs
the engine thread and adds what only it has (generation, adapters, a KV pool).
"""

from collections.abc import Callable, Mapping

from engine.api import EncodeEvent, EncodeRequest, EngineState
from engine.encoders.encoder_model import EncoderRunner
from engine.encoders.encoding import check_encode
from engine.serving.intake import Intake
from engine.stats import Bucket, EngineStats


class IntakeFront:
    def __init__(self, decode_lanes: int, max_queue: int, encoders: Mapping[str, EncoderRunner]) -> None:
        self.decode_lanes = decode_lanes
        self.encoders: Mapping[str, EncoderRunner] = dict(encoders)
        self._intake = Intake(decode_lanes, max_queue)

    @property
    def state(self) -> EngineState:
        return self._intake.state

    @property
    def failure(self) -> tuple[str, str] | None:
        """(cause, reason) once the engine thread has died."""
        return self._intake.failure

    def encode(self, request: EncodeRequest, sink: Callable[[EncodeEvent], None]) -> int:
        check_encode(request, self.encoders)
        return self._intake.enqueue_encode(request, sink)

    def cancel(self, request_id: int) -> None:
        self._intake.cancel(request_id)

    def set_max_queue(self, max_queue: int) -> None:
        """How many requests may wait from now on (`--max-queue` changed while serving); past it
        `submit` and `encode` raise QueueFull. Requests already waiting keep their place."""
        self._intake.set_max_queue(max_queue)

    def drain(self) -> None:
        """Refuses new requests (EngineUnavailable); in-flight ones finish."""
        self._intake.drain()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Blocks until no request is in flight (or the engine is dead); False on timeout."""
        return self._intake.wait_idle(timeout)

    def stats(self) -> EngineStats:
        intake = self._intake
        with intake.lock:
            counters = intake.counters
            pages_total, pages_used = self._kv_pages()
            return EngineStats(
                state=intake.state,
                decode_lanes=self.decode_lanes,
                requests_running=len(intake.running),
                requests_waiting=intake.pending_requests,
                kv_pages_total=pages_total,
                kv_pages_used=pages_used,
                kv_cache_usage=pages_used / pages_total if pages_total else 0.0,
                prefix_cache_queries=counters["prefix_queries"],
                prefix_cache_hits=counters["prefix_hits"],
                prefix_cache_disk_hits=counters["prefix_disk_hits"],
                prompt_tokens=counters["prompt_tokens"],
                generation_tokens=counters["generation_tokens"],
                preemptions=counters["preemptions"],
                refusals=counters["refusals"],
                draft_tokens=counters["draft_tokens"],
                draft_tokens_accepted=counters["draft_accepted"],
                decode_steps=counters["decode_steps"],
                decode_host_seconds=counters["decode_host_ns"] / 1e9,
                encode_requests=counters["encode_requests"],
                time_to_first_token=intake.ttft.snapshot(),
                inter_token_latency=intake.itl.snapshot(),
                e2e_latency=intake.e2e.snapshot(),
                compiles_after_startup=self._compiles_after_startup(),
                buckets=self._buckets(),
                pending_buckets=self._pending_buckets(),
            )

    # What an engine with a KV pool and compiled steps reports; an encoder engine has neither.
    def _kv_pages(self) -> tuple[int, int]:
        """(total, used), read under the intake's lock."""
        return 0, 0

    def _compiles_after_startup(self) -> int:
        return 0

    def _buckets(self) -> tuple[Bucket, ...]:
        return ()

    def _pending_buckets(self) -> int:
        return 0
