"""The LoRA trust policy (pooled/hosting/lora_policy.py): each refusal, and `--lora` at start-up."""

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.api import AdapterRefused
from engine.engine import Engine
from engine.engine_config import EngineConfig
from engine.errors import CheckpointError
from engine.lora.peft_adapter import file_sha256
from engine.model.families.registry import decoder_for_hf_config
from engine.model.loading.loader import load_model
from engine.model.model_config import ModelConfig
from pooled.configuration import setting_sources
from pooled.configuration.settings import Settings
from pooled.hosting.adapter_admin import EngineAdapters
from pooled.hosting.loading import load_start_adapters, lora_policy
from pooled.hosting.lora_policy import LoraPolicy
from tests.engine.tiny_checkpoints import TINY_MODELS, build_tiny_checkpoint
from tests.engine.tiny_gguf_lora import write_lora_gguf
from tests.engine.tiny_lora import build_tiny_adapter

LLAMA = TINY_MODELS["llama_tied"]


def model_config(hf: dict) -> ModelConfig:
    return decoder_for_hf_config(hf).config(hf)


@pytest.fixture(scope="module")
def config() -> ModelConfig:
    return model_config(LLAMA)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "root").mkdir()
    return tmp_path / "root"


def refused(read: Callable[[], object], code: str, match: str) -> None:
    with pytest.raises(AdapterRefused, match=match) as caught:
        read()
    assert caught.value.code == code


def test_an_adapter_inside_a_root_loads_by_absolute_or_relative_path(config: ModelConfig, root: Path) -> None:
    build_tiny_adapter("llama_all", root / "mine")
    policy = LoraPolicy(roots=(root,))
    assert policy.read("mine", str(root / "mine"), config, at_runtime=True).rank == 4
    assert policy.read("mine", "mine", config, at_runtime=True).path == (root / "mine").resolve()


def test_run_time_paths_outside_the_roots_are_refused(config: ModelConfig, root: Path, tmp_path: Path) -> None:
    outside = build_tiny_adapter("llama_all", tmp_path / "outside")
    policy = LoraPolicy(roots=(root,))
    refused(lambda: policy.read("x", str(outside), config, at_runtime=True), "lora_path", "outside every --lora-root")
    refused(lambda: policy.read("x", "../outside", config, at_runtime=True), "lora_path", "'..' is not allowed")
    (root / "link").symlink_to(outside, target_is_directory=True)  # a symlink escaping the root
    refused(lambda: policy.read("x", str(root / "link"), config, at_runtime=True), "lora_path", "resolves to")
    refused(lambda: LoraPolicy().read("x", str(outside), config, at_runtime=True), "lora_path", "needs --lora-root")
    assert LoraPolicy().read("x", str(outside), config, at_runtime=False).rank == 4  # the operator's own choice


def test_size_rank_shape_and_digest_refusals(config: ModelConfig, root: Path) -> None:
    adapter = build_tiny_adapter("llama_all", root / "a")  # rank 4
    weights = adapter / "adapter_model.safetensors"
    size = weights.stat().st_size
    read = LoraPolicy(roots=(root,), max_bytes=size - 1).read
    refused(lambda: read("a", "a", config, True), "lora_too_large", f"{size} bytes of weights, above --lora-max-bytes")
    refused(lambda: LoraPolicy(max_rank=2).read("a", str(adapter), config, False), "lora_rank", "rank 4 is above")
    other = model_config(TINY_MODELS["qwen3"])
    refused(lambda: LoraPolicy().read("a", str(adapter), other, False), "lora_mismatch", "do not fit the served model")
    digest = file_sha256(weights)
    allowed = LoraPolicy(digests={"a": digest})
    assert allowed.read("a", str(adapter), config, False).sha256 == digest
    refused(lambda: allowed.read("b", str(adapter), config, False), "lora_not_allowed", "not in the --lora-sha256")
    wrong = LoraPolicy(digests={"a": "0" * 64})
    refused(lambda: wrong.read("a", str(adapter), config, False), "lora_digest", f"sha256 {digest} is not the allowed")
    refused(lambda: LoraPolicy().read("a", str(root), config, False), "lora_not_found", "no adapter_model.safetensors")


def test_a_llama_cpp_gguf_file_is_its_own_weights_file(config: ModelConfig, root: Path, tmp_path: Path) -> None:
    path = write_lora_gguf(build_tiny_adapter("llama_all", tmp_path / "peft"), LLAMA, root / "a.gguf")
    size, digest = path.stat().st_size, file_sha256(path)
    assert LoraPolicy(roots=(root,)).read("a", "a.gguf", config, at_runtime=True).path == path.resolve()
    read = LoraPolicy(roots=(root,), max_bytes=size - 1).read
    refused(lambda: read("a", "a.gguf", config, True), "lora_too_large", f"{size} bytes of weights, above")
    assert LoraPolicy(roots=(root,), max_bytes=size).read("a", "a.gguf", config, True).size_bytes == size
    refused(lambda: LoraPolicy(max_rank=2).read("a", str(path), config, False), "lora_rank", "rank 4 is above")
    assert LoraPolicy(digests={"a": digest}).read("a", str(path), config, False).sha256 == digest
    peft_digest = file_sha256(tmp_path / "peft" / "adapter_model.safetensors")  # the same pairs, another file
    wrong = LoraPolicy(digests={"a": peft_digest})
    refused(lambda: wrong.read("a", str(path), config, False), "lora_digest", f"sha256 {digest} is not the allowed")
    other = model_config(TINY_MODELS["qwen3"])
    refused(lambda: LoraPolicy().read("a", str(path), other, False), "lora_mismatch", "an adapter for 'llama' models")
    needed = r"\(a PEFT adapter directory or a llama.cpp LoRA GGUF file is needed\)"
    (root / "a.bin").write_bytes(path.read_bytes())
    refused(lambda: LoraPolicy().read("a", str(root / "a.bin"), config, False), "lora_not_found", needed)
    refused(lambda: LoraPolicy().read("a", str(root / "b.gguf"), config, False), "lora_not_found", needed)


def test_lora_flags_repeat_and_read_their_variables() -> None:
    parser = setting_sources.argparse.ArgumentParser()
    setting_sources.add_arguments(parser)
    parsed = vars(parser.parse_args(["--lora", "a=/x", "--lora", "b = /y", "--max-loras", "2"]))
    loaded = setting_sources.load(parsed, {"POOLED_LORA_SHA256": "a=ab,b=cd", "POOLED_LORA_ROOT": "/r1,/r2"})
    assert loaded.lora == (("a", "/x"), ("b", "/y")) and loaded.max_loras == 2
    assert loaded.lora_sha256 == (("a", "ab"), ("b", "cd")) and loaded.lora_root == ("/r1", "/r2")
    with pytest.raises(SystemExit):
        parser.parse_args(["--lora", "no-equals-sign"])


@pytest.mark.slow  # builds an engine
def test_a_start_up_adapter_refused_fails_the_load_naming_it(tmp_path: Path) -> None:
    model = load_model(
        build_tiny_checkpoint("llama_tied", tmp_path / "model"), cache_dir=tmp_path / "c", progress=False
    )
    adapter = build_tiny_adapter("llama_all", tmp_path / "a")  # rank 4
    small = Settings(lora=(("a", str(adapter)),), max_lora_rank=2, max_loras=1)
    for settings, reason in (
        (small, "--lora a: .*rank 4 is above --max-lora-rank 2"),
        (
            dataclasses.replace(small, max_loras=0, max_lora_rank=4),
            r"--lora a: .*no LoRA adapter slots.*\(set --max-loras\)",
        ),
    ):
        config = EngineConfig(decode_lanes=2, page_size=8, prefill_chunk=16, max_context=64)
        engine = Engine.build(model, dataclasses.replace(config, max_loras=settings.max_loras), lambda *_: None)
        try:
            with pytest.raises(CheckpointError, match=reason):
                load_start_adapters(EngineAdapters(engine, model.config, lora_policy(settings)), settings)
        finally:
            engine.shutdown()
