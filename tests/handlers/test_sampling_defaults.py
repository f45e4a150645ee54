"""The sampling a request leaves out, end to end through the app (the engine a scripted double that
records what reaches it): the request's own value, then what the user set (flags, `POOLED_*`
variables, the config file, a live change), then the served model's own recommendation (its
catalog entry's, then its GGUF's `general.sampling.*` keys or its generation_config.json, each
read from files written here), then the APIs' defaults; and where `/health`, `/v1/config` and
the banner say each came from."""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from gguf import GGUFWriter

from engine.api import SamplingParams
from pooled.configuration import setting_sources
from pooled.configuration.live_settings import LiveSettings
from pooled.configuration.model_sampling import checkpoint_defaults
from pooled.configuration.setting_sources import LoadedSettings, ModelDefaults, with_model_defaults
from pooled.models_folder.catalog import parse_catalog
from pooled.web.app import build_app, server_context
from tests.conftest import BASE_URL, StubModel
from tests.engine.tiny_checkpoints import build_tiny_checkpoint
from tests.fake_engine import FakeEngine
from text import ChatTemplate, Tokenizer

HI = [{"role": "user", "content": "Hi"}]
CATALOG = """
[[model]]
id = "small"
family = "llama"
format = "gguf"
trained_ctx = 8192
licence = "Apache-2.0"
memory_bytes = 600000000

[model.serving]
temp = 0.3
top_p = 0.8
reason = "its model card's"

[[model.file]]
name = "small.gguf"
url = "https://huggingface.co/x/y/resolve/0123/small.gguf"
sha256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
size = 98362432
"""


def load(argv: list[str], environ: dict[str, str] | None = None) -> LoadedSettings:
    parser = argparse.ArgumentParser()
    setting_sources.add_arguments(parser)
    return setting_sources.load_with_origins(vars(parser.parse_args(argv)), environ or {})


def catalog_defaults() -> ModelDefaults:
    serving = parse_catalog(CATALOG, "catalog.toml")["small"].serving
    assert serving is not None
    return serving


def sampling_gguf(path: Path, write: Callable[[GGUFWriter], None]) -> Path:
    """A GGUF of no tensors whose header holds the sampling keys `write` adds, as llama.cpp's
    converter writes them."""
    writer = GGUFWriter(path, "llama")
    write(writer)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def every_key(writer: GGUFWriter) -> None:
    writer.add_sampling_temp(0.6)
    writer.add_sampling_top_k(20)
    writer.add_sampling_top_p(0.95)
    writer.add_sampling_min_p(0.1)
    writer.add_sampling_penalty_repeat(1.1)


@pytest.fixture
def serve(
    smollm2: tuple[Tokenizer, ChatTemplate], fake_engine: FakeEngine
) -> Callable[[LoadedSettings], tuple[TestClient, LiveSettings]]:
    """An app over `loaded` (its live settings, as `pooled serve` keeps them) and the recording engine."""
    tokenizer, template = smollm2
    model = StubModel(ctx=2048, decode_lanes=4, engine=fake_engine, tokenizer=tokenizer, chat_template=template)

    def served(loaded: LoadedSettings) -> tuple[TestClient, LiveSettings]:
        live = LiveSettings(loaded)
        app = build_app(loaded.settings, server_context(loaded.settings, model, live=live))
        return TestClient(app, base_url=BASE_URL, raise_server_exceptions=False), live

    return served


def reached(fake_engine: FakeEngine) -> SamplingParams:
    """The last request's sampling as the engine got it, its logprobs and seed aside."""
    return replace(fake_engine.submitted[-1].sampling, logprobs=None, seed=None)


def chat(client: TestClient, **fields: Any) -> None:
    response = client.post("/v1/chat/completions", json={"model": "m", "messages": HI, "max_tokens": 4, **fields})
    assert response.status_code == 200, response.text


def in_force(client: TestClient) -> dict[str, Any]:
    """`/health`'s sampling defaults, as (value, origin) by request field."""
    reported = client.get("/health").json()["sampling_defaults"]
    return {field: (default["value"], default["origin"]) for field, default in reported.items()}


def test_each_layer_sets_what_the_ones_above_leave(
    tmp_path: Path, serve: Callable[[LoadedSettings], tuple[TestClient, LiveSettings]], fake_engine: FakeEngine
) -> None:
    """The GGUF recommends all five; the catalog entry overrides two, an environment variable and a
    flag one each, and only the repetition penalty is left the GGUF's."""
    gguf = sampling_gguf(tmp_path / "small.gguf", every_key)
    user = load(["--min-p", "0.02"], {"POOLED_TOP_K": "5"})
    client, _ = serve(with_model_defaults(user, catalog_defaults(), checkpoint_defaults(gguf)))
    with client:
        chat(client)
        assert reached(fake_engine) == SamplingParams(
            temperature=0.3, top_k=5, top_p=0.8, min_p=0.02, repetition_penalty=1.1
        )
        assert in_force(client) == {
            "temperature": (0.3, "catalog"),
            "top_k": (5, "env"),
            "top_p": (0.8, "catalog"),
            "min_p": (0.02, "flag"),
            "repetition_penalty": (1.1, "gguf"),
        }
        values, origins = client.get("/v1/config").json(), client.get("/v1/config/origins").json()
        banner = client.get("/").text
        # A request's own value always wins, one equal to "off" or greedy included.
        chat(client, temperature=0, top_k=0, top_p=1, min_p=0, repetition_penalty=1)
        assert reached(fake_engine) == SamplingParams(temperature=0.0)
    assert [values[name] for name in ("temp", "top_k", "top_p", "min_p", "repeat_penalty")] == [0.3, 5, 0.8, 0.02, 1.1]
    assert origins["temp"] == {"origin": "catalog", "catalog": "small", "reason": "its model card's"}
    assert origins["repeat_penalty"] == {"origin": "gguf", "file": str(gguf)}
    assert (origins["top_k"], origins["min_p"]) == ({"origin": "env"}, {"origin": "flag"})
    assert (
        "Sampling defaults: temperature 0.3 (catalog), top_k 5 (POOLED_* variable), top_p 0.8 (catalog), "
        "min_p 0.02 (flag), repetition_penalty 1.1 (the GGUF's)\n"
    ) in banner


def test_without_a_recommendation_a_request_gets_the_apis_defaults(
    serve: Callable[[LoadedSettings], tuple[TestClient, LiveSettings]], fake_engine: FakeEngine
) -> None:
    client, _ = serve(with_model_defaults(load([]), None, None))
    with client:
        chat(client)
        assert reached(fake_engine) == SamplingParams()  # temperature 1 over the whole vocabulary
        assert set(in_force(client).values()) == {(1.0, "default"), (0, "default"), (0.0, "default")}


def test_a_safetensors_folders_generation_config_is_its_recommendation(
    tmp_path: Path, serve: Callable[[LoadedSettings], tuple[TestClient, LiveSettings]], fake_engine: FakeEngine
) -> None:
    folder = build_tiny_checkpoint("llama_tied", tmp_path / "tiny")
    config = {"bos_token_id": 1, "do_sample": True, "temperature": 0.7, "top_k": 40, "repetition_penalty": 1.05}
    (folder / "generation_config.json").write_text(json.dumps(config), encoding="utf-8")
    client, _ = serve(with_model_defaults(load(["--top-k", "8"]), None, checkpoint_defaults(folder)))
    with client:
        chat(client)
        assert reached(fake_engine) == SamplingParams(temperature=0.7, top_k=8, repetition_penalty=1.05)
        assert in_force(client)["temperature"] == (0.7, "generation_config")
        origin = client.get("/v1/config/origins").json()["temp"]
    assert origin == {"origin": "generation_config", "file": str(folder / "generation_config.json")}


def test_every_route_that_samples_takes_them_and_its_own_fields_win(
    tmp_path: Path, serve: Callable[[LoadedSettings], tuple[TestClient, LiveSettings]], fake_engine: FakeEngine
) -> None:
    gguf = sampling_gguf(tmp_path / "small.gguf", every_key)
    client, _ = serve(with_model_defaults(load([]), None, checkpoint_defaults(gguf)))
    recommended = SamplingParams(temperature=0.6, top_k=20, top_p=0.95, min_p=0.1, repetition_penalty=1.1)
    with client:
        asked = {
            "/v1/completions": {"model": "m", "prompt": "Hi", "max_tokens": 4},
            "/v1/responses": {"model": "m", "input": "Hi", "max_output_tokens": 4},
            "/v1/messages": {"model": "m", "messages": HI, "max_tokens": 4},
        }
        for path, body in asked.items():
            response = client.post(path, json=body)
            assert response.status_code == 200, (path, response.text)
            assert reached(fake_engine) == recommended, path
            if path == "/v1/responses":  # the Response repeats what it sampled with
                assert (response.json()["temperature"], response.json()["top_p"]) == (0.6, 0.95)
        answer = client.post("/v1/responses", json={**asked["/v1/responses"], "temperature": 0.9, "top_p": 0.5})
        assert (answer.json()["temperature"], answer.json()["top_p"]) == (0.9, 0.5)
        assert reached(fake_engine) == replace(recommended, temperature=0.9, top_p=0.5)
        assert client.post("/v1/messages", json={**asked["/v1/messages"], "top_k": 3}).status_code == 200
        assert reached(fake_engine) == replace(recommended, top_k=3)
        assert client.post("/v1/completions", json={**asked["/v1/completions"], "top_k": -1}).status_code == 200
        assert reached(fake_engine) == replace(recommended, top_k=0)  # -1: every token, as 0


def test_a_live_change_wins_and_a_switch_brings_the_new_models_own(
    tmp_path: Path, serve: Callable[[LoadedSettings], tuple[TestClient, LiveSettings]], fake_engine: FakeEngine
) -> None:
    first = checkpoint_defaults(sampling_gguf(tmp_path / "first.gguf", every_key))
    second_file = sampling_gguf(tmp_path / "second.gguf", lambda writer: writer.add_sampling_top_k(64))
    client, live = serve(with_model_defaults(load([]), catalog_defaults(), first))
    with client:
        assert client.patch("/v1/config", json={"min_p": 0.2}).status_code == 200
        chat(client)
        assert reached(fake_engine) == SamplingParams(
            temperature=0.3, top_k=20, top_p=0.8, min_p=0.2, repetition_penalty=1.1
        )
        live.serve_model(None, checkpoint_defaults(second_file))  # a switch to a model the catalog does not know
        chat(client)
        assert reached(fake_engine) == SamplingParams(top_k=64, min_p=0.2)
        assert in_force(client)["top_k"] == (64, "gguf") and in_force(client)["min_p"] == (0.2, "live")
        assert client.get("/v1/config/origins").json()["top_k"] == {"origin": "gguf", "file": str(second_file)}


def test_a_recommendation_no_setting_takes_is_left_out_saying_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def odd(writer: GGUFWriter) -> None:
        writer.add_sampling_temp(5.0)  # --temp takes 0 to 2
        writer.add_sampling_top_p(0.5)

    path = sampling_gguf(tmp_path / "odd.gguf", odd)
    with caplog.at_level(logging.WARNING):
        defaults = checkpoint_defaults(path)
    assert defaults is not None and defaults.values == {"top_p": 0.5}
    assert f"{path} recommends temperature 5.0, which --temp does not take (a number of 0 to 2)" in caplog.text
    assert checkpoint_defaults(sampling_gguf(tmp_path / "only_odd.gguf", lambda w: w.add_sampling_temp(9.0))) is None
