"""One model over several processes (`jax.distributed`): joining the group, and its message channel.

Every process of a group runs the same compiled steps over one mesh of all the group's devices
(SPMD), so every step must start on every process, in the same order, with the same host inputs.
Process 0 leads: it alone serves HTTP and runs the scheduler, and its runner
(engine/device/mirrored_runner.py) sends each runner call's arguments before making the call. Every
other process follows: it receives them and makes the same calls on a runner of its own.

Messages travel by `multihost_utils.broadcast_one_to_all` (a psum over one device per process:
JAX's own collectives; gloo on the CPU) in two fixed shapes, each compiled once: a head of
HEAD_BYTES, which holds most messages whole, and CHUNK_BYTES chunks for the rest of a long one
(a LoRA adapter, pages for the KV cache). They are pickled: the group is one trust domain, like
the coordinator every process already obeys.

Threads: on the leader, one thread at a time sends, in turn: the model host's lifecycle thread
(a model's load and build, and `Release` after its engine stopped), the engine thread (every
runner call while the engine runs) and the main thread (`Stop` at exit); the lock only guards
that rule. A follower's main thread receives, in `engine.device.mirrored_runner.follow`.
"""

import logging
import pickle
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils

from engine.engine_config import EngineConfig

log = logging.getLogger(__name__)

HEAD_BYTES = 16 << 10  # a decode step's rows, even with grammar masks for a few of them
CHUNK_BYTES = 1 << 20
LENGTH_BYTES = 8  # the head starts with the pickled message's length
AGREEMENT_BYTES = 1024  # each process's load error, as the group agrees on a load
# How long the leader waits at exit for the followers to leave the coordinator before it stops
# the coordination service (a follower whose service vanishes first aborts).
LEAVE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class GroupSpec:
    """Where the group's coordinator listens and who this process is. Unset fields are left to
    JAX (JAX_COORDINATOR_ADDRESS, or a cluster it detects: SLURM, Open MPI, Kubernetes, Cloud TPU)."""

    coordinator: str | None
    num_processes: int | None
    process_id: int | None
    heartbeat_timeout_s: int = 100


def join(spec: GroupSpec) -> None:
    """Joins the group, before anything else touches a JAX backend. On the CPU, collectives go
    through gloo. Recoverability keeps a process alive when another dies: its next collective
    fails instead, and process 0 reports the failure (it would otherwise be aborted by the
    coordination service). JAX's preemption service is off: it would take SIGTERM from the
    server (the leader drains on it) and from a follower's supervisor."""
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.config.update("jax_enable_recoverability", True)
    jax.config.update("jax_enable_preemption_service", False)  # it takes SIGTERM, which drains the leader
    jax.distributed.initialize(
        spec.coordinator,
        spec.num_processes,
        spec.process_id,
        heartbeat_timeout_seconds=spec.heartbeat_timeout_s,
    )
    log.info(
        "process %d of %d in the group (%d devices, %d here)",
        jax.process_index(),
        jax.process_count(),
        jax.device_count(),
        jax.local_device_count(),
    )


def in_group() -> bool:
    return jax.process_count() > 1


def is_leader() -> bool:
    return jax.process_index() == 0


@dataclass(frozen=True)
class Load:
    """Load a model: `spec` says which and how, in the terms of whoever runs the group (the server's
    path and settings); the engine only carries it."""

    spec: Any


@dataclass(frozen=True)
class Build:
    """Build the runner of the model just loaded: the leader's engine configuration and KV pool
    size (free memory differs between hosts; the pool must not)."""

    config: EngineConfig
    pages: int


@dataclass(frozen=True)
class Call:
    """One runner call (engine/device/mirrored_runner.py); `keep` numbers its result, which later calls
    name by `Kept`."""

    verb: str
    args: tuple[Any, ...]
    keep: int | None = None


@dataclass(frozen=True)
class Kept:
    number: int


@dataclass(frozen=True)
class Calls:
    """Runner calls, in order; none keeps an idle group's links alive."""

    calls: tuple[Call, ...]


@dataclass(frozen=True)
class Release:
    """The engine stopped: drop the runner and the model (a switch or an unload may follow)."""


@dataclass(frozen=True)
class Stop:
    """The leader is exiting: leave the group."""


Message = Load | Build | Calls | Release | Stop


class Channel:
    """The leader sends, every follower receives the same messages in the same order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def send(self, message: Message) -> None:
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        frame = len(payload).to_bytes(LENGTH_BYTES, "little") + payload
        with self._lock:
            _broadcast(_padded(frame[:HEAD_BYTES], HEAD_BYTES))
            for start in range(HEAD_BYTES, len(frame), CHUNK_BYTES):
                _broadcast(_padded(frame[start : start + CHUNK_BYTES], CHUNK_BYTES))

    def receive(self) -> Message:
        head = _broadcast(np.zeros(HEAD_BYTES, np.uint8))
        length = int.from_bytes(head[:LENGTH_BYTES].tobytes(), "little")
        parts, received = [head[LENGTH_BYTES:].tobytes()], HEAD_BYTES
        while received < LENGTH_BYTES + length:
            parts.append(_broadcast(np.zeros(CHUNK_BYTES, np.uint8)).tobytes())
            received += CHUNK_BYTES
        message: Message = pickle.loads(b"".join(parts)[:length])
        return message

    def warm(self) -> None:
        """Compiles both shapes, on every process at once (they carry no message)."""
        with self._lock:
            _broadcast(np.zeros(HEAD_BYTES, np.uint8))
            _broadcast(np.zeros(CHUNK_BYTES, np.uint8))


def agree(error: str | None) -> None:
    """Every process says how its load went; raises GroupLoadFailed on every process, naming the
    processes that failed, unless all loaded."""
    mine = np.zeros(AGREEMENT_BYTES, np.uint8)
    text = (error or "").encode()[: AGREEMENT_BYTES - 1]
    mine[: len(text)] = np.frombuffer(text, np.uint8)
    everyone = np.asarray(multihost_utils.process_allgather(mine)).reshape(-1, AGREEMENT_BYTES)
    failures = {i: bytes(row).rstrip(b"\0").decode(errors="replace") for i, row in enumerate(everyone)}
    failures = {i: reason for i, reason in failures.items() if reason}
    if failures:
        raise GroupLoadFailed("; ".join(f"process {i}: {reason}" for i, reason in sorted(failures.items())))


@dataclass(frozen=True)
class Lead:
    """Process 0's side of a group: the channel, and what to do when a step hangs (a process
    stopped answering: no collective can finish, and none ever fails)."""

    channel: Channel
    step_timeout_s: float
    on_hang: Callable[[str], None]


class GroupLoadFailed(Exception):
    """A process of the group could not load the model, so none serves it."""


def leave() -> None:
    """Leaves the group at exit. The leader, whose process hosts the coordination service, waits
    (up to LEAVE_TIMEOUT_S) for the followers to leave first."""
    if is_leader():
        client = jax._src.distributed.global_state.client
        everyone = list(range(jax.process_count()))
        deadline = time.monotonic() + LEAVE_TIMEOUT_S
        while client is not None and time.monotonic() < deadline and len(client.get_live_nodes(everyone)) > 1:
            time.sleep(0.1)
    jax.distributed.shutdown()


def _broadcast(data: np.ndarray) -> np.ndarray:
    return np.asarray(multihost_utils.broadcast_one_to_all(data, is_source=is_leader()))


def _padded(data: bytes, size: int) -> np.ndarray:
    padded = np.zeros(size, np.uint8)
    padded[: len(data)] = np.frombuffer(data, np.uint8)
    return padded
