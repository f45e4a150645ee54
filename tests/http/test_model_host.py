"""The model host: loading → serving on success, dead with a cause on failure; default model found."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from pooled.model_host import Loaded, ModelHost, ModelNotFound, default_model_path, model_id_for, resolve_model_path
from pooled.settings import Settings


def wait_until_settled(host: ModelHost) -> None:
    for thread in threading.enumerate():
        if thread.name == "pooled-load":
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


def test_missing_model_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound, match="does not exist"):
        resolve_model_path(Settings(model=str(tmp_path / "nope.gguf")))
