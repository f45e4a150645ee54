"""Serialized executables of the engine's jitted functions, kept on disk, so that a warm start
loads every compiled shape in milliseconds instead of tracing, lowering and compiling it again.

`cache_jitted` replaces each jitted function an object holds (the model's `StepFunctions`, the
KV pool's verbs) with a `CachedFunction`: the first call of each argument signature (the
arguments' tree, and each leaf's shape, dtype and placement) loads that signature's executable
from the `ExecutableStore`, or lowers and compiles it through the jitted function and stores it;
every later call runs the loaded `jax.stages.Compiled`, which dispatches through jax's C++ path as
jit does. Nothing here knows a step's kind: a new jitted function is covered by being an attribute.

An entry's name is a digest of the store's namespace (everything that changes the programs but is
not an argument's shape: the checkpoint's fingerprint, the model's configuration and parameter
tree, the engine settings that enter the graph, the source of the engine's code, the native kernels'
library, jax and jaxlib, the backend, its devices, XLA's flags) with the function's name and the
call's signature. A stale entry therefore misses; one that does not load (truncated, corrupt,
written by another build) is compiled again and rewritten, never fatal. After each write the store
drops the entries used longest ago until it holds at most `max_bytes` (EXECUTABLE_CACHE_BYTES).

Executables call the native kernels (engine/model/kernels) through XLA custom calls, so the
namespace asks for them (`kernels.available()` registers them) before anything is loaded.
"""

import functools
import hashlib
import logging
import os
import pickle
import platform
import tempfile
import time
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import jaxlib
import numpy as np
from jax.experimental.serialize_executable import deserialize_and_load, serialize

from engine.model import kernels

log = logging.getLogger(__name__)

try:  # the thread-local forms of two public jax.config options: private, so checked (`supported`)
    from jax._src import config as jax_states

    _CACHE_SWITCHES = (
        getattr(jax_states, "compilation_cache_include_metadata_in_key", None),
        getattr(jax_states, "persistent_cache_min_compile_time_secs", None),
    )
except ImportError:
    _CACHE_SWITCHES = (None, None)


def supported() -> bool:
    """Whether this jax lets a compile bypass its persistent cache (`_compiled_afresh`); without,
    the engine keeps no executables (what that cache hands back does not serialize whole)."""
    return all(switch is not None for switch in _CACHE_SWITCHES)


# The store's default bound: a 0.5B model's ~40 shapes take a few hundred MB on the CPU.
EXECUTABLE_CACHE_BYTES = 4 << 30
_ENGINE_SOURCE = Path(__file__).resolve().parents[1]  # the `engine` package: its code is the programs'
_SUFFIX = ".exe"


def source_digest() -> str:
    """A digest of the engine package's Python sources: a change to any of them may change a program."""
    digest = hashlib.sha256()
    for path in sorted(_ENGINE_SOURCE.rglob("*.py")):
        digest.update(str(path.relative_to(_ENGINE_SOURCE)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def namespace(identity: Mapping[str, object]) -> str:
    """`identity` (what the caller knows changes its programs) with what changes every program here."""
    devices = jax.devices()
    fields = {
        **{key: repr(value) for key, value in identity.items()},
        "source": source_digest(),
        "kernels": kernels.library_name() if kernels.available() else "",
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "backend": f"{jax.default_backend()} {devices[0].client.platform_version}",
        "devices": repr([(device.platform, device.device_kind, device.id) for device in devices]),
        "machine": platform.machine(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "x64": repr(jax_states.enable_x64.value),
    }
    return hashlib.sha256(repr(sorted(fields.items())).encode()).hexdigest()[:24]


def own_jit(fun: Any, **options: Any) -> Any:
    """`jax.jit(fun, **options)` whose compiled programs are this caller's alone, for a module-level
    `fun` that a `cache_jitted` owner holds. jax hands every jit of one Python function the program
    it compiled first for the same shapes, and on the CPU a program that has run holds its sorts'
    comparators and no longer serializes ("`LessThan` is not serializable"): a store could then not
    keep a shape another engine of this process ran before. A partial is a function of its own."""
    return jax.jit(functools.partial(fun), **options)


class NotStored(Exception):
    """A call's executable is not in the store while it only loads (`ExecutableStore.loading_only`)."""


class ExecutableStore:
    """The serialized executables of one namespace in `directory` (shared with other namespaces),
    and how many of this process's shapes were loaded from it or compiled."""

    def __init__(self, directory: Path, space: str, max_bytes: int = EXECUTABLE_CACHE_BYTES) -> None:
        self._directory, self._space, self._max_bytes = directory, space, max_bytes
        self.loaded = 0
        self.compiled = 0
        self.seconds = 0.0  # spent loading and compiling
        self.loading_only = False  # True: a call whose executable is not stored raises NotStored

    def _path(self, name: str, signature: str) -> Path:
        key = hashlib.sha256(f"{self._space}\0{name}\0{signature}".encode()).hexdigest()[:32]
        return self._directory / f"{key}{_SUFFIX}"

    def load(self, name: str, signature: str) -> jax.stages.Compiled | None:
        path = self._path(name, signature)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        try:
            payload, in_tree, out_tree = pickle.loads(data)
            compiled = deserialize_and_load(payload, in_tree, out_tree)
        except Exception as error:  # a corrupt or foreign entry: compiled again and rewritten
            log.warning("executable cache entry %s did not load (%s): compiling it again", path.name, error)
            return None
        os.utime(path)  # used now: the last to be dropped
        return compiled

    def save(self, name: str, signature: str, compiled: jax.stages.Compiled) -> None:
        try:
            payload, in_tree, out_tree = serialize(compiled)
            data = pickle.dumps((payload, in_tree, out_tree))
        except (ValueError, NotImplementedError, pickle.PicklingError, TypeError, jax.errors.JaxRuntimeError) as error:
            log.warning("executable %s not cached: %s", name, error)
            return
        path = self._path(name, signature)
        try:
            self._directory.mkdir(parents=True, exist_ok=True)
            # Written under a temporary name and renamed: another process never reads half an entry.
            with tempfile.NamedTemporaryFile(dir=self._directory, suffix=".partial", delete=False) as file:
                file.write(data)
            Path(file.name).replace(path)
            self._bound()
        except OSError as error:
            log.warning("executable cache not written (%s): %s", path, error)

    def _bound(self) -> None:
        """Drops the entries used longest ago until the folder holds at most `max_bytes`."""
        entries = []
        for path in self._directory.glob(f"*{_SUFFIX}"):
            try:
                stat = path.stat()
            except OSError:
                continue
            entries.append((stat.st_mtime, stat.st_size, path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries, key=lambda entry: entry[0]):
            if total <= self._max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size


def _leaf_key(leaf: object) -> object:
    if isinstance(leaf, jax.Array):
        return (leaf.shape, leaf.dtype, leaf.sharding)
    if isinstance(leaf, np.ndarray | np.generic):
        return (leaf.shape, leaf.dtype)
    return type(leaf)  # a Python scalar: traced as a weak-typed value of its type


def _placement(leaf: object) -> object:
    """A leaf's shape, dtype and where its parts lie: two shardings that place every part alike
    (replicated, or split over a mesh axis of one device) run the same executable."""
    if isinstance(leaf, jax.Array):
        parts = leaf.sharding.devices_indices_map(leaf.shape)
        placed = sorted((repr(device), repr(index)) for device, index in parts.items())
        return (leaf.shape, str(leaf.dtype), leaf.sharding.memory_kind, placed)
    return _leaf_key(leaf)


def _signature(args: tuple[object, ...]) -> str:
    """A call's signature as the store names it: the same in every process that makes the call."""
    leaves, tree = jax.tree.flatten(args)
    return repr((tree, [_placement(leaf) for leaf in leaves]))


def _arg_key(arg: object) -> object:
    if isinstance(arg, np.ndarray | jax.Array | np.generic):
        return _leaf_key(arg)
    leaves, tree = jax.tree.flatten(arg)
    return (tree, tuple(map(_leaf_key, leaves)))


class CachedFunction:
    """A jitted function whose executables come from an `ExecutableStore` (see the module's doc).

    A call first tries the executable the last call ran: a step repeats its signature far more
    often than it changes it, and the executable checks its arguments' types itself (in jax's C++
    dispatch, as jit does) and refuses others before running anything, with a TypeError or
    ValueError. Only then is the call's signature worked out and its executable looked up."""

    def __init__(self, name: str, jitted: Any, store: ExecutableStore) -> None:
        self._name, self._jitted, self._store = name, jitted, store
        self._executables: dict[tuple[object, ...], jax.stages.Compiled] = {}
        self._last: jax.stages.Compiled | None = None

    def __call__(self, *args: object) -> Any:
        if self._last is not None:
            try:
                return self._last(*args)
            except (TypeError, ValueError):
                pass  # another signature than the last call's
        key = tuple(map(_arg_key, args))
        executable = self._executables.get(key)
        if executable is None:
            executable = self._executables[key] = self._build(args)
        self._last = executable
        return executable(*args)

    def loaded(self, *args: object) -> bool:
        """Makes ready the executable a call with `args` runs, without running it; whether it came
        from the store (False: it was compiled now)."""
        key = tuple(map(_arg_key, args))
        if key in self._executables:
            return True
        before = self._store.loaded
        self._executables[key] = self._build(args)
        return self._store.loaded > before

    def _build(self, args: tuple[object, ...]) -> jax.stages.Compiled:
        started = time.perf_counter()
        signature = _signature(args)
        executable = self._store.load(self._name, signature)
        if executable is not None:
            self._store.loaded += 1
        elif self._store.loading_only:
            raise NotStored(self._name)
        else:
            executable = _compiled_afresh(self._jitted.lower(*args))
            self._store.save(self._name, signature, executable)
            self._store.compiled += 1
        self._store.seconds += time.perf_counter() - started
        return executable


def _compiled_afresh(lowered: jax.stages.Lowered) -> jax.stages.Compiled:
    """`lowered` compiled by XLA, never read from nor written to jax's persistent compilation cache
    (engine/front.py's `use_compilation_cache`): on the CPU (jax 0.10) an executable that cache
    returns serializes without its fused functions, and the one loaded from that fails when run
    ("Function ... not found"). Keys that include the program's metadata are keys no other compile
    writes (jax's own strip it), and the cache writes nothing that compiles faster than the bound."""
    include_metadata, min_compile_secs = _CACHE_SWITCHES
    assert include_metadata is not None and min_compile_secs is not None, "checked by `supported`"
    with include_metadata(True), min_compile_secs(float("inf")):
        return lowered.compile()


def cache_jitted(owners: Mapping[str, object], store: ExecutableStore) -> None:
    """Replaces every jitted function each owner holds as an attribute by a `CachedFunction`
    named after the owner's label and the attribute."""
    for label, owner in owners.items():
        for attribute, value in list(vars(owner).items()):
            if _is_jitted(value):
                assert not _shared(value), f"{label}.{attribute}: jit it with `own_jit`"
                setattr(owner, attribute, CachedFunction(f"{label}.{attribute}", value, store))


def _is_jitted(value: object) -> bool:
    return callable(value) and hasattr(value, "lower") and hasattr(value, "trace")


def _shared(jitted: object) -> bool:
    """Whether `jitted` wraps a module-level function, whose programs every jit of it shares."""
    fun = getattr(jitted, "__wrapped__", None)
    return isinstance(fun, types.FunctionType) and "<locals>" not in fun.__qualname__
