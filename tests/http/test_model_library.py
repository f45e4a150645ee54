"""The models-folder routes (/v1/models/catalog, /download, /download/cancel, /remove, /switch)
over the product's FolderLibrary, Downloader and ModelHost, with a loopback file server as the
mirror and a model host whose loader is a test double (switching real checkpoints is in
tests/e2e/test_switching.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient

from pooled.configuration.settings import Settings
from pooled.hosting.model_host import Loaded, ModelHost
from pooled.models_folder.downloads import Downloader
from pooled.models_folder.folder_library import FolderLibrary
from pooled.web.app import build_app, server_context
from tests.conftest import BASE_URL
from tests.http.file_server import Blob, FileServer
from tests.http.test_downloads import BACKOFF_S, STALL_S, blob, entry_for, wait_for
from tests.http.test_model_host import Engine, wait_until_settled


@pytest.fixture
def mirror() -> Iterator[FileServer]:
    with FileServer() as running:
        yield running


class Served(SimpleNamespace):
    client: TestClient
    loads: list[Path]
    models_dir: Path
    mirror: FileServer
    host: ModelHost


@pytest.fixture
def served(mirror: FileServer, tmp_path: Path) -> Iterator[Served]:
    data, slow = blob(300_000, seed=1), blob(2_000_000, seed=2)
    fast = entry_for({"fast.gguf": (mirror.add("fast.gguf", Blob(data)), data)}, "fast")
    crawl = entry_for({"slow.gguf": (mirror.add("slow.gguf", Blob(slow, delay_s=0.01)), slow)}, "slow")
    loads: list[Path] = []

    def loader(path: Path, settings: Settings, report) -> Loaded:  # type: ignore[no-untyped-def]
        loads.append(path)
        if path.name == "broken.gguf":
            raise ValueError("not a GGUF file")
        return Loaded(1024, 1024, None, "none", object(), None, Engine(path.name))  # type: ignore[arg-type]

    models_dir = tmp_path / "models"
    settings = Settings()
    (tmp_path / "start.gguf").write_bytes(b"")  # a file outside the folder: served, not switchable
    host = ModelHost(settings, tmp_path / "start.gguf", loader)
    host.start()
    wait_until_settled(host)
    downloader = Downloader(models_dir, backoff_s=BACKOFF_S, stall_timeout_s=STALL_S)
    library = FolderLibrary(host, {"fast": fast, "slow": crawl}, models_dir, downloader, True)
    with TestClient(build_app(settings, server_context(settings, host, library)), base_url=BASE_URL) as client:
        yield Served(client=client, loads=loads, models_dir=models_dir, mirror=mirror, host=host)
    downloader.cancel()


def row(served: Served, entry_id: str) -> dict:  # type: ignore[type-arg]
    rows = served.client.get("/v1/models/catalog").json()["data"]
    return next(r for r in rows if r["id"] == entry_id)


def test_a_download_runs_in_the_background_and_its_row_follows_it(served: Served) -> None:
    assert row(served, "fast")["state"] == "absent"
    started = served.client.post("/v1/models/download", json={"id": "fast"})
    assert started.status_code == 200 and started.json()["id"] == "fast"
    wait_for(lambda: row(served, "fast")["state"] == "verified", 10)
    fast = row(served, "fast")
    assert fast["bytes_on_disk"] == fast["size_bytes"] == 300_000 and fast["download"]["state"] == "done"
    assert "pooled/fast" in [m["id"] for m in served.client.get("/v1/models").json()["data"]]


def test_one_download_at_a_time_and_a_cancel_keeps_the_part_to_resume(served: Served) -> None:
    assert served.client.post("/v1/models/download", json={"id": "slow"}).status_code == 200
    wait_for(lambda: row(served, "slow")["bytes_on_disk"] > 0)
    busy = served.client.post("/v1/models/download", json={"id": "fast"})
    assert busy.status_code == 409 and "a download of slow is running" in busy.json()["error"]["message"]
    removing = served.client.post("/v1/models/remove", json={"id": "slow"})
    assert removing.status_code == 409 and "being downloaded" in removing.json()["error"]["message"]
    cancelled = served.client.post("/v1/models/download/cancel").json()
    assert cancelled["cancelled"] is True
    wait_for(lambda: row(served, "slow")["download"]["state"] == "cancelled")
    kept = row(served, "slow")
    assert kept["state"] == "partial" and 0 < kept["bytes_on_disk"] < kept["size_bytes"]
    assert served.client.post("/v1/models/download", json={"id": "slow"}).status_code == 200
    wait_for(lambda: row(served, "slow")["state"] == "verified", 30)
    resumed = served.mirror.requests_for("slow.gguf")[-1]
    assert resumed.range_start is not None and resumed.range_start >= kept["bytes_on_disk"]


def test_switch_serves_a_downloaded_entry_and_removal_spares_the_model_in_use(served: Served) -> None:
    absent = served.client.post("/v1/models/switch", json={"id": "fast"})
    assert absent.status_code == 404 and "not downloaded" in absent.json()["error"]["message"]
    served.client.post("/v1/models/download", json={"id": "fast"})
    wait_for(lambda: row(served, "fast")["state"] == "verified", 10)
    switched = served.client.post("/v1/models/switch", json={"id": "fast"})
    assert switched.status_code == 200 and switched.json()["id"] == "pooled/fast"
    assert served.loads[-1] == served.models_dir / "fast" / "fast.gguf"
    assert row(served, "fast")["loaded"] is True
    in_use = served.client.post("/v1/models/remove", json={"id": "fast"})
    assert in_use.status_code == 409 and "switch to another first" in in_use.json()["error"]["message"]
    assert served.client.post("/v1/models/switch", json={"id": "pooled/fast"}).status_code == 200  # already served
    assert served.loads.count(served.models_dir / "fast" / "fast.gguf") == 1
    assert served.client.post("/v1/models/remove", json={"id": "slow"}).json() == {
        "object": "model.removed",
        "id": "slow",
        "freed_bytes": 0,
    }


def test_a_failed_switch_is_a_500_and_the_old_model_says_failed(served: Served) -> None:
    (served.models_dir / "broken.gguf").parent.mkdir(parents=True, exist_ok=True)
    (served.models_dir / "broken.gguf").write_bytes(b"GGUF but not really")
    failed = served.client.post("/v1/models/switch", json={"id": "pooled/broken"})
    assert failed.status_code == 500 and failed.json()["error"]["code"] == "switch_failed"
    first = served.client.get("/v1/models").json()["data"][0]
    assert first["id"] == "pooled/start" and first["status"] == "failed" and first["reason"] == "not a GGUF file"


def test_a_switch_from_an_idle_unloaded_model_loads_it_again_first(served: Served) -> None:
    served.client.post("/v1/models/download", json={"id": "fast"})
    wait_for(lambda: row(served, "fast")["state"] == "verified", 10)
    served.host.unload()
    wait_for(lambda: served.host.engine is None)
    switched = served.client.post("/v1/models/switch", json={"id": "fast"})
    assert switched.status_code == 200 and switched.json()["id"] == "pooled/fast"
    assert [path.name for path in served.loads] == ["start.gguf", "start.gguf", "fast.gguf"]
