"""Native CPU kernels, called from jitted code as XLA custom calls (`jax.ffi`).

Why: XLA's CPU backend has no fast path for what a decode step does most, and its float dot
adds a row's products in an order that depends on how many rows there are (`f32_matmul.cc`: a
row's result never depends on the other rows of the call, so a seeded request draws the same
tokens however its prompt was split or batched; used by engine/model/layers/linear.py). Its int8 dot streams
weights at a fraction of the memory's bandwidth with one or two rows of activations
(`int8_matmul.cc`: AVX-512 VNNI or AVX2, with software prefetch; used by engine/model/int8.py); it has
no Q4 weights at all (`q4_matmul.cc`, every matmul of `--quantization w4a8`, AVX2), nor any of
GGUF's block formats (`gguf_matmul.cc`: a GGUF's weights in their own blocks, engine/model/gguf_weights.py;
AVX2 with AVX-512 VNNI's dot where the CPU has it); and
its attention over a paged cache has to gather each row's keys into blocks and loop over them in
small matmuls (`paged_attention.cc` reads the pages in place for one-token steps, steps over drafts and
decode bursts,
`paged_prefill_attention.cc` runs a tiled flash attention for prompt steps; used by
engine/model/layers/paged_attention.py). All split their work over XLA's own thread pool
(`parallel.h`); each has portable loops for CPUs without those instructions.

The kernels are compiled by `make setup`, or on first use where they are missing, for the machine
they run on (`-march=native`), one process of the C++ compiler in `$CXX` (default `c++`) per source
at once, then linked into `kernels/` under the prepared-weights cache
(`POOLED_CACHE_DIR`, default ~/.cache/pooled/prepared), keyed by the sources, the flags, the
compiler, jaxlib and the CPU's feature flags; later processes load that library. Without a
compiler, or if the build fails, `available()` is False (logged once) and callers use XLA's own
ops: slower, never wrong.
"""

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import jaxlib
import numpy as np

from engine.cache_paths import cache_root

log = logging.getLogger(__name__)

Array = jax.Array

_SOURCE_DIR = Path(__file__).parent
_COMPILE_FLAGS = ("-O3", "-march=native", "-std=c++17", "-fopenmp-simd", "-fPIC")
_LINK_FLAGS = ("-shared",)
F32_MATMUL = "pooled_f32_matmul"
INT8_MATMUL = "pooled_int8_matmul"
Q4_MATMUL = "pooled_q4_matmul"
GGUF_MATMUL = "pooled_gguf_matmul"
GGUF_ROWS = "pooled_gguf_rows"
PAGED_DECODE_ATTENTION = "pooled_paged_decode_attention"
PAGED_PREFILL_ATTENTION = "pooled_paged_prefill_attention"
PAGED_DRAFT_ATTENTION = "pooled_paged_draft_attention"
PAGED_BURST_ATTENTION = "pooled_paged_burst_attention"
_TARGETS = {
    F32_MATMUL: "PooledF32Matmul",
    INT8_MATMUL: "PooledInt8Matmul",
    Q4_MATMUL: "PooledQ4Matmul",
    GGUF_MATMUL: "PooledGgufMatmul",
    GGUF_ROWS: "PooledGgufRows",
    PAGED_DECODE_ATTENTION: "PooledPagedDecodeAttention",
    PAGED_PREFILL_ATTENTION: "PooledPagedPrefillAttention",
    PAGED_DRAFT_ATTENTION: "PooledPagedDraftAttention",
    PAGED_BURST_ATTENTION: "PooledPagedBurstAttention",
}


def _cpu_features() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor()


def _build() -> Path:
    """The library of every kernel here, built now unless a matching one is cached."""
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        raise RuntimeError(f"no C++ compiler ({compiler!r}; set CXX)")
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
    sources = sorted(_SOURCE_DIR.glob("*.cc"))
    texts = [path.read_text() for path in [*sources, *sorted(_SOURCE_DIR.glob("*.h"))]]
    flags = [*_COMPILE_FLAGS, *_LINK_FLAGS]
    identity = [*texts, *flags, version, jaxlib.__version__, platform.machine(), _cpu_features()]
    key = hashlib.sha256("\0".join(identity).encode()).hexdigest()[:16]
    directory = cache_root(None) / "kernels"
    library = directory / f"kernels-{key}.so"
    if library.exists():
        return library
    directory.mkdir(parents=True, exist_ok=True)
    # Built under a temporary name and renamed: concurrent processes never load a half-written file.
    with tempfile.TemporaryDirectory(dir=directory) as scratch:
        built = Path(scratch) / library.name
        objects = _compile_all(compiler, sources, Path(scratch))
        _run([compiler, *_LINK_FLAGS, *map(str, objects), "-o", str(built)])
        built.replace(library)
    return library


def _compile_all(compiler: str, sources: Sequence[Path], scratch: Path) -> list[Path]:
    """Each source to an object file, all at once: a cold start waits for the slowest, not the sum."""
    include = ["-isystem", jax.ffi.include_dir()]
    objects = [scratch / f"{source.stem}.o" for source in sources]
    commands = [
        [compiler, *_COMPILE_FLAGS, *include, "-c", str(source), "-o", str(target)]
        for source, target in zip(sources, objects, strict=True)
    ]
    running = [(command, subprocess.Popen(command, stderr=subprocess.PIPE, text=True)) for command in commands]
    for command, process in running:
        _, errors = process.communicate()
        if process.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{errors[-2000:]}")
    return objects


def _run(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-2000:]}")


def available() -> bool:
    """Whether the kernels can be called on CPU (built and registered once per process). Off the
    CPU (a GPU or TPU backend) they are not built: XLA's own ops (or Pallas) run there."""
    return bool(library_name())


@functools.cache
def library_name() -> str:
    """The file name of the library registered in this process, which names its key (built and
    registered on first call); "" where the kernels are unavailable. Serialized executables that
    call the kernels are keyed by it (engine/device/executables.py)."""
    if jax.default_backend() != "cpu":
        log.info("native CPU kernels skipped on the %s backend", jax.default_backend())
        return ""
    try:
        path = _build()
        library = ctypes.cdll.LoadLibrary(str(path))
    except (OSError, RuntimeError, subprocess.CalledProcessError) as error:
        log.warning("native CPU kernels unavailable, using XLA's own ops: %s", error)
        return ""
    for target, symbol in _TARGETS.items():
        jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(library, symbol)), platform="cpu")
    return path.name


def f32_matmul(x: Array, weights: Sequence[Array]) -> list[Array]:
    """f32 x [M, K] times each f32 weight [K, N] → f32 [M, N] each, in one call whose rows never
    depend on each other (`f32_matmul.cc`). CPU only, after `available()`."""
    results = [jax.ShapeDtypeStruct((x.shape[0], weight.shape[1]), jnp.float32) for weight in weights]
    return list(jax.ffi.ffi_call(F32_MATMUL, results)(x, *weights))


def int8_matmul(x: Array, weights: Sequence[tuple[Array, Array]]) -> list[Array]:
    """f32 x [M, K], quantized per row as `engine.model.int8.quantize_rows` does, times each (int8 weight
    [N, K], f32 scale [N]) → f32 [M, N] each, in one call. CPU only, after `available()`."""
    return _matmuls(INT8_MATMUL, x, weights)


def q4_matmul(x: Array, weights: Sequence[Array]) -> list[Array]:
    """f32 x [M, K] times each packed Q4_1 weight (engine/model/int4.py: uint8 [N, K/32 · 20]) → f32 [M, N]
    each, in one call (`q4_matmul.cc`). CPU only, after `available()`."""
    return _matmuls(Q4_MATMUL, x, [(weight,) for weight in weights])


def gguf_matmul(x: Array, weights: Sequence[tuple[Array, int]]) -> list[Array]:
    """f32 x [M, K] times each (GGUF weight uint8 [N, K's blocks in bytes], its ggml type number) → f32
    [M, N] each, in one call (`gguf_matmul.cc`). CPU only, after `available()`."""
    results = [jax.ShapeDtypeStruct((x.shape[0], values.shape[0]), jnp.float32) for values, _ in weights]
    formats = np.array([format for _, format in weights], dtype=np.int32)
    return list(jax.ffi.ffi_call(GGUF_MATMUL, results)(x, *(values for values, _ in weights), formats=formats))


def gguf_rows(table: Array, indices: Array, format: int, depth: int) -> Array:
    """Rows `indices` int32 [n] of a GGUF table (uint8 [V, bytes] of ggml type `format`) as f32 [n,
    depth] (`gguf_matmul.cc`). CPU only, after `available()`."""
    result = jax.ShapeDtypeStruct((indices.shape[0], depth), jnp.float32)
    return jax.ffi.ffi_call(GGUF_ROWS, result)(table, indices, format=np.int32(format))


def _matmuls(target: str, x: Array, weights: Sequence[tuple[Array, ...]]) -> list[Array]:
    results = [jax.ShapeDtypeStruct((x.shape[0], arrays[0].shape[0]), jnp.float32) for arrays in weights]
    operands = [array for arrays in weights for array in arrays]
    return list(jax.ffi.ffi_call(target, results)(x, *operands))


def paged_decode_attention(
    q: Array, k: Array, v: Array, k_pool: Array, v_pool: Array, tables: Array, filled: Array
) -> Array:
    """One decode step's attention (see `paged_attention.cc`): q f32 [B, K, G, H], the step's own
    k, v f32 [B, K, H], pools [K, P, S, H] (f32, or bfloat16 stored as uint16), tables int32 [B, C],
    `filled` int32 [B] positions in the pool → f32 [B, K*G*H]. CPU only, after `available()`."""
    B, K, G, H = q.shape
    result = jax.ShapeDtypeStruct((B, K * G * H), jnp.float32)
    return jax.ffi.ffi_call(PAGED_DECODE_ATTENTION, result)(q, k, v, k_pool, v_pool, tables, filled)


def paged_prefill_attention(
    q: Array, k: Array, v: Array, k_pool: Array, v_pool: Array, tables: Array, positions: Array
) -> Array:
    """A prompt step's attention (see `paged_prefill_attention.cc`): q f32 [B, T, K, G, H], the
    step's own k, v f32 [B, T, K, H], pools [K, P, S, H] (f32, or bfloat16 stored as uint16), tables
    int32 [B, C], the step tokens' positions int32 [B, T] → f32 [B, T, K*G*H]. CPU only, after
    `available()`."""
    B, T, K, G, H = q.shape
    result = jax.ShapeDtypeStruct((B, T, K * G * H), jnp.float32)
    return jax.ffi.ffi_call(PAGED_PREFILL_ATTENTION, result)(q, k, v, k_pool, v_pool, tables, positions)


def paged_draft_attention(
    q: Array,
    k: Array,
    v: Array,
    k_step: Array,
    v_step: Array,
    k_pool: Array,
    v_pool: Array,
    tables: Array,
    positions: Array,
) -> Array:
    """A decode step over drafts (see `paged_attention.cc`): q f32 [B, T, K, G, H], the step's own
    k, v f32 [B, T, K, H] and the same in the pools' stored form (k_step, v_step), pools [K, P, S, H],
    tables int32 [B, C], positions int32 [B, T] → f32 [B, T, K*G*H], each token's output that of a
    decode step at its position, bit for bit. CPU only, after `available()`."""
    B, T, K, G, H = q.shape
    result = jax.ShapeDtypeStruct((B, T, K * G * H), jnp.float32)
    return jax.ffi.ffi_call(PAGED_DRAFT_ATTENTION, result)(q, k, v, k_step, v_step, k_pool, v_pool, tables, positions)


def paged_burst_attention(
    q: Array,
    k: Array,
    v: Array,
    k_side: Array,
    v_side: Array,
    k_pool: Array,
    v_pool: Array,
    tables: Array,
    filled: Array,
    count: Array,
) -> Array:
    """A step of a decode burst (see `paged_attention.cc`): `paged_decode_attention`'s arguments, and
    the burst's side buffer k_side, v_side [B, N, K, H] in the pools' stored form, whose first
    `count` int32 [B] entries hold each row's positions filled - count .. filled - 1 (not in the
    pool yet) → f32 [B, K*G*H], a decode step's output at that position, bit for bit. CPU only,
    after `available()`."""
    B, K, G, H = q.shape
    result = jax.ShapeDtypeStruct((B, K * G * H), jnp.float32)
    return jax.ffi.ffi_call(PAGED_BURST_ATTENTION, result)(
        q, k, v, k_side, v_side, k_pool, v_pool, tables, filled, count
    )
