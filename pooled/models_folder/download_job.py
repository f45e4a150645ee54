"""One download of a catalog entry into the models folder: resumable, checked, retried.

Each file of an entry is fetched in order into `<name>.part` by a streaming GET (httpx). A part
left by a cancelled, failed or killed download is resumed with `Range: bytes=N-`: a 206 appends, a
200 (a server that ignores Range) truncates and starts over; a part already at its size goes to
the check without a request (as a 416 for it would). The part's bytes are hashed as they are
written (an existing part's are hashed once first), so the sha256 check after the last byte is not
a second read; a match renames the part to its final name and records the digest
(pooled/models_folder/models_dir.py), a mismatch deletes the part, which can never become right. A
file with no known digest (`pooled pull URL` without --sha256) is checked by its size only and
records the digest computed. A dropped connection, a stall (no bytes for `stall_timeout_s`), a 5xx
or a 429 is retried after an exponential backoff, at most `retries` times in a row: an attempt that
brought bytes starts the count again. Any other HTTP status, a disk that is full (the part is kept
for a later start), more bytes than the catalog's size, or a digest mismatch ends the download as
failed, its reason in the progress.

Threads: a job runs on one thread (the Downloader's, pooled/models_folder/downloads.py, or the
caller's in `download()`, for `pooled pull`); only that thread touches the entry's files and the
HTTP client. Other threads read `snapshot()`, taken under the job's lock, and cancel by setting
the job's Event, checked between chunks (and while it waits to retry); a read in progress ends
with its chunk, at the latest at the stall timeout. Two processes downloading the same entry would
write the same parts: a download holds an exclusive lock on `<folder>/.lock` (POSIX flock) and
fails at once where another holds it.
"""

import contextlib
import errno
import hashlib
import logging
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

import httpx

try:
    import fcntl
except ImportError:  # not POSIX
    fcntl = None  # type: ignore[assignment]

from pooled.models_folder.catalog import CatalogEntry, CatalogFile
from pooled.models_folder.models_dir import (
    HASH_CHUNK,
    LOCK,
    file_path,
    is_verified,
    part_path,
    read_verified,
    record_verified,
    sha256_file,
)

log = logging.getLogger(__name__)


RATE_WINDOW_S = 5.0  # the rate is the bytes of the last few seconds over their time
PROGRESS_EVERY_S = 0.1  # on_progress at most this often while bytes arrive (and at the end)
MAX_BACKOFF_S = 60.0

State = Literal["running", "done", "failed", "cancelled"]
ProgressCallback = Callable[["DownloadProgress"], None]


@dataclass(frozen=True)
class DownloadProgress:
    id: str
    state: State
    bytes: int  # of the entry on disk, resumed parts included
    total: int
    rate_bytes_per_s: float
    eta_s: float | None
    error: str | None  # failed: the reason
    file: str | None = None  # the file being fetched, or the last one


def download(
    entry: CatalogEntry,
    models_dir: Path,
    on_progress: ProgressCallback | None = None,
    *,
    retries: int = 5,
    backoff_s: float = 1.0,
    stall_timeout_s: float = 30.0,
    transport: httpx.BaseTransport | None = None,
    cancel: threading.Event | None = None,
) -> DownloadProgress:
    """The Downloader's work in the calling thread: `on_progress` is called as bytes arrive (at most
    every PROGRESS_EVERY_S) and once at the end; the final progress is returned. A
    KeyboardInterrupt goes through to the caller, the part kept for the next start."""
    options = DownloadOptions(retries, backoff_s, stall_timeout_s, transport)
    return DownloadJob(entry, models_dir, options, cancel or threading.Event(), on_progress).run()


@dataclass(frozen=True)
class DownloadOptions:
    retries: int
    backoff_s: float
    stall_timeout_s: float
    transport: httpx.BaseTransport | None


class _Failed(Exception):
    """The download cannot finish: the message is the progress's error."""


class _Retry(Exception):
    """An attempt that may succeed if made again (a dropped connection, a stall, a 5xx or 429)."""


class _Cancelled(Exception):
    pass


class _PartHash:
    """The sha256 of a part's first `offset` bytes, kept across attempts at one file."""

    def __init__(self) -> None:
        self.offset = 0
        self.digest = hashlib.sha256()

    def reset(self) -> None:
        self.offset = 0
        self.digest = hashlib.sha256()

    def update(self, chunk: bytes) -> None:
        self.digest.update(chunk)
        self.offset += len(chunk)

    def catch_up(self, part: Path, size: int) -> None:
        """Hash the part's bytes where this hash does not cover them (a part from an earlier run,
        or one a failed write left longer than what was hashed)."""
        if self.offset == size:
            return
        self.reset()
        if size == 0:
            return
        with part.open("rb") as stream:
            while chunk := stream.read(HASH_CHUNK):
                self.update(chunk)


class _Rate:
    """Bytes a second over the last RATE_WINDOW_S."""

    def __init__(self) -> None:
        self._samples: deque[tuple[float, int]] = deque()

    def add(self, now: float, transferred: int) -> None:
        if len(self._samples) >= 2 and now - self._samples[-2][0] < 0.05:  # at most ~20 samples a second
            self._samples[-1] = (now, transferred)
        else:
            self._samples.append((now, transferred))
        self._prune(now)

    def rate(self, now: float) -> float:
        self._prune(now)
        if len(self._samples) < 2:
            return 0.0
        (start, first), (_, last) = self._samples[0], self._samples[-1]
        elapsed = now - start
        return (last - first) / elapsed if elapsed > 0 else 0.0

    def _prune(self, now: float) -> None:
        while len(self._samples) > 2 and self._samples[1][0] <= now - RATE_WINDOW_S:
            self._samples.popleft()


class DownloadJob:
    """One download of one entry; `run` does it in the calling thread."""

    def __init__(
        self,
        entry: CatalogEntry,
        models_dir: Path,
        options: DownloadOptions,
        cancel: threading.Event,
        on_progress: ProgressCallback | None,
    ) -> None:
        self.entry = entry
        self.models_dir = models_dir
        self.options = options
        self.cancel = cancel
        self._on_progress = on_progress
        self._lock = threading.Lock()
        self._state: State = "running"
        self._error: str | None = None
        self._file: str | None = None
        self._bytes = 0
        self._transferred = 0
        self._rate = _Rate()
        self._last_report = 0.0

    @property
    def running(self) -> bool:
        return self._state == "running"

    def snapshot(self) -> DownloadProgress:
        with self._lock:
            total = self.entry.size
            rate = self._rate.rate(time.monotonic()) if self._state == "running" else 0.0
            eta = (total - self._bytes) / rate if rate > 0 else None
            return DownloadProgress(
                id=self.entry.id,
                state=self._state,
                bytes=self._bytes,
                total=total,
                rate_bytes_per_s=rate,
                eta_s=eta,
                error=self._error,
                file=self._file,
            )

    def run(self) -> DownloadProgress:
        state: State = "failed"
        error: str | None = None
        try:
            with self._folder_lock():
                self._fetch_all()
            state = "done"
        except _Cancelled:
            state = "cancelled"
        except _Failed as failure:
            error = str(failure)
        except OSError as failure:
            error = _os_reason(failure, failure.filename or self.entry.folder(self.models_dir))
        except Exception as failure:  # a bug: the download fails, the thread does not die silently
            log.exception("download of %s", self.entry.id)
            error = f"unexpected error: {failure!r}"
        if error is not None:
            log.warning("download of %s failed: %s", self.entry.id, error)
        with self._lock:
            self._error = error
            self._state = state
        final = self.snapshot()
        if self._on_progress is not None:
            self._on_progress(final)
        return final

    @contextlib.contextmanager
    def _folder_lock(self) -> Iterator[None]:
        folder = self.entry.folder(self.models_dir)
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / LOCK).open("a") as handle:
            if fcntl is None:  # not POSIX: no lock between processes
                yield
                return
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise _Failed(f"another process is downloading {self.entry.id} into {folder}") from None
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _fetch_all(self) -> None:
        entry, models_dir = self.entry, self.models_dir
        record = read_verified(entry.folder(models_dir))
        self._recount()
        self._advance(0, transferred=0)  # the rate counts from here
        timeout = httpx.Timeout(self.options.stall_timeout_s)
        headers = {"Accept-Encoding": "identity", "User-Agent": "pooled"}
        with httpx.Client(
            transport=self.options.transport, timeout=timeout, follow_redirects=True, headers=headers
        ) as client:
            for file in entry.files:
                self._check_cancel()
                with self._lock:
                    self._file = file.name
                if is_verified(entry, models_dir, file, record) or self._adopt(file):
                    continue
                self._fetch_file(client, file)

    def _on_disk(self, file: CatalogFile) -> int:
        """Bytes of `file` there now: the finished file at its size, else the part (at most the size)."""
        final = file_path(self.entry, self.models_dir, file)
        if final.is_file() and final.stat().st_size == file.size:
            return file.size
        part = part_path(self.entry, self.models_dir, file)
        return min(part.stat().st_size, file.size) if part.is_file() else 0

    def _adopt(self, file: CatalogFile) -> bool:
        """A file under its final name not recorded as checked (copied in by hand): hashed once and
        kept if it matches; otherwise deleted, to be fetched."""
        final = file_path(self.entry, self.models_dir, file)
        if not final.is_file():
            return False
        digest = sha256_file(final) if final.stat().st_size == file.size else None
        if digest is not None and file.sha256 in (None, digest):
            record_verified(self.entry.folder(self.models_dir), file.name, digest)
            return True
        log.warning("%s does not match the catalog's %s: fetching it again", final, self.entry.id)
        final.unlink()
        self._recount()
        return False

    def _fetch_file(self, client: httpx.Client, file: CatalogFile) -> None:
        part = part_path(self.entry, self.models_dir, file)
        part.parent.mkdir(parents=True, exist_ok=True)
        hashed = _PartHash()
        failures = 0
        while True:
            self._check_cancel()
            before = hashed.offset
            try:
                self._attempt(client, file, part, hashed)
                break
            except _Retry as retry:
                failures = 1 if hashed.offset > before else failures + 1
                if failures > self.options.retries:
                    raise _Failed(
                        f"{file.name}: retries exhausted ({failures} failed attempts in a row, "
                        f"retries={self.options.retries}); the last: {retry}"
                    ) from None
                delay = min(self.options.backoff_s * 2 ** (failures - 1), MAX_BACKOFF_S)
                log.info("download of %s: %s; retrying in %.1f s", self.entry.id, retry, delay)
                if self.cancel.wait(delay):
                    raise _Cancelled() from None
        self._finish(file, part, hashed)

    def _attempt(self, client: httpx.Client, file: CatalogFile, part: Path, hashed: _PartHash) -> None:
        """One GET of what the part lacks; returns with the part at its size, else raises."""
        offset = part.stat().st_size if part.is_file() else 0
        if offset > file.size:  # cannot be a prefix of the right file
            part.unlink()
            self._recount()
            offset = 0
        hashed.catch_up(part, offset)
        if offset == file.size:
            return
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        try:
            with client.stream("GET", file.url, headers=headers) as response:
                self._receive(file, part, hashed, response, offset)
        except httpx.TimeoutException:
            raise _Retry(f"{file.name}: no bytes for {self.options.stall_timeout_s:g} s") from None
        except httpx.TransportError as error:
            raise _Retry(f"{file.name}: connection failed: {error or type(error).__name__}") from None

    def _receive(self, file: CatalogFile, part: Path, hashed: _PartHash, response: httpx.Response, offset: int) -> None:
        status = response.status_code
        if status == 416 and offset >= file.size:
            return
        if status == 429 or status >= 500:
            raise _Retry(f"{file.name}: HTTP {status} from {file.url}")
        if status == 206:
            start = _range_start(response.headers.get("content-range"))
            if start is not None and start != offset:
                raise _Failed(f"{file.name}: asked {file.url} for bytes {offset}-, it sent a range from {start}")
            mode = "ab"
        elif status == 200:
            if offset:  # the server ignored Range: the body starts at byte 0
                log.info("%s ignored Range: fetching %s from its start", file.url, file.name)
                self._advance(-offset, transferred=0)
                hashed.reset()
            offset = 0
            mode = "wb"
        else:
            raise _Failed(f"{file.name}: HTTP {status} from {file.url}")
        length = response.headers.get("content-length")
        if length is not None and length.isdigit() and offset + int(length) > file.size:
            raise self._too_large(file, part, offset + int(length))
        try:
            with _open_part(part, mode) as out:
                for chunk in response.iter_bytes():
                    if self.cancel.is_set():
                        raise _Cancelled()
                    if hashed.offset + len(chunk) > file.size:
                        raise self._too_large(file, part, hashed.offset + len(chunk))
                    out.write(chunk)
                    hashed.update(chunk)
                    self._advance(len(chunk), transferred=len(chunk))
        except OSError as error:
            raise _Failed(_os_reason(error, part)) from None
        if hashed.offset < file.size:
            raise _Retry(f"{file.name}: the connection ended at byte {hashed.offset} of {file.size}")

    def _too_large(self, file: CatalogFile, part: Path, size: int) -> _Failed:
        """The failure of a file larger than the catalog says: not the catalog's file, so its part goes."""
        part.unlink(missing_ok=True)
        self._recount()
        return _Failed(f"{file.name}: {file.url} has at least {size} bytes, more than the catalog's {file.size}")

    def _finish(self, file: CatalogFile, part: Path, hashed: _PartHash) -> None:
        got = hashed.digest.hexdigest()
        if file.sha256 is not None and got != file.sha256:
            part.unlink()
            self._recount()
            raise _Failed(
                f"{file.name}: sha256 {got} does not match the expected {file.sha256}; the download is deleted"
            )
        with part.open("rb+") as stream:  # on disk before the name says it is finished
            os.fsync(stream.fileno())
        os.replace(part, file_path(self.entry, self.models_dir, file))
        record_verified(self.entry.folder(self.models_dir), file.name, got)

    def _advance(self, count: int, transferred: int) -> None:
        now = time.monotonic()
        with self._lock:
            self._bytes += count
            self._transferred += transferred
            self._rate.add(now, self._transferred)
        if self._on_progress is not None and now - self._last_report >= PROGRESS_EVERY_S:
            self._last_report = now
            self._on_progress(self.snapshot())

    def _recount(self) -> None:
        """Bytes on disk counted again after a file or part was deleted."""
        counted = sum(self._on_disk(file) for file in self.entry.files)
        with self._lock:
            self._bytes = counted

    def _check_cancel(self) -> None:
        if self.cancel.is_set():
            raise _Cancelled()


def _open_part(path: Path, mode: str) -> BinaryIO:
    """The part file opened for writing (a seam the disk-full test replaces)."""
    return path.open(mode)  # type: ignore[return-value]


def _range_start(content_range: str | None) -> int | None:
    match = re.fullmatch(r"bytes (\d+)-\d+/(\d+|\*)", content_range or "")
    return int(match.group(1)) if match else None


def _os_reason(error: OSError, path: object) -> str:
    if error.errno == errno.ENOSPC:
        return f"disk full writing {path}"
    return f"{path}: {error.strerror or error}"
