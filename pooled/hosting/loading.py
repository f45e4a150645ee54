"""The load step that `ModelHost` runs on its thread: checkpoint → model, tokenizer, template, engine.

The weight dtype `auto` resolves per backend: float32 on the CPU (XLA's CPU
backend ran the batch-1 decode step several times slower with bf16 weights; see
docs/BENCHMARKS.md) and bfloat16 on accelerators.

The start log says where a start's time goes, one info line a phase: the imports (the process's
time before the load), the weights (read and prepared), the native kernels, the shapes (loaded from
the executable cache or compiled: engine/device/runner.py's line) and the whole start to ready.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import jax

from engine.api import AdapterRefused
from engine.errors import CheckpointError
from engine.front import (
    DecoderEmbedding,
    EncoderRunner,
    EncodeTask,
    Engine,
    EngineConfig,
    Lead,
    LoadedEncoder,
    LoadedModel,
    Report,
    TaskEngine,
    TranscribeTask,
    decoder_embedding,
    decoder_embedding_runner,
    executable_cache_dir,
    in_group,
    is_embedding_decoder,
    is_encoder_checkpoint,
    is_whisper_checkpoint,
    lead_load,
    load_encoder,
    load_model,
    native_kernels,
    use_compilation_cache,
)
from handlers.context import EncoderKind, EncoderService, FailedPart, FailedSetting
from pooled.configuration.context_policy import ServedContext, served_context
from pooled.configuration.model_sampling import checkpoint_defaults
from pooled.configuration.setting_sources import flag_name
from pooled.configuration.settings import Settings
from pooled.hosting.adapter_admin import EngineAdapters
from pooled.hosting.lora_policy import LoraPolicy
from pooled.hosting.model_host import Loaded, first_line
from pooled.hosting.model_paths import projector_for
from pooled.hosting.speech_loading import load_speech, load_speech_serving
from pooled.models_folder.model_ids import model_id_for
from text import ChatTemplate, Tokenizer
from text.encoder_inputs import EncoderTokenizer

log = logging.getLogger(__name__)


def resolve_dtype(requested: str, backend: str) -> str:
    if requested != "auto":
        return requested
    return "float32" if backend == "cpu" else "bfloat16"


def _devices(count: int | None) -> list[jax.Device]:
    devices = jax.devices()
    if count is None:
        return devices
    if not 1 <= count <= len(devices):
        raise CheckpointError(f"--devices {count} asked for, but this machine has {len(devices)}")
    return devices[:count]


@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint, before its engine is built."""

    model: LoadedModel
    tokenizer: Tokenizer
    chat_template: ChatTemplate | None


def process_seconds() -> float | None:
    """Seconds since this process started (None where /proc does not say)."""
    try:
        started = int(Path("/proc/self/stat").read_text().rpartition(")")[2].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return uptime - started / os.sysconf("SC_CLK_TCK")


def engine_config(settings: Settings, checkpoint: Checkpoint) -> EngineConfig:
    """The engine's configuration; a process group's (whose followers build the same runner on
    other hosts) keeps no executable cache."""
    return EngineConfig(
        decode_lanes=settings.decode_lanes,
        max_queue=settings.max_queue,
        kv_cache_dtype=settings.kv_cache_dtype,
        page_size=settings.page_size,
        prefill_chunk=settings.prefill_chunk,
        kv_memory_bytes=settings.kv_memory or 0,  # 0: the engine sizes the pool
        stop_token_ids=checkpoint.tokenizer.stop_token_ids,
        draft_tokens=settings.draft_tokens,
        draft_rows=settings.draft_rows,
        burst_steps=settings.burst_steps,
        burst_max_step_ms=settings.burst_max_step_ms,
        prefix_disk_dir=settings.prefix_cache_dir,
        prefix_disk_bytes=settings.prefix_cache_disk,
        max_loras=settings.max_loras,
        max_lora_rank=settings.max_lora_rank,
        compile_while_serving=settings.compile_while_serving,
        vision_enabled=settings.vision_enabled,
        max_image_pixels=settings.max_image_pixels,
        image_cache_images=settings.image_cache,
        executable_cache_dir="" if in_group() else str(executable_cache_dir()),
    )


def lora_policy(settings: Settings) -> LoraPolicy:
    return LoraPolicy(
        roots=tuple(Path(root) for root in settings.lora_root),
        max_rank=settings.max_lora_rank,
        max_bytes=settings.lora_max_bytes,
        digests=dict(settings.lora_sha256),
    )


def load_start_adapters(adapters: EngineAdapters, settings: Settings) -> None:
    """The `--lora NAME=PATH` adapters, through the trust policy, into the engine's slots."""
    for name, path in settings.lora:
        try:
            adapters.load_at_start(name, path)
        except AdapterRefused as error:
            hint = " (set --max-loras)" if error.code == "lora_disabled" else ""
            raise CheckpointError(f"--lora {name}: {error.message}{hint}") from error


def load_checkpoint(path: Path, settings: Settings) -> Checkpoint:
    model = load_model(
        path,
        dtype=resolve_dtype(settings.dtype, jax.default_backend()),
        devices=_devices(settings.devices),
        context_length=settings.ctx,
        rope_scaling=settings.rope_scaling,
        quantization=settings.quantization,
        prepared_cache=not in_group(),
        mmproj=projector_for(path, settings),
    )
    tokenizer = Tokenizer.for_checkpoint(model.source, model.tokenizer_dir)
    template = ChatTemplate(model.chat_template, tokenizer) if model.chat_template else None
    return Checkpoint(model, tokenizer, template)


@dataclass(frozen=True)
class ServedEncoder:
    """An embedding or rerank model: what requests see of it, and its runner on the engine thread."""

    face: EncoderService  # what requests see of it
    runner: EncoderRunner
    quantization: str = "none"  # what a decoder's --quantization resolved to


@dataclass(frozen=True)
class BesideModels:
    """The encoders served beside the model, by the name requests use, and those that did not load."""

    encoders: dict[str, ServedEncoder]
    failed: tuple[FailedPart, ...]


def load_encoders(settings: Settings, report: Report) -> BesideModels:
    """The encoders served beside the model (`--embedding-model`, `--rerank-model`). One that does
    not load (one of the wrong kind: a CheckpointError saying which flag takes it) is a failed
    part: the routes it would serve answer 503 naming why, and the chat model serves."""
    encoders: dict[str, ServedEncoder] = {}
    failed: list[FailedPart] = []
    named: tuple[tuple[FailedSetting, EncoderKind, str | None], ...] = (
        ("embedding_model", "embedding", settings.embedding_model),
        ("rerank_model", "rerank", settings.rerank_model),
    )
    for setting, kind, value in named:
        if value is None:
            continue
        flag = flag_name(setting)
        path = Path(value).expanduser()
        report(f"loading {flag} {value}", 0, 1)
        try:
            served = load_served_encoder(path, settings)
            if served.face.kind != kind:
                other = "--rerank-model" if served.face.kind == "rerank" else "--embedding-model"
                raise CheckpointError(f"{flag} {value} is a {served.face.kind} model: give it as {other}")
        except Exception as error:  # whatever went wrong, it is this part's failure, not the model's
            reason = first_line(error) if isinstance(error, CheckpointError) else f"{error!r}".splitlines()[0]
            log.error("%s %s did not load, its routes answer 503: %s", flag, value, reason)
            failed.append(FailedPart(kind, setting, str(path), reason))
            continue
        encoders[model_id_for(path)] = served
    return BesideModels(encoders, tuple(failed))


def load_served_encoder(path: Path, settings: Settings) -> ServedEncoder:
    """An encoder checkpoint, or a decoder that declares itself an embedding model, with its runner."""
    if is_embedding_decoder(path):
        return decoder_embedder(load_checkpoint(path, settings), settings)
    encoder = load_encoder(path)
    face = encoder_service(encoder, EncoderTokenizer(encoder.tokenizer, encoder.token_types))
    return ServedEncoder(face, EncoderRunner.for_encoder(encoder, settings.encoder_batch_tokens))


def decoder_embedder(checkpoint: Checkpoint, settings: Settings) -> ServedEncoder:
    """A decoder's embedding pass (engine/tasks/encode/decoder_embedding.py) over the checkpoint's own weights."""
    model = checkpoint.model
    embedding = decoder_embedding(model, settings.embedding_max_tokens)
    runner = decoder_embedding_runner(model, embedding, settings.encoder_batch_tokens)
    face = encoder_service(embedding, EncoderTokenizer.of(checkpoint.tokenizer, embedding.token_types))
    return ServedEncoder(face, runner, model.quantization)


def encoder_service(model: LoadedEncoder | DecoderEmbedding, inputs: EncoderTokenizer) -> EncoderService:
    return EncoderService(model.kind, model.dimensions, model.max_tokens, model.matryoshka, model.normalize, inputs)


@dataclass(frozen=True)
class GroupLoad:
    """What a process group's follower needs to load the model its leader loads."""

    path: Path
    settings: Settings


def load_generation(path: Path, settings: Settings) -> tuple[Checkpoint, EngineConfig, ServedContext]:
    """A chat model's checkpoint, its engine configuration and the context it serves."""
    checkpoint = load_checkpoint(path, settings)
    config = engine_config(settings, checkpoint)
    return checkpoint, config, served_context(checkpoint.model, settings, config)


def follower_model(spec: GroupLoad) -> LoadedModel:
    """A follower's copy of the leader's model (`engine.front.follow`)."""
    return load_generation(spec.path, spec.settings)[2].model


def check_group_serving(path: Path, settings: Settings) -> None:
    """What a process group does not serve: an embedding pass over a decoder's weights (its
    steps would run on the leader alone, over devices of every process) and an encoder as the model."""
    if is_encoder_checkpoint(path) or is_embedding_decoder(path):
        raise CheckpointError(f"{path} is an embedding or rerank model: a process group serves a chat model")
    if settings.embeddings:
        raise CheckpointError("--embeddings is not served by a process group; give --embedding-model an encoder")
    if settings.embedding_model and is_embedding_decoder(Path(settings.embedding_model).expanduser()):
        raise CheckpointError("--embedding-model names a decoder: a process group serves encoders beside its model")


def load_serving(
    path: Path, settings: Settings, report: Callable[[str, int, int], None], group: Lead | None = None
) -> Loaded:
    """The model at `path`, served; with `group`, led over a process group (engine/device/process_group.py)."""
    use_compilation_cache()
    since_start = process_seconds()
    if since_start is not None:
        log.info("start: the load begins %.1f s after the process started (imports, settings)", since_start)
    started = time.perf_counter()
    native_kernels()
    log.info("start: native kernels ready in %.1f s", time.perf_counter() - started)
    report("loading weights", 0, 1)
    weights_started = time.perf_counter()
    if group is not None:
        check_group_serving(path, settings)
        spec = GroupLoad(path, settings)
        checkpoint, config, context = lead_load(group.channel, spec, lambda: load_generation(path, settings))
    elif is_encoder_checkpoint(path) or is_embedding_decoder(path):
        return load_encoder_serving(path, settings, report)
    elif is_whisper_checkpoint(path):
        return load_speech_serving(path, settings, report)
    else:
        checkpoint, config, context = load_generation(path, settings)
    log.info("start: weights read and prepared in %.1f s", time.perf_counter() - weights_started)
    recommended = checkpoint_defaults(path)
    beside = load_encoders(settings, report)  # an encoder's steps run on this process's first device alone
    encoders = beside.encoders
    if settings.embeddings:
        encoders[model_id_for(path)] = decoder_embedder(checkpoint, settings)
    speech = load_speech(settings, report)  # its steps run on this process's CPU
    tasks: list[EncodeTask | TranscribeTask] = []
    if encoders:
        tasks.append(EncodeTask({name: encoder.runner for name, encoder in encoders.items()}))
    if speech.runner is not None:
        tasks.append(speech.runner)
    built = time.perf_counter()
    engine = Engine.build(context.model, config, report, tasks, group)
    log.info("start: engine built in %.1f s (its KV pool and shapes)", time.perf_counter() - built)
    adapters = EngineAdapters(engine, context.model.config, lora_policy(settings))
    try:
        load_start_adapters(adapters, settings)
    except CheckpointError:
        engine.shutdown()
        raise
    log.info("start: ready, the load took %.1f s", time.perf_counter() - started)
    return Loaded(
        engine.max_context,
        context.trained,
        context.rope_scaling,
        checkpoint.model.quantization,
        checkpoint.tokenizer,
        checkpoint.chat_template,
        engine,
        {name: encoder.face for name, encoder in encoders.items()},
        adapters=adapters,
        failed_parts=beside.failed + speech.failed,
        speech=speech.face,
        weight_formats=checkpoint.model.weight_formats,
        checkpoint_defaults=recommended,
    )


def load_encoder_serving(path: Path, settings: Settings, report: Callable[[str, int, int], None]) -> Loaded:
    """An encoder, or a decoder that declares itself an embedding model, as the model itself: its
    own engine thread, its routes only (generation is a 400)."""
    if settings.embedding_model or settings.rerank_model:
        raise CheckpointError(f"{path} is an encoder: --embedding-model and --rerank-model go beside a chat model")
    served = load_served_encoder(path, settings)
    tokenizer = Tokenizer(served.face.inputs.tokenizer, bos_token_id=None, eos_token_ids=())
    name, face = model_id_for(path), served.face
    speech = load_speech(settings, report)
    tasks: list[EncodeTask | TranscribeTask] = [EncodeTask({name: served.runner})]
    if speech.runner is not None:
        tasks.append(speech.runner)
    engine = TaskEngine(tasks, face.max_tokens, settings.max_queue, report)
    return Loaded(
        face.max_tokens,
        face.max_tokens,
        None,
        served.quantization,
        tokenizer,
        None,
        engine,
        {name: face},
        face.kind,
        failed_parts=speech.failed,
        speech=speech.face,
    )
