"""`PrefixDisk`: the prefix cache's disk tier, so that a prompt prefilled once, even before a
restart, is read back instead of prefilled again.

An entry is one full KV page: its keys and values for every layer, as the runner stores them,
named by the page's chained content hash (engine/serving/kv_pages.py). Entries live in one folder per
namespace, a digest of everything that changes a page's numbers (the model file's fingerprint,
dtype, quantization, KV dtype, page size, RoPE and the rest of the model config), so another
model, or the same one served another way, never sees them. Each file holds a header (magic,
namespace, content hash, payload length), the payload and a checksum of the payload: a file that
is short, damaged or from another namespace is deleted and counts as a miss. Files are written
to a temporary name and renamed, so a crash leaves no half entry. The folder is capped in bytes:
the least recently used entries go first (a read counts as a use).

Threads: the engine thread calls `has_run` (which entries follow a prefix), `save` and `load`;
both only queue a job. One IO thread runs the jobs, loads first: a load reads its files and
hands the contents to `on_loaded` (the engine's intake, which wakes the engine thread); a save
writes files and evicts. The index of entries is shared under a lock, held only for index
updates, never across file IO.
"""

import hashlib
import logging
import os
import struct
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

_MAGIC = b"POOLEDKV1\n"
_HEADER = struct.Struct("<10s16s16sQ")  # magic, namespace, content hash, payload bytes
_CHECKSUM_BYTES = 16
_SUFFIX = ".kv"


def entry_bytes(page_bytes: int) -> int:
    """The size of one entry's file."""
    return _HEADER.size + page_bytes + _CHECKSUM_BYTES


def namespace_digest(parts: dict[str, object]) -> bytes:
    """A 16-byte digest of what a page's numbers depend on besides its tokens."""
    text = repr(sorted(parts.items()))
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


@dataclass(frozen=True)
class Loaded:
    """A finished load: the contents of the first entries of `hashes` that were found intact,
    in order (a missing or damaged entry ends the run)."""

    ticket: int
    hashes: Sequence[bytes]
    contents: list[bytes]


class PrefixDisk:
    def __init__(
        self, root: Path, namespace: bytes, page_bytes: int, cap_bytes: int, on_loaded: Callable[[Loaded], None]
    ) -> None:
        self._folder = root / namespace.hex()
        self._folder.mkdir(parents=True, exist_ok=True)
        self._namespace = namespace
        self._page_bytes = page_bytes
        self._entry_bytes = entry_bytes(page_bytes)
        self._cap_bytes = cap_bytes
        self._on_loaded = on_loaded
        self._lock = threading.Condition()
        self._index: OrderedDict[bytes, None] = OrderedDict()  # least recently used first
        self._loads: deque[tuple[int, Sequence[bytes]]] = deque()
        self._saves: deque[tuple[Sequence[bytes], list[bytes]]] = deque()
        self._queued: set[bytes] = set()  # hashes of queued saves
        self._stopping = False
        self._scan()
        self._thread = threading.Thread(target=self._run, name="prefix-disk", daemon=True)
        self._thread.start()

    @property
    def entries(self) -> int:
        with self._lock:
            return len(self._index)

    # --- the engine thread ------------------------------------------------------------------

    def has_run(self, hashes: Sequence[bytes]) -> int:
        """How many of `hashes`, from the first, have an entry (as far as the index knows)."""
        with self._lock:
            count = 0
            for content_hash in hashes:
                if content_hash not in self._index:
                    break
                count += 1
            return count

    def missing(self, hashes: Sequence[bytes]) -> list[int]:
        """The positions in `hashes` of those with no entry and no save queued."""
        with self._lock:
            return [i for i, h in enumerate(hashes) if h not in self._index and h not in self._queued]

    def load(self, ticket: int, hashes: Sequence[bytes]) -> None:
        with self._lock:
            self._loads.append((ticket, hashes))
            self._lock.notify()

    def save(self, hashes: Sequence[bytes], contents: list[bytes]) -> None:
        with self._lock:
            self._queued.update(hashes)
            self._saves.append((hashes, contents))
            self._lock.notify()

    def close(self) -> None:
        """Finishes the queued jobs and stops the IO thread."""
        with self._lock:
            self._stopping = True
            self._lock.notify()
        self._thread.join()

    # --- the IO thread ----------------------------------------------------------------------

    def _run(self) -> None:
        while (job := self._next_job()) is not None:
            try:
                job()
            except Exception:  # a disk error costs the cache, never the engine
                log.exception("prefix cache disk tier: job failed")

    def _next_job(self) -> Callable[[], None] | None:
        """The next job, loads first; None once stopping with nothing queued."""
        with self._lock:
            while not (self._loads or self._saves or self._stopping):
                self._lock.wait()
            if self._loads:
                ticket, hashes = self._loads.popleft()
                return lambda: self._on_loaded(Loaded(ticket, hashes, self._read_run(hashes)))
            if self._saves:
                hashes, contents = self._saves.popleft()
                return lambda: self._write_all(hashes, contents)
            return None

    def _read_run(self, hashes: Sequence[bytes]) -> list[bytes]:
        contents = []
        for content_hash in hashes:
            payload = self._read(content_hash)
            if payload is None:
                break
            contents.append(payload)
        return contents

    def _read(self, content_hash: bytes) -> bytes | None:
        path = self._path(content_hash)
        try:
            data = path.read_bytes()
        except OSError:
            self._forget(content_hash)
            return None
        payload = self._payload(data, content_hash)
        if payload is None:
            log.warning("prefix cache disk tier: ignoring and removing damaged entry %s", path.name)
            self._remove(content_hash)
            return None
        os.utime(path)  # the folder's least-recently-used order survives a restart
        with self._lock:
            if content_hash in self._index:
                self._index.move_to_end(content_hash)
        return payload

    def _payload(self, data: bytes, content_hash: bytes) -> bytes | None:
        if len(data) != self._entry_bytes:
            return None
        magic, namespace, stored_hash, length = _HEADER.unpack_from(data)
        if (magic, namespace, stored_hash, length) != (_MAGIC, self._namespace, content_hash, self._page_bytes):
            return None
        payload = data[_HEADER.size : _HEADER.size + length]
        if hashlib.blake2b(payload, digest_size=_CHECKSUM_BYTES).digest() != data[_HEADER.size + length :]:
            return None
        return payload

    def _write_all(self, hashes: Sequence[bytes], contents: list[bytes]) -> None:
        try:
            for content_hash, payload in zip(hashes, contents, strict=True):
                self._write(content_hash, payload)
        finally:
            with self._lock:
                self._queued.difference_update(hashes)

    def _write(self, content_hash: bytes, payload: bytes) -> None:
        with self._lock:
            if content_hash in self._index:
                return
        header = _HEADER.pack(_MAGIC, self._namespace, content_hash, len(payload))
        checksum = hashlib.blake2b(payload, digest_size=_CHECKSUM_BYTES).digest()
        path = self._path(content_hash)
        staging = path.with_suffix(".tmp")
        staging.write_bytes(header + payload + checksum)
        os.replace(staging, path)
        with self._lock:
            self._index[content_hash] = None
        self._evict()

    def _evict(self) -> None:
        while True:
            with self._lock:
                if len(self._index) * self._entry_bytes <= self._cap_bytes or not self._index:
                    return
                oldest = next(iter(self._index))
            self._remove(oldest)

    def _remove(self, content_hash: bytes) -> None:
        self._forget(content_hash)
        self._path(content_hash).unlink(missing_ok=True)

    def _forget(self, content_hash: bytes) -> None:
        with self._lock:
            self._index.pop(content_hash, None)

    def _path(self, content_hash: bytes) -> Path:
        return self._folder / f"{content_hash.hex()}{_SUFFIX}"

    def _scan(self) -> None:
        """Indexes the folder's entries, least recently used first; stray staging files go."""
        entries = []
        for path in self._folder.iterdir():
            if path.suffix == ".tmp":
                path.unlink(missing_ok=True)
                continue
            try:
                content_hash = bytes.fromhex(path.stem)
                stat = path.stat()
            except (ValueError, OSError):
                continue
            if path.suffix == _SUFFIX and len(content_hash) == 16 and stat.st_size == self._entry_bytes:
                entries.append((stat.st_mtime_ns, content_hash))
        for _, content_hash in sorted(entries):
            self._index[content_hash] = None
        self._evict()
