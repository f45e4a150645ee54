"""What the host process needs to load a model and build the engine that serves it: the way in from
outside `engine` for everything that is not a request (those are `engine.api`'s).

- loading a checkpoint (`load_model`) and the context it serves (`with_served_context`);
- building a generation engine (`Engine.build` from an `EngineConfig`, with the tasks it serves
  beside generation, e.g. `EncodeTask`), an engine of tasks alone (`TaskEngine`: an encoder as the
  model) and the runners of encoders and of a decoder's embedding pass;
- a speech model: loading a Whisper checkpoint (`load_whisper`) and the runner of its transcribe
  task (`TranscribeTask`, sized by a `SpeechConfig`), on the CPU device;
- a process group (docs/deploy.md): joining it, the leader's side (`Lead`, `lead_load`) and a
  follower's (`follow`);
- the compilation cache (`use_compilation_cache`), the executable cache's folder
  (`executable_cache_dir`), the native kernels (`native_kernels`) and the KV pool's sizing (`longest_row`);
- reading LoRA adapters (`read_lora_adapter`) against the served model.

What the host reads from a checkpoint's files without loading it is `engine.checkpoints`'; the
preparation of a request's inputs, `engine.inputs`'. This module imports JAX.
"""

from pathlib import Path

import jax

from engine.cache_paths import cache_root
from engine.device.kv_sizing import pool_pages, row_capacity
from engine.device.mirrored_runner import follow, lead_load
from engine.device.process_group import Channel, GroupSpec, Lead, Stop, in_group, is_leader, join, leave
from engine.device.runner_api import Report
from engine.engine import Engine, TaskEngine
from engine.engine_config import EngineConfig
from engine.lora.adapter_formats import NEEDED, adapter_weights_file, read_lora_adapter
from engine.lora.peft_adapter import TARGETS, LoraAdapter
from engine.model import kernels
from engine.model.families.whisper import LoadedWhisper, is_whisper_checkpoint, load_whisper
from engine.model.loading.loader import LoadedModel, load_model, with_served_context
from engine.model.model_config import CONTEXT_EXTENSION_KINDS, ModelConfig
from engine.tasks.encode.decoder_embedding import (
    DecoderEmbedding,
    decoder_embedding,
    decoder_embedding_runner,
    is_embedding_decoder,
)
from engine.tasks.encode.encode_task import EncodeTask
from engine.tasks.encode.encoder_model import EncoderRunner, LoadedEncoder, is_encoder_checkpoint, load_encoder
from engine.tasks.transcribe.transcribe_task import SpeechConfig, TranscribeTask

__all__ = [
    # loading a checkpoint
    "CONTEXT_EXTENSION_KINDS",
    "LoadedModel",
    "ModelConfig",
    "Report",
    "load_model",
    "with_served_context",
    # building what serves it
    "DecoderEmbedding",
    "EncodeTask",
    "EncoderRunner",
    "Engine",
    "EngineConfig",
    "LoadedEncoder",
    "TaskEngine",
    "decoder_embedding",
    "decoder_embedding_runner",
    "is_embedding_decoder",
    "is_encoder_checkpoint",
    "load_encoder",
    # a speech model
    "LoadedWhisper",
    "SpeechConfig",
    "TranscribeTask",
    "is_whisper_checkpoint",
    "load_whisper",
    # a process group
    "Channel",
    "GroupSpec",
    "Lead",
    "Stop",
    "follow",
    "in_group",
    "is_leader",
    "join",
    "lead_load",
    "leave",
    # the compilation and executable caches, the kernels and the KV pool
    "executable_cache_dir",
    "longest_row",
    "native_kernels",
    "use_compilation_cache",
    # LoRA adapters
    "NEEDED",
    "TARGETS",
    "LoraAdapter",
    "adapter_weights_file",
    "read_lora_adapter",
]


def use_compilation_cache() -> None:
    """Keep compiled XLA programs on disk, so a restart skips the start-up compile plan it already ran."""
    jax.config.update("jax_compilation_cache_dir", str(cache_root(None) / "xla"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


def executable_cache_dir() -> Path:
    """Where `pooled serve` keeps the serialized executables of every compiled shape
    (EngineConfig.executable_cache_dir, engine/device/executables.py)."""
    return cache_root(None) / "executables"


def native_kernels() -> bool:
    """Builds (where the cache has no library for this machine) and registers the native CPU
    kernels now, so that the start log shows their time apart; whether they are available."""
    return kernels.available()


def longest_row(model: LoadedModel, config: EngineConfig) -> int:
    """The most tokens one row may hold in the KV pool `config` sizes for `model` (the rule `Engine`
    checks its pool by)."""
    return row_capacity(pool_pages(model, config), config.decode_lanes, config.page_size)
