"""`EncoderEngine`: the engine of an encoder served on its own (`pooled serve --model` an embedding
model or a cross-encoder). It has `Engine`'s front (engine/serving/intake_front.py, engine/api.py's `ServedEngine`):
encode requests take the same intake and the same batches (engine/encoders/encoding.py) on an engine
thread of its own; a generation request is refused on its face, naming what the model serves.

Threads: handler threads call `submit`, `encode`, `cancel`, `stats`, `drain`, `wait_idle` and
`set_max_queue`, and share only the intake with the engine thread, which runs the batches and
calls the sinks.
`shutdown` runs on the thread that owns the engine.
"""

import logging
import threading

from engine.api import Failed, GenerationRequest, RequestRefused
from engine.device.runner_api import Report
from engine.encoders.encoder_model import EncoderKind, EncoderRunner
from engine.encoders.encoding import Encoding
from engine.serving.intake_front import IntakeFront
from engine.serving.rows import Sink
from engine.stats import HeldArrays

log = logging.getLogger(__name__)

ROUTES = {"embedding": "/v1/embeddings and /v1/rerank", "rerank": "/v1/rerank"}


class EncoderEngine(IntakeFront):
    def __init__(self, name: str, kind: EncoderKind, runner: EncoderRunner, max_queue: int, report: Report) -> None:
        """Compiles the encoder's buckets (reporting progress), then starts the engine thread."""
        super().__init__(0, max_queue, {name: runner})
        self.kind = kind
        self.max_context = runner.max_tokens
        self._name = name
        self._encoding = Encoding(self.encoders, self._intake.encoded)
        runner.compile(report, f"compiling encoder {name}")
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)
        self._thread.start()

    def submit(self, request: GenerationRequest, sink: Sink) -> int:
        raise RequestRefused(
            "model_not_supported",
            f"'{self._name}' is {'an' if self.kind == 'embedding' else 'a'} {self.kind} model: it serves "
            f"{ROUTES[self.kind]}, not text generation",
        )

    def shutdown(self) -> None:
        self._intake.stop()
        self._thread.join()

    @property
    def vision(self) -> None:
        return None  # an encoder takes no images

    def held_arrays(self) -> HeldArrays:
        return self.encoders[self._name].held_arrays()

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
