"""A test double of the engine seam (engine/api.py): replays scripted token ids from its own thread.

Each row emits its script one token per `Tokens` event, then `Finished`. With a constraint it runs
until the grammar is complete, a scripted token the grammar forbids (or any past the script)
replaced by the lowest allowed id, so a constrained row always writes what the grammar admits. It admits
requests by the engine's own rules (engine/serving/admission.py: the context, `n`, the output budget and
its finish), stops on the model's stop ids (`stop_ids`) unless `ignore_eos` and always on the request's own
(`stop_token_ids`), as the engine does, and honours `logprobs`, `cancel` and a blocking `gate` to hold a
request in flight. Encode
requests go to real encoder runners, if it has any, each input alone, refused as the engine refuses;
a transcription gets the events its `speech` script gives (after the gate); its one face, `submit`,
takes any of them.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from engine.api import (
    Encoded,
    EncodeEvent,
    EncodeRequest,
    EngineEvent,
    Finished,
    GenerationRequest,
    QueueFull,
    TaskRequest,
    TokenLogprob,
    Tokens,
    TranscriptionEvent,
    TranscriptionRequest,
    Usage,
    Vision,
)
from engine.serving.admission import Admission, admit
from engine.stats import Bucket, EngineStats, Histogram
from engine.tasks.encode.encode_task import ENCODE, EncodeRunner, check_encode

Script = Callable[[GenerationRequest, int], Sequence[int]]
SpeechScript = Callable[[TranscriptionRequest], Sequence[TranscriptionEvent]]


class FakeEngine:
    def __init__(
        self,
        script: Script,
        vocab_size: int,
        stop_ids: frozenset[int] = frozenset(),
        encoders: Mapping[str, EncodeRunner] | None = None,
        max_context: int = 2048,
        decode_lanes: int = 4,
        speech: SpeechScript | None = None,
    ) -> None:
        self.script = script
        self.speech = speech
        self.transcriptions: list[TranscriptionRequest] = []
        self.max_context = max_context
        self.decode_lanes = decode_lanes
        self.encoders = dict(encoders or {})
        self.vocab_size = vocab_size
        self.stop_ids = stop_ids
        self.vision: Vision | None = None  # a text model's
        self.submitted: list[GenerationRequest] = []
        self.admitted: dict[int, Admission] = {}  # by request id
        self.cancelled: set[int] = set()
        self.queue_full_after: int | None = None  # refuse with QueueFull once this many were submitted
        self.gate = threading.Event()
        self.gate.set()
        self._ids = itertools.count(1)

    def tasks(self) -> frozenset[str]:
        tasks = {"generate"} | ({ENCODE} if self.encoders else set()) | ({"transcribe"} if self.speech else set())
        return frozenset(tasks)

    def submit(self, request: TaskRequest[Any], sink: Callable[[Any], None]) -> int:
        if isinstance(request, EncodeRequest):
            return self._encode(request, sink)
        if isinstance(request, TranscriptionRequest):
            return self._transcribe(request, sink)
        assert isinstance(request, GenerationRequest), request
        return self._generate(request, sink)

    def _generate(self, request: GenerationRequest, sink: Callable[[EngineEvent], None]) -> int:
        if self.queue_full_after is not None and len(self.submitted) >= self.queue_full_after:
            raise QueueFull(retry_after_s=3)
        image_token = None if self.vision is None else self.vision.image_token_id
        admission = admit(request, self.max_context, self.decode_lanes, image_token)
        self.submitted.append(request)
        request_id = next(self._ids)
        self.admitted[request_id] = admission
        threading.Thread(target=self._run, args=(request_id, request, sink), daemon=True).start()
        return request_id

    def _encode(self, request: EncodeRequest, sink: Callable[[EncodeEvent], None]) -> int:
        check_encode(request, self.encoders)
        runner = self.encoders[request.encoder]
        values = np.concatenate([runner.run([item]) for item in request.inputs])
        threading.Thread(target=sink, args=(Encoded(values, sum(len(i.token_ids) for i in request.inputs)),)).start()
        return next(self._ids)

    def _transcribe(self, request: TranscriptionRequest, sink: Callable[[TranscriptionEvent], None]) -> int:
        assert self.speech is not None, "a transcription sent to a fake engine without a speech script"
        if self.queue_full_after is not None and len(self.transcriptions) >= self.queue_full_after:
            raise QueueFull(retry_after_s=3)
        self.transcriptions.append(request)
        request_id = next(self._ids)
        events = list(self.speech(request))

        def run() -> None:
            self.gate.wait()
            for event in events:
                if request_id in self.cancelled:
                    return
                sink(event)

        threading.Thread(target=run, daemon=True).start()
        return request_id

    def cancel(self, request_id: int) -> None:
        self.cancelled.add(request_id)

    def stats(self) -> EngineStats:
        empty = Histogram(bounds=(1.0,), counts=(0, 0), sum=0.0, count=0)
        return EngineStats(
            state="serving", decode_lanes=self.decode_lanes, requests_running=0, requests_waiting=0, kv_pages_total=64,
            kv_pages_used=0, kv_cache_usage=0.0, prefix_cache_queries=0, prefix_cache_hits=0, prefix_cache_disk_hits=0,
            prompt_tokens=sum(len(r.prompt_ids) for r in self.submitted), generation_tokens=0, preemptions=0,
            refusals=0, draft_tokens=0, draft_tokens_accepted=0, decode_steps=0, decode_host_seconds=0.0,
            encode_requests=0, time_to_first_token=empty, inter_token_latency=empty, e2e_latency=empty,
            compiles_after_startup=0, buckets=(Bucket("decode", 1, 1, 8),), pending_buckets=0,
        )  # fmt: skip

    def _run(self, request_id: int, request: GenerationRequest, sink: Callable[[EngineEvent], None]) -> None:
        admission = self.admitted[request_id]
        stop_ids = request.stop_token_ids | (frozenset() if request.sampling.ignore_eos else self.stop_ids)
        self.gate.wait()
        for row in range(request.n):
            constraint = request.constraint() if request.constraint else None
            mask = np.zeros((self.vocab_size + 31) // 32, dtype=np.int32)
            script = list(self.script(request, row))
            count, reason, stop_id = 0, admission.length_finish, None
            for position in itertools.count():
                if request_id in self.cancelled:
                    reason = "cancelled"
                    break
                if count >= admission.max_tokens:
                    break
                if constraint is not None and constraint.is_finished():
                    reason = "stop"
                    break
                if position >= len(script) and constraint is None:
                    reason = "stop"
                    break
                token = script[position] if position < len(script) else 0
                if constraint is not None:
                    constraint.fill_mask(mask)
                    token = _allowed(mask, token)
                    constraint.accept(token)
                if token in stop_ids:
                    reason, stop_id = "stop", token
                    break
                logprobs = None
                if request.sampling.logprobs is not None:
                    top = tuple((token + k, -0.5 - k) for k in range(request.sampling.logprobs))
                    scored = tuple(-1.0 - k for k, _ in enumerate(request.sampling.scored_ids))
                    logprobs = (TokenLogprob(token, -0.25, top, scored),)
                sink(Tokens(row, (token,), logprobs))
                count += 1
            usage = Usage(len(request.prompt_ids), 0, count)
            sink(Finished(row, reason, stop_id, usage))  # type: ignore[arg-type]


def _allowed(mask: np.ndarray, wanted: int) -> int:
    if (int(mask[wanted // 32]) >> (wanted % 32)) & 1:
        return wanted
    bits = np.unpackbits(mask.view(np.uint8), bitorder="little")
    return int(np.flatnonzero(bits)[0])
