"""`pooled pull`, `list` and `rm` run as a user runs them (a subprocess of the CLI) against a loopback
file server (tests/http/file_server.py) and a catalog file of the test's, on a models folder of
their own: without a server (nothing listens on the port they are given) they work on the folder;
with a real `pooled serve` of a tiny checkpoint (a catalog entry, downloaded first) they go
through its routes."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from pooled.models_folder.catalog import load_catalog
from pooled.models_folder.download_job import download
from pooled.models_folder.model_ids import model_id_for
from tests.e2e.test_switching import servable
from tests.http.file_server import Blob, FileServer
from tests.http.test_downloads import blob
from tests.pooled_servers import free_port, running_server

# A cold `pooled` process per command, and downloads paced so that Ctrl-C finds them running.
pytestmark = pytest.mark.slow

CLI_TIMEOUT_S = 60


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def entry_toml(entry_id: str, files: dict[str, tuple[str, bytes]], digest: str | None = None) -> str:
    """One `[[model]]` table of the files `{name: (url, data)}`: gguf for one .gguf, else safetensors."""
    form = "gguf" if any(name.endswith(".gguf") for name in files) else "safetensors"
    size = sum(len(data) for _, data in files.values())
    lines = [
        "[[model]]",
        f'id = "{entry_id}"',
        'family = "llama"',
        f'format = "{form}"',
        "trained_ctx = 2048",
        'licence = "Apache-2.0"',
        f"memory_bytes = {size + (1 << 20)}",
    ]
    for name, (url, data) in files.items():
        lines += ["[[model.file]]", f'name = "{name}"', f'url = "{url}"']
        lines += [f'sha256 = "{digest or sha256(data)}"', f"size = {len(data)}"]
    return "\n".join(lines) + "\n"


@dataclass
class Folder:
    """A models folder, the catalog file naming the file server's blobs, and the port (nothing
    listening, or the server) the commands are given."""

    models: Path
    catalog: Path
    port: int

    def args(self) -> list[str]:
        return ["--models-dir", str(self.models), "--catalog", str(self.catalog), "--port", str(self.port)]


def pooled(folder: Folder, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pooled.cli", *args, *folder.args()],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )


def started(folder: Folder, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pooled.cli", *args, *folder.args()],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )


def wait_until(condition: Callable[[], bool], process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + CLI_TIMEOUT_S
    while not condition():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def interrupt(process: subprocess.Popen[str]) -> tuple[int, str]:
    """SIGINT, as Ctrl-C sends it; the exit status and stderr."""
    process.send_signal(signal.SIGINT)
    _, errors = process.communicate(timeout=CLI_TIMEOUT_S)
    return process.returncode, errors


def rows(folder: Folder) -> dict[str, dict[str, Any]]:
    listed = pooled(folder, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    return {row["id"]: row for row in json.loads(listed.stdout)}


# -- without a server: the models folder itself ------------------------------------------------

ALPHA, BETA, PARTIAL, SLOW = blob(200_000, 1), blob(120_000, 2), blob(100_000, 3), blob(400_000, 4)
# A slow download's pause after each 4 KiB: ~20 s for SLOW, so that a Ctrl-C sent once a part has
# begun still finds it running on a busy machine (at 20 ms a chunk it had ended before the signal came).
SLOW_CHUNK_S = 0.2


@pytest.fixture(scope="module")
def files() -> Iterator[FileServer]:
    with FileServer() as server:
        yield server


@pytest.fixture
def folder(files: FileServer, tmp_path: Path) -> Folder:
    tables = [
        entry_toml("alpha", {"alpha.gguf": (files.add("alpha.gguf", Blob(ALPHA)), ALPHA)}),
        entry_toml("beta", {"beta.gguf": (files.add("beta.gguf", Blob(BETA)), BETA)}),
        entry_toml("gamma", {"gamma.gguf": (files.add("gamma.gguf", Blob(PARTIAL)), PARTIAL)}),
        entry_toml("wrong", {"wrong.gguf": (files.add("wrong.gguf", Blob(BETA)), BETA)}, digest=sha256(b"other")),
        entry_toml("slow", {"slow.gguf": (files.add("slow.gguf", Blob(SLOW, chunk=4096, delay_s=SLOW_CHUNK_S)), SLOW)}),
    ]
    catalog = tmp_path / "catalog.toml"
    catalog.write_text("\n".join(tables))
    return Folder(tmp_path / "models", catalog, free_port())


def test_pull_verifies_list_shows_the_states_and_rm_frees(folder: Folder) -> None:
    pulled = pooled(folder, "pull", "alpha")
    assert pulled.returncode == 0, pulled.stderr
    assert "alpha: verified" in pulled.stdout and "pooled serve --model alpha" in pulled.stdout
    assert (folder.models / "alpha" / "alpha.gguf").read_bytes() == ALPHA
    assert "no server" not in pulled.stderr and "alpha: 100%" in pulled.stderr  # the bar
    (folder.models / "gamma").mkdir()
    (folder.models / "gamma" / "gamma.gguf.part").write_bytes(PARTIAL[:25_000])

    listed = pooled(folder, "list")
    assert listed.returncode == 0, listed.stderr
    lines = {line.split()[0]: line for line in listed.stdout.splitlines()}
    assert lines["alpha"].split()[1:] == ["195", "KiB", "verified", "2048"]
    assert "absent" in lines["beta"] and "partial 25%" in lines["gamma"]
    assert rows(folder)["gamma"] == {
        "id": "gamma",
        "source": "catalog",
        "size_bytes": 100_000,
        "state": "partial",
        "bytes_on_disk": 25_000,
        "context": 2048,
        "serving": False,
        "path": None,
    }

    removed = pooled(folder, "rm", "pooled/alpha")
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.strip() == "removed alpha (verified): freed 195 KiB"
    assert not (folder.models / "alpha").exists() and rows(folder)["alpha"]["state"] == "absent"
    assert pooled(folder, "rm", "gamma").stdout.strip() == "removed gamma (partial): freed 24 KiB"


def test_pull_resumes_a_part(folder: Folder, files: FileServer) -> None:
    part = folder.models / "beta" / "beta.gguf.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(BETA[:50_000])
    before = len(files.requests_for("beta.gguf"))
    pulled = pooled(folder, "pull", "beta")
    assert pulled.returncode == 0, pulled.stderr
    assert "resuming, 49 KiB of 117 KiB" in pulled.stderr
    assert (folder.models / "beta" / "beta.gguf").read_bytes() == BETA
    assert [request.range_start for request in files.requests_for("beta.gguf")[before:]] == [50_000]
    again = pooled(folder, "pull", "beta")
    assert again.returncode == 0 and "already downloaded and verified" in again.stdout


def test_a_wrong_digest_fails_naming_both(folder: Folder) -> None:
    pulled = pooled(folder, "pull", "wrong")
    assert pulled.returncode == 1
    assert f"does not match the expected {sha256(b'other')}" in pulled.stderr and "nothing kept" in pulled.stderr
    assert pulled.stderr.count("does not match") == 1  # the downloader's own warning is not repeated
    assert not (folder.models / "wrong" / "wrong.gguf").exists()


def test_unknown_ids_exit_2_naming_the_known_ones(folder: Folder) -> None:
    for command in ("pull", "rm"):
        answer = pooled(folder, command, "nope")
        assert answer.returncode == 2, answer.stderr
        assert "nope" in answer.stderr and "alpha, beta, gamma" in answer.stderr
    digest_for_an_id = pooled(folder, "pull", "alpha", "--sha256", "0" * 64)
    assert digest_for_an_id.returncode == 2 and "--sha256 is for a URL pull" in digest_for_an_id.stderr


def test_ctrl_c_keeps_the_part_and_says_how_to_resume(folder: Folder, files: FileServer) -> None:
    part = folder.models / "slow" / "slow.gguf.part"
    process = started(folder, "pull", "slow")
    wait_until(lambda: part.is_file() and part.stat().st_size > 40_000, process)
    status, errors = interrupt(process)
    assert status == 130, errors
    assert "interrupted" in errors and "`pooled pull slow` resumes it" in errors and "Traceback" not in errors
    kept = part.stat().st_size
    assert 40_000 <= kept < len(SLOW)
    files.blobs["slow.gguf"].delay_s = 0
    resumed = pooled(folder, "pull", "slow")
    assert resumed.returncode == 0, resumed.stderr
    assert files.requests_for("slow.gguf")[-1].range_start == kept


def test_a_gguf_by_url_with_and_without_a_digest(folder: Folder, files: FileServer) -> None:
    data = blob(150_000, 5)
    url = files.add("files/Tiny.Model.Q4.gguf", Blob(data))
    final = folder.models / "Tiny.Model.Q4.gguf"

    wrong = pooled(folder, "pull", url, "--sha256", sha256(b"other"))
    assert wrong.returncode == 1 and "does not match" in wrong.stderr and not final.exists()

    checked = pooled(folder, "pull", url, "--sha256", sha256(data))
    assert checked.returncode == 0, checked.stderr
    assert "verified against --sha256" in checked.stdout and "--model pooled/tiny-model-q4" in checked.stdout
    assert final.read_bytes() == data
    assert [path.name for path in folder.models.iterdir()] == [final.name]  # no staging folder left
    row = rows(folder)["pooled/tiny-model-q4"]
    assert (row["source"], row["size_bytes"], row["state"]) == ("folder", len(data), "on disk")

    final.unlink()
    unchecked = pooled(folder, "pull", url)
    assert unchecked.returncode == 0, unchecked.stderr
    assert f"sha256 {sha256(data)}: not verified against anything" in unchecked.stdout
    assert final.read_bytes() == data
    there = pooled(folder, "pull", url, "--sha256", sha256(b"other"))
    assert there.returncode == 1 and "already there" in there.stderr and final.exists()

    not_gguf = pooled(folder, "pull", files.url("notes.txt"))
    assert not_gguf.returncode == 2 and "a .gguf file's URL" in not_gguf.stderr


def test_a_url_pull_resumes_its_part(folder: Folder, files: FileServer) -> None:
    data = blob(300_000, 6)
    url = files.add("resume/model.gguf", Blob(data, chunk=4096, delay_s=SLOW_CHUNK_S))
    process = started(folder, "pull", url)

    def parts() -> list[Path]:
        return list(folder.models.glob(".pull-*/model.gguf.part"))

    wait_until(lambda: bool(parts()) and parts()[0].stat().st_size > 30_000, process)
    status, errors = interrupt(process)
    assert status == 130 and "the same `pooled pull URL` resumes it" in errors, errors
    kept = parts()[0].stat().st_size
    files.blobs["resume/model.gguf"].delay_s = 0
    resumed = pooled(folder, "pull", url, "--sha256", sha256(data))
    assert resumed.returncode == 0, resumed.stderr
    assert (folder.models / "model.gguf").read_bytes() == data
    assert files.requests_for("resume/model.gguf")[-1].range_start == kept


def test_rm_of_a_folder_model_needs_yes(folder: Folder, tmp_path: Path) -> None:
    outside = tmp_path / "outside.gguf"
    outside.write_bytes(b"keep me")
    folder.models.mkdir()
    (folder.models / "Mine.gguf").write_bytes(b"x" * 4096)
    (folder.models / "linked.gguf").symlink_to(outside)
    refused = pooled(folder, "rm", "pooled/mine")
    assert refused.returncode == 1 and "pass --yes" in refused.stderr and (folder.models / "Mine.gguf").exists()
    removed = pooled(folder, "rm", "pooled/mine", "--yes")
    assert removed.returncode == 0, removed.stderr
    assert "freed 4.0 KiB" in removed.stdout and not (folder.models / "Mine.gguf").exists()
    link = pooled(folder, "rm", "linked", "--yes")
    assert link.returncode == 0 and "the link" in link.stdout, link.stderr
    assert outside.read_bytes() == b"keep me" and not (folder.models / "linked.gguf").is_symlink()


def test_a_folder_model_is_named_by_its_file_or_directory(tmp_path: Path) -> None:
    (tmp_path / "SmolLM2-135M.Q4_1.gguf").write_bytes(b"")
    (tmp_path / "Tiny.Llama").mkdir()
    assert model_id_for(tmp_path / "SmolLM2-135M.Q4_1.gguf") == "pooled/smollm2-135m-q4_1"
    assert model_id_for(tmp_path / "Tiny.Llama") == "pooled/tiny-llama"


# -- through a running server ---------------------------------------------------------------------

SERVED, EXTRA = "tiny-llama", blob(300_000, 7)


@dataclass
class Served:
    base: str
    folder: Folder
    files: FileServer


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """`pooled serve --model tiny-llama`: a catalog entry of a tiny checkpoint, downloaded first."""
    checkpoint = servable("llama_tied", tmp_path_factory.mktemp("checkpoint") / SERVED)
    root = tmp_path_factory.mktemp("served")
    with FileServer() as server:
        parts = {path.name: path.read_bytes() for path in sorted(checkpoint.iterdir())}
        tables = [
            entry_toml(SERVED, {name: (server.add(f"tiny/{name}", Blob(data)), data) for name, data in parts.items()}),
            entry_toml("extra", {"extra.gguf": (server.add("extra.gguf", Blob(EXTRA)), EXTRA)}),
            entry_toml(
                "slow", {"slow.gguf": (server.add("slow.gguf", Blob(SLOW, chunk=4096, delay_s=SLOW_CHUNK_S)), SLOW)}
            ),
        ]
        catalog = root / "catalog.toml"
        catalog.write_text("\n".join(tables))
        models = root / "models"
        assert download(load_catalog(catalog)[SERVED], models).state == "done"
        args = ["--model", SERVED, "--models-dir", str(models), "--catalog", str(catalog)]
        with running_server(tmp_path_factory, [*args, "--ctx", "64", "--decode-lanes", "2"]) as base:
            yield Served(base, Folder(models, catalog, int(base.rsplit(":", 1)[1])), server)


@pytest.mark.server
def test_a_pull_through_the_server_shows_in_its_health(served: Served) -> None:
    pulled = pooled(served.folder, "pull", "extra")
    assert pulled.returncode == 0, pulled.stderr
    assert f"through the server at {served.base}" in pulled.stderr and "by the server at" in pulled.stdout
    download = httpx.get(f"{served.base}/health", timeout=10).json()["download"]
    assert download["id"] == "extra" and download["state"] == "done" and download["bytes"] == len(EXTRA)
    assert (served.folder.models / "extra" / "extra.gguf").read_bytes() == EXTRA


@pytest.mark.server
def test_list_through_the_server_marks_its_model_serving(served: Served) -> None:
    listed = rows(served.folder)
    assert listed[SERVED]["serving"] is True and listed[SERVED]["state"] == "verified"
    assert listed["slow"]["serving"] is False
    table = pooled(served.folder, "list")
    line = next(line for line in table.stdout.splitlines() if line.startswith(SERVED))
    assert "verified, serving" in line and "through the server" in table.stderr


@pytest.mark.server
def test_rm_of_the_served_model_is_refused_with_the_servers_message(served: Served) -> None:
    refused = pooled(served.folder, "rm", SERVED)
    assert refused.returncode == 1
    assert f"pooled/{SERVED} is the model serving: switch to another first" in refused.stderr
    assert (served.folder.models / SERVED / "model.safetensors").exists()
    unknown = pooled(served.folder, "rm", "nope")
    assert unknown.returncode == 2 and "extra, slow, smollm2-135m-instruct-q4_1, tiny-llama" in unknown.stderr


@pytest.mark.server
def test_a_second_pull_is_refused_and_ctrl_c_cancels_the_servers_download(served: Served) -> None:
    def health_download() -> dict[str, Any]:
        """The server's download, or {} before its first (when this test runs alone)."""
        download: dict[str, Any] | None = httpx.get(f"{served.base}/health", timeout=10).json()["download"]
        return download or {}

    process = started(served.folder, "pull", "slow")
    wait_until(lambda: health_download().get("id") == "slow" and health_download()["bytes"] > 40_000, process)
    busy = pooled(served.folder, "pull", "extra")
    status, errors = interrupt(process)
    assert busy.returncode == 1 and "a download of slow is running" in busy.stderr, busy.stderr
    assert status == 130 and "cancelled the server's download of slow" in errors, errors
    assert "`pooled pull slow` resumes it" in errors
    deadline = time.monotonic() + 10
    while health_download()["state"] == "running":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert health_download()["state"] == "cancelled"
    assert (served.folder.models / "slow" / "slow.gguf.part").is_file()
