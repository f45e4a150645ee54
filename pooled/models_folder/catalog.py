"""The model catalog: models pooled knows how to fetch, each with the files, digests and sizes that
make a download checkable, and what serving it takes.

The shipped catalog is `pooled/models_folder/catalog.toml` (package data). A user's file of the same shape goes
over it: an entry with the same id replaces the shipped one whole, new ids are added. Every entry
is checked when it is read, so a download never starts from a malformed one: a bad file is a
CatalogError naming the file and the entry.

The TOML shape, one `[[model]]` table an entry, one `[[model.file]]` table a file:

    [[model]]
    id = "smollm2-135m-instruct-q4_1"   # the folder's name under the models folder
    family = "llama"
    format = "gguf"                      # or "safetensors"
    trained_ctx = 8192
    licence = "Apache-2.0"
    memory_bytes = 555541568             # see below

    [model.serving]                      # optional: settings the entry is served with
    max_output_tokens = 512              # a setting's name and value, as in --config's file
    reason = "why the model needs them"  # shown in the banner and /v1/config/origins

    [[model.file]]
    name = "SmolLM2-135M-Instruct.Q4_1.gguf"   # a path inside the entry's folder
    url = "https://huggingface.co/{repo}/resolve/{revision}/{file}"
    sha256 = "b179c952..."                     # 64 hex digits
    size = 98362432                            # bytes

`memory_bytes` is what serving the entry needs, stated by whoever writes the entry by this rule:
the files' bytes (the weights as the engine holds them: a GGUF's blocks are served as they are),
plus the KV cache of one sequence of `trained_ctx` tokens in bfloat16 (2 × layers × KV heads ×
head size × 2 bytes a token; none for an encoder), plus 256 MiB for the runtime (XLA, compiled
programs, buffers). The size class follows from it (`size_class_of`), so it is not stated.

`[model.serving]` holds the entry's own defaults: whenever the entry is served (`pooled serve`
with no `--model` for the default model, `--model ID`, a switch), each setting it names takes its
value unless a flag, a `POOLED_*` variable or the config file sets it. Only settings that apply
while serving (`live`) may be named: a switch to the entry applies them without a reload.
"""

import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any, Literal, TypeVar, cast

from pooled.configuration.setting_sources import BY_NAME, ModelDefaults, expects, from_data
from pooled.human_units import human_size

GIB = 1 << 30

# Size classes by the memory serving needs: upper bounds (exclusive), the last has none.
SIZE_CLASSES: tuple[tuple[str, float], ...] = (
    ("tiny", 1 * GIB),
    ("small", 4 * GIB),
    ("medium", 16 * GIB),
    ("large", math.inf),
)

FORMATS = ("gguf", "safetensors")
_ID = re.compile(r"[a-z0-9][a-z0-9._-]*")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_ENTRY_KEYS = {"id", "family", "format", "trained_ctx", "licence", "memory_bytes", "file", "serving"}
_SERVING_REASON = "reason"
_FILE_KEYS = {"name", "url", "sha256", "size"}
# Names the models folder's own bookkeeping uses inside an entry's folder (pooled/models_folder/models_dir.py).
RESERVED_SUFFIX = ".part"
RESERVED_NAMES = (".verified", ".verified.tmp", ".lock")

T = TypeVar("T")
_KINDS: dict[type, str] = {int: "an integer", str: "a string"}


class CatalogError(ValueError):
    """A catalog file that cannot be used: the message names the file and the entry."""


@dataclass(frozen=True)
class CatalogFile:
    name: str  # path inside the entry's folder, e.g. "model.gguf" or "1_Pooling/config.json"
    url: str
    # Lower-case hex. None only for a file whose digest nobody published (`pooled pull URL` without
    # --sha256): its download computes one and records it; a catalog file always has one.
    sha256: str | None
    size: int  # bytes


@dataclass(frozen=True)
class CatalogEntry:
    id: str
    family: str
    format: Literal["gguf", "safetensors"]
    files: tuple[CatalogFile, ...]
    trained_ctx: int
    licence: str
    size_class: str  # by memory_bytes: SIZE_CLASSES
    memory_bytes: int  # weights + one trained_ctx sequence's KV cache + runtime (the module's rule)
    serving: ModelDefaults | None = None  # its [model.serving] table

    @property
    def size(self) -> int:
        """Bytes of all its files: what a download fetches."""
        return sum(file.size for file in self.files)

    def folder(self, models_dir: Path) -> Path:
        return models_dir / self.id

    def model_path(self, models_dir: Path) -> Path:
        """What the loader takes: the .gguf file of a GGUF entry, the folder of a safetensors one."""
        if self.format == "gguf":
            gguf = next(file for file in self.files if file.name.endswith(".gguf"))
            return self.folder(models_dir) / gguf.name
        return self.folder(models_dir)


def size_class_of(memory_bytes: int) -> str:
    return next(name for name, bound in SIZE_CLASSES if memory_bytes < bound)


def shipped_catalog_text() -> str:
    return resources.files("pooled.models_folder").joinpath("catalog.toml").read_text(encoding="utf-8")


def load_catalog(user_file: Path | None = None) -> dict[str, CatalogEntry]:
    """The shipped catalog with the user's file (same TOML shape) over it: an entry of the same id
    replaces the shipped one. A user file that does not exist is an error too (a caller with a
    default location checks it exists first)."""
    catalog = parse_catalog(shipped_catalog_text(), "pooled/models_folder/catalog.toml")
    if user_file is not None:
        try:
            text = user_file.read_text(encoding="utf-8")
        except OSError as error:
            raise CatalogError(f"{user_file}: cannot read the catalog: {error.strerror or error}") from error
        catalog.update(parse_catalog(text, str(user_file)))
    return catalog


def parse_catalog(text: str, source: str) -> dict[str, CatalogEntry]:
    """The entries of one catalog file's text; `source` names it in errors."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise CatalogError(f"{source}: not valid TOML: {error}") from error
    unknown = set(document) - {"model"}
    if unknown:
        raise CatalogError(f"{source}: unknown top-level keys {sorted(unknown)} (entries are [[model]] tables)")
    models = document.get("model", [])
    if not isinstance(models, list) or not all(isinstance(model, dict) for model in models):
        raise CatalogError(f"{source}: `model` must be an array of tables ([[model]])")
    entries: dict[str, CatalogEntry] = {}
    for index, table in enumerate(models):
        label = f"model {table['id']!r}" if isinstance(table.get("id"), str) else f"model #{index + 1}"
        entry = _entry(table, _Where(source, label))
        if entry.id in entries:
            raise CatalogError(f"{source}: {label}: the id appears twice in this file")
        entries[entry.id] = entry
    return entries


@dataclass(frozen=True)
class _Where:
    source: str
    label: str

    def error(self, problem: str) -> CatalogError:
        return CatalogError(f"{self.source}: {self.label}: {problem}")


def _entry(table: Mapping[str, Any], where: _Where) -> CatalogEntry:
    unknown = set(table) - _ENTRY_KEYS
    if unknown:
        raise where.error(f"unknown keys {sorted(unknown)}")
    entry_id = _field(table, "id", str, where)
    if not _ID.fullmatch(entry_id):
        raise where.error("id must be lower-case letters, digits, '.', '_' or '-' (it names a folder)")
    family = _field(table, "family", str, where)
    form = _field(table, "format", str, where)
    if form not in FORMATS:
        raise where.error(f"format {form!r} is not one of {', '.join(FORMATS)}")
    trained_ctx = _positive(table, "trained_ctx", where)
    licence = _field(table, "licence", str, where)
    memory_bytes = _positive(table, "memory_bytes", where)
    raw_files = table.get("file")
    if not isinstance(raw_files, list) or not raw_files or not all(isinstance(f, dict) for f in raw_files):
        raise where.error("needs at least one [[model.file]] table")
    files = tuple(_file(raw, _Where(where.source, f"{where.label} file #{n + 1}")) for n, raw in enumerate(raw_files))
    names = [file.name for file in files]
    if len(set(names)) != len(names):
        raise where.error("a file name appears twice")
    size = sum(file.size for file in files)
    if memory_bytes < size:
        raise where.error(f"memory_bytes {memory_bytes} is below the files' own {size} bytes")
    if form == "gguf" and sum(name.endswith(".gguf") for name in names) != 1:
        raise where.error("a gguf entry has exactly one .gguf file")
    if form == "safetensors" and not any(name.endswith(".safetensors") for name in names):
        raise where.error("a safetensors entry has at least one .safetensors file")
    serving_where = _Where(where.source, f"{where.label} [model.serving]")
    serving = None if "serving" not in table else _serving(table["serving"], entry_id, serving_where)
    return CatalogEntry(
        id=entry_id,
        family=family,
        format=cast(Literal["gguf", "safetensors"], form),
        files=files,
        trained_ctx=trained_ctx,
        licence=licence,
        size_class=size_class_of(memory_bytes),
        memory_bytes=memory_bytes,
        serving=serving,
    )


def _serving(table: Any, entry_id: str, where: _Where) -> ModelDefaults:
    if not isinstance(table, dict):
        raise where.error("must be a table ([model.serving])")
    reason = _field(table, _SERVING_REASON, str, where)
    values: dict[str, Any] = {}
    for name, data in table.items():
        if name == _SERVING_REASON:
            continue
        if name not in BY_NAME:
            raise where.error(f"{name!r} is not a setting (docs/configuration.md lists them)")
        if BY_NAME[name].metadata["change"] != "live":
            raise where.error(f"{name!r} applies only at a reload or restart; an entry's defaults must apply live")
        try:
            values[name] = from_data(name, data)
        except ValueError:
            raise where.error(f"{name!r} takes {expects(name)}, not {data!r}") from None
    if not values:
        raise where.error("names no setting")
    return ModelDefaults(entry_id, values, reason)


def _file(table: Mapping[str, Any], where: _Where) -> CatalogFile:
    unknown = set(table) - _FILE_KEYS
    if unknown:
        raise where.error(f"unknown keys {sorted(unknown)}")
    name = _field(table, "name", str, where)
    where = _Where(where.source, f"{where.label} ({name!r})")
    path = PurePosixPath(name)
    if not name or path.is_absolute() or "\\" in name or any(part in ("", ".", "..") for part in name.split("/")):
        raise where.error("name must be a relative path inside the entry's folder, without '.' or '..'")
    if name.endswith(RESERVED_SUFFIX) or path.name in RESERVED_NAMES:
        raise where.error(f"names ending {RESERVED_SUFFIX} and {', '.join(RESERVED_NAMES)} are the folder's own")
    url = _field(table, "url", str, where)
    if not url.startswith(("https://", "http://")):
        raise where.error(f"url {url!r} is not http(s)")
    digest = _field(table, "sha256", str, where).lower()
    if not _SHA256.fullmatch(digest):
        raise where.error(f"sha256 {digest!r} is not 64 hex digits")
    return CatalogFile(name=name, url=url, sha256=digest, size=_positive(table, "size", where))


def _field(table: Mapping[str, Any], key: str, kind: type[T], where: _Where) -> T:
    if key not in table:
        raise where.error(f"missing {key!r}")
    value = table[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise where.error(f"{key!r} must be {_KINDS.get(kind, kind.__name__)}, not {value!r}")
    if isinstance(value, str) and not value.strip():
        raise where.error(f"{key!r} is empty")
    return value


def _positive(table: Mapping[str, Any], key: str, where: _Where) -> int:
    value = _field(table, key, int, where)
    if value <= 0:
        raise where.error(f"{key!r} must be positive, not {value}")
    return value


def memory_available() -> int | None:
    """Bytes of memory available to a new process now: /proc/meminfo's MemAvailable on Linux (free
    plus what the kernel can reclaim), else the free physical pages sysconf reports; None when
    neither says."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def availability(entry: CatalogEntry, available: int | None = None) -> tuple[bool, str | None]:
    """Whether this machine can serve the entry: its memory_bytes against the host memory available
    now (`available`, default memory_available()). An accelerator's own memory is not consulted:
    the engine sizes its KV cache to what the device has. Unknown memory counts as enough."""
    if available is None:
        available = memory_available()
    if available is None or entry.memory_bytes <= available:
        return True, None
    return False, (
        f"{entry.id} needs {human_size(entry.memory_bytes)} ({entry.memory_bytes} bytes) of memory; "
        f"{human_size(available)} ({available} bytes) is available now"
    )
