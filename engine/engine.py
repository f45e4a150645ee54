"""The serving engines, each a front door (the `ServedEngine` of engine/api.py) over one intake and
one engine thread. `Engine` generates in lanes, assembled from a runner, a KV page pool, an intake
and a scheduler, and serves the task runners it is given beside (engine/tasks/task_registry.py);
`TaskEngine` serves task runners alone (an embedding or rerank model as `--model`): no lanes, no
KV pool, generation refused on its face.

Request path, after JetStream's orchestrator: a handler calls `submit(request, sink)` on any
thread with any task's request. A request invalid on its face, or of a task the engine does not
serve, is refused there (`RequestRefused`), a full queue raises `QueueFull`, a draining or dead
engine `EngineUnavailable`; otherwise the request joins the intake and the engine thread
(`engine/serving/scheduler.py`) is woken. The engine thread alone schedules, drives the runner
(`engine/device/runner.py`: the device) and the task runners, and calls the request's sink with
each event.

LoRA adapters (engine/serving/adapter_table.py) are loaded and unloaded by jobs the engine thread runs
between steps; a request names one by `adapter`.

Threads: handler threads call `submit`, `cancel`, `tasks`, `stats`, `drain`, `wait_idle`, `load_adapter`,
`unload_adapter` and `set_max_queue`; they take the intake's (or the adapter table's) lock briefly and never wait
on the device. `build` and `shutdown` run on the thread that
owns the engine (the load thread, the server's shutdown).
"""

import logging
import math
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any

import jax

from engine.api import Failed, GenerationRequest, ServedAdapter, Vision
from engine.device.kv_sizing import kv_dtype, pool_pages, row_capacity
from engine.device.mirrored_runner import LeaderRunner
from engine.device.process_group import Build, Lead
from engine.device.runner import DeviceRunner
from engine.device.runner_api import Report, Runner
from engine.engine_config import EngineConfig
from engine.lora.peft_adapter import LoraAdapter
from engine.model.families.qwen2_vl.image_processing import served_rules
from engine.model.loading.loader import LoadedModel
from engine.serving.adapter_table import AdapterTable
from engine.serving.admission import admit
from engine.serving.intake_front import GENERATE, IntakeFront
from engine.serving.kv_pages import PagePool
from engine.serving.prefix_disk import PrefixDisk, namespace_digest
from engine.serving.rows import Sink
from engine.serving.scheduler import Scheduler
from engine.stats import Bucket, HeldArrays
from engine.tasks.task_registry import TaskRunner

log = logging.getLogger(__name__)


class Engine(IntakeFront):
    """One engine thread, one queue: generation in lanes and `tasks` beside. submit/cancel/stats are
    thread-safe and never block on the device."""

    def __init__(
        self,
        runner: Runner,
        pages: int,
        config: EngineConfig,
        eos_token_ids: frozenset[int],
        report: Report,
        disk_namespace: bytes | None = None,
        tasks: Sequence[TaskRunner[Any]] = (),
        vision: Vision | None = None,
    ) -> None:
        """Compiles the runner's shapes and the tasks' (reporting progress), then starts the engine
        thread. `pages` counts the runner's KV pages with the null page. With
        `config.prefix_disk_dir`, the prefix cache keeps pages on disk under `disk_namespace` (what
        they depend on). `tasks` run on the same engine thread. `vision`: how the model takes
        images (None: it takes none)."""
        # One row must always fit alone.
        if runner.max_context > row_capacity(pages, config.decode_lanes, config.page_size):
            pages_per_row = math.ceil(runner.max_context / config.page_size)
            raise ValueError(
                f"KV pool of {pages} pages cannot hold one full-context row ({pages_per_row} pages) "
                f"plus {config.decode_lanes} lanes; raise the KV memory or lower max_context"
            )
        super().__init__(config.decode_lanes, config.max_queue, tasks)
        self.max_context = runner.max_context
        self.vision = vision
        self.eos_token_ids = eos_token_ids | config.stop_token_ids
        self.runner = runner
        self._pool = PagePool(pages, config.page_size)
        self._disk = None
        if config.prefix_disk_dir and config.prefix_disk_bytes > 0 and disk_namespace is not None:
            root = Path(config.prefix_disk_dir).expanduser()
            cap = config.prefix_disk_bytes
            self._disk = PrefixDisk(root, disk_namespace, runner.page_bytes, cap, self._intake.fetched)
        self.adapters = AdapterTable(runner.adapter_slots, runner.adapter_rank)
        self._scheduler = Scheduler(
            runner,
            self._pool,
            self._intake,
            config.prefill_chunk,
            self._tasks,
            self._disk,
            self.adapters,
            config.burst_max_step_ms,
        )
        runner.compile(report)
        self._tasks.compile(report)
        runner.watch_compiles(self._scheduler.thread)
        self._scheduler.thread.start()

    @classmethod
    def build(
        cls,
        model: LoadedModel,
        config: EngineConfig,
        report: Report,
        tasks: Sequence[TaskRunner[Any]] = (),
        group: Lead | None = None,
    ) -> "Engine":
        """Sizes and allocates the KV page pool on the model's devices, compiles every shape
        bucket and starts the engine thread. With `group`, this process leads a process group
        (engine/device/process_group.py) whose followers have loaded `model` too: they build the same
        runner and make every runner call this engine makes."""
        pages = pool_pages(model, config)
        rules = None
        tower = model.config.vision
        if tower is not None and config.vision_enabled:
            rules = served_rules(model.image_processor, tower.patch_size, tower.merge_size, config.max_image_pixels)
            # The tower's compiled sizes stop at the largest image the model's own rules allow.
            config = replace(config, max_image_pixels=rules.max_pixels)
        if group is not None:
            # Every process must run the same programs in the same order: a group compiles every
            # shape before serving, none while idle.
            config = replace(config, compile_while_serving=False)
            group.channel.send(Build(config, pages))
        local = DeviceRunner(model, config, pages)
        runner: Runner = local if group is None else LeaderRunner(local, group, jax.process_count())
        namespace = namespace_digest(
            {
                "checkpoint": model.fingerprint,
                "dtype": model.dtype,
                "quantization": model.quantization,
                "kv_dtype": str(kv_dtype(model.dtype, config.kv_cache_dtype)),
                "page_size": config.page_size,
                "page_bytes": runner.page_bytes,
                "model": repr(model.config),  # RoPE and its scaling, the served context, the matmul weights
            }
        )
        eos = frozenset(model.config.eos_token_ids)
        vision = None if runner.image_token_id is None or rules is None else Vision(runner.image_token_id, rules)
        return cls(runner, pages, config, eos, report, namespace, tasks, vision)

    def tasks(self) -> frozenset[str]:
        return super().tasks() | {GENERATE}

    def _generate(self, request: GenerationRequest, sink: Sink) -> int:
        admission = admit(request, self.max_context, self.decode_lanes, self.runner.image_token_id)
        stop_ids = request.stop_token_ids | (frozenset() if request.sampling.ignore_eos else self.eos_token_ids)
        adapter = None if request.adapter is None else self.adapters.use(request.adapter)
        try:
            return self._intake.enqueue(request, sink, admission, stop_ids, adapter)
        except Exception:
            if adapter is not None:
                self.adapters.release(adapter.slot)
            raise

    @property
    def adapter_slots(self) -> int:
        return self.adapters.slots

    def adapter_listing(self) -> list[ServedAdapter]:
        return self.adapters.listing()

    def load_adapter(self, name: str, adapter: LoraAdapter) -> Future[None]:
        """Puts `adapter` (read and checked against this model: engine/lora/peft_adapter.py) in a free
        slot between two steps; requests may name it once the future is done. Raises
        AdapterRefused (name taken, no free slot, rank above the slots')."""
        job = self.adapters.reserve(name, adapter)
        self._intake.enqueue_adapter_job(job)
        return job.done

    def unload_adapter(self, name: str) -> Future[None]:
        """Refuses new requests naming the adapter at once; frees its slot, between two steps,
        once the requests using it have finished."""
        job = self.adapters.begin_unload(name)
        self._intake.enqueue_adapter_job(job)
        return job.done

    def shutdown(self) -> None:
        """Cancels everything in flight and stops the engine thread."""
        self._intake.stop()
        self._scheduler.thread.join()
        if self._disk is not None:
            self._disk.close()  # after the queued saves (seconds for a long prompt's pages)
        self.runner.close()

    def _kv_pages(self) -> tuple[int, int]:
        return self._pool.total, self._pool.used

    def _compiles_after_startup(self) -> int:
        return self.runner.compiles_after_startup()

    def _buckets(self) -> tuple[Bucket, ...]:
        return self.runner.buckets()

    def _pending_buckets(self) -> int:
        return self.runner.pending_buckets()

    def held_arrays(self) -> HeldArrays:
        """The device arrays of its runner and tasks; for a report of what freeing it gives back."""
        return self.runner.held_arrays() + self._tasks.held_arrays()


class TaskEngine(IntakeFront):
    """An engine of task runners alone, on an engine thread of its own: the same front, intake and
    batches as `Engine`'s tasks, without generation."""

    def __init__(self, tasks: Sequence[TaskRunner[Any]], max_context: int, max_queue: int, report: Report) -> None:
        """Compiles the tasks' shapes (reporting progress), then starts the engine thread.
        `max_context`: the longest input a request may hold."""
        super().__init__(0, max_queue, tasks)
        self.max_context = max_context
        self.vision: Vision | None = None  # it generates nothing, so takes no images
        self._tasks.compile(report)
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        self._intake.stop()
        self._thread.join()

    def held_arrays(self) -> HeldArrays:
        return self._tasks.held_arrays()

    def _run(self) -> None:
        tasks = self._tasks
        try:
            while True:
                work = self._intake.next_work(tasks.busy)
                tasks.add(work.task_jobs)
                if work.stopping:
                    tasks.fail_all(Failed("unavailable", "the engine stopped"), self._intake.abandon_task_jobs())
                    return
                if work.cancels:
                    tasks.cancel(set(work.cancels))
                tasks.run_batches()
        except Exception as error:  # the engine thread must never die silently: fail every request
            reason = f"{type(error).__name__}: {error}"
            log.error("engine thread died: %s", reason, exc_info=error)
            tasks.fail_all(Failed("fault", f"the engine failed: {reason}"), self._intake.abandon_task_jobs())
            self._intake.died("fault", reason)
