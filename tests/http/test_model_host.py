"""The model host: loading → serving on success, dead with a cause on failure; default model found."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from engine.stats import HeldArrays
from handlers.context import ReleasedMemory
from pooled.configuration.settings import Settings
from pooled.hosting.model_host import (
    Loaded,
    ModelHost,
    ModelNotFound,
    SwitchFailed,
    SwitchRefused,
    default_model_path,
)
from pooled.models_folder.catalog import load_catalog
from pooled.models_folder.folder_library import model_to_serve, serving_defaults
from pooled.models_folder.model_ids import model_id_for


def wait_until_settled(host: ModelHost) -> None:
    for thread in threading.enumerate():
        if thread.name == "pooled-lifecycle":
            thread.join(timeout=10)


def test_successful_load_serves_with_the_loaded_context(tmp_path: Path) -> None:
    release = threading.Event()

    tokenizer = object()
    engine = SimpleNamespace(state="serving", failure=None)

    def loader(path: Path, settings: Settings, report) -> Loaded:  # type: ignore[no-untyped-def]
        report("weights", 1, 2)
        release.wait(5)
        return Loaded(  # type: ignore[arg-type]
            ctx=4096,
            trained_ctx=2048,
            rope_scaling="yarn",
            quantization="w4a8",
            tokenizer=tokenizer,
            chat_template=None,
            engine=engine,
        )

    host = ModelHost(Settings(), tmp_path, loader)
    host.start()
    assert host.state == "loading"
    release.set()
    wait_until_settled(host)
    assert (host.state, host.ctx, host.tokenizer, host.progress) == ("serving", 4096, tokenizer, None)
    assert (host.trained_ctx, host.rope_scaling, host.quantization) == (2048, "yarn", "w4a8")
    engine.state, engine.failure = "dead", ("panicked", "IndexError in the scheduler")
    assert (host.state, host.failure) == ("dead", ("panicked", "IndexError in the scheduler"))


def test_failed_load_is_dead_with_the_reason(tmp_path: Path) -> None:
    def loader(path: Path, settings: Settings, report) -> Loaded:  # type: ignore[no-untyped-def]
        raise ValueError("tensor blk.0.attn_q.weight is missing\nmore detail")

    host = ModelHost(Settings(), tmp_path, loader)
    host.start()
    wait_until_settled(host)
    assert host.state == "dead"
    assert host.failure == ("fault", "tensor blk.0.attn_q.weight is missing")


def test_default_model_is_the_smollm2_wheel() -> None:
    path = default_model_path()
    assert path.is_file() and path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert model_id_for(path) == "pooled/smollm2-135m-instruct-q4_1"


def test_the_default_model_is_served_with_its_catalog_entrys_defaults() -> None:
    catalog = load_catalog()
    defaults = serving_defaults(catalog, model_id_for(default_model_path()))
    assert defaults is not None and defaults == catalog["smollm2-135m-instruct-q4_1"].serving
    assert serving_defaults(catalog, "smollm2-135m-instruct-q4_1") == defaults  # --model ID
    assert serving_defaults(catalog, "pooled/all-minilm-l6-v2") is None  # an entry without any
    assert serving_defaults(catalog, "pooled/my-own-model") is None  # a model the catalog does not know


def test_missing_model_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound, match="is not a file or directory, and no model .* in the catalog or the models"):
        model_to_serve(str(tmp_path / "nope.gguf"), load_catalog(), tmp_path)
    with pytest.raises(ModelNotFound, match="'smollm2-135m-instruct-q4_1' is in the catalog but not downloaded"):
        model_to_serve("smollm2-135m-instruct-q4_1", load_catalog(), tmp_path)


class Engine:
    """What the host asks of an engine when it switches models or unloads one."""

    def __init__(self, name: str, idle: bool = True) -> None:
        self.name, self.idle = name, idle
        self.state, self.failure = "serving", None
        self.vision = None  # a text model's
        self.calls: list[str] = []
        self.kv_pool, self.weights = np.zeros(1024, np.uint8), np.zeros(256, np.uint8)

    def held_arrays(self) -> HeldArrays:
        return HeldArrays((self.kv_pool,), (self.weights, self.weights))  # a tied head: one array, twice

    def drain(self) -> None:
        self.calls.append("drain")

    def wait_idle(self, timeout: float | None = None) -> bool:
        self.calls.append(f"wait_idle {timeout}")
        return self.idle

    def shutdown(self) -> None:
        self.calls.append("shutdown")


def loaded(engine: Engine, ctx: int) -> Loaded:
    return Loaded(ctx, ctx, None, "none", object(), None, engine)  # type: ignore[arg-type]


def serving_host(tmp_path: Path, loads: dict[str, Engine | Exception], gate: threading.Event) -> ModelHost:
    """A host whose loader gives each path's engine (or raises), the new ones once `gate` is set."""

    def loader(path: Path, settings: Settings, report) -> Loaded:  # type: ignore[no-untyped-def]
        if path.name != "old":
            assert gate.wait(10)
        result = loads[path.name]
        if isinstance(result, Exception):
            raise result
        return loaded(result, 1024 if path.name == "old" else 2048)

    host = ModelHost(Settings(switch_grace=7.0), tmp_path / "old", loader)
    host.start()
    wait_until_settled(host)
    assert host.state == "serving"
    return host


def test_a_switch_drains_the_old_engine_then_serves_the_new_model(tmp_path: Path) -> None:
    old, new, gate = Engine("old"), Engine("new"), threading.Event()
    host = serving_host(tmp_path, {"old": old, "new": new}, gate)
    done = host.switch(tmp_path / "new", "pooled/new")
    with pytest.raises(SwitchRefused, match="switching"):
        host.switch(tmp_path / "new", "pooled/new")  # one at a time
    deadline = time.monotonic() + 10
    while "shutdown" not in old.calls:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert old.calls == ["drain", "wait_idle 7.0", "shutdown"]  # in order, before the new load
    assert (host.state, host.engine, host.model_id) == ("switching", None, "pooled/new")
    gate.set()
    done.result(timeout=10)
    assert (host.state, host.engine, host.ctx, host.switch_failure) == ("serving", new, 2048, None)


def test_a_failed_switch_serves_the_old_model_again_and_says_why(tmp_path: Path) -> None:
    old, gate = Engine("old"), threading.Event()
    host = serving_host(tmp_path, {"old": old, "broken": ValueError("no tokenizer in broken\ndetail")}, gate)
    done = host.switch(tmp_path / "broken", "pooled/broken")
    gate.set()
    with pytest.raises(SwitchFailed, match="pooled/broken did not load: no tokenizer in broken"):
        done.result(timeout=10)
    assert (host.state, host.engine, host.model_id, host.ctx) == ("serving", old, "pooled/old", 1024)
    assert host.switch_failure == ("pooled/broken", "no tokenizer in broken")


def test_a_drain_during_a_switch_wins(tmp_path: Path) -> None:
    old, new, gate = Engine("old"), Engine("new"), threading.Event()
    host = serving_host(tmp_path, {"old": old, "new": new}, gate)
    done = host.switch(tmp_path / "new", "pooled/new")
    host.drain()
    gate.set()
    done.result(timeout=10)
    assert host.state == "draining" and new.calls == ["drain"]


def test_an_idle_unload_frees_the_engine_and_a_wake_loads_it_again(tmp_path: Path) -> None:
    engines = [Engine("first"), Engine("second")]
    gate = threading.Event()

    def loader(path: Path, settings: Settings, report) -> Loaded:  # type: ignore[no-untyped-def]
        if len(engines) == 1:  # the reload
            assert gate.wait(10)
        return loaded(engines.pop(0), 1024)

    host = ModelHost(Settings(idle_unload=5.0), tmp_path / "m", loader)
    host.start()
    wait_until_settled(host)
    first = host.engine
    assert host.wake() is None  # serving: nothing to wait for
    host.unload()
    assert host.state == "unloaded"
    deadline = time.monotonic() + 10
    while host.engine is not None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert first.calls == ["drain", "shutdown"]  # type: ignore[union-attr]
    waking = host.wake()
    assert waking is not None and host.wake() is waking  # every request waits for the one reload
    assert host.state == "loading"
    gate.set()
    waking.result(timeout=10)
    assert host.state == "serving" and host.engine is not None and host.engine is not first


def test_an_idle_unload_reports_the_memory_it_freed_and_what_something_still_holds(tmp_path: Path) -> None:
    def loader(path: Path, settings: Settings, report) -> Loaded:  # type: ignore[no-untyped-def]
        return loaded(Engine("m"), 1024)

    host = ModelHost(Settings(idle_unload=5.0), tmp_path / "m", loader)
    host.start()
    wait_until_settled(host)
    assert host.released is None
    host.unload()
    wait_until_settled(host)
    assert host.released == ReleasedMemory(kv_cache_bytes=1024, weights_bytes=256, still_held_bytes=0)
    host.wake()  # its future may be done before it returns: the load is instant here
    wait_until_settled(host)
    assert host.state == "serving"
    kept = host.engine  # a reference the unload cannot drop: its arrays stay
    host.unload()
    wait_until_settled(host)
    assert kept is not None and host.released == ReleasedMemory(0, 0, 1280)


def test_a_load_logs_one_line_per_stage(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    def loader(path: Path, settings: Settings, report) -> Loaded:  # type: ignore[no-untyped-def]
        report("loading weights", 0, 1)
        for done, step in enumerate(["prefill rows=1", "decode rows=1", "decode rows=2"]):
            report(f"compiling the engine: {step}", done, 3)
        report("compiling the engine: done", 3, 3)
        report("compiling encoder pooled/e", 1, 2)
        report("compiling encoder pooled/e", 2, 2)
        return loaded(Engine("m"), 1024)

    caplog.set_level("INFO", logger="pooled.hosting.model_host")
    host = ModelHost(Settings(), tmp_path / "m", loader)
    host.start()
    wait_until_settled(host)
    assert [record.getMessage() for record in caplog.records if record.name == "pooled.hosting.model_host"] == [
        "pooled/m: loading weights",
        "pooled/m: compiling the engine (3 steps)",
        "pooled/m: compiling encoder pooled/e (2 steps)",
    ]
