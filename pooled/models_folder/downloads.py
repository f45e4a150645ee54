"""`Downloader`: downloads of catalog entries into the models folder, one at a time, each on a
daemon thread of its own ("pooled-download-<id>"); the work of one download is
pooled/models_folder/download_job.py's.

Threads: a lock guards the check and the start, so a second start is DownloadBusy. Callers'
threads (the server's event loop, a CLI) read progress, a snapshot taken under the job's lock, and
cancel by setting the Event the download thread checks between chunks.
"""

import threading
from pathlib import Path

import httpx

from pooled.models_folder.catalog import CatalogEntry
from pooled.models_folder.download_job import DownloadJob, DownloadOptions, DownloadProgress

CANCEL_WAIT_S = 5.0


class DownloadBusy(Exception):
    """A download was started while another runs."""

    def __init__(self, running_id: str) -> None:
        super().__init__(f"a download of {running_id} is running; cancel it or wait for it to end")
        self.running_id = running_id


class Downloader:
    """Downloads into `models_dir`, one at a time, each on a daemon thread (the module's paragraph)."""

    def __init__(
        self,
        models_dir: Path,
        retries: int = 5,
        backoff_s: float = 1.0,
        stall_timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.models_dir = models_dir
        self._options = DownloadOptions(retries, backoff_s, stall_timeout_s, transport)
        self._lock = threading.Lock()
        self._job: DownloadJob | None = None
        self._thread: threading.Thread | None = None

    def start(self, entry: CatalogEntry) -> None:
        """Start downloading `entry` and return at once; DownloadBusy while another runs."""
        with self._lock:
            if self._job is not None and self._job.running:
                raise DownloadBusy(self._job.entry.id)
            job = DownloadJob(entry, self.models_dir, self._options, threading.Event(), None)
            thread = threading.Thread(target=job.run, name=f"pooled-download-{entry.id}", daemon=True)
            self._job, self._thread = job, thread
            thread.start()

    def cancel(self, wait_s: float = CANCEL_WAIT_S) -> bool:
        """Stop the running download, keeping its parts for the next start to resume, and wait up to
        `wait_s` for its thread to end (0 from an event loop: progress() then says when it has);
        False when none runs."""
        with self._lock:
            job, thread = self._job, self._thread
        if job is None or thread is None or not job.running:
            return False
        job.cancel.set()
        thread.join(wait_s)
        return True

    def progress(self) -> DownloadProgress | None:
        """The running download's progress, or the last one's; None before the first."""
        job = self._job
        return job.snapshot() if job is not None else None

    def wait(self, timeout: float | None = None) -> DownloadProgress | None:
        """Wait up to `timeout` for the download to end; its progress (still running on a timeout)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return self.progress()
