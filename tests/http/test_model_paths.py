"""The model and adapter paths a start names, checked before the listener opens
(pooled/hosting/model_paths.py): each problem names the flag and what is wrong; `pooled serve`
exits 2 with them before it listens."""

from __future__ import annotations

import subprocess
from pathlib import Path

import gguf as gguf_writer
import pytest

from pooled.configuration.settings import Settings
from pooled.hosting.model_paths import model_path_problems, projector_for
from pooled.models_folder.model_ids import beside_model_path
from tests.pooled_servers import POOLED, free_port


def gguf(path: Path) -> Path:
    path.write_bytes(b"GGUF" + bytes(60))  # the magic is what a start checks; the rest is the load's
    return path


def model_folder(path: Path) -> Path:
    path.mkdir()
    (path / "config.json").write_text("{}")
    (path / "model.safetensors").write_bytes(bytes(8))
    return path


def adapter_folder(path: Path) -> Path:
    path.mkdir()
    (path / "adapter_config.json").write_text("{}")
    (path / "adapter_model.safetensors").write_bytes(bytes(8))
    return path


def test_paths_the_loaders_read_pass(tmp_path: Path) -> None:
    settings = Settings(
        embedding_model=str(model_folder(tmp_path / "encoder")),
        rerank_model=str(gguf(tmp_path / "reranker.gguf")),
        lora=(("a", str(adapter_folder(tmp_path / "a"))), ("b", str(gguf(tmp_path / "b.GGUF")))),
        max_loras=2,
    )
    assert model_path_problems(gguf(tmp_path / "model.gguf"), settings) == []


def test_each_problem_names_the_flag_and_what_is_wrong(tmp_path: Path) -> None:
    (tmp_path / "no-weights").mkdir()
    (tmp_path / "no-weights" / "config.json").write_text("{}")
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "fake.gguf").write_text("hello")
    settings = Settings(
        embedding_model=str(tmp_path / "empty"),
        rerank_model=str(tmp_path / "missing"),
        lora=(("a", str(tmp_path / "notes.txt")), ("b", str(tmp_path / "empty")), ("c", str(tmp_path / "fake.gguf"))),
    )
    problems = model_path_problems(tmp_path / "no-weights", settings)
    assert problems == [
        f"--model {tmp_path}/no-weights: not a model folder ({tmp_path}/no-weights has neither model.safetensors "
        "nor model.safetensors.index.json); a model is a GGUF file or a safetensors model folder",
        f"--embedding-model {tmp_path}/empty: not a model folder ({tmp_path}/empty has no config.json); "
        "a model is a GGUF file or a safetensors model folder",
        f"--rerank-model {tmp_path}/missing: no such file or folder; give a GGUF file or a safetensors model folder",
        f"--lora a={tmp_path}/notes.txt: a file whose name does not end in .gguf; an adapter is a PEFT adapter "
        "folder or a llama.cpp LoRA GGUF file",
        f"--lora b={tmp_path}/empty: a folder without adapter_config.json or adapter_model.safetensors; an "
        "adapter is a PEFT adapter folder or a llama.cpp LoRA GGUF file",
        f"--lora c={tmp_path}/fake.gguf: not a GGUF file (it starts b'hell', not b'GGUF')",
        "--lora needs adapter slots: set --max-loras (0, the default, serves no adapter)",
    ]


@pytest.mark.slow  # a `pooled serve` process, which exits before it listens
def test_serve_exits_2_naming_every_bad_path_before_it_listens(tmp_path: Path) -> None:
    """`--model` as `pooled serve` resolves it (the default model here) passes; the encoder
    folder without a model in it, a missing reranker and an adapter that is no GGUF are refused."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("hello")
    port = free_port()
    arguments = ["--embedding-model", str(tmp_path / "empty"), "--rerank-model", str(tmp_path / "missing")]
    arguments += ["--lora", f"a={tmp_path / 'notes.txt'}", "--max-loras", "1"]
    finished = subprocess.run(
        [POOLED, "serve", "--port", str(port), *arguments],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert finished.returncode == 2, finished.stderr
    assert f"--embedding-model {tmp_path}/empty: not a model folder" in finished.stderr
    assert f"--rerank-model {tmp_path}/missing: no such file or folder" in finished.stderr
    assert f"--lora a={tmp_path}/notes.txt: a file whose name does not end in .gguf" in finished.stderr
    assert "listening" not in finished.stderr and "Uvicorn running" not in finished.stderr


def language_gguf(path: Path, architecture: str) -> Path:
    """A GGUF whose header names `architecture` (what choosing a projector reads), no tensors."""
    writer = gguf_writer.GGUFWriter(path, architecture)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_qwen2vl_gguf_takes_mmproj_or_its_one_projector_beside_it(tmp_path: Path) -> None:
    (tmp_path / "vlm").mkdir()
    vlm = language_gguf(tmp_path / "vlm" / "Qwen2.5-VL-3B-Q4_K_M.gguf", "qwen2vl")
    assert projector_for(vlm, Settings()) is None
    beside = gguf(tmp_path / "vlm" / "mmproj-Qwen2.5-VL-3B-f16.gguf")
    assert projector_for(vlm, Settings()) == beside
    assert projector_for(vlm, Settings(mmproj=str(tmp_path / "elsewhere.gguf"))) == tmp_path / "elsewhere.gguf"
    gguf(tmp_path / "vlm" / "mmproj-Qwen2.5-VL-3B-q8_0.gguf")
    assert projector_for(vlm, Settings()) is None  # two: which one is the user's to say
    text_model = language_gguf(tmp_path / "vlm" / "SmolLM2.gguf", "llama")
    assert projector_for(text_model, Settings(mmproj=str(beside))) is None


def test_mmproj_needs_a_qwen2vl_gguf_model(tmp_path: Path) -> None:
    projector = gguf(tmp_path / "mmproj.gguf")
    assert model_path_problems(language_gguf(tmp_path / "vlm.gguf", "qwen2vl"), Settings(mmproj=str(projector))) == []
    text_model = language_gguf(tmp_path / "text.gguf", "llama")
    assert model_path_problems(text_model, Settings(mmproj=str(projector))) == [
        f"--mmproj {projector}: a projector goes with a qwen2vl GGUF (Qwen2-VL, Qwen2.5-VL); "
        f"--model {text_model} is of architecture 'llama'"
    ]
    folder = model_folder(tmp_path / "folder")
    assert model_path_problems(folder, Settings(mmproj=str(projector)))[0].endswith(
        f"--model {folder} is a safetensors folder (its vision tower is in it)"
    )
    missing = tmp_path / "missing.gguf"
    assert model_path_problems(tmp_path / "vlm.gguf", Settings(mmproj=str(missing))) == [
        f"--mmproj {missing}: no such file or folder; give llama.cpp's mmproj GGUF"
    ]


def test_a_speech_model_is_a_whisper_folder_in_either_layout(tmp_path: Path) -> None:
    hf = model_folder(tmp_path / "whisper-hf")
    (hf / "tokenizer.json").write_text("{}")
    ct2 = tmp_path / "whisper-ct2"
    ct2.mkdir()
    for name in ("config.json", "tokenizer.json", "model.bin"):
        (ct2 / name).write_text("{}")
    model = gguf(tmp_path / "model.gguf")
    assert model_path_problems(model, Settings(speech_model=str(hf))) == []
    assert model_path_problems(model, Settings(speech_model=str(ct2))) == []
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "config.json").write_text("{}")
    assert model_path_problems(model, Settings(speech_model=str(tmp_path / "half"))) == [
        f"--speech-model {tmp_path}/half: a folder without tokenizer.json, model.safetensors or model.bin; give a "
        "Whisper model folder (config.json and tokenizer.json, with model.safetensors or CTranslate2's model.bin)"
    ]
    assert model_path_problems(model, Settings(speech_model=str(tmp_path / "none")))[0].startswith(
        f"--speech-model {tmp_path}/none: no such folder"
    )


def test_a_speech_model_may_be_named_by_its_folder_in_the_models_folder(tmp_path: Path) -> None:
    folder = tmp_path / "models" / "whisper-tiny"
    folder.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json", "model.bin"):
        (folder / name).write_text("{}")
    model = gguf(tmp_path / "model.gguf")
    for name in ("whisper-tiny", "pooled/whisper-tiny"):
        assert model_path_problems(model, Settings(speech_model=name, models_dir=str(tmp_path / "models"))) == []
    assert beside_model_path("pooled/whisper-tiny", str(tmp_path / "models")) == folder
