"""`EncoderEngine`: the engine of an encoder served on its own (`pooled serve --model` an embedding
model or a cross-encoder). It offers what `Engine` offers (engine/api.py's `GenerationEngine`):
encode requests take the same intake and the same batches (engine/encoders/encoding.py) on an engine
thread of its own; a generation request is refused on its face, naming what the model serves.

Threads: handler threads call `submit`, `encode`, `cancel`, `stats`, `drain`, `wait_idle` and
`set_max_queue`, and
share only the intake with the engine thread, which runs the batches and calls the sinks.
`shutdown` runs on the thread that owns the engine.
"""

import logging
import threading
from collections.abc import Callable

from engine.api import EncodeEvent, EncodeRequest, Failed, GenerationRequest, RequestRefused
from engine.device.runner_api import Report
from engine.encoders.encoder_model import EncoderKind, EncoderRunner
from engine.encoders.encoding import Encoding, check_encode
from engine.serving.intake import EngineState, Intake
from engine.serving.rows import Sink
from engine.stats import EngineStats, HeldArrays

log = logging.getLogger(__name__)

ROUTES = {"embedding": "/v1/embeddings and /v1/rerank", "rerank": "/v1/rerank"}


class EncoderEngine:
    def __init__(self, name: str, kind: EncoderKind, runner: EncoderRunner, max_queue: int, report: Report) -> None:
        """Compiles the encoder's buckets (reporting progress), then starts the engine thread."""
        self.encoders = {name: runner}
        self.kind = kind
        self.max_context = runner.max_tokens
        self._name = name
        self._intake = Intake(0, max_queue)
        self._encoding = Encoding(self.encoders, self._intake.encoded)
        runner.compile(report, f"compiling encoder {name}")
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)
        self._thread.start()

    @property
    def state(self) -> EngineState:
        return self._intake.state

    @property
    def failure(self) -> tuple[str, str] | None:
        return self._intake.failure

    def submit(self, request: GenerationRequest, sink: Sink) -> int:
        raise RequestRefused(
            "model_not_supported",
            f"'{self._name}' is {'an' if self.kind == 'embedding' else 'a'} {self.kind} model: it serves "
            f"{ROUTES[self.kind]}, not text generation",
        )

    def encode(self, request: EncodeRequest, sink: Callable[[EncodeEvent], None]) -> int:
        check_encode(request, self.encoders)
        return self._intake.enqueue_encode(request, sink)

    def cancel(self, request_id: int) -> None:
        self._intake.cancel(request_id)

    def set_max_queue(self, max_queue: int) -> None:
        """As `Engine.set_max_queue`."""
        self._intake.set_max_queue(max_queue)

    def drain(self) -> None:
        self._intake.drain()

    def wait_idle(self, timeout: float | None = None) -> bool:
        return self._intake.wait_idle(timeout)

    def shutdown(self) -> None:
        self._intake.stop()
        self._thread.join()

    def held_arrays(self) -> HeldArrays:
        return self.encoders[self._name].held_arrays()

    def stats(self) -> EngineStats:
        intake = self._intake
        with intake.lock:
            counters = intake.counters
            return EngineStats(
                state=intake.state,
                decode_lanes=0,
                requests_running=0,
                requests_waiting=intake.pending_requests,
                kv_pages_total=0,
                kv_pages_used=0,
                kv_cache_usage=0.0,
                prefix_cache_queries=0,
                prefix_cache_hits=0,
                prefix_cache_disk_hits=0,
                prompt_tokens=counters["prompt_tokens"],
                generation_tokens=0,
                preemptions=0,
                refusals=counters["refusals"],
                draft_tokens=0,
                draft_tokens_accepted=0,
                encode_requests=counters["encode_requests"],
                time_to_first_token=intake.ttft.snapshot(),
                inter_token_latency=intake.itl.snapshot(),
                e2e_latency=intake.e2e.snapshot(),
                compiles_after_startup=0,
                buckets=(),
            )

    def _run(self) -> None:
        try:
            while True:
                work = self._intake.next_work(self._encoding.busy)
                self._encoding.add(work.encodes)
                if work.stopping:
                    self._encoding.fail_all(Failed("unavailable", "the engine stopped"), self._intake.abandon_encodes())
                    return
                if work.cancels:
                    self._encoding.cancel(set(work.cancels))
                if self._encoding.busy:
                    self._encoding.run_batch()
        except Exception as error:  # the engine thread must never die silently: fail every request
            reason = f"{type(error).__name__}: {error}"
            log.error("engine thread died: %s", reason, exc_info=error)
            self._encoding.fail_all(Failed("fault", f"the engine failed: {reason}"), self._intake.abandon_encodes())
            self._intake.died("fault", reason)
