"""`DeviceRunner`: the runner on JAX — the device state and the compiled steps that change it.

It keeps the device state and runs the model's compiled steps (engine/device/step.py) over it,
each part with its job: the KV pages and the page verbs are its `KVPool` (engine/device/kv_pool.py);
the decode lanes — each lane's tables and penalty state, the first-token, decode, burst and verify steps
that draw their tokens — its `DecodeLanes` (engine/device/decode_lanes.py); the LoRA stack its
`AdapterSlots` (engine/device/adapter_slots.py); the vision tower its `ImageEmbeddings`. It runs
the prompts' prefill chunks itself. The shapes it compiles and each step's padding to one are its
`CompiledShapes` (engine/device/compiled_shapes.py). At start-up `compile` runs every shape of the
plan once on padding (the null page, the spare lane), which changes nothing real; with
`EngineConfig.compile_while_serving` only the largest of each kind, and `idle` runs the others,
one a call, while the engine has nothing to do. With `EngineConfig.executable_cache_dir` every
jitted function's executables come from disk where an earlier start stored them
(engine/device/executables.py): on a warm start `compile` loads each shape in a fraction of a
second instead of compiling it for seconds, the deferred ones too where the store holds them, so
only shapes never stored are left to `idle`. What each verb may assume is in
`engine/device/runner_api.py`; all of them run on the engine thread, except `compile`, which runs
on the building thread before the engine thread starts.
"""

import logging
import threading
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Literal

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from engine.device.adapter_slots import AdapterSlots
from engine.device.compile_watch import CompileWatch
from engine.device.compiled_shapes import CompiledShapes
from engine.device.decode_lanes import DecodeLanes, LaneSizes
from engine.device.executables import CachedFunction, ExecutableStore, NotStored, cache_jitted, namespace
from engine.device.executables import supported as executables_supported
from engine.device.image_embeddings import ImageEmbeddings, tower_buckets
from engine.device.kv_pool import KVPool
from engine.device.kv_sizing import kv_dtype, max_context
from engine.device.runner_api import (
    NULL_PAGE,
    PREFILL_ROWS,
    DecodeRow,
    Drawn,
    InsertedRow,
    Pending,
    PrefillChunk,
    PromptLogits,
    PromptScores,
    Report,
)
from engine.device.step import PromptScores as DeviceScores
from engine.device.step import StepFunctions
from engine.engine_config import EngineConfig
from engine.lora.peft_adapter import LoraAdapter
from engine.model.image_tower import PreparedImage
from engine.model.layers.lora import LoraStack
from engine.model.layers.paged_attention import ATTENTION_BLOCK_TOKENS
from engine.model.loading.loader import DTYPES, LoadedModel
from engine.stats import Bucket, HeldArrays

log = logging.getLogger(__name__)


class DeviceRunner:
    """The runner of one loaded model (see `engine.device.runner_api.Runner`)."""

    def __init__(self, model: LoadedModel, config: EngineConfig, pages: int) -> None:
        c = model.config
        self.lanes = config.decode_lanes
        self.page_size = config.page_size
        self.max_context = max_context(model.config, config)
        # The vision tower's parameters are its own call's; the steps get the decoder's alone.
        decoder_params = {name: part for name, part in model.params.items() if name != "vision"}
        param_leaves, params_tree = jax.tree.flatten(decoder_params)
        self._param_leaves: list[jax.Array] = param_leaves
        self.steps = StepFunctions(
            model.family.model(c, DTYPES[model.dtype]), params_tree, config.page_size, PREFILL_ROWS, config.burst_steps
        )
        self.burst_steps = config.burst_steps
        # Placed like the step outputs (replicated on the model's mesh), so the first real step
        # finds the start-up compile instead of compiling again for a different input placement.
        self._replicated = NamedSharding(model.mesh, PartitionSpec())
        self._pool = KVPool(c, pages, config.page_size, kv_dtype(model.dtype, config.kv_cache_dtype), self._replicated)
        self.page_bytes = self._pool.page_bytes
        self._vision = c.vision if config.vision_enabled else None
        self.image_token_id = c.image_token_id if self._vision is not None else None
        tower_sizes = [] if self._vision is None else tower_buckets(self._vision, config.max_image_pixels)
        self._images = None
        if self._vision is not None:
            tower_params = model.params["vision"]
            self._images = ImageEmbeddings(self._vision, DTYPES[model.dtype], tower_params, config.image_cache_images)
        self._shapes = CompiledShapes(config, self.max_context, tower_sizes)
        self.draft_tokens = self._shapes.draft_tokens
        self._compile_while_serving = config.compile_while_serving
        self.adapter_slots, self.adapter_rank = config.max_loras, config.max_lora_rank
        self._adapters: AdapterSlots | None = None
        if self.adapter_slots:
            dtype = DTYPES[model.dtype]
            self._adapters = AdapterSlots(c, self.adapter_slots, self.adapter_rank, dtype, self._replicated)
        sizes = LaneSizes(self.lanes, c.vocab_size, self.max_context, rope_shifts=self._vision is not None)
        self._lanes = DecodeLanes(
            sizes, self.steps, self._param_leaves, self._pool, self._adapters, self._shapes, self._replicated
        )
        self.mask_words = self._lanes.mask_words
        self.executables: ExecutableStore | None = None
        if config.executable_cache_dir and executables_supported():
            self.executables = executable_store(model, config, params_tree)
            owners = {"steps": self.steps, "pool": self._pool, "adapters": self._adapters, "images": self._images}
            cache_jitted({label: owner for label, owner in owners.items() if owner is not None}, self.executables)
        self._buckets: tuple[Bucket, ...] = ()
        self._compiles: CompileWatch | None = None
        self._scored: tuple[jax.Array, DeviceScores] | None = None  # the last scored prefill's logits and scores

    # --- start-up ---------------------------------------------------------------------------

    @property
    def batched_chunk(self) -> int:
        return self._shapes.batched_chunk

    @property
    def scored_ready(self) -> bool:
        return self._shapes.scored_ready

    @property
    def draft_rows(self) -> int:
        return self._shapes.ready_draft_rows

    @property
    def idle_interval(self) -> float | None:
        # Deferred shapes to compile: come back at once; else one process has nothing to do idle.
        return 0.0 if self._shapes.pending else None

    def compile(self, report: Report) -> None:
        started = time.perf_counter()
        plan = self._shapes.plan()
        now = self._shapes.first(plan) if self._compile_while_serving else plan
        for done, bucket in enumerate(now):
            step = f"{bucket.kind} rows={bucket.rows} tokens={bucket.tokens} pages={bucket.pages}"
            report(f"compiling the engine: {step}", done, len(now))
            self._run_bucket(bucket)
        later = self._shapes.defer(plan, now)
        if self.executables is not None and later:
            now = [*now, *self._load_stored(later)]
            later = list(self._shapes.pending)
        done_line = f"done; {len(later)} smaller shapes compile while serving" if later else "done"
        report(f"compiling the engine: {done_line}", len(now), len(now))
        jax.block_until_ready(self._pool.pages)
        self._buckets = tuple(now)
        self._log_compile(len(now), len(later), time.perf_counter() - started)

    def _load_stored(self, deferred: Sequence[Bucket]) -> list[Bucket]:
        """Makes ready the deferred buckets whose executables the store holds (a warm start: each
        loads in a fraction of a second, while under load the engine is never idle to load them
        and every step would be padded to the largest shape); returns them. A bucket that meets an
        executable not stored stops before running it (its earlier calls ran on padding, which
        changes nothing real) and stays deferred."""
        assert self.executables is not None
        ready = []
        self.executables.loading_only = True
        try:
            for bucket in deferred:
                try:
                    self._run_bucket(bucket)
                except NotStored:
                    continue
                ready.append(bucket)
        finally:
            self.executables.loading_only = False
        self._shapes.mark_ready(ready)
        return ready

    def idle(self) -> None:
        """Compiles the next deferred shape (a request that comes meanwhile waits for it)."""
        if not self._shapes.pending:
            return
        bucket = self._shapes.pending[0]
        with self._planned_compiles():
            self._run_bucket(bucket)
            jax.block_until_ready(self._pool.pages)
        self._shapes.mark_ready([bucket])
        self._buckets = (*self._buckets, bucket)

    def pending_buckets(self) -> int:
        return len(self._shapes.pending)

    def _planned_compiles(self) -> AbstractContextManager[None]:
        return self._compiles.planned() if self._compiles is not None else nullcontext()

    def _log_compile(self, ready: int, later: int, seconds: float) -> None:
        store, source = self.executables, ""
        if store is not None:
            source = f" ({store.loaded} executables loaded, {store.compiled} compiled: {store.seconds:.1f} s)"
        rest = f"; {later} more compile while serving" if later else ""
        log.info("shapes: %d ready in %.1f s%s%s", ready, seconds, source, rest)

    def _run_bucket(self, bucket: Bucket) -> None:
        """Runs one bucket on padding (null page, spare lane), which compiles it and changes nothing real.

        Attention's loop over pages runs at least one turn (decode positions start at 1) and a
        prefill's runs two, over one whole block and one partial (each its own branch): on XLA's
        CPU backend the first run of a loop body or of a branch costs more than later runs, and
        that belongs here, not in a request.
        """
        if bucket.kind in ("prefill", "prefill_scored"):
            shape = (bucket.rows, bucket.tokens)
            start = ATTENTION_BLOCK_TOKENS + 1 if self.max_context > ATTENTION_BLOCK_TOKENS + 1 else 1
            tokens, positions = np.zeros(shape, np.int32), np.full(shape, start, np.int32)
            table, last = np.zeros((bucket.rows, bucket.pages), np.int32), np.zeros(bucket.rows, np.int32)
            slots = np.zeros(bucket.rows, np.int32)
            targets = np.zeros(shape, np.int32) if bucket.kind == "prefill_scored" else None
            inputs = (self._param_leaves, self._lora, self._pool.pages, tokens, positions, table, last, slots)
            arguments = (*inputs, targets, *self._chunk_media([], positions))
            if isinstance(self.steps.prefill, CachedFunction) and self.steps.prefill.loaded(*arguments):
                # Loaded, not compiled: running it on padding would only spend a whole chunk's
                # arithmetic (seconds for a 0.5B model's 512 tokens); its first request pays the
                # first run's extra instead.
                return
            written, _, _ = self.steps.prefill(*arguments)
            self._pool.store(written)
        elif bucket.kind == "vision":
            assert self._images is not None
            self._images.run_blank(bucket.tokens)
        elif bucket.kind in ("first_tokens", "decode", "burst", "verify", "reset_lane"):
            self._lanes.run_blank(bucket)
        elif bucket.kind == "load_adapter":
            self.load_adapter(1, None)  # slot 1 is empty at start-up: clearing it changes nothing
        elif bucket.kind == "read_pages":
            self.read_pages([NULL_PAGE])
        elif bucket.kind == "write_pages":
            self.write_pages([NULL_PAGE], [bytes(self.page_bytes)])
        else:
            self.copy_page(NULL_PAGE, NULL_PAGE)

    def buckets(self) -> tuple[Bucket, ...]:
        return self._buckets

    def watch_compiles(self, thread: threading.Thread) -> None:
        """Counts compiles on `thread` (the engine thread) from now on."""
        self._compiles = CompileWatch(thread)

    def compiles_after_startup(self) -> int:
        return 0 if self._compiles is None else self._compiles.count

    def failure_kind(self, error: BaseException) -> Literal["fault", "panicked"]:
        return failure_kind(error)

    def close(self) -> None:
        if self._compiles is not None:
            self._compiles.close()

    def held_arrays(self) -> HeldArrays:
        lora = tuple(jax.tree.leaves(self._lora))
        tower = () if self._images is None else self._images.held_arrays()
        return HeldArrays(tuple(jax.tree.leaves(self._pool.pages)), (*self._param_leaves, *lora, *tower))

    @property
    def _lora(self) -> LoraStack | None:
        """The adapter slots' stack the steps take (None: the engine has none)."""
        return None if self._adapters is None else self._adapters.stack

    # --- prompts ----------------------------------------------------------------------------

    def encode_images(self, images: Sequence[PreparedImage]) -> list[np.ndarray]:
        assert self._images is not None, "images for a runner whose model takes none"
        sizes = self._shapes.ready_sizes("vision")
        return [self._images.embeddings(image, sizes) for image in images]

    def _chunk_media(self, chunks: Sequence[PrefillChunk], positions: np.ndarray) -> tuple[np.ndarray, ...]:
        """A model that takes images: the step's image embeddings [B,T,D] and M-RoPE positions
        [B,T,3] (a text row's are its positions); nothing for a text model."""
        if self._vision is None:
            return ()
        media = np.zeros((*positions.shape, self._vision.out_size), np.float32)
        rope = np.repeat(positions[:, :, None], 3, axis=2)
        for i, chunk in enumerate(chunks):
            length = len(chunk.tokens)
            if chunk.media is not None:
                media[i, :length] = chunk.media
            if chunk.rope is not None:
                rope[i, :length] = chunk.rope
        return media, rope

    def prefill(self, chunks: Sequence[PrefillChunk]) -> PromptLogits:
        """A scored chunk (one whose tokens bring targets) prefills alone, in its own bucket."""
        scored = bool(chunks[0].targets)
        assert not scored or len(chunks) == 1, "a scored chunk prefilled beside others"
        tokens, positions, table, last, slots = self._shapes.prefill_inputs(
            chunks, "prefill_scored" if scored else "prefill"
        )
        targets = None
        if scored:
            targets = np.full(tokens.shape, -1, np.int32)
            targets[0, : len(chunks[0].targets)] = chunks[0].targets
        written, logits, scores = self.steps.prefill(
            self._param_leaves,
            self._lora,
            self._pool.pages,
            tokens,
            positions,
            table,
            last,
            slots,
            targets,
            *self._chunk_media(chunks, positions),
        )
        self._pool.store(written)
        if scores is not None:
            self._scored = (logits, scores)
        return PromptLogits(logits)

    def prompt_scores(self, logits: PromptLogits) -> PromptScores:
        assert self._scored is not None and self._scored[0] is logits, "not the last scored prefill's logits"
        scores = self._scored[1]
        return PromptScores(
            *(np.asarray(field) for field in (scores.logprobs, scores.ranks, scores.top_ids, scores.top_logprobs))
        )

    # --- lanes and pages ---------------------------------------------------------------------

    def insert(self, lane: int, row: InsertedRow) -> None:
        self._lanes.insert(lane, row)

    def add_page(self, lane: int, index: int, page: int) -> None:
        self._lanes.add_page(lane, index, page)

    def copy_page(self, source: int, target: int) -> None:
        self._pool.copy_page(source, target)

    def read_pages(self, pages: Sequence[int]) -> list[bytes]:
        return self._pool.read_pages(pages)

    def write_pages(self, pages: Sequence[int], contents: Sequence[bytes]) -> None:
        self._pool.write_pages(pages, contents)

    def load_adapter(self, slot: int, adapter: LoraAdapter | None) -> None:
        assert self._adapters is not None, "no adapter slots"
        self._adapters.load(slot, adapter)

    # --- decode -----------------------------------------------------------------------------

    def first_tokens(self, logits: PromptLogits, index: int, rows: Sequence[DecodeRow]) -> Drawn:
        return self._lanes.first_tokens(logits, index, rows)

    def generate(self, rows: Sequence[DecodeRow], chained: Pending | None = None, burst: bool = False) -> Pending:
        return self._lanes.generate(rows, chained, burst)

    def take(self, step: Pending) -> Drawn:
        return self._lanes.take(step)


def failure_kind(error: BaseException) -> Literal["fault", "panicked"]:
    """A device/XLA runtime error is a fault; anything else that kills the engine thread is a panic."""
    return "fault" if isinstance(error, jax.errors.JaxRuntimeError) else "panicked"


def executable_store(model: LoadedModel, config: EngineConfig, params_tree: object) -> ExecutableStore:
    """The executable cache of `model`'s programs under `config`: its namespace names what changes
    them besides their arguments' shapes (engine/device/executables.py adds the code and the platform)."""
    graph_config = replace(config, executable_cache_dir="", prefix_disk_dir="", compile_while_serving=False)
    identity = {
        "checkpoint": model.fingerprint,
        "dtype": model.dtype,
        "quantization": model.quantization,
        "model": model.config,
        "params": params_tree,
        "engine": graph_config,
        "prefill_rows": PREFILL_ROWS,
    }
    return ExecutableStore(Path(config.executable_cache_dir), namespace(identity))
