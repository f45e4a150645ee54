"""CTranslate2's `model.bin`, read with numpy (no ctranslate2 at run time).

The file, little-endian: the binary version (uint32), the spec's name (a
string: uint16 length counting its NUL, the bytes, the NUL) and its revision (uint32); the
variable count (uint32) and each variable: its name, its rank (uint8) and dimensions (uint32
each), its type id (uint8: float32, int8, int16, int32, float16, bfloat16), its byte count
(uint32) and its bytes; then the alias count (uint32) and each alias's name then
the variable it stands for. A quantized weight `X/weight` (int8 or int16) comes with
`X/weight_scale`, and its float value is the integers divided by their row's scale.
"""

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np

from engine.errors import CheckpointError

_TYPES: tuple[np.dtype, ...] = tuple(
    np.dtype(t) for t in (np.float32, np.int8, np.int16, np.int32, np.float16, ml_dtypes.bfloat16)
)
# 4 began writing type ids and byte counts (every version since has aliases); 5 and 6 kept the layout.
SUPPORTED_VERSIONS = range(4, 7)


@dataclass(frozen=True)
class ModelBin:
    spec: str  # e.g. "WhisperSpec"
    revision: int
    variables: dict[str, np.ndarray]  # float weights as float32, scalars and flags as stored


class _Reader:
    def __init__(self, data: mmap.mmap | bytes, path: Path):
        self.data, self.path, self.offset = data, path, 0

    def unpack(self, fmt: str) -> tuple[int, ...]:
        size = struct.calcsize(fmt)
        if self.offset + size > len(self.data):
            raise CheckpointError(f"{self.path} is truncated at byte {self.offset}")
        values = struct.unpack_from(fmt, self.data, self.offset)
        self.offset += size
        return values

    def string(self) -> str:
        (length,) = self.unpack("<H")
        raw = self.take(length)
        return bytes(raw[:-1]).decode("utf-8")

    def take(self, count: int) -> memoryview:
        if self.offset + count > len(self.data):
            raise CheckpointError(f"{self.path} is truncated at byte {self.offset}")
        view = memoryview(self.data)[self.offset : self.offset + count]
        self.offset += count
        return view


def read_spec_name(path: Path) -> str | None:
    """The spec name in a model.bin's header (cheap: the first bytes only), or None where the file
    is not one CTranslate2 writes."""
    with path.open("rb") as f:
        head = f.read(512)
    reader = _Reader(head, path)
    try:
        (version,) = reader.unpack("<I")
        return reader.string() if version in SUPPORTED_VERSIONS else None
    except (CheckpointError, UnicodeDecodeError):
        return None


def read_model_bin(path: Path) -> ModelBin:
    """Every variable of a model.bin, aliases resolved, quantized weights dequantized to float32."""
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        reader = _Reader(data, path)
        (version,) = reader.unpack("<I")
        if version not in SUPPORTED_VERSIONS:
            raise CheckpointError(f"{path}: CTranslate2 binary version {version} is not supported")
        spec = reader.string()
        (revision,) = reader.unpack("<I")
        (count,) = reader.unpack("<I")
        raw: dict[str, np.ndarray] = {}
        for _ in range(count):
            name = reader.string()
            (rank,) = reader.unpack("<B")
            shape = reader.unpack(f"<{rank}I")
            type_id, size = reader.unpack("<BI")
            if type_id >= len(_TYPES):
                raise CheckpointError(f"{path}: variable {name!r} has unknown type id {type_id}")
            dtype = _TYPES[type_id]
            if size != int(np.prod(shape)) * dtype.itemsize:
                raise CheckpointError(f"{path}: variable {name!r} has {size} bytes for shape {shape} of {dtype}")
            # Copied out of the map: the file closes here, and every weight is converted anyway.
            raw[name] = np.frombuffer(reader.take(size), dtype=dtype).reshape(shape).copy()
        (count,) = reader.unpack("<I")
        aliases = [(reader.string(), reader.string()) for _ in range(count)]
    variables = _dequantized(raw)
    for alias, target in aliases:
        if target not in variables:
            raise CheckpointError(f"{path}: alias {alias!r} names a missing variable {target!r}")
        variables[alias] = variables[target]
    return ModelBin(spec, revision, variables)


def _dequantized(raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    variables: dict[str, np.ndarray] = {}
    for name, value in raw.items():
        if name.endswith("_scale") and name[: -len("_scale")] in raw:
            continue
        scale = raw.get(f"{name}_scale")
        if scale is not None and value.dtype in (np.int8, np.int16):
            scale = scale.astype(np.float32).reshape(-1, *([1] * (value.ndim - 1)))
            variables[name] = value.astype(np.float32) / scale
        elif value.dtype.kind == "f" or value.dtype == ml_dtypes.bfloat16:
            variables[name] = value.astype(np.float32)
        else:
            variables[name] = value
    return variables
