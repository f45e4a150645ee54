"""`load_model`: a checkpoint path → a family's parameters placed on a device mesh.

The orchestration above the checkpoint readers and the families: it asks the registry
(engine/model/families/registry.py) for the checkpoint's family and hands the readers what they
need of it.

1. Fingerprint the checkpoint files; on a prepared-cache hit, restore the parameters with orbax
   straight into their shardings and skip parsing and conversion entirely.
2. Otherwise read the checkpoint (safetensors directory or GGUF file) into a `RawCheckpoint`, let
   the family convert HF tensors to its parameter tree a layer at a time, check every shape
   against the model, cast, place each tensor shard by shard, and write the cache entry.
3. With `quantization="w8a8"`, turn the projections and the output head into int8 weights with
   per-channel scales (`engine/model/int8.py`); with "w4a8" into Q4_1 blocks (`engine/model/int4.py`). The
   cache keeps the float parameters: the quantization is a serving choice, cheap to redo at each
   load. A GGUF's Q4_1 matrices are moved into that layout from the file's
   own blocks instead (no float copy, no prepared cache: the file is the prepared form).
4. With "gguf", a GGUF file's matrices stay in their own blocks (`engine/model/gguf_weights.py`):
   the family's conversion passes each through as a `BlockMatrix`, the loader copies the file's
   rows to the devices and keeps no float copy; no prepared cache either (the file is the prepared
   form).

"auto" serves a file's own numbers fast where the native CPU kernels run: w4a8 for a GGUF whose
projections are all Q4_1 (requantizing them gives back the file's blocks), gguf for any other
GGUF whose matrices are all in block formats the kernels compute with, else none.
"""

import logging
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, overload

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from tqdm import tqdm

from engine.cache_paths import cache_root
from engine.errors import CheckpointError
from engine.model import gguf_weights, int4, int8, kernels
from engine.model.checkpoint.block_matrix import BlockMatrix
from engine.model.checkpoint.hf_folder import checkpoint_files
from engine.model.checkpoint.prepared_cache import PreparedCache, fingerprint
from engine.model.checkpoint.raw import RawCheckpoint
from engine.model.checkpoint.safetensors_dir import (
    read_chat_template,
    read_image_processor,
    read_safetensors_dir,
)
from engine.model.families.family import DecoderFamily
from engine.model.families.registry import GGUF_DECODERS, decoder_for_hf_config
from engine.model.forward import ForwardFn, abstract_params, make_forward
from engine.model.layers.kv_cache import LayerCache, init_layer_caches
from engine.model.layers.lora import LoraBatch
from engine.model.model_config import ModelConfig, with_context
from engine.model.sharding import make_mesh, place, shardings_for

log = logging.getLogger(__name__)

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
# --quantization → ModelConfig.matmul_weights ("auto" resolves to one of them, see resolve_quantization)
QUANTIZATIONS = {"none": "float", "w8a8": "int8", "w4a8": "int4", "gguf": "gguf"}


@dataclass(frozen=True)
class LoadedModel:
    config: ModelConfig
    family: DecoderFamily
    dtype: str
    params: Any  # the family's parameter tree of jax.Array, placed on `mesh`
    mesh: Mesh
    apply: ForwardFn  # pure: apply(params, tokens, positions, kv_cache=None, lora=None)
    source: Path
    tokenizer_dir: Path | None
    chat_template: str | None
    # A vision-language model's image preprocessing (preprocessor_config.json's fields); None: the defaults.
    image_processor: dict[str, Any] | None
    from_cache: bool  # parameters were restored from the prepared cache
    quantization: str  # one of QUANTIZATIONS, "auto" resolved
    fingerprint: str  # of the checkpoint files and dtype (the prepared cache's key)

    @property
    def weight_formats(self) -> dict[str, int]:
        """Each GGUF block format the matrices are served in (quantization "gguf"), with how many
        matrices it holds; empty otherwise."""
        return dict(sorted(Counter(format for _, format in self.config.block_formats).items()))

    @overload
    def forward(
        self, tokens: jax.Array, positions: jax.Array, *, lora: LoraBatch | None = None
    ) -> tuple[jax.Array, None]: ...

    @overload
    def forward(
        self, tokens: jax.Array, positions: jax.Array, kv_cache: Sequence[LayerCache], lora: LoraBatch | None = None
    ) -> tuple[jax.Array, tuple[LayerCache, ...]]: ...

    def forward(
        self,
        tokens: jax.Array,
        positions: jax.Array,
        kv_cache: Sequence[LayerCache] | None = None,
        lora: LoraBatch | None = None,
    ) -> tuple[jax.Array, tuple[LayerCache, ...] | None]:
        """Logits [B,T,V] float32 for tokens [B,T] at positions [B,T], and the updated cache
        (donated); with `lora`, each row's adapter slot added."""
        return self.apply(self.params, tokens, positions, kv_cache, lora)

    def init_kv_cache(self, batch: int, length: int) -> tuple[LayerCache, ...]:
        return init_layer_caches(self.config, batch, length, DTYPES[self.dtype])


def load_model(
    path: str | Path,
    dtype: str = "float32",
    devices: Sequence[jax.Device] | None = None,
    cache_dir: str | Path | None = None,
    progress: bool = True,
    *,
    context_length: int | None = None,
    rope_scaling: str | None = None,
    quantization: str = "none",
    prepared_cache: bool = True,
    mmproj: str | Path | None = None,
) -> LoadedModel:
    """Loads a safetensors directory or `.gguf` file; raises CheckpointError with a one-line reason.
    `mmproj`: llama.cpp's projector GGUF for a `.gguf` language model (its vision tower).

    Without `prepared_cache` the cache of prepared parameters is neither read nor written (a
    process group: writing it is collective, over a folder every host would have to share).

    `context_length` beyond the trained length needs `rope_scaling` (see `engine.model.model_config.with_context`).
    """
    path = Path(path).expanduser()
    if dtype not in DTYPES:
        raise CheckpointError(f"unsupported dtype {dtype!r} (supported: {', '.join(DTYPES)})")
    if quantization != "auto" and quantization not in QUANTIZATIONS:
        supported = ", ".join(("auto", *QUANTIZATIONS))
        raise CheckpointError(f"unsupported quantization {quantization!r} (supported: {supported})")
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist")
    is_gguf = path.suffix == ".gguf"
    if not is_gguf and not path.is_dir():
        raise CheckpointError(f"{path} is neither a model directory nor a .gguf file")
    projector = _projector_path(mmproj, is_gguf)
    files = ([path] if is_gguf else checkpoint_files(path)) + ([projector] if projector else [])
    files_fingerprint = fingerprint(files, dtype)
    cache = PreparedCache(cache_root(cache_dir), files_fingerprint)
    mesh = make_mesh(devices)

    # A GGUF's header is read at every load (its tensors stay in the mapped file until used): what
    # it is served as depends on it, and a GGUF served from its blocks needs no prepared copy.
    meta = cache.lookup() if prepared_cache and not is_gguf else None
    raw = _read(path, is_gguf, projector) if meta is None else None
    if meta is None:
        assert raw is not None
        meta = {
            "hf_config": raw.hf_config,
            "tokenizer_dir": str(raw.tokenizer_dir) if raw.tokenizer_dir else None,
            "chat_template": raw.chat_template,
            "projection_blocks": raw.projection_blocks,
            "matrix_formats": list(raw.matrix_formats),
            "image_processor": raw.image_processor,
        }

    family = decoder_for_hf_config(meta["hf_config"])
    config = family.config(meta["hf_config"])
    if context_length is not None:
        config = with_context(config, context_length, rope_scaling)
    if quantization in ("auto", "gguf"):
        quantization = resolve_quantization(meta, family, mesh, required=quantization == "gguf")
    params: Any  # the family's parameter tree
    restored = False
    if quantization == "gguf":
        assert raw is not None
        config, params = _block_params(raw, family, config, dtype, mesh, progress)
        model = family.model(config, DTYPES[dtype])
    else:
        model = family.model(config, DTYPES[dtype])
        shapes, logical = abstract_params(model)
        shardings = shardings_for(shapes, logical, mesh)
        # The int8 or int4 model's parameters, which the float ones become below.
        quantized = (
            abstract_params(family.model(replace(config, matmul_weights=QUANTIZATIONS[quantization]), DTYPES[dtype]))
            if quantization in ("w8a8", "w4a8")
            else None
        )
        packed = None
        if quantization == "w4a8" and quantized is not None:
            packed = _q4_1_packed(raw, family, config, (shapes, logical), quantized)
        if packed is not None:
            packed_shapes, packed_logical, entries = packed
            params = _prepare(
                iter(entries), packed_shapes, shardings_for(packed_shapes, packed_logical, mesh), progress
            )
        elif prepared_cache and cache.lookup() is not None:
            params = _restore(cache, shapes, shardings)
            restored = params is not None
        else:
            params = None
        if params is None:
            raw = raw or _read(path, is_gguf, projector)
            params = _prepare(family.convert(raw.tensors, config), shapes, shardings, progress)
            if prepared_cache:
                log.info("saving prepared parameters to %s", cache.entry)
                cache.save(params, meta)
    if quantization in ("w8a8", "w4a8"):
        assert quantized is not None
        config = replace(config, matmul_weights=QUANTIZATIONS[quantization])
        model = family.model(config, DTYPES[dtype])
        params = _int8_params(params, *quantized, mesh)
    elif quantization == "none" and config.tie_word_embeddings and dtype == "float32" and _native_matmuls(mesh):
        config = replace(config, tie_word_embeddings=False)
        model = family.model(config, DTYPES[dtype])
        params = _untied_head(params, model, mesh)

    tokenizer_dir = meta["tokenizer_dir"]
    return LoadedModel(
        config=config,
        family=family,
        dtype=dtype,
        params=params,
        mesh=mesh,
        apply=make_forward(model),
        source=path,
        tokenizer_dir=Path(tokenizer_dir) if tokenizer_dir else None,
        # The cache holds prepared parameters; a directory's template is read at every load, so an
        # edited one is served (a GGUF's lives in the fingerprinted file itself).
        chat_template=meta["chat_template"] if is_gguf else read_chat_template(path),
        image_processor=meta.get("image_processor") if is_gguf or config.vision is None else read_image_processor(path),
        from_cache=restored,
        quantization=quantization,
        fingerprint=files_fingerprint,
    )


def with_served_context(model: LoadedModel, ctx: int, rope_scaling: str | None) -> LoadedModel:
    """`model` serving `ctx` tokens (see `engine.model.model_config.with_context`), its forward rebuilt for the
    new RoPE; the parameters are shared, not reloaded."""
    config = with_context(model.config, ctx, rope_scaling)
    return replace(model, config=config, apply=make_forward(model.family.model(config, DTYPES[model.dtype])))


def resolve_quantization(meta: dict[str, Any], family: DecoderFamily, mesh: Mesh, required: bool = False) -> str:
    """What "auto" serves: a GGUF's own blocks on the native kernels (the numbers llama.cpp
    computes with, ~4x float32's decode speed on a CPU) — w4a8 for all-Q4_1 projections, gguf where
    every matrix is in a served block format — else the float weights. `required` ("gguf" asked
    for): gguf, or CheckpointError saying why not."""
    native = _native_matmuls(mesh)
    if not required and meta.get("projection_blocks") == "Q4_1" and native:
        return "w4a8"
    formats = meta.get("matrix_formats") or []
    others = sorted(set(formats) - set(gguf_weights.FORMATS))
    reason = (
        "it needs a GGUF file"
        if not formats
        else f"its matrices include {', '.join(others)}"
        if others
        else "mixtures of experts are not served from blocks"
        if family.traits.moe
        else "the native CPU kernels do not run here"
        if not native
        else None
    )
    if reason is None:
        return "gguf"
    if required:
        served = ", ".join(gguf_weights.FORMATS)
        raise CheckpointError(f"--quantization gguf cannot serve this model: {reason} (served: {served})")
    return "none"


def _block_params(
    raw: RawCheckpoint, family: DecoderFamily, config: ModelConfig, dtype: str, mesh: Mesh, progress: bool
) -> tuple[ModelConfig, dict[str, Any]]:
    """The model's config naming each matrix's block format, and its parameters: the file's rows."""
    from engine.model.checkpoint.gguf_file import GGUFTensors

    assert isinstance(raw.tensors, GGUFTensors)
    entries = list(family.convert(raw.tensors.as_blocks(), config))  # views of the file, a few small floats
    formats = []
    for name, host in entries:
        for key, leaf in jax.tree_util.tree_flatten_with_path(host)[0]:
            if isinstance(leaf, BlockMatrix):
                formats.append((_name(name, key), leaf.format))
    config = replace(config, matmul_weights="gguf", block_formats=tuple(sorted(formats)))
    shapes, logical = abstract_params(family.model(config, DTYPES[dtype]))
    return config, _prepare(iter(entries), shapes, shardings_for(shapes, logical, mesh), progress)


def _q4_1_packed(
    raw: RawCheckpoint | None,
    family: DecoderFamily,
    config: ModelConfig,
    floats: tuple[Any, Any],
    int4_model: tuple[Any, Any],
) -> tuple[Any, Any, list[tuple[str, Any]]] | None:
    """w4a8 from a GGUF: the shapes and logical axes to place by (the float model's, the Q4_1
    matrices' leaves packed) and the converted entries with each Q4_1 matrix the file's own blocks
    in engine/model/int4.py's layout (moved, not requantized: `pack` of their floats finds the same
    blocks). The rest
    (the embedding) stays float, quantized as any w4a8 model's. None where a Q4_1 matrix is not a
    packed weight of the w4a8 model (its channels or depth do not pack): its floats are packed then.
    """
    from engine.model.checkpoint.gguf_file import GGUFTensors

    if raw is None or not isinstance(raw.tensors, GGUFTensors):
        return None
    (shapes, logical), (int4_shapes, int4_logical) = floats, int4_model
    entries = list(family.convert(raw.tensors.as_blocks(("Q4_1",)), config))  # views of the file, the embedding
    blocks = {key for key, leaf in _entry_leaves(entries) if isinstance(leaf, BlockMatrix)}
    packed = {key for key, leaf in _entry_leaves(int4_shapes.items()) if leaf.dtype == jnp.uint8}
    if not blocks or blocks != packed:
        return None
    moved = [
        (name, jax.tree.map(lambda leaf: _moved_q4_1(leaf) if isinstance(leaf, BlockMatrix) else leaf, host))
        for name, host in entries
    ]
    return _with_packed(shapes, int4_shapes, packed), _with_packed(logical, int4_logical, packed), moved


def _moved_q4_1(matrix: BlockMatrix) -> BlockMatrix:
    return BlockMatrix(int4.from_q4_1_rows(matrix.rows()), "Q4_1", matrix.shape)


def _entry_leaves(entries: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    for name, host in entries:
        for key, leaf in jax.tree_util.tree_flatten_with_path(host)[0]:
            yield _name(name, key), leaf


def _with_packed(floats: dict[str, Any], packed: dict[str, Any], keys: set[str], prefix: str = "") -> dict[str, Any]:
    """The tree `floats` with the leaves at `keys` taken from `packed` (a tree of the same names)."""
    return {
        name: _with_packed(leaf, packed[name], keys, f"{prefix}{name}/")
        if isinstance(leaf, dict)
        else packed[name]
        if f"{prefix}{name}" in keys
        else leaf
        for name, leaf in floats.items()
    }


def _native_matmuls(mesh: Mesh) -> bool:
    """Whether float matmuls run on the native CPU kernel (engine/model/layers/linear.py float_matmuls)."""
    return mesh.devices.flat[0].platform == "cpu" and kernels.available()


def _untied_head(params: Any, model: Any, mesh: Mesh) -> Any:
    """A tied embedding's own copy as the output head, [D, V]: the native float matmul reads its
    weights input-major, and the embedding table is [V, D] (a row-invariant kernel over that layout
    ran the default model's 32-row head at 1.7× XLA's time; input-major at XLA's). Costs the
    table's bytes once more (113 MB for the default model)."""
    shapes, logical = abstract_params(model)
    untie = jax.jit(
        lambda p: {**p, "lm_head": p["embed"]["embedding"].T}, out_shardings=shardings_for(shapes, logical, mesh)
    )
    return untie(params)


def _int8_params(params: Any, shapes: Any, logical: Any, mesh: Mesh) -> Any:
    """Float parameters → the int8 model's tree (its `shapes` and `logical` axes): each int8 weight
    `w` with its `w_scale`, or packed to Q4_1 (uint8) on its own (or as it is, packed already)."""

    def convert(floats: dict[str, Any], shapes: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, shape in shapes.items():
            if isinstance(shape, dict):
                out[name] = convert(floats[name], shape)
            elif name in floats and shape.dtype in (jnp.int8, jnp.uint8) and floats[name].dtype != shape.dtype:
                # An embedding table's channels are its rows (tokens); a kernel's are its last axes.
                packed = shape.dtype == jnp.uint8
                weight = int8.quantize(
                    floats[name],
                    shape.ndim - 1 if packed else shapes[f"{name}_scale"].ndim,
                    channels_last=name != "embedding",
                    packed=packed,
                )
                out[name] = weight.values
                if weight.scale is not None:
                    out[f"{name}_scale"] = weight.scale
            elif name not in out:
                out[name] = floats[name]
        return out

    quantize = jax.jit(lambda floats: convert(floats, shapes), out_shardings=shardings_for(shapes, logical, mesh))
    return quantize(params)


def _projector_path(mmproj: str | Path | None, is_gguf: bool) -> Path | None:
    if mmproj is None:
        return None
    projector = Path(mmproj).expanduser()
    if not is_gguf:
        raise CheckpointError(
            f"an mmproj file ({projector}) goes with a GGUF language model; "
            "a safetensors directory holds its vision tower itself"
        )
    if not projector.is_file():
        raise CheckpointError(f"mmproj file {projector} does not exist")
    return projector


def _read(path: Path, is_gguf: bool, mmproj: Path | None) -> RawCheckpoint:
    if not is_gguf:
        return read_safetensors_dir(path)
    from engine.model.checkpoint.gguf_file import read_gguf  # gguf parsing is only needed for .gguf paths

    raw = read_gguf(path, GGUF_DECODERS)
    # A projector file is its language model's family's to join.
    return raw if mmproj is None else decoder_for_hf_config(raw.hf_config).with_projector(raw, mmproj)


def _restore(cache: PreparedCache, shapes: Any, shardings: Any) -> Any | None:
    """Parameters from the cache entry, or None (and a warning) if the entry cannot be restored."""
    log.info("restoring prepared parameters from %s", cache.entry)
    target = jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, shardings)
    try:
        return cache.restore(target)
    except Exception as e:  # orbax raises many types for damaged entries; the checkpoint itself is still good
        log.warning("ignoring unreadable prepared-parameter cache %s: %s", cache.entry, e)
        return None


def _prepare(parts: Iterator[tuple[str, Any]], shapes: Any, shardings: Any, progress: bool) -> dict[str, Any]:
    """Checks each converted entry against the model, casts it and places it shard by shard."""
    placed: dict[str, Any] = {}
    bar = tqdm(parts, total=len(shapes), desc="preparing weights", unit="part", disable=not progress)
    for name, host in bar:
        if name not in shapes:
            raise CheckpointError(f"checkpoint has parameters the model does not use: {name}")
        placed[name] = _place_entry(name, host, shapes[name], shardings[name])
    if missing := sorted(shapes.keys() - placed.keys()):
        raise CheckpointError(f"checkpoint lacks parameter {missing[0]}")
    return placed


def _place_entry(name: str, host: Any, shapes: Any, shardings: Any) -> Any:
    host_leaves = dict(jax.tree_util.tree_flatten_with_path(host)[0])
    expected = jax.tree_util.tree_flatten_with_path(shapes)[0]
    if unexpected := host_leaves.keys() - {key for key, _ in expected}:
        raise CheckpointError(f"checkpoint has parameters the model does not use: {_name(name, min(unexpected))}")
    placed = []
    for (key, shape), sharding in zip(expected, jax.tree.leaves(shardings), strict=True):
        if key not in host_leaves:
            raise CheckpointError(f"checkpoint lacks parameter {_name(name, key)}")
        tensor = host_leaves[key]
        if isinstance(tensor, BlockMatrix):
            tensor = tensor.fitted(shape.shape, _name(name, key))
        if tensor.shape != shape.shape:
            raise CheckpointError(
                f"parameter {_name(name, key)} has shape {tuple(tensor.shape)} but the config implies {shape.shape}"
            )
        placed.append(place(np.asarray(tensor), sharding, shape.dtype))  # a view: read slice by slice
    return jax.tree_util.tree_unflatten(jax.tree.structure(shapes), placed)


def _name(prefix: str, key: tuple[Any, ...]) -> str:
    return "/".join([prefix, *(str(getattr(k, "key", k)) for k in key)])
