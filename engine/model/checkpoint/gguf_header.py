"""A GGUF file's header, read fast: its metadata values and its tensors, each tensor's data a view
of one read-only memory map of the file.

gguf-py's `GGUFReader` makes a numpy view of every part of every metadata value: for a vocabulary
of 49k tokens and as many merges, about half a million views, two seconds of a small CPU's start.
This reads the same header with `struct` from the mapped bytes, and gives the values as
`ReaderField.contents()` gives them (numbers, strings, lists) and the tensors as `ReaderTensor`
shapes them (`shape` as the file lists the dimensions, innermost first; `data` in numpy's order,
a quantized tensor as uint8 rows of its blocks).

Every GGUF reader starts here: `open_reader` (the magic checked, a corrupt file a CheckpointError),
`read_gguf_metadata`, and `gguf_architecture` from the first bytes alone.
"""

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType
from gguf.quants import quant_shape_to_byte_shape

from engine.errors import CheckpointError

GGUF_MAGIC = b"GGUF"

DEFAULT_ALIGNMENT = 32

# Scalar value types: struct format (little-endian).
_SCALARS = {
    GGUFValueType.UINT8: "<B",
    GGUFValueType.INT8: "<b",
    GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I",
    GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f",
    GGUFValueType.BOOL: "<?",
    GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q",
    GGUFValueType.FLOAT64: "<d",
}
# Tensor types numpy holds as numbers; every other type is blocks, held as bytes.
_NUMPY_TYPES = {
    GGMLQuantizationType.F16: np.float16,
    GGMLQuantizationType.F32: np.float32,
    GGMLQuantizationType.F64: np.float64,
    GGMLQuantizationType.I8: np.int8,
    GGMLQuantizationType.I16: np.int16,
    GGMLQuantizationType.I32: np.int32,
    GGMLQuantizationType.I64: np.int64,
}


@dataclass(frozen=True)
class HeaderTensor:
    name: str
    tensor_type: GGMLQuantizationType
    shape: np.ndarray  # the dimensions as the file lists them, innermost first
    n_elements: int
    n_bytes: int
    data: np.ndarray  # read-only, in numpy's order (blocks: uint8 rows)


@dataclass(frozen=True)
class GGUFHeader:
    fields: dict[str, Any]  # metadata key → value
    tensors: list[HeaderTensor]


class _Cursor:
    """Reads the header's values in order from the mapped bytes."""

    def __init__(self, data: mmap.mmap) -> None:
        self.data, self.offset = data, 0

    def scalar(self, kind: GGUFValueType) -> Any:
        fmt = _SCALARS[kind]
        (value,) = struct.unpack_from(fmt, self.data, self.offset)
        self.offset += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        (length,) = struct.unpack_from("<Q", self.data, self.offset)
        start = self.offset + 8
        if start + length > len(self.data):
            raise ValueError("a string runs past the end of the file")
        self.offset = start + length
        return self.data[start : self.offset].decode("utf-8")

    def value(self, kind: GGUFValueType) -> Any:
        if kind == GGUFValueType.STRING:
            return self.string()
        if kind != GGUFValueType.ARRAY:
            return self.scalar(kind)
        item_kind = GGUFValueType(self.scalar(GGUFValueType.UINT32))
        count = self.scalar(GGUFValueType.UINT64)
        if item_kind in _SCALARS and item_kind != GGUFValueType.BOOL:
            dtype = np.dtype(_SCALARS[item_kind])
            items = np.frombuffer(self.data, dtype, count, self.offset)  # ValueError past the end
            self.offset += count * dtype.itemsize
            return items.tolist()
        return [self.value(item_kind) for _ in range(count)]

    def skip(self, kind: GGUFValueType) -> None:
        """Past a value without decoding it (a string array still takes a read of each length)."""
        if kind == GGUFValueType.STRING:
            self.offset += 8 + struct.unpack_from("<Q", self.data, self.offset)[0]
            return
        if kind != GGUFValueType.ARRAY:
            self.offset += struct.calcsize(_SCALARS[kind])
            return
        item_kind = GGUFValueType(self.scalar(GGUFValueType.UINT32))
        count = self.scalar(GGUFValueType.UINT64)
        if item_kind in _SCALARS:
            self.offset += count * struct.calcsize(_SCALARS[item_kind])
            return
        for _ in range(count):
            self.skip(item_kind)


def read_header(path: Path) -> GGUFHeader:
    """The header of the GGUF file at `path` (magic already checked). ValueError, struct.error or
    UnicodeDecodeError when it is truncated or corrupt."""
    with open(path, "rb") as file:
        data = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    cursor = _Cursor(data)
    cursor.offset = 4  # the magic
    version = cursor.scalar(GGUFValueType.UINT32)
    if version not in (2, 3):
        raise ValueError(f"GGUF version {version} is not read here (2 and 3 are)")
    tensor_count = cursor.scalar(GGUFValueType.UINT64)
    field_count = cursor.scalar(GGUFValueType.UINT64)
    fields: dict[str, Any] = {}
    for _ in range(field_count):
        key = cursor.string()
        fields[key] = cursor.value(GGUFValueType(cursor.scalar(GGUFValueType.UINT32)))
    infos: list[_TensorInfo] = []
    for _ in range(tensor_count):
        name = cursor.string()
        dimensions = [cursor.scalar(GGUFValueType.UINT64) for _ in range(cursor.scalar(GGUFValueType.UINT32))]
        kind = GGMLQuantizationType(cursor.scalar(GGUFValueType.UINT32))
        infos.append((name, dimensions, kind, cursor.scalar(GGUFValueType.UINT64)))
    alignment = fields.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise ValueError(f"invalid alignment {alignment!r}: must be a power of two")
    start = -(-cursor.offset // alignment) * alignment
    return GGUFHeader(fields, _tensors(data, infos, start))


_TensorInfo = tuple[str, list[int], GGMLQuantizationType, int]  # name, dimensions, type, data offset


def _tensors(data: mmap.mmap, infos: list[_TensorInfo], start: int) -> list[HeaderTensor]:
    tensors: list[HeaderTensor] = []
    names: set[str] = set()
    for name, dimensions, kind, offset in infos:
        if name in names:
            raise ValueError(f"duplicated tensor {name}")
        names.add(name)
        elements = int(np.prod(dimensions))
        block_size, type_size = GGML_QUANT_SIZES[kind]
        n_bytes = elements * type_size // block_size
        numpy_shape = tuple(reversed(dimensions))
        if kind in _NUMPY_TYPES:
            array = np.frombuffer(data, _NUMPY_TYPES[kind], elements, start + offset)
        else:
            array = np.frombuffer(data, np.uint8, n_bytes, start + offset)
            numpy_shape = quant_shape_to_byte_shape(numpy_shape, kind)
        shape = np.asarray(dimensions, np.uint64)
        tensors.append(HeaderTensor(name, kind, shape, elements, n_bytes, array.reshape(numpy_shape)))
    return tensors


def open_reader(path: Path) -> GGUFHeader:
    _check_magic(path)
    try:
        return read_header(path)
    except _CORRUPT as error:
        raise _corrupt(path, error) from error


# What reading a truncated or corrupt header raises.
_CORRUPT = (ValueError, IndexError, KeyError, OverflowError, UnicodeDecodeError, struct.error)


def _corrupt(path: Path, error: Exception) -> CheckpointError:
    return CheckpointError(f"{path}: truncated or corrupt GGUF file ({' '.join(str(error).split())})")


def _check_magic(path: Path) -> None:
    try:
        with open(path, "rb") as file:
            magic = file.read(len(GGUF_MAGIC))
    except OSError as error:
        raise CheckpointError(f"{path}: cannot open GGUF file: {error.strerror}") from error
    if magic != GGUF_MAGIC:
        raise CheckpointError(f"{path}: not a GGUF file (bad magic {magic!r})")


_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # GGUF value types
_STRING = 8


def gguf_architecture(path: Path) -> str | None:
    """A GGUF file's `general.architecture`, read from its header alone (parsing the whole
    metadata, a vocabulary of 49k tokens, took 5.5 s); None where the header does not give it
    before an array value."""
    try:
        with open(path, "rb") as file:
            magic, version, _, count = struct.unpack("<4sIQQ", file.read(24))
            if magic != GGUF_MAGIC or version not in (2, 3):
                return None
            for _ in range(count):
                key = file.read(struct.unpack("<Q", file.read(8))[0]).decode()
                kind = struct.unpack("<I", file.read(4))[0]
                if kind == _STRING:
                    value = file.read(struct.unpack("<Q", file.read(8))[0])
                    if key == "general.architecture":
                        return value.decode()
                elif kind in _SCALAR_BYTES:
                    file.read(_SCALAR_BYTES[kind])
                else:
                    return None
    except (OSError, struct.error, UnicodeDecodeError):
        return None
    return None


def read_gguf_scalars(path: Path, prefix: str) -> dict[str, Any]:
    """The metadata entries whose keys start with `prefix` and whose values are not arrays, every
    other value skipped undecoded: for the default model a third of `read_header`'s time, most of
    it stepping over the vocabulary's strings. A file that is no GGUF, or a truncated one, is a
    CheckpointError."""
    _check_magic(path)
    found: dict[str, Any] = {}
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        cursor = _Cursor(data)
        cursor.offset = 4  # the magic
        try:
            version = cursor.scalar(GGUFValueType.UINT32)
            if version not in (2, 3):
                raise ValueError(f"GGUF version {version} is not read here (2 and 3 are)")
            cursor.offset += 8  # the tensor count
            for _ in range(cursor.scalar(GGUFValueType.UINT64)):
                key = cursor.string()
                kind = GGUFValueType(cursor.scalar(GGUFValueType.UINT32))
                if key.startswith(prefix) and kind != GGUFValueType.ARRAY:
                    found[key] = cursor.value(kind)
                else:
                    cursor.skip(kind)
        except _CORRUPT as error:
            raise _corrupt(path, error) from error
    return found


def read_gguf_metadata(path: Path, prefix: str = "") -> dict[str, Any]:
    """The metadata entries whose keys start with `prefix` (e.g. "tokenizer."), without tensors."""
    return reader_metadata(open_reader(path), path, prefix)


def reader_metadata(reader: GGUFHeader, path: Path, prefix: str = "") -> dict[str, Any]:
    try:
        return {key: value for key, value in reader.fields.items() if key.startswith(prefix)}
    except (ValueError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path}: corrupt GGUF metadata ({' '.join(str(error).split())})") from error
