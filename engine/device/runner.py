"""`DeviceRunner`: the runner on JAX — the device state and the compiled steps that change it.

It keeps the device state (the KV pages, each lane's penalty state, the LoRA stack) and runs the
steps over it: the host tables a step reads are its `LaneTables` (engine/device/lane_tables.py:
each lane's block table, sampling parameters and adapter slot), the shapes it compiles and each
step's padding to one are its `CompiledShapes` (engine/device/compiled_shapes.py). At start-up
`compile` runs every shape of the plan once on padding (the null page, the spare lane), which
changes nothing real; with `EngineConfig.compile_while_serving` only the largest of each kind,
and `idle` runs the others, one a call, while the engine has nothing to do. What each verb may
assume is in `engine/device/runner_api.py`; all of them run on the engine thread, except
`compile`, which runs on the building thread before the engine thread starts.

With adapter slots (`EngineConfig.max_loras`), the device holds every slot's LoRA pairs in one
stack (engine/model/layers/lora.py); each lane and each prefill chunk names its slot, and
`load_adapter` writes a slot's columns between steps through one compiled function.
"""

import math
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from engine.device.compile_watch import CompileWatch
from engine.device.compiled_shapes import PAGE_TRANSFER_GROUP, CompiledShapes, page_group
from engine.device.image_embeddings import ImageEmbeddings, tower_buckets
from engine.device.kv_sizing import kv_dtype, max_context
from engine.device.lane_tables import LaneTables
from engine.device.runner_api import (
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
from engine.device.sampling import Sampled
from engine.device.step import LaneState, RowParams, StepFunctions
from engine.device.step import PromptScores as DeviceScores
from engine.engine_config import EngineConfig
from engine.lora.peft_adapter import LoraAdapter
from engine.model.checkpoint.loader import DTYPES, LoadedModel
from engine.model.layers.kv_cache import init_paged_caches
from engine.model.layers.lora import LoraStack, stack_adapters
from engine.model.layers.paged_attention import ATTENTION_BLOCK_TOKENS
from engine.serving.kv_pages import NULL_PAGE
from engine.stats import Bucket, HeldArrays
from engine.vision.images import PreparedImage


@dataclass(frozen=True)
class _Step:
    """A dispatched decode step: its sampled tokens on the device (`width` per row, row-major),
    how many of each row's a verify step takes (None: one each), and whether any row wants logprobs."""

    sampled: Sampled
    logprobs: bool
    width: int = 1
    taken: jax.Array | None = None


class DeviceRunner:
    """The runner of one loaded model (see `engine.device.runner_api.Runner`)."""

    def __init__(self, model: LoadedModel, config: EngineConfig, pages: int) -> None:
        c = model.config
        self.lanes = config.decode_lanes
        self.page_size = config.page_size
        self.max_context = max_context(model.config, config)
        self._vocab_size = c.vocab_size
        # The vision tower's parameters are its own call's; the steps get the decoder's alone.
        decoder_params = {name: part for name, part in model.params.items() if name != "vision"}
        param_leaves, params_tree = jax.tree.flatten(decoder_params)
        self._param_leaves: list[jax.Array] = param_leaves
        self.steps = StepFunctions(
            model.family.model(c, DTYPES[model.dtype]), params_tree, config.page_size, PREFILL_ROWS
        )
        # Placed like the step outputs (replicated on the model's mesh), so the first real step
        # finds the start-up compile instead of compiling again for a different input placement.
        self._replicated = NamedSharding(model.mesh, PartitionSpec())
        kv_pool = init_paged_caches(c, pages, config.page_size, kv_dtype(model.dtype, config.kv_cache_dtype))
        self._kv = jax.device_put(kv_pool, self._replicated)
        spare = self.lanes + 1
        self._lane_state = jax.device_put(
            LaneState(jnp.zeros((spare, c.vocab_size), bool), jnp.zeros((spare, c.vocab_size), jnp.int32)),
            self._replicated,
        )
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
        # A jitted identity places a host table as a step's argument would be placed: replicated
        # over the model's mesh, which in a process group spans processes (jax.device_put of a
        # host array to devices of other processes is refused).
        self._tables = LaneTables(
            self.lanes, self._shapes.width, c.vocab_size, jax.jit(lambda table: table, out_shardings=self._replicated)
        )
        self.mask_words = self._tables.mask_words
        self.adapter_slots, self.adapter_rank = config.max_loras, config.max_lora_rank
        self._model_config, self._dtype = c, DTYPES[model.dtype]
        self._lora: LoraStack | None = None
        if self.adapter_slots:
            empty = stack_adapters(c, [None] * self.adapter_slots, self.adapter_rank, self._dtype)
            self._lora = jax.device_put(empty, self._replicated)
        self._buckets: tuple[Bucket, ...] = ()
        self._compiles: CompileWatch | None = None
        self._scored: tuple[jax.Array, DeviceScores] | None = None  # the last scored prefill's logits and scores
        pool = self._kv[0].k
        self._page_shape = (c.num_layers, 2, pool.shape[0], config.page_size, pool.shape[3])
        self._page_dtype = np.dtype(pool.dtype)
        self.page_bytes = math.prod(self._page_shape) * self._page_dtype.itemsize

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
        plan = self._shapes.plan()
        now = self._shapes.first(plan) if self._compile_while_serving else plan
        later = self._shapes.defer(plan, now)
        for done, bucket in enumerate(now):
            step = f"{bucket.kind} rows={bucket.rows} tokens={bucket.tokens} pages={bucket.pages}"
            report(f"compiling the engine: {step}", done, len(now))
            self._run_bucket(bucket)
        done_line = f"done; {len(later)} smaller shapes compile while serving" if later else "done"
        report(f"compiling the engine: {done_line}", len(now), len(now))
        jax.block_until_ready(self._kv)
        self._buckets = tuple(now)

    def idle(self) -> None:
        """Compiles the next deferred shape (a request that comes meanwhile waits for it)."""
        if not self._shapes.pending:
            return
        bucket = self._shapes.pending[0]
        with self._planned_compiles():
            self._run_bucket(bucket)
            jax.block_until_ready(self._kv)
        self._shapes.mark_ready([bucket])
        self._buckets = (*self._buckets, bucket)

    def pending_buckets(self) -> int:
        return len(self._shapes.pending)

    def _planned_compiles(self) -> AbstractContextManager[None]:
        return self._compiles.planned() if self._compiles is not None else nullcontext()

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
            inputs = (self._param_leaves, self._lora, self._kv, tokens, positions, table, last, slots)
            media = self._chunk_media([], positions)
            if bucket.kind == "prefill":
                written, _ = self.steps.prefill(*inputs, *media)
            else:
                written, _, _ = self.steps.prefill_scored(*inputs, np.zeros(shape, np.int32), *media)
            self._kv = self.steps.write(self._kv, written)
        elif bucket.kind == "vision":
            assert self._images is not None
            self._images.run_blank(bucket.tokens)
        elif bucket.kind == "first_tokens":
            lane_ids = np.full(bucket.rows, self.lanes, np.int32)
            logits = jax.device_put(jnp.zeros((PREFILL_ROWS, self._vocab_size), jnp.float32), self._replicated)
            self._lane_state, _ = self.steps.first_tokens(
                self._lane_state, logits, np.int32(0), lane_ids, self._tables.params()
            )
        elif bucket.kind == "decode":
            lane_ids = np.full(bucket.rows, self.lanes, np.int32)
            tokens = jax.device_put(np.zeros(bucket.rows, np.int32), self._replicated)
            shifts = self._rope_shifts([], bucket.rows)
            self._decode(tokens, np.ones(bucket.rows, np.int32), lane_ids, self._tables.params(), *shifts)
        elif bucket.kind == "verify":
            lane_ids = np.full(bucket.rows, self.lanes, np.int32)
            shape = (bucket.rows, bucket.tokens)
            tokens, positions = np.zeros(shape, np.int32), np.ones(shape, np.int32)
            drafts = np.full(bucket.rows, self.draft_tokens, np.int32)
            self._verify(
                tokens, positions, drafts, lane_ids, self._tables.params(), *self._rope_shifts([], bucket.rows)
            )
        elif bucket.kind == "reset_lane":
            self._reset_lane(self.lanes, [], [])
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
        lora = tuple(jax.tree.leaves(self._lora)) if self._lora is not None else ()
        tower = () if self._images is None else self._images.held_arrays()
        return HeldArrays(tuple(jax.tree.leaves(self._kv)), (*self._param_leaves, *lora, *tower))

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
        if chunks[0].targets:
            return self._prefill_scored(chunks)
        tokens, positions, table, last, slots = self._shapes.prefill_inputs(chunks)
        written, logits = self.steps.prefill(
            self._param_leaves,
            self._lora,
            self._kv,
            tokens,
            positions,
            table,
            last,
            slots,
            *self._chunk_media(chunks, positions),
        )
        self._kv = self.steps.write(self._kv, written)
        return PromptLogits(logits)

    def _prefill_scored(self, chunks: Sequence[PrefillChunk]) -> PromptLogits:
        assert len(chunks) == 1, "a scored chunk prefilled beside others"
        tokens, positions, table, last, slots = self._shapes.prefill_inputs(chunks, "prefill_scored")
        targets = np.full(tokens.shape, -1, np.int32)
        targets[0, : len(chunks[0].targets)] = chunks[0].targets
        written, logits, scores = self.steps.prefill_scored(
            self._param_leaves,
            self._lora,
            self._kv,
            tokens,
            positions,
            table,
            last,
            slots,
            targets,
            *self._chunk_media(chunks, positions),
        )
        self._kv = self.steps.write(self._kv, written)
        self._scored = (logits, scores)
        return PromptLogits(logits)

    def prompt_scores(self, logits: PromptLogits) -> PromptScores:
        assert self._scored is not None and self._scored[0] is logits, "not the last scored prefill's logits"
        scores = self._scored[1]
        return PromptScores(
            *(np.asarray(field) for field in (scores.logprobs, scores.ranks, scores.top_ids, scores.top_logprobs))
        )

    def insert(self, lane: int, row: InsertedRow) -> None:
        self._tables.insert(lane, row)
        if row.sampling.penalised:
            self._reset_lane(lane, row.prompt, row.output)

    def add_page(self, lane: int, index: int, page: int) -> None:
        self._tables.add_page(lane, index, page)

    def copy_page(self, source: int, target: int) -> None:
        self._kv = self.steps.copy_page(self._kv, np.int32(source), np.int32(target))

    def load_adapter(self, slot: int, adapter: LoraAdapter | None) -> None:
        assert self._lora is not None and 1 <= slot <= self.adapter_slots, "no such adapter slot"
        part = stack_adapters(self._model_config, [adapter], self.adapter_rank, self._dtype)
        first = np.int32((slot - 1) * self.adapter_rank)
        self._lora = self.steps.set_slot(self._lora, first, jax.device_put(part, self._replicated))

    def read_pages(self, pages: Sequence[int]) -> list[bytes]:
        contents = []
        for start in range(0, len(pages), PAGE_TRANSFER_GROUP):
            group = page_group(pages[start : start + PAGE_TRANSFER_GROUP])
            read = np.asarray(self.steps.read_pages(self._kv, group))
            contents += [page.tobytes() for page in read[: min(PAGE_TRANSFER_GROUP, len(pages) - start)]]
        return contents

    def write_pages(self, pages: Sequence[int], contents: Sequence[bytes]) -> None:
        for start in range(0, len(pages), PAGE_TRANSFER_GROUP):
            chunk = contents[start : start + PAGE_TRANSFER_GROUP]
            # Padding entries write zeros into the null page, which no row reads as a real page.
            data = np.zeros((PAGE_TRANSFER_GROUP, *self._page_shape), self._page_dtype)
            for i, content in enumerate(chunk):
                data[i] = np.frombuffer(content, self._page_dtype).reshape(self._page_shape)
            group = page_group(pages[start : start + PAGE_TRANSFER_GROUP])
            self._kv = self.steps.write_pages(self._kv, group, jax.device_put(data, self._replicated))

    def first_tokens(self, logits: PromptLogits, index: int, rows: Sequence[DecodeRow]) -> Drawn:
        lane_ids = self._tables.lane_ids(rows, self._shapes.ready_sizes("first_tokens"))
        params = self._tables.params()
        self._lane_state, sampled = self.steps.first_tokens(self._lane_state, logits, np.int32(index), lane_ids, params)
        return self.take(Pending(_Step(sampled, self._tables.logprobs(lane_ids))))

    # --- decode -----------------------------------------------------------------------------

    def generate(self, rows: Sequence[DecodeRow], chained: Pending | None = None) -> Pending:
        if any(row.draft for row in rows):
            assert chained is None, "a step with drafts chained on a pending step"
            return self._generate_verifying(rows)
        lane_ids = self._tables.lane_ids(rows, self._shapes.ready_sizes("decode"))
        positions = np.zeros(len(lane_ids), np.int32)
        positions[: len(rows)] = [row.position for row in rows]
        if chained is None:
            host_tokens = np.zeros(len(lane_ids), np.int32)
            host_tokens[: len(rows)] = [row.token for row in rows]
            tokens = jax.device_put(host_tokens, self._replicated)
        else:
            tokens = _step(chained).sampled.token
        params = self._tables.params()
        shifts = self._rope_shifts(rows, len(lane_ids))
        sampled = self._decode(tokens, positions, lane_ids, params, *shifts)
        return Pending(_Step(sampled, self._tables.logprobs(lane_ids)))

    def _rope_shifts(self, rows: Sequence[DecodeRow], bucket: int) -> tuple[np.ndarray, ...]:
        """A model that takes images: each row's M-RoPE shift, padded to the step's rows."""
        if self._vision is None:
            return ()
        shifts = np.zeros(bucket, np.int32)
        shifts[: len(rows)] = [row.rope_shift for row in rows]
        return (shifts,)

    def _generate_verifying(self, rows: Sequence[DecodeRow]) -> Pending:
        """A step over each row's token and its draft (positions after it), padded to a row
        bucket of steps with drafts."""
        lane_ids = self._tables.lane_ids(rows, self._shapes.ready_sizes("verify"))
        tokens, positions, drafts = self._shapes.verify_inputs(rows, len(lane_ids))
        params = self._tables.params()
        sampled, taken = self._verify(
            tokens, positions, drafts, lane_ids, params, *self._rope_shifts(rows, len(lane_ids))
        )
        return Pending(_Step(sampled, self._tables.logprobs(lane_ids), self.draft_tokens + 1, taken))

    def _verify(
        self,
        tokens: np.ndarray,
        positions: np.ndarray,
        drafts: np.ndarray,
        lane_ids: np.ndarray,
        params: RowParams,
        *shifts: np.ndarray,
    ) -> tuple[Sampled, jax.Array]:
        sampled, taken = self._run_step(self.steps.verify, tokens, positions, lane_ids, params, drafts, *shifts)
        return sampled, taken

    def take(self, step: Pending) -> Drawn:
        sampled, width = _step(step).sampled, _step(step).width
        chosen = np.asarray(sampled.token).reshape(-1, width)
        taken = np.ones(len(chosen), np.int32) if _step(step).taken is None else np.asarray(_step(step).taken)
        if not _step(step).logprobs:
            return Drawn(chosen, taken, None)
        top = sampled.top_ids.shape[-1]
        return Drawn(
            chosen,
            taken,
            (
                np.asarray(sampled.logprob).reshape(-1, width),
                np.asarray(sampled.top_ids).reshape(-1, width, top),
                np.asarray(sampled.top_logprobs).reshape(-1, width, top),
                np.asarray(sampled.scored).reshape(-1, width, sampled.scored.shape[-1]),
            ),
        )

    def _decode(
        self, tokens: jax.Array, positions: np.ndarray, lane_ids: np.ndarray, params: RowParams, *shifts: np.ndarray
    ) -> Sampled:
        """`tokens` are on the device, placed like a step's sampled tokens: a step started from host
        tokens and one chained on the last step's run the same compiled program. `shifts`: the
        rows' M-RoPE shifts, for a model that takes images."""
        (sampled,) = self._run_step(self.steps.decode, tokens, positions, lane_ids, params, *shifts)
        return sampled

    def _run_step(
        self,
        step: Callable[..., tuple[Any, ...]],
        tokens: jax.Array | np.ndarray,
        positions: np.ndarray,
        lane_ids: np.ndarray,
        params: RowParams,
        *extra: np.ndarray,
    ) -> list[Any]:
        """Runs a decode-like step function over the lanes' block tables and writes its keys and
        values into the pool; returns what it returns after them and the lanes' penalty state."""
        written, self._lane_state, *results = step(
            self._param_leaves,
            self._lora,
            self._kv,
            self._lane_state,
            tokens,
            positions,
            self._tables.block_tables[lane_ids],
            lane_ids,
            params,
            None if self._lora is None else self._tables.adapters[lane_ids],
            *extra,
        )
        self._kv = self.steps.write(self._kv, written)
        return results

    # --- lane state -------------------------------------------------------------------------

    def _reset_lane(self, lane: int, prompt: Sequence[int], output: Sequence[int]) -> None:
        padded_prompt = np.full(self.max_context, -1, np.int32)
        padded_output = np.full(self.max_context, -1, np.int32)
        padded_prompt[: len(prompt)] = prompt
        padded_output[: len(output)] = output
        self._lane_state = self.steps.reset_lane(self._lane_state, np.int32(lane), padded_prompt, padded_output)


def failure_kind(error: BaseException) -> Literal["fault", "panicked"]:
    """A device/XLA runtime error is a fault; anything else that kills the engine thread is a panic."""
    return "fault" if isinstance(error, jax.errors.JaxRuntimeError) else "panicked"


def _step(pending: Pending) -> _Step:
    assert isinstance(pending, _Step), "a pending step of another runner"
    return pending
