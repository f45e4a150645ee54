"""The seam between the engine and the request handlers: token ids in, token ids out.

The engine never sees text, chat templates or JSON. A handler turns a request into a task's request
(a `GenerationRequest`, an `EncodeRequest`, a `TranscriptionRequest`), calls
`EngineFront.submit(request, sink)` and receives the task's events on `sink` (called on the engine
thread, so the sink must be cheap and thread-safe). A generation request's are `EngineEvent`s: per
row, zero or more `Tokens` followed by exactly one `Finished`; a `Failed` ends the whole request
instead. An encode request's is one `Encoded` or `Failed`; a transcription's, zero or more
`SpeechSegment`s in order, then one `Transcribed` or `Failed`. `submit` raises `QueueFull`,
`RequestRefused` or `EngineUnavailable` synchronously, so a refusal never reaches the sink.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar, overload

import numpy as np

from engine.stats import EngineStats, HeldArrays

if TYPE_CHECKING:
    from concurrent.futures import Future

    from jax import Array

    from engine.lora.peft_adapter import LoraAdapter
    from engine.model.families.qwen2_vl.image_processing import ImageRules
    from engine.model.image_tower import PreparedImage

MAX_TOKENS_CAP = 32768
# Most alternatives a token may report (OpenAI's top_logprobs limit); static for the compile.
MAX_TOP_LOGPROBS = 20
MAX_SCORED_IDS = 64  # SamplingParams.scored_ids; a table column per id on the device
# The APIs' own default temperature (OpenAI's and Anthropic's), as SamplingParams' other defaults are
# theirs: what the server's --temp and its kin default to (pooled/configuration/settings.py).
DEFAULT_TEMPERATURE = 1.0

EngineState = Literal["serving", "draining", "dead"]
AdapterState = Literal["loading", "ready", "unloading"]
EventT = TypeVar("EventT")


class TaskRequest(Generic[EventT]):
    """A request for one of the engine's tasks, whose sink receives `EventT`s
    (engine/tasks/task_registry.py: how a task plugs in)."""


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = DEFAULT_TEMPERATURE  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0
    min_p: float = 0.0
    # HF/vLLM semantics (divide positive logits, multiply negative) over prompt+output tokens.
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0  # OpenAI semantics over output tokens
    frequency_penalty: float = 0.0  # OpenAI semantics over output tokens
    logit_bias: Mapping[int, float] = field(default_factory=dict)  # token id -> bias (-100 bans)
    # None: drawn from the OS; with a seed a row is reproducible alone or batched.
    seed: int | None = None
    # None: no logprobs; k >= 0: logprob of each chosen token plus its top-k alternatives.
    logprobs: int | None = None
    # With logprobs: token ids whose logprobs each drawn token also reports, in this order, however
    # unlikely (a decision's option labels); at most MAX_SCORED_IDS.
    scored_ids: tuple[int, ...] = ()
    ignore_eos: bool = False

    @property
    def penalised(self) -> bool:
        """Whether any penalty is on: the row then needs its tokens' penalty state on the device,
        and a step over a draft cannot serve it (each draw's penalties depend on the one before)."""
        return penalised(self.repetition_penalty, self.presence_penalty, self.frequency_penalty)


@overload
def penalised(repetition_penalty: float, presence_penalty: float, frequency_penalty: float) -> bool: ...
@overload
def penalised(repetition_penalty: Array, presence_penalty: Array, frequency_penalty: Array) -> Array: ...
def penalised(repetition_penalty: Any, presence_penalty: Any, frequency_penalty: Any) -> Any:
    """Whether the penalties change a row's logits: a repetition penalty other than 1, or a
    presence or frequency penalty other than 0. For one row's floats, or row by row for a step's
    rows on the device (engine/device/sampling.py), where the same rule must hold bit for bit."""
    return (repetition_penalty != 1.0) | (presence_penalty != 0.0) | (frequency_penalty != 0.0)


class Constraint(Protocol):
    """Guided decoding for one row (built by handlers, e.g. from llguidance); host-side."""

    def fill_mask(self, out: np.ndarray) -> None:
        """Write the allowed-token bitmask, int32[ceil(V/32)] (bit i of word w allows 32*w + i)."""
        ...

    def accept(self, token_id: int) -> None:
        """Advance by the chosen token."""
        ...

    def is_finished(self) -> bool:
        """Grammar complete: the row ends with reason "stop"."""
        ...


@dataclass(frozen=True)
class OutputCap:
    """A cap on every request's output that the server sets, not the request: a row it ends
    finishes as `finish` says ("stop" for a small model that never ends an agent's turn itself)."""

    tokens: int
    finish: Literal["length", "stop"] = "length"


@dataclass(frozen=True)
class GenerationRequest(TaskRequest["EngineEvent"]):
    """What to generate. The engine's admission (engine/serving/admission.py) decides what this
    server allows: the prompt against the context, `n` against the decode lanes, and the output
    budget (`max_tokens`, the server's `output_cap`, the context left, MAX_TOKENS_CAP). The
    request's own shape is the caller's to keep (the API spec checks it for the handlers):
    `max_tokens` and `n` at least 1, `prompt_logprobs` from 0 to MAX_TOP_LOGPROBS."""

    prompt_ids: tuple[int, ...]
    sampling: SamplingParams
    max_tokens: int | None  # the request's own limit; None: as many as the context and the caps allow
    n: int = 1  # rows sharing the prompt's KV pages; n > decode lanes is refused
    # Besides the model's own EOS/end-of-turn ids (unless ignore_eos).
    stop_token_ids: frozenset[int] = frozenset()
    constraint: Callable[[], Constraint] | None = None  # a factory: one Constraint per row
    # Seconds the request may go without progress (its admission, a prefill chunk of its prompt, a
    # token) before it ends with reason "timeout": a long prompt or a long answer is not stuck.
    stall_timeout: float | None = None
    adapter: str | None = None  # the name of a loaded LoRA adapter (engine/serving/adapter_table.py), or none
    output_cap: OutputCap | None = None
    # None: none; k >= 0: each prompt token's logprob (from the positions before it) and its top-k
    # alternatives, in `Prefilled` events. Such a prompt is prefilled whole, not from the prefix cache.
    prompt_logprobs: int | None = None
    # The prompt's images in order (a model that takes images: `EngineFront.vision`), each
    # standing in `prompt_ids` as a run of `image.tokens` image token ids.
    images: tuple[PreparedImage, ...] = ()


@dataclass(frozen=True)
class Vision:
    """How a model that takes images wants them: its image token and its preprocessing rules
    (engine/model/families/qwen2_vl/image_processing.py; `rules.max_pixels` already lowered to the server's limit)."""

    image_token_id: int
    rules: ImageRules


@dataclass(frozen=True)
class TokenLogprob:
    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...]  # (token id, logprob) best first, len == SamplingParams.logprobs
    scored: tuple[float, ...] = ()  # the logprobs of SamplingParams.scored_ids, in their order
    rank: int | None = None  # a prompt token's rank among the vocabulary (1: the likeliest)


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    cached_prompt_tokens: int  # prompt tokens served from the prefix cache (not prefilled)
    completion_tokens: int


@dataclass(frozen=True)
class Tokens:
    """One or more new tokens of one row."""

    row: int
    token_ids: tuple[int, ...]
    logprobs: tuple[TokenLogprob, ...] | None


@dataclass(frozen=True)
class Finished:
    """One row is done; after all n rows finish, no more events for the request."""

    row: int
    reason: Literal["stop", "length", "cancelled", "timeout"]
    stop_token_id: int | None  # the token that stopped it (not included in Tokens), if any
    usage: Usage  # this row's completion tokens; prompt counts are the request's


@dataclass(frozen=True)
class Failed:
    """The whole request failed; no more events follow."""

    kind: Literal["refused", "unavailable", "fault"]  # → HTTP 400 / 503 / 500
    message: str


@dataclass(frozen=True)
class Prefilled:
    """Progress, not output: the prompt's KV is written up to `done` of its `total` tokens (one
    event per prefill chunk, so a consumer can tell a long prompt from a silent engine)."""

    done: int
    total: int
    # With `GenerationRequest.prompt_logprobs`: the chunk's prompt tokens that follow an earlier
    # position, each with its logprob there (the prompt's first token has none).
    logprobs: tuple[TokenLogprob, ...] = ()


EngineEvent = Tokens | Finished | Failed | Prefilled


@dataclass(frozen=True)
class EncoderInput:
    """One input of an encoder: token ids and token types (a pair's second segment is type 1)."""

    token_ids: tuple[int, ...]
    type_ids: tuple[int, ...]


@dataclass(frozen=True)
class EncodeRequest(TaskRequest["EncodeEvent"]):
    """Inputs for one of the engine's encoders, by its name; each holds 1..its max_tokens tokens."""

    encoder: str
    inputs: tuple[EncoderInput, ...]


@dataclass(frozen=True)
class Encoded:
    """A finished encode request: embeddings [N, D] or relevance logits [N] (float32), in input order."""

    values: np.ndarray
    prompt_tokens: int


EncodeEvent = Encoded | Failed


# Speech models hear mono audio at 16 kHz: the rate a `TranscriptionRequest`'s samples are in.
SPEECH_SAMPLE_RATE = 16000


@dataclass(frozen=True)
class TranscriptionRequest(TaskRequest["TranscriptionEvent"]):
    """Speech to text by the engine's speech model: `audio` is mono float32 samples in [-1, 1] at
    SPEECH_SAMPLE_RATE. Token ids are the speech model's own (the handler tokenizes `prompt_ids`
    and detokenizes the segments' tokens)."""

    audio: np.ndarray
    task: Literal["transcribe", "translate"] = "transcribe"
    language: str | None = None  # a language code the model knows ("en"); None: detected
    prompt_ids: tuple[int, ...] = ()  # the previous-text prompt, without special tokens
    # The temperature ladder: a window whose decode fails the thresholds is decoded again at the
    # next one (openai-whisper's fallback); one entry: no fallback.
    temperatures: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    word_timestamps: bool = False
    logprobs: bool = False  # each segment's tokens' logprobs
    seed: int | None = None  # None: drawn from the OS


@dataclass(frozen=True)
class SpeechWord:
    """A word of a segment, timed by cross-attention alignment; `tokens` are the model's ids."""

    start: float  # seconds from the audio's start
    end: float
    tokens: tuple[int, ...]
    probability: float


@dataclass(frozen=True)
class SpeechSegment:
    """A decoded stretch of speech, sent as soon as its window is decoded, in order."""

    index: int
    seek: float  # the start of the window it was decoded in, seconds
    start: float  # seconds from the audio's start
    end: float
    tokens: tuple[int, ...]  # its text tokens (no timestamp or special tokens)
    temperature: float  # the temperature that decoded its window
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float
    words: tuple[SpeechWord, ...] = ()  # with TranscriptionRequest.word_timestamps
    logprobs: tuple[float, ...] = ()  # one a token, with TranscriptionRequest.logprobs


@dataclass(frozen=True)
class Transcribed:
    """A finished transcription, after its last segment."""

    language: str  # the code asked for or detected
    language_probability: float  # 1.0 when asked for
    duration: float  # seconds of audio
    output_tokens: int  # text tokens decoded, in the kept segments


TranscriptionEvent = SpeechSegment | Transcribed | Failed


class QueueFull(Exception):
    """Raised by submit(): the wait queue (max_queue) is full."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(f"engine full; retry after {retry_after_s} s")
        self.retry_after_s = retry_after_s


class RequestRefused(Exception):
    """Raised by submit(): invalid on its face (prompt over the context, n > lanes, empty prompt, a
    task the engine does not serve).
    `field` names the request's part at fault in the engine's terms ("prompt", "n", "max_tokens",
    "inputs"); each API renames it to its own field."""

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field


class EngineUnavailable(Exception):
    """Raised by submit(): not serving (loading, draining, dead)."""


class AdapterRefused(Exception):
    """An adapter not let in (by the host's trust policy) or a load or unload the
    engine's adapter table cannot do (a name in use, no free slot, an unknown name); `code` names the rule."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class ServedAdapter:
    """A LoRA adapter in one of the engine's slots (engine/serving/adapter_table.py)."""

    name: str
    adapter: LoraAdapter
    slot: int
    state: AdapterState = "loading"
    running: int = 0  # requests in flight that use it
    requests: int = 0  # requests it has been asked for, in all
    loaded_at: float = 0.0  # Unix time its slot was written


class EngineFront(Protocol):
    """What handlers call on the running engine (engine/engine.py): one face for every task."""

    def submit(self, request: TaskRequest[EventT], sink: Callable[[EventT], None]) -> int:
        """Queue a request of any task the engine serves; its events arrive on `sink`, called on
        the engine thread. A task it does not serve is refused on its face (RequestRefused)."""
        ...

    def cancel(self, request_id: int) -> None:
        """Idempotent; a generation request's unfinished rows end with Finished(reason="cancelled"),
        another task's request ends without an answer."""
        ...

    def tasks(self) -> frozenset[str]:
        """The tasks it serves ("generate", "encode")."""
        ...

    def stats(self) -> EngineStats:
        """A consistent snapshot of the engine's counters, for /health and /metrics."""
        ...

    @property
    def vision(self) -> Vision | None:
        """How the model takes images; None: it takes none (or the server turned them off)."""
        ...


class ServedEngine(EngineFront, Protocol):
    """What the host holding an engine calls besides requests: its life. `Engine` and
    `TaskEngine` both offer it (their shared front: engine/serving/intake_front.py)."""

    @property
    def max_context(self) -> int:
        """The longest prompt plus output a request may have (an encoder's: its longest input)."""
        ...

    @property
    def state(self) -> EngineState: ...

    @property
    def failure(self) -> tuple[str, str] | None:
        """(cause, reason) once the engine thread has died."""
        ...

    def set_max_queue(self, max_queue: int) -> None:
        """How many requests may wait from now on (`--max-queue` changed while serving)."""
        ...

    def drain(self) -> None:
        """Refuses new requests (EngineUnavailable); in-flight ones finish."""
        ...

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Blocks until no request is in flight (or the engine is dead); False on timeout."""
        ...

    def shutdown(self) -> None:
        """Cancels everything in flight and stops the engine thread."""
        ...

    def held_arrays(self) -> HeldArrays:
        """The device arrays it holds (KV pool, weights, encoders), to report what freeing it gives back."""
        ...


class AdapterEngine(Protocol):
    """An engine's LoRA adapter slots (engine/serving/adapter_table.py), as the host's admin uses them."""

    @property
    def adapter_slots(self) -> int: ...

    def adapter_listing(self) -> list[ServedAdapter]:
        """The adapters loaded or unloading, by slot."""
        ...

    def load_adapter(self, name: str, adapter: LoraAdapter) -> Future[None]:
        """Puts `adapter` in a free slot between two steps; raises AdapterRefused."""
        ...

    def unload_adapter(self, name: str) -> Future[None]:
        """Frees the adapter's slot once the requests using it have finished."""
        ...
