"""Configuration: where each value came from (default, profile, file, env, flag, live), the config
file's errors at start-up, and `/v1/config` read and changed on a running app."""

from __future__ import annotations

import argparse
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from engine.api import EncodeRequest, OutputCap, QueueFull
from engine.checkpoints import read_gguf_metadata
from engine.serving.intake import Intake
from pooled import cli
from pooled.configuration import setting_sources
from pooled.configuration.config_service import host_reloader
from pooled.configuration.live_settings import LiveSettings
from pooled.configuration.setting_sources import (
    BY_NAME,
    LoadedSettings,
    ModelDefaults,
    SettingsError,
    with_model_defaults,
)
from pooled.configuration.settings import Settings
from pooled.hosting.model_host import Loaded, ModelHost, default_model_path
from pooled.web.app import build_app, server_context
from tests.conftest import BASE_URL, StubModel
from tests.fake_engine import FakeEngine
from text import ChatTemplate, Tokenizer

SPEC = Path(__file__).resolve().parents[2] / "spec" / "components" / "schemas" / "config.yaml"
JSON_TYPES = {"string": "string", "integer": "integer", "number": "number", "boolean": "boolean", "list": "array"}
KEY = {"Authorization": "Bearer sekrit"}


def load(argv: list[str], environ: dict[str, str] | None = None) -> LoadedSettings:
    parser = argparse.ArgumentParser()
    setting_sources.add_arguments(parser)
    return setting_sources.load_with_origins(vars(parser.parse_args(argv)), environ or {})


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pooled.toml"
    path.write_text(text, encoding="utf-8")
    return path


def client_for(loaded: LoadedSettings, model: Any = None, **context: Any) -> TestClient:
    live = LiveSettings(loaded)
    server = server_context(loaded.settings, model or StubModel(), live=live, **context)
    return TestClient(build_app(loaded.settings, server), base_url=BASE_URL, raise_server_exceptions=False)


@pytest.fixture
def client() -> Iterator[TestClient]:
    with client_for(LoadedSettings.of(Settings())) as test_client:
        yield test_client


# --- where each value came from --------------------------------------------------------------


def test_every_origin_is_reported(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        'request_timeout = 7.5\nallow_origin = ["https://file.example/"]\n'
        "[profile.small]\nmax_output_tokens = 100\nkeepalive_interval = 2.0\nrequest_timeout = 1.0\n",
    )
    loaded = load(["--config", str(path), "--profile", "small", "--max-queue", "3"], {"POOLED_DECODE_LANES": "2"})
    settings = loaded.settings
    assert (settings.max_queue, settings.decode_lanes, settings.request_timeout) == (3, 2, 7.5)
    assert (settings.max_output_tokens, settings.keepalive_interval) == (100, 2.0)
    assert settings.allow_origin == ("https://file.example",)
    with client_for(loaded) as client:
        assert client.patch("/v1/config", json={"keepalive_interval": 4.0}).status_code == 200
        origins = client.get("/v1/config/origins").json()
    assert set(origins) == set(BY_NAME)
    assert origins["max_queue"] == {"origin": "flag"}
    assert origins["config"] == origins["profile"] == {"origin": "flag"}
    assert origins["decode_lanes"] == {"origin": "env"}
    assert origins["request_timeout"] == {"origin": "file", "file": str(path)}
    assert origins["max_output_tokens"] == {"origin": "profile", "file": str(path), "profile": "small"}
    assert origins["keepalive_interval"] == {"origin": "live"}
    assert origins["host"] == origins["api_key"] == {"origin": "default"}


def test_flag_over_env_over_file_over_profile_over_default(tmp_path: Path) -> None:
    with_file = write(tmp_path, "max_queue = 2\n[profile.p]\nmax_queue = 1\n")
    only_profile = tmp_path / "profile.toml"
    only_profile.write_text("[profile.p]\nmax_queue = 1\n", encoding="utf-8")
    config = ["--config", str(with_file), "--profile", "p"]
    cases = [
        (load([*config, "--max-queue", "4"], {"POOLED_MAX_QUEUE": "3"}), 4, "flag"),
        (load(config, {"POOLED_MAX_QUEUE": "3"}), 3, "env"),
        (load(config), 2, "file"),
        (load(["--config", str(only_profile), "--profile", "p"]), 1, "profile"),
        (load(["--config", str(only_profile)]), 8, "default"),
        (load([]), 8, "default"),
    ]
    for loaded, value, origin in cases:
        assert (loaded.settings.max_queue, loaded.origins["max_queue"]) == (value, origin)
    assert load([], {"POOLED_CONFIG": str(with_file)}).origins["max_queue"] == "file"


SMALL = ModelDefaults("small", {"max_output_tokens": 512, "max_output_tokens_finish": "stop"}, "it rambles")


def test_a_models_catalog_defaults_sit_under_everything_the_user_sets(tmp_path: Path) -> None:
    profile = write(tmp_path, "[profile.p]\nmax_output_tokens = 100\n")
    cases = [
        (load([]), 512, "catalog"),
        (load(["--config", str(profile), "--profile", "p"]), 100, "profile"),
        (load([], {"POOLED_MAX_OUTPUT_TOKENS": "none"}), None, "env"),
        (load(["--max-output-tokens", "64"]), 64, "flag"),
    ]
    for loaded, value, origin in cases:
        served = with_model_defaults(loaded, SMALL)
        assert (served.settings.max_output_tokens, served.origins["max_output_tokens"]) == (value, origin)
        assert (served.settings.max_output_tokens_finish, served.origins["max_output_tokens_finish"]) == (
            "stop",
            "catalog",
        )
    unknown = with_model_defaults(load([]), None)  # a model the catalog does not know: none
    assert (unknown.settings.max_output_tokens, unknown.origins["max_output_tokens"]) == (None, "default")


def test_a_switch_brings_the_new_models_defaults_and_keeps_the_users_values() -> None:
    live = LiveSettings(with_model_defaults(load(["--max-output-tokens-finish", "length"]), SMALL))
    seen: list[Settings] = []
    live.subscribe(seen.append)
    other = ModelDefaults("other", {"keepalive_interval": 2.0}, "slow client")
    settings = live.serve_model(other)
    assert (settings.max_output_tokens, settings.max_output_tokens_finish, settings.keepalive_interval) == (
        None,
        "length",
        2.0,
    )
    assert (live.origins["max_output_tokens"], live.origins["keepalive_interval"]) == ("default", "catalog")
    assert live.model_defaults == other and seen == [settings]
    live.apply({"keepalive_interval": 3.0})  # changed while serving: the user's, kept by a switch
    assert live.serve_model(None).keepalive_interval == 3.0 and live.origins["keepalive_interval"] == "live"
    assert live.serve_model(None) == live.current and len(seen) == 2  # nothing changed: nobody told


def test_catalog_origins_name_the_entry_and_its_reason() -> None:
    with client_for(with_model_defaults(load([]), SMALL)) as client:
        origins = client.get("/v1/config/origins").json()
        values = client.get("/v1/config").json()
        banner = client.get("/").text
    catalog = {"origin": "catalog", "catalog": "small", "reason": "it rambles"}
    assert origins["max_output_tokens"] == origins["max_output_tokens_finish"] == catalog
    assert (values["max_output_tokens"], values["max_output_tokens_finish"]) == (512, "stop")
    assert "Defaults of the catalog's small: --max-output-tokens 512, --max-output-tokens-finish stop\n" in banner
    assert "(it rambles); a flag, a POOLED_* variable or the --config file overrides them." in banner


def test_file_values_take_their_kind_or_the_flags_text(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        'ctx = "auto"\nidle_unload = 90\nlora = ["a=/adapters/a"]\nlora_root = "/r1,/r2"\nembeddings = true\n',
    )
    settings = load(["--config", str(path)]).settings
    assert (settings.ctx, settings.idle_unload, settings.embeddings) == (None, 90.0, True)
    assert settings.lora == (("a", "/adapters/a"),) and settings.lora_root == ("/r1", "/r2")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_qeueu = 16\n", "key 'max_qeueu' is not a setting"),
        ("[profile.x]\nnope = 1\n", "[profile.x] key 'nope' is not a setting"),
        ("max_queue = -1\n", "key 'max_queue' takes an integer of 0 or more, not -1"),
        ('max_queue = "many"\n', "key 'max_queue' takes an integer of 0 or more"),
        ("max_queue = true\n", "key 'max_queue' takes an integer"),
        ('quantization = "int4"\n', "one of auto, none, gguf, w8a8, w4a8"),
        ("[profile.unused]\nrequest_timeout = 0\n", "[profile.unused]: key 'request_timeout' takes a number above 0"),
        ('config = "other.toml"\n', "key 'config' is chosen by a flag or variable"),
        ('profile = "x"\n', "[profile.NAME] tables"),
        ("max_queue = \n", "not valid TOML"),
    ],
)
def test_a_bad_config_file_stops_the_start_naming_the_key_and_file(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(SettingsError) as error:
        load(["--config", str(path)])
    assert message in str(error.value) and str(path) in str(error.value)


def test_unknown_profile_missing_file_and_bad_variable_stop_the_start(tmp_path: Path) -> None:
    path = write(tmp_path, "[profile.small]\nmax_queue = 1\n")
    with pytest.raises(SettingsError, match=r"has no \[profile.big\] table \(its profiles: small\)"):
        load(["--config", str(path), "--profile", "big"])
    with pytest.raises(SettingsError, match="no file is given"):
        load(["--profile", "small"])
    with pytest.raises(SettingsError, match="cannot read it"):
        load(["--config", str(tmp_path / "missing.toml")])
    with pytest.raises(SettingsError, match="POOLED_MAX_QUEUE='lots': max_queue takes an integer of 0 or more"):
        load([], {"POOLED_MAX_QUEUE": "lots"})


def test_serve_with_a_bad_config_file_exits_2_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "max_qeueu = 16\n")
    assert cli.main(["serve", "--config", str(path)]) == 2
    assert f"{path}: key 'max_qeueu' is not a setting" in capsys.readouterr().err


# --- reading the configuration -----------------------------------------------------------------


def test_get_shows_every_value_but_never_the_api_key() -> None:
    loaded = load(["--api-key", "sekrit", "--max-queue", "5", "--lora-sha256", "a=ab"])
    with client_for(loaded) as client:
        values = client.get("/v1/config", headers=KEY).json()
        texts = [client.get(path, headers=KEY).text for path in ("/v1/config/fields", "/v1/config/origins")]
        patched = client.patch("/v1/config", headers=KEY, json={"max_queue": 6})
    assert set(values) == set(BY_NAME) - {"api_key"}
    assert (values["max_queue"], values["lora_sha256"], values["ctx"], values["request_timeout"]) == (
        5,
        ["a=ab"],
        None,
        300.0,
    )
    assert all("sekrit" not in text for text in [*texts, patched.text, str(values)])
    assert "api_key" not in patched.json() and patched.json()["max_queue"] == 6


def test_fields_list_every_setting_with_kind_default_rule_and_change(client: TestClient) -> None:
    fields = {row["name"]: row for row in client.get("/v1/config/fields").json()["data"]}
    assert list(fields) == list(BY_NAME)
    assert fields["max_queue"] == {
        "name": "max_queue",
        "kind": "integer",
        "nullable": False,
        "default": 8,
        "rule": {"minimum": 0},
        "change": "live",
        "secret": False,
        "flag": "--max-queue",
        "env": "POOLED_MAX_QUEUE",
        "help": BY_NAME["max_queue"].metadata["help"],
    }
    assert fields["quantization"]["rule"] == {"choices": ["auto", "none", "gguf", "w8a8", "w4a8"]}
    assert fields["request_timeout"]["rule"] == {"exclusive_minimum": 0}
    assert fields["port"]["rule"] == {"minimum": 0, "maximum": 65535}
    assert fields["ctx"]["nullable"] and fields["ctx"]["change"] == "reload"
    assert fields["allow_origin"]["kind"] == fields["lora"]["kind"] == "list"
    assert fields["api_key"]["secret"] and fields["api_key"]["change"] == "restart"
    assert fields["host"]["rule"] is None and fields["host"]["change"] == "restart"
    live = {"max_queue", "request_timeout", "max_output_tokens", "max_output_tokens_finish", "keepalive_interval"}
    assert live | {"max_embedding_inputs", "allow_origin", "max_body", "lora_admin"} <= {
        name for name, row in fields.items() if row["change"] == "live"
    }


def test_the_spec_names_every_setting_with_its_json_type() -> None:
    schemas = yaml.safe_load(SPEC.read_text(encoding="utf-8"))
    shown = [row for row in setting_sources.setting_fields() if not row.secret]
    assert list(schemas["Config"]["properties"]) == [row.name for row in shown]
    assert schemas["Config"]["required"] == [row.name for row in shown]
    for row in shown:
        declared = schemas["Config"]["properties"][row.name]["type"]
        assert declared == ([JSON_TYPES[row.kind], "null"] if row.nullable else JSON_TYPES[row.kind]), row.name
    assert list(schemas["ConfigOrigins"]["properties"]) == list(BY_NAME)


# --- changing it ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2() -> tuple[Tokenizer, ChatTemplate]:
    metadata = read_gguf_metadata(default_model_path(), prefix="tokenizer.")
    tokenizer = Tokenizer.from_gguf_metadata(metadata)
    return tokenizer, ChatTemplate(metadata["tokenizer.chat_template"], tokenizer)


@pytest.fixture
def engine(smollm2: tuple[Tokenizer, ChatTemplate]) -> FakeEngine:
    tokenizer = smollm2[0]
    return FakeEngine(lambda request, row: tokenizer.encode(" one two three four five six seven"), tokenizer.vocab_size)


@pytest.fixture
def api(smollm2: tuple[Tokenizer, ChatTemplate], engine: FakeEngine) -> Iterator[TestClient]:
    tokenizer, template = smollm2
    model = StubModel(engine=engine, tokenizer=tokenizer, chat_template=template)
    with client_for(LoadedSettings.of(Settings(decode_lanes=4)), model) as client:
        yield client


def test_a_live_change_holds_from_the_next_request(api: TestClient, engine: FakeEngine) -> None:
    body = {"prompt": "Count:", "max_tokens": 50}
    first = api.post("/v1/completions", json=body).json()
    assert first["usage"]["completion_tokens"] > 3 and engine.submitted[-1].stall_timeout == 300.0
    changed = api.patch("/v1/config", json={"max_output_tokens": 3, "request_timeout": 12.5})
    assert changed.status_code == 200
    assert (changed.json()["max_output_tokens"], changed.json()["request_timeout"]) == (3, 12.5)
    capped = api.post("/v1/completions", json=body).json()
    assert capped["usage"]["completion_tokens"] == 3 and capped["choices"][0]["finish_reason"] == "length"
    assert engine.submitted[-1].output_cap == OutputCap(3) and engine.submitted[-1].stall_timeout == 12.5
    api.patch("/v1/config", json={"max_output_tokens_finish": "stop"})
    assert api.post("/v1/completions", json=body).json()["choices"][0]["finish_reason"] == "stop"
    api.patch("/v1/config", json={"max_output_tokens": None})
    assert api.post("/v1/completions", json=body).json()["usage"]["completion_tokens"] > 3


def test_a_newly_allowed_origin_passes_and_gets_cors(client: TestClient) -> None:
    origin = {"Origin": "https://app.example"}
    assert client.get("/v1/models", headers=origin).status_code == 403
    changed = client.patch("/v1/config", json={"allow_origin": ["https://app.example/"]})
    assert changed.json()["allow_origin"] == ["https://app.example"]
    allowed = client.get("/v1/models", headers=origin)
    assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == "https://app.example"
    preflight = client.options("/v1/config", headers={**origin, "Access-Control-Request-Method": "PATCH"})
    assert preflight.status_code == 204 and "PATCH" in preflight.headers["access-control-allow-methods"]
    client.patch("/v1/config", json={"allow_origin": []})
    assert client.get("/v1/models", headers=origin).status_code == 403


def test_body_limit_lora_admin_and_embedding_inputs_are_live(client: TestClient) -> None:
    assert client.get("/v1/lora_adapters").status_code != 403
    client.patch("/v1/config", json={"lora_admin": False, "max_body": 64, "max_embedding_inputs": 1})
    assert client.get("/v1/lora_adapters").json()["error"]["code"] == "lora_admin_disabled"
    assert client.post("/v1/embeddings", json={"input": ["a", "b"], "model": "x" * 64}).status_code == 413
    assert client.get("/v1/config").json()["max_embedding_inputs"] == 1


def test_one_bad_value_among_good_ones_changes_nothing(client: TestClient) -> None:
    before = client.get("/v1/config").json()
    refused = client.patch("/v1/config", json={"max_output_tokens": 10, "max_queue": -2, "request_timeout": 5.0})
    error = refused.json()["error"]
    assert refused.status_code == 400 and (error["code"], error["param"]) == ("invalid_value", "max_queue")
    assert "an integer of 0 or more" in error["message"] and "-2" in error["message"]
    assert client.get("/v1/config").json() == before
    assert client.get("/v1/config/origins").json()["max_output_tokens"] == {"origin": "default"}


@pytest.mark.parametrize(
    ("body", "param", "rule"),
    [
        ({"max_queue": "16"}, "max_queue", "an integer"),
        ({"max_queue": 1.5}, "max_queue", "an integer"),
        ({"lora_admin": 1}, "lora_admin", "true or false"),
        ({"request_timeout": 0}, "request_timeout", "a number above 0"),
        ({"request_timeout": None}, "request_timeout", "a number above 0"),
        ({"allow_origin": "https://a.example"}, "allow_origin", "a list of origins"),
        ({"volatile_line_pattern": "("}, "volatile_line_pattern", "a regular expression"),
        ({"max_output_tokens_finish": "end"}, "max_output_tokens_finish", "one of length, stop"),
        ({"lora": ["no-equals"]}, "lora", "NAME=VALUE"),
    ],
)
def test_a_bad_value_is_a_400_naming_the_field_and_rule(
    client: TestClient, body: dict[str, Any], param: str, rule: str
) -> None:
    refused = client.patch("/v1/config", json=body)
    error = refused.json()["error"]
    assert refused.status_code == 400 and error["param"] == param and rule in error["message"], error


def test_unknown_setting_and_non_object_bodies_are_400(client: TestClient) -> None:
    unknown = client.patch("/v1/config", json={"max_qeueu": 16})
    assert unknown.status_code == 400 and unknown.json()["error"]["code"] == "unknown_setting"
    assert unknown.json()["error"]["param"] == "max_qeueu"
    assert client.patch("/v1/config", json=[1]).status_code == 400


def test_reload_and_restart_fields_are_409_naming_them(client: TestClient) -> None:
    reload = client.patch("/v1/config", json={"max_queue": 3, "decode_lanes": 8})
    assert reload.status_code == 409
    assert (reload.json()["error"]["code"], reload.json()["error"]["param"]) == ("reload_required", "decode_lanes")
    assert "reload=true" in reload.json()["error"]["message"]
    restart = client.patch("/v1/config?reload=true", json={"port": 9000, "decode_lanes": 8})
    assert (restart.status_code, restart.json()["error"]["param"]) == (409, "port")
    assert restart.json()["error"]["code"] == "restart_required"
    no_host = client.patch("/v1/config?reload=true", json={"decode_lanes": 8})
    assert (no_host.status_code, no_host.json()["error"]["code"]) == (409, "reload_unavailable")
    assert client.get("/v1/config").json()["max_queue"] == 8  # nothing applied


def test_what_get_gave_may_be_sent_back_with_one_value_changed(client: TestClient) -> None:
    values = client.get("/v1/config").json()
    changed = client.patch("/v1/config", json={**values, "max_queue": 12})
    assert changed.status_code == 200 and changed.json() == {**values, "max_queue": 12}
    origins = client.get("/v1/config/origins").json()
    assert origins["max_queue"] == {"origin": "live"} and origins["port"] == {"origin": "default"}


def test_the_api_key_cannot_be_patched_and_every_route_needs_it() -> None:
    with client_for(load(["--api-key", "sekrit"])) as client:
        for method, path in [
            ("GET", "/v1/config"),
            ("GET", "/v1/config/fields"),
            ("GET", "/v1/config/origins"),
            ("PATCH", "/v1/config"),
        ]:
            response = client.request(method, path, json={"max_queue": 1} if method == "PATCH" else None)
            assert response.status_code == 401, path
        refused = client.patch("/v1/config", headers=KEY, json={"api_key": "other", "max_queue": 1})
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "secret_setting"
        assert client.get("/v1/config", headers={"Authorization": "Bearer other"}).status_code == 401
        assert client.get("/v1/config", headers=KEY).json()["max_queue"] == 8


# --- the engine's queue bound and reloads, through the model host -------------------------------


class Engine:
    """What the host asks of an engine: draining and stopping for a reload, and the queue bound."""

    def __init__(self) -> None:
        self.state, self.failure = "serving", None
        self.max_queue: list[int] = []
        self.vision = None  # a text model's

    def drain(self) -> None:
        pass

    def wait_idle(self, timeout: float | None = None) -> bool:
        return True

    def shutdown(self) -> None:
        self.state = "dead"

    def set_max_queue(self, max_queue: int) -> None:
        self.max_queue.append(max_queue)


def hosted(tmp_path: Path, fail_when: int | None = None) -> tuple[ModelHost, list[Settings], LiveSettings]:
    """A serving host whose loads record their settings; a load with decode_lanes == `fail_when` fails."""
    loads: list[Settings] = []

    def loader(path: Path, settings: Settings, report: Any) -> Loaded:
        loads.append(settings)
        if settings.decode_lanes == fail_when:
            raise ValueError("out of memory for that many lanes")
        return Loaded(1024, 1024, None, "none", object(), None, Engine())  # type: ignore[arg-type]

    live = LiveSettings(LoadedSettings.of(Settings(decode_lanes=4)))
    host = ModelHost(live.current, tmp_path, loader)
    live.subscribe(host.update_live)
    host.start()
    for thread in threading.enumerate():
        if thread.name == "pooled-lifecycle":
            thread.join(timeout=10)
    assert host.state == "serving"
    return host, loads, live


def test_max_queue_reaches_the_running_engine(tmp_path: Path) -> None:
    host, _, live = hosted(tmp_path)
    live.apply({"max_queue": 0})
    assert host.engine.max_queue == [0] and host.settings.max_queue == 0  # type: ignore[union-attr]
    intake = Intake(0, 1)
    request = EncodeRequest("x", ())
    intake.enqueue_task("encode", request, lambda event: None)
    with pytest.raises(QueueFull):
        intake.enqueue_task("encode", request, lambda event: None)
    intake.set_max_queue(2)
    intake.enqueue_task("encode", request, lambda event: None)


def test_a_reload_loads_the_model_again_with_the_new_settings(tmp_path: Path) -> None:
    host, loads, live = hosted(tmp_path)
    server = server_context(live.current, host, live=live, reload=host_reloader(host))
    with TestClient(build_app(live.current, server), base_url=BASE_URL) as client:
        changed = client.patch("/v1/config?reload=true", json={"decode_lanes": 2, "max_queue": 5})
        assert changed.status_code == 200, changed.text
        assert (changed.json()["decode_lanes"], changed.json()["max_queue"]) == (2, 5)
        assert loads[-1].decode_lanes == 2 and len(loads) == 2
        assert host.state == "serving" and host.decode_lanes == 2 and host.engine.max_queue[-1] == 5  # type: ignore[union-attr]
        origins = client.get("/v1/config/origins").json()
        assert origins["decode_lanes"] == origins["max_queue"] == {"origin": "live"}


def test_a_failed_reload_serves_the_old_settings_again(tmp_path: Path) -> None:
    host, loads, live = hosted(tmp_path, fail_when=64)
    server = server_context(live.current, host, live=live, reload=host_reloader(host))
    with TestClient(build_app(live.current, server), base_url=BASE_URL) as client:
        failed = client.patch("/v1/config?reload=true", json={"decode_lanes": 64, "max_queue": 5})
        assert failed.status_code == 500 and failed.json()["error"]["code"] == "reload_failed"
        assert "out of memory" in failed.json()["error"]["message"]
        assert [settings.decode_lanes for settings in loads] == [4, 64, 4]
        assert host.state == "serving" and host.settings.decode_lanes == 4
        assert client.get("/v1/config").json()["max_queue"] == 8
