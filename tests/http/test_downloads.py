"""Downloads (pooled/models_folder/downloads.py) and the models folder
(pooled/models_folder/models_dir.py) against a loopback file server (tests/http/file_server.py):
verify, resume after a cancel or a restart, retries of drops and stalls, each failure, and the
folder's states."""

import errno
import fcntl
import hashlib
import io
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

import pytest

from pooled.models_folder import download_job as download_job_module
from pooled.models_folder.catalog import CatalogEntry, CatalogFile, size_class_of
from pooled.models_folder.download_job import DownloadProgress, download
from pooled.models_folder.downloads import DownloadBusy, Downloader
from pooled.models_folder.models_dir import (
    VERIFIED,
    disk_state,
    folder_models,
    part_path,
    read_verified,
    record_verified,
    remove_entry,
)
from tests.http.file_server import Blob, FileServer

BACKOFF_S = 0.01
STALL_S = 0.5


def blob(size: int, seed: int = 0) -> bytes:
    return (hashlib.sha256(str(seed).encode()).digest() * (size // 32 + 1))[:size] if seed else os.urandom(size)


def entry_for(files: dict[str, tuple[str, bytes]], entry_id: str = "tiny", sha256: str | None = None) -> CatalogEntry:
    """An entry of the files `{name: (url, data)}` (one gguf, or safetensors when there are several)."""
    catalog_files = tuple(
        CatalogFile(name, url, sha256 or hashlib.sha256(data).hexdigest(), len(data))
        for name, (url, data) in files.items()
    )
    form: Literal["gguf", "safetensors"] = "gguf" if len(catalog_files) == 1 else "safetensors"
    return CatalogEntry(entry_id, "llama", form, catalog_files, 2048, "Apache-2.0", size_class_of(1 << 20), 1 << 20)


@pytest.fixture
def server() -> Iterator[FileServer]:
    with FileServer() as running:
        yield running


def one_file(server: FileServer, served: Blob) -> CatalogEntry:
    """An entry of one GGUF file, the blob's data, served as `served` says."""
    url = server.add("model.gguf", served)
    return entry_for({"model.gguf": (url, served.data)})


def fetch(
    entry: CatalogEntry, models_dir: Path, seen: list[DownloadProgress] | None = None, retries: int = 5
) -> DownloadProgress:
    on_progress = seen.append if seen is not None else None
    return download(entry, models_dir, on_progress, retries=retries, backoff_s=BACKOFF_S, stall_timeout_s=STALL_S)


def downloader(models_dir: Path) -> Downloader:
    return Downloader(models_dir, backoff_s=BACKOFF_S, stall_timeout_s=STALL_S)


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def done(progress: DownloadProgress | None) -> DownloadProgress:
    assert progress is not None
    assert progress.state == "done", progress.error
    assert progress.bytes == progress.total
    return progress


def test_a_download_is_checked_and_visible_under_its_final_name(server: FileServer, tmp_path: Path) -> None:
    data = blob(300_000)
    entry = one_file(server, Blob(data))
    loader = downloader(tmp_path)
    assert loader.progress() is None and loader.cancel() is False
    loader.start(entry)
    progress = done(loader.wait(10))
    assert progress.id == "tiny" and progress.total == len(data) and progress.error is None
    assert entry.model_path(tmp_path).read_bytes() == data
    assert not part_path(entry, tmp_path, entry.files[0]).exists()
    assert read_verified(entry.folder(tmp_path)) == {"model.gguf": entry.files[0].sha256}
    assert disk_state(entry, tmp_path).state == "verified"
    assert [request.range_start for request in server.requests] == [None]


def test_files_of_an_entry_come_in_order_and_verified_ones_are_skipped(server: FileServer, tmp_path: Path) -> None:
    datas = {"config.json": blob(500), "1_Pooling/config.json": blob(90), "model.safetensors": blob(100_000)}
    entry = entry_for({name: (server.add(name, Blob(data)), data) for name, data in datas.items()})
    seen: list[DownloadProgress] = []
    done(fetch(entry, tmp_path, seen))
    assert [request.path for request in server.requests] == list(datas)
    assert seen[-1].state == "done" and all(p.state == "running" for p in seen[:-1])
    assert [p.bytes for p in seen] == sorted(p.bytes for p in seen)
    for name, data in datas.items():
        assert (tmp_path / "tiny" / name).read_bytes() == data
    assert entry.model_path(tmp_path) == tmp_path / "tiny"
    done(fetch(entry, tmp_path))
    assert len(server.requests) == 3  # nothing fetched again


def test_cancel_keeps_the_part_and_the_next_start_resumes_it(server: FileServer, tmp_path: Path) -> None:
    data = blob(400_000)
    entry = one_file(server, Blob(data, chunk=4096, delay_s=0.01))
    loader = downloader(tmp_path)
    loader.start(entry)
    wait_for(lambda: (loader.progress() or DownloadProgress("", "running", 0, 0, 0, None, None)).bytes > 40_000)
    running = loader.progress()
    assert running is not None and running.state == "running" and running.rate_bytes_per_s > 0
    assert running.eta_s is not None and running.eta_s > 0
    assert loader.cancel() is True
    # The download says it stopped as cancel() returned, short of the file's end: the cancel did
    # not wait for the rest (400 kB at 4 kB per 10 ms).
    cancelled = loader.progress()
    assert cancelled is not None and cancelled.state == "cancelled" and cancelled.error is None
    part = part_path(entry, tmp_path, entry.files[0])
    kept = part.stat().st_size
    assert 0 < kept < len(data) and cancelled.bytes == kept
    assert not entry.model_path(tmp_path).exists()
    assert disk_state(entry, tmp_path).state == "partial"
    server.blobs["model.gguf"].delay_s = 0
    loader.start(entry)
    done(loader.wait(10))
    assert entry.model_path(tmp_path).read_bytes() == data
    first, second = server.requests
    assert second.range_start == kept and second.status == 206
    assert first.sent + second.sent < len(data) + 64 * 1024  # about one copy, not two


def test_a_new_downloader_resumes_the_part_of_an_earlier_process(server: FileServer, tmp_path: Path) -> None:
    data = blob(200_000)
    entry = one_file(server, Blob(data))
    part = part_path(entry, tmp_path, entry.files[0])
    part.parent.mkdir(parents=True)
    part.write_bytes(data[:123_456])  # what a killed process left
    assert disk_state(entry, tmp_path).bytes == 123_456
    loader = downloader(tmp_path)
    loader.start(entry)
    done(loader.wait(10))
    assert entry.model_path(tmp_path).read_bytes() == data
    (request,) = server.requests
    assert request.range_start == 123_456 and request.status == 206 and request.sent == len(data) - 123_456


def test_a_server_that_ignores_range_starts_the_file_over(server: FileServer, tmp_path: Path) -> None:
    data = blob(100_000)
    entry = one_file(server, Blob(data, ignore_range=True))
    part = part_path(entry, tmp_path, entry.files[0])
    part.parent.mkdir(parents=True)
    part.write_bytes(data[:30_000])
    done(fetch(entry, tmp_path))
    assert entry.model_path(tmp_path).read_bytes() == data
    (request,) = server.requests
    assert request.range_start == 30_000 and request.status == 200


def test_a_full_part_goes_to_the_check_without_a_request(server: FileServer, tmp_path: Path) -> None:
    data = blob(50_000)
    entry = one_file(server, Blob(data))
    part = part_path(entry, tmp_path, entry.files[0])
    part.parent.mkdir(parents=True)
    part.write_bytes(data)
    done(fetch(entry, tmp_path))
    assert server.requests == [] and entry.model_path(tmp_path).read_bytes() == data


def test_416_for_a_part_short_of_the_catalog_size_fails_naming_it(server: FileServer, tmp_path: Path) -> None:
    data = blob(50_000)
    url = server.add("model.gguf", Blob(data))
    longer = data + b"x" * 10  # the catalog says 10 bytes more than the server has
    entry = entry_for({"model.gguf": (url, longer)})
    part = part_path(entry, tmp_path, entry.files[0])
    part.parent.mkdir(parents=True)
    part.write_bytes(data)
    progress = fetch(entry, tmp_path)
    assert progress.state == "failed" and progress.error is not None and "HTTP 416" in progress.error


def test_dropped_connections_are_retried_and_resumed(server: FileServer, tmp_path: Path) -> None:
    data = blob(200_000)
    entry = one_file(server, Blob(data, drop_after=50_000, drop_requests=3))
    done(fetch(entry, tmp_path, retries=1))
    assert entry.model_path(tmp_path).read_bytes() == data
    # Each drop brought bytes, so one retry in a row was enough each time.
    assert [request.range_start for request in server.requests] == [None, 50_000, 100_000, 150_000]
    assert sum(request.sent for request in server.requests) == len(data)


def test_a_stall_is_cut_at_the_stall_timeout_and_retried(
    server: FileServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = blob(100_000)
    entry = one_file(server, Blob(data, stall_after=20_000, stall_s=2.0, stall_requests=1))
    caplog.set_level("INFO", logger=download_job_module.__name__)
    done(download(entry, tmp_path, None, retries=2, backoff_s=0.01, stall_timeout_s=0.3))
    # Retried because nothing came for the stall timeout, not because the server closed after its 2 s.
    (retried,) = [record.getMessage() for record in caplog.records if "retrying" in record.getMessage()]
    assert "model.gguf: no bytes for 0.3 s" in retried
    first, second = server.requests
    assert first.sent == 20_000 and second.range_start == 20_000


def test_5xx_and_429_are_retried_within_the_budget(server: FileServer, tmp_path: Path) -> None:
    data = blob(10_000)
    entry = one_file(server, Blob(data, status=503, status_requests=2))
    done(fetch(entry, tmp_path, retries=2))
    server.blobs["model.gguf"] = Blob(data, status=429, status_requests=1)
    other = tmp_path / "other"
    done(fetch(entry, other, retries=1))
    assert [request.status for request in server.requests] == [503, 503, 200, 429, 200]


def test_retries_exhausted_fail_naming_the_last_error(server: FileServer, tmp_path: Path) -> None:
    entry = one_file(server, Blob(blob(10_000), status=500))
    progress = fetch(entry, tmp_path, retries=2)
    assert progress.state == "failed" and progress.error is not None
    assert "retries exhausted" in progress.error and "HTTP 500" in progress.error
    assert len(server.requests) == 3  # the first attempt and two retries


def test_a_client_error_fails_at_once_naming_the_status(server: FileServer, tmp_path: Path) -> None:
    entry = entry_for({"model.gguf": (server.url("missing.gguf"), b"whatever")})
    progress = fetch(entry, tmp_path)
    assert progress.state == "failed" and progress.error is not None and "HTTP 404" in progress.error
    assert len(server.requests) == 1


def test_a_wrong_digest_fails_and_nothing_is_visible(server: FileServer, tmp_path: Path) -> None:
    data = blob(60_000)
    url = server.add("model.gguf", Blob(data))
    expected = "ab" * 32
    entry = entry_for({"model.gguf": (url, data)}, sha256=expected)
    progress = fetch(entry, tmp_path)
    assert progress.state == "failed" and progress.error is not None
    assert expected in progress.error and hashlib.sha256(data).hexdigest() in progress.error
    assert not entry.model_path(tmp_path).exists()
    assert not part_path(entry, tmp_path, entry.files[0]).exists()
    assert disk_state(entry, tmp_path) == disk_state(entry, tmp_path / "nowhere")  # absent, 0 bytes


def test_a_file_larger_than_the_catalog_says_fails(server: FileServer, tmp_path: Path) -> None:
    data = blob(60_000)
    url = server.add("model.gguf", Blob(data))
    entry = entry_for({"model.gguf": (url, data[:50_000])})
    progress = fetch(entry, tmp_path)
    assert progress.state == "failed" and progress.error is not None and "more than the catalog's" in progress.error
    assert not entry.model_path(tmp_path).exists()


def test_a_full_disk_fails_and_keeps_the_part(
    server: FileServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = blob(100_000)
    entry = one_file(server, Blob(data, chunk=8192))

    class FullDisk(io.FileIO):
        def write(self, chunk: bytes) -> int:  # type: ignore[override]
            room = 40_000 - self.tell()
            if len(chunk) > room:  # what fits is written, then the disk is full
                super().write(chunk[:room])
                raise OSError(errno.ENOSPC, "No space left on device")
            return super().write(chunk)

    monkeypatch.setattr(download_job_module, "_open_part", lambda path, mode: FullDisk(path, mode.replace("b", "")))
    progress = fetch(entry, tmp_path)
    assert progress.state == "failed" and progress.error is not None and "disk full" in progress.error
    kept = part_path(entry, tmp_path, entry.files[0]).stat().st_size
    assert kept == 40_000
    monkeypatch.undo()
    done(fetch(entry, tmp_path))
    assert entry.model_path(tmp_path).read_bytes() == data
    assert server.requests[-1].range_start == kept


def test_a_second_download_while_one_runs_is_busy(server: FileServer, tmp_path: Path) -> None:
    entry = one_file(server, Blob(blob(200_000), chunk=2048, delay_s=0.01))
    loader = downloader(tmp_path)
    loader.start(entry)
    with pytest.raises(DownloadBusy) as busy:
        loader.start(entry)
    assert busy.value.running_id == "tiny"
    assert loader.cancel() is True
    assert loader.cancel() is False


def test_a_file_copied_in_by_hand_is_hashed_once_and_kept(server: FileServer, tmp_path: Path) -> None:
    data = blob(20_000)
    entry = one_file(server, Blob(data))
    entry.folder(tmp_path).mkdir()
    entry.model_path(tmp_path).write_bytes(data)
    assert disk_state(entry, tmp_path).state == "complete"
    done(fetch(entry, tmp_path))
    assert server.requests == [] and disk_state(entry, tmp_path).state == "verified"


def test_disk_state_each_state(tmp_path: Path) -> None:
    a, b = blob(1000, seed=1), blob(3000, seed=2)
    entry = entry_for({"config.json": ("http://x/a", a), "model.safetensors": ("http://x/b", b)})
    folder = entry.folder(tmp_path)
    assert disk_state(entry, tmp_path) == disk_state(entry, tmp_path).__class__("absent", 0, 4000)
    folder.mkdir()
    (folder / "model.safetensors.part").write_bytes(b[:500])
    assert disk_state(entry, tmp_path).state == "partial" and disk_state(entry, tmp_path).bytes == 500
    (folder / "config.json").write_bytes(a)
    assert disk_state(entry, tmp_path).bytes == 1500
    (folder / "model.safetensors.part").rename(folder / "model.safetensors")
    assert disk_state(entry, tmp_path).state == "partial"  # under its final name, but short
    (folder / "model.safetensors").write_bytes(b)
    assert disk_state(entry, tmp_path).state == "complete" and disk_state(entry, tmp_path).bytes == 4000
    record_verified(folder, "config.json", entry.files[0].sha256)
    assert disk_state(entry, tmp_path).state == "complete"  # one recorded, not both
    record_verified(folder, "model.safetensors", entry.files[1].sha256)
    assert disk_state(entry, tmp_path).state == "verified"
    (folder / "model.safetensors").write_bytes(b[:-1])  # replaced since: sizes are checked every time
    assert disk_state(entry, tmp_path).state == "partial"


def test_remove_entry_frees_finished_and_partial_files(server: FileServer, tmp_path: Path) -> None:
    datas = {"config.json": blob(500), "sub/model.safetensors": blob(80_000)}
    entry = entry_for({name: (server.add(name, Blob(data)), data) for name, data in datas.items()})
    done(fetch(entry, tmp_path))
    assert remove_entry(entry, tmp_path) == 80_500
    assert not entry.folder(tmp_path).exists() and disk_state(entry, tmp_path).state == "absent"
    assert remove_entry(entry, tmp_path) == 0
    folder = entry.folder(tmp_path)
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_bytes(datas["config.json"])
    (folder / "sub/model.safetensors.part").write_bytes(b"x" * 1234)
    (folder / "notes.txt").write_text("mine")  # not the entry's: kept
    assert remove_entry(entry, tmp_path) == 500 + 1234
    assert sorted(path.name for path in folder.iterdir()) == ["notes.txt"]


def test_folder_models_lists_what_is_not_a_catalog_entry(tmp_path: Path) -> None:
    (tmp_path / "loose.gguf").write_bytes(b"GGUF")
    (tmp_path / "notes.txt").write_text("no")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "model.safetensors").write_bytes(b"{}")
    (tmp_path / "mine" / "config.json").write_text("{}")
    (tmp_path / "ggufs").mkdir()
    (tmp_path / "ggufs" / "b.gguf").write_bytes(b"GGUF")
    (tmp_path / "ggufs" / "a.gguf").write_bytes(b"GGUF")
    (tmp_path / "ggufs" / "mmproj-a-f16.gguf").write_bytes(b"GGUF")  # a's projector: not a model
    (tmp_path / "mmproj-loose.gguf").write_bytes(b"GGUF")
    (tmp_path / "empty").mkdir()
    (tmp_path / "tiny").mkdir()  # a catalog entry's folder
    (tmp_path / "tiny" / "model.gguf").write_bytes(b"GGUF")
    (tmp_path / "other").mkdir()  # an entry of a catalog not passed: its download's record
    (tmp_path / "other" / "model.gguf").write_bytes(b"GGUF")
    (tmp_path / "other" / VERIFIED).write_text("{}")
    (tmp_path / ".hidden.gguf").write_bytes(b"GGUF")
    assert folder_models(tmp_path, {"tiny"}) == [
        tmp_path / "ggufs" / "a.gguf",
        tmp_path / "ggufs" / "b.gguf",
        tmp_path / "loose.gguf",
        tmp_path / "mine",
    ]
    assert folder_models(tmp_path / "missing") == []


def test_a_download_another_process_holds_fails_at_once(server: FileServer, tmp_path: Path) -> None:
    entry = one_file(server, Blob(blob(1000)))
    entry.folder(tmp_path).mkdir()
    with (entry.folder(tmp_path) / ".lock").open("a") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        progress = fetch(entry, tmp_path)
    assert progress.state == "failed" and progress.error is not None and "another process" in progress.error
    assert server.requests == []
    done(fetch(entry, tmp_path))
