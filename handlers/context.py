"""What a handler may ask of the running server, without knowing how it is built.

`pooled` assembles a `ServerContext` and puts it on `app.state.context`; handlers
read it through `context(request)`. The model side is a Protocol so handlers
depend on its shape only: they never import JAX or the engine's internals.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from starlette.requests import HTTPConnection

from engine.api import EngineFront
from handlers.generation.sampling_params import SamplingDefaults
from handlers.generation.volatile_lines import volatile_line_pattern
from handlers.response_store import ResponseStore
from text import ChatTemplate, Tokenizer
from text.encoder_inputs import EncoderTokenizer

ModelState = Literal["loading", "serving", "switching", "unloaded", "draining", "dead"]
EncoderKind = Literal["embedding", "rerank"]
ModelKind = Literal["chat", "embedding", "rerank", "speech"]
PartKind = Literal["embedding", "rerank", "speech"]  # a model served beside the chat model
FailedSetting = Literal["embedding_model", "rerank_model", "speech_model"]


@dataclass(frozen=True)
class EncoderService:
    """An encoder served beside the model (or as the model), as the HTTP side sees it: what the
    engine loaded (engine/tasks/encode/) and how its inputs are tokenized (text/encoder_inputs.py)."""

    kind: EncoderKind
    dimensions: int
    max_tokens: int  # the most tokens one input may hold, special tokens included
    matryoshka: bool  # whether its embeddings may be cut to fewer dimensions
    normalize: bool
    inputs: EncoderTokenizer


@dataclass(frozen=True)
class SpeechService:
    """The speech model served beside the chat model (`--speech-model`), as the HTTP side sees it:
    its name, its tokenizer (prompts in, segment tokens out) and the languages it knows."""

    name: str
    tokenizer: Tokenizer
    languages: frozenset[str]  # the codes a request may name ("en" alone for an English-only model)
    translates: bool  # whether it has the translate task (a multilingual model)
    max_text_tokens: int  # the decoder's context: prompt, special tokens and a window's text


@dataclass(frozen=True)
class FailedPart:
    """A model served beside the chat model that did not load: its routes answer 503 naming the
    failure while the chat model serves."""

    kind: PartKind  # what it would have served
    setting: FailedSetting  # the setting that names it
    path: str
    reason: str


@dataclass(frozen=True)
class ReleasedMemory:
    """What an idle unload gave back: bytes of the device arrays the engine held that no longer
    exist, and bytes of those something else still holds (0 unless memory leaks)."""

    kv_cache_bytes: int
    weights_bytes: int
    still_held_bytes: int


@dataclass(frozen=True)
class AdapterEntry:
    """A LoRA adapter the engine serves, as the admin routes and `/v1/models` show it."""

    name: str
    path: str
    rank: int
    alpha: float
    targets: tuple[str, ...]  # Hugging Face module names (q_proj, …)
    size_bytes: int
    sha256: str
    loaded_at: int  # Unix seconds
    requests: int  # run with it since it was loaded
    running: int
    state: Literal["ready", "unloading"]


class AdapterAdmin(Protocol):
    """The served model's LoRA adapters (pooled/hosting/adapter_admin.py): loads and unloads go through
    the trust policy and run on the engine thread. Refusals raise `engine.api.AdapterRefused`
    naming the rule (its `code`)."""

    @property
    def slots(self) -> int: ...

    def listing(self) -> list[AdapterEntry]:
        """By name; an adapter still loading is not listed."""
        ...

    async def load(self, name: str, path: str) -> AdapterEntry:
        """Once requests can name it."""
        ...

    async def unload(self, name: str) -> None:
        """Once the requests running with it have finished and its slot is free."""
        ...


@dataclass(frozen=True)
class DownloadView:
    id: str
    state: Literal["running", "done", "failed", "cancelled"]
    bytes: int
    total: int
    rate_bytes_per_s: float
    eta_s: float | None
    error: str | None


@dataclass(frozen=True)
class CatalogView:
    """A catalog entry as `/v1/models/catalog` shows it."""

    id: str
    family: str
    format: Literal["gguf", "safetensors"]
    size_bytes: int
    trained_ctx: int
    licence: str
    size_class: str
    memory_bytes: int
    state: Literal["absent", "partial", "complete", "verified"]
    bytes_on_disk: int
    available: bool
    reason: str | None
    loaded: bool
    download: DownloadView | None


@dataclass(frozen=True)
class SwitchTarget:
    """A model a request naming `id` would switch to: a catalog entry on disk, or a model file or
    directory in the models folder."""

    id: str
    kind: ModelKind
    available: bool
    reason: str | None
    trained_ctx: int | None


class LibraryRefused(Exception):
    """A download, removal or switch the library cannot do now; `code` says which rule:
    `not_found` (no such model), `busy` (a download, switch, load or drain under way, or the model
    is in use), `unavailable` (this machine lacks the memory for it) or `switch_failed` (the new
    model did not load; the old one serves again)."""

    def __init__(self, code: Literal["not_found", "busy", "unavailable", "switch_failed"], message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class ModelLibrary(Protocol):
    """The models folder and its catalog (pooled/models_folder/folder_library.py): what can be fetched, removed
    or switched to, and the switch itself."""

    @property
    def models_dir(self) -> str: ...

    @property
    def implicit_switch(self) -> bool:
        """Whether a request naming another model switches to it (--switch-allow-implicit)."""
        ...

    def catalog(self) -> list[CatalogView]: ...

    def targets(self) -> list[SwitchTarget]:
        """Every model a switch could serve, the one served excluded."""
        ...

    def names_model(self, model_id: str) -> bool:
        """Whether `model_id` names a model a switch could serve (the one served excluded)."""
        ...

    def download(self) -> DownloadView | None:
        """The running download, or the last one."""
        ...

    def start_download(self, model_id: str) -> CatalogView: ...

    def cancel_download(self) -> tuple[bool, DownloadView | None]: ...

    def remove(self, model_id: str) -> int:
        """Bytes freed."""
        ...

    async def switch(self, model_id: str) -> None:
        """Once the model serves (a switch to the one served returns at once)."""
        ...


class ModelService(Protocol):
    """The loaded (or loading) model as the HTTP side sees it."""

    @property
    def state(self) -> ModelState: ...

    @property
    def model_id(self) -> str: ...

    @property
    def kind(self) -> ModelKind:
        """What the model serves: the generation routes (chat), or an encoder's routes only."""
        ...

    @property
    def ctx(self) -> int | None: ...

    @property
    def trained_ctx(self) -> int | None:
        """The checkpoint's trained context once loaded, else None."""
        ...

    @property
    def rope_scaling(self) -> str | None:
        """The RoPE scaling that extends `ctx` past `trained_ctx`, or None."""
        ...

    @property
    def quantization(self) -> str | None:
        """How the weights are served (none, gguf, w8a8, w4a8) once loaded, else None."""
        ...

    @property
    def weight_formats(self) -> Mapping[str, int] | None:
        """Under gguf, each block format the matrices are served in and how many it holds; else None."""
        ...

    @property
    def progress(self) -> dict[str, Any] | None: ...

    @property
    def failure(self) -> tuple[str, str] | None:
        """(cause, reason) once the model or its engine has died, else None."""
        ...

    @property
    def decode_lanes(self) -> int: ...

    @property
    def engine(self) -> EngineFront | None:
        """The running engine once the model serves, else None."""
        ...

    @property
    def tokenizer(self) -> Tokenizer | None:
        """Available as soon as the checkpoint's tokenizer is read (before the engine warms up)."""
        ...

    @property
    def encoders(self) -> Mapping[str, EncoderService]:
        """The encoders served beside the model, by the name requests use; empty until it serves."""
        ...

    @property
    def speech(self) -> SpeechService | None:
        """The speech model served beside it, once it serves; None without one (or when it failed)."""
        ...

    @property
    def failed_parts(self) -> Sequence[FailedPart]:
        """The models beside it that did not load, since the last load; empty until it serves."""
        ...

    @property
    def released(self) -> ReleasedMemory | None:
        """What the last idle unload gave back; None before any."""
        ...

    @property
    def chat_template(self) -> ChatTemplate | None:
        """The checkpoint's chat template, or None when it ships none."""
        ...

    def wake(self) -> Future[None] | None:
        """After an idle unload, starts loading the model again; the future ends when it serves.
        None when there is nothing to wait for."""
        ...

    @property
    def switch_failure(self) -> tuple[str, str] | None:
        """(model id, reason) of the last switch whose model did not load, until one succeeds."""
        ...

    @property
    def adapters(self) -> AdapterAdmin | None:
        """The LoRA adapters of a generating model once it serves, else None."""
        ...


SettingKind = Literal["string", "integer", "number", "boolean", "list"]
SettingChange = Literal["live", "reload", "restart"]  # how a change takes effect
SettingOrigin = Literal["default", "gguf", "generation_config", "catalog", "profile", "file", "env", "flag", "live"]


@dataclass(frozen=True)
class SettingRule:
    """The values a setting allows beyond its kind (each part None or empty where there is none)."""

    minimum: float | None
    exclusive_minimum: float | None
    maximum: float | None
    choices: tuple[str, ...]


@dataclass(frozen=True)
class SettingView:
    """One setting as `GET /v1/config/fields` lists it."""

    name: str
    kind: SettingKind
    nullable: bool
    default: Any  # as JSON
    rule: SettingRule | None
    change: SettingChange
    secret: bool
    flag: str
    env: str
    help: str


@dataclass(frozen=True)
class OriginView:
    """Where a setting's value came from; `file` for one from the config file or its profile, or
    from the served model's GGUF or generation_config.json; `profile` for one from the profile,
    `catalog` (the entry's id) and `reason` for one from the served model's catalog entry."""

    origin: SettingOrigin
    file: str | None = None
    profile: str | None = None
    catalog: str | None = None
    reason: str | None = None


class ConfigRefused(Exception):
    """A configuration change the server will not make, nothing of it applied: `status` (400 a
    value, 403 a secret, 409 a change that needs a reload or a restart, or a reload that cannot
    start now, 500 a reload that failed), `code`, and `param`, the setting it names."""

    def __init__(self, status: int, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.param = status, code, message, param


class ConfigService(Protocol):
    """The server's settings (pooled/configuration/config_service.py): the values in force, what each setting
    is, where each value came from, and changes while serving."""

    def values(self) -> dict[str, Any]:
        """Setting name → value as JSON; secrets left out."""
        ...

    def fields(self) -> list[SettingView]: ...

    def origins(self) -> dict[str, OriginView]: ...

    async def change(self, changes: Mapping[str, Any], reload: bool) -> dict[str, Any]:
        """Applies `changes` (setting name → JSON value) whole or not at all, reloading the model
        for those that need it when `reload`; returns `values()` after. Raises ConfigRefused."""
        ...


@dataclass(frozen=True)
class AccessRules:
    """What the guards in front of the handlers (pooled/web/guards.py) check on every request that a
    configuration change may replace: the browser origins allowed besides the server's own, and
    the largest body. Kept here beside `GenerationLimits` so one object holds everything a change
    swaps."""

    allow_origin: frozenset[str] = frozenset()
    max_body: int = 4 * 1024 * 1024


@dataclass(frozen=True)
class GenerationLimits:
    """Server-wide bounds on each generation, and the sampling its request leaves to the server
    (from `pooled.configuration.settings`). Handlers read `ServerContext.limits` once per request;
    a configuration change replaces the whole object (one assignment), so a request sees the old
    values or the new ones, never a mix."""

    request_timeout_s: float = 300.0  # a request this long without progress answers 504 and frees its lanes
    max_output_tokens: int | None = None  # a cap on every request's output, besides the engine's own
    # How an answer that cap ended finishes: "length" (as a request's own max_tokens), or "stop".
    max_output_tokens_finish: str = "length"
    keepalive_interval_s: float = 10.0  # an SSE comment this often while a stream waits
    max_embedding_inputs: int = 2048  # inputs of one embeddings request, documents of one rerank
    max_images: int = 16  # images in one generation request
    max_audio_bytes: int = 25 * 1024 * 1024  # an audio upload's file, as OpenAI's limit
    max_audio_seconds: float = 3600.0  # an audio upload's length
    image_fetch: ImageFetch | None = None  # None: image URLs are refused, only inline images taken
    sampling: SamplingDefaults = SamplingDefaults()  # what a request's omitted sampling fields take


DEFAULT_LIMITS = GenerationLimits()


@dataclass(frozen=True)
class ImageFetch:
    """How the server fetches an image part's http(s) URL (`--image-url-fetch`)."""

    timeout_s: float  # for the whole fetch, redirects and body included
    max_bytes: int  # an image larger than this is refused unread past the limit


@dataclass
class Counters:
    """Request counts the HTTP side keeps itself (the engine keeps its own)."""

    served: int = 0
    in_flight: int = 0
    rate_limited: int = 0  # refused by --rate-limit-rpm
    last_active: float = field(default_factory=time.monotonic)  # when a model request last began or ended


@dataclass
class ServerContext:
    """Shared by every request. `limits`, `access`, `lora_admin` and `volatile_lines` are replaced
    (one assignment each, on the event loop) when `PATCH /v1/config` changes their settings: a
    handler reads each once per request."""

    model: ModelService
    port: int
    created: int
    responses: ResponseStore
    counters: Counters = field(default_factory=Counters)
    limits: GenerationLimits = field(default_factory=GenerationLimits)
    lora_admin: bool = True  # whether the /v1/lora_adapters routes are served (--lora-admin)
    ui: bool = True  # whether the Playground (/ui/) is served (--server-ui)
    library: ModelLibrary | None = None  # the models folder and its catalog; None in unit tests without one
    # System-prompt lines dropped from rendered prompts (see handlers/generation/volatile_lines.py).
    volatile_lines: re.Pattern[str] = field(default_factory=volatile_line_pattern)
    config: ConfigService | None = None  # the settings and their changes (/v1/config); None: not served
    access: AccessRules = field(default_factory=AccessRules)  # what the guards check per request


def context(request: HTTPConnection) -> ServerContext:
    """The server's context, from a request or a WebSocket."""
    server_context: ServerContext = request.app.state.context
    return server_context
