"""`pooled pull URL`: one GGUF file by its URL into the models folder, as `<models_dir>/<file name>`
(a folder model, served as `pooled/<name>`), through the catalog downloader (pooled/models_folder/downloads.py):
its Range resume, retries and stall timeout.

The file is fetched as a one-file entry made up for it, in a hidden staging folder
`<models_dir>/.pull-<hash of the URL>/` (listings skip hidden names, and no catalog id starts with a
dot), so a part left by an interrupted pull is resumed by the same command, and only a finished file
appears under the model's name: it is moved there once its size (and digest, when given) matched.

The size comes from the server (`Content-Range` of a one-byte range request, or `Content-Length`).
With `--sha256` the file is checked against it; without, the download computes the digest and the
command prints it, saying the file was checked against nothing: the URL's publisher is the only
one who could say what it should be.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import httpx

from pooled.human_units import human_size
from pooled.models_folder.catalog import CatalogEntry, CatalogFile, size_class_of
from pooled.models_folder.download_job import DownloadProgress, ProgressCallback, download
from pooled.models_folder.model_ids import model_id_for
from pooled.models_folder.models_dir import disk_state, part_path, read_verified, remove_entry, sha256_file

_SHA256 = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[^/\\\x00]+\.gguf")
STAGING_PREFIX = ".pull-"


class UrlRefused(ValueError):
    """A URL or digest this command does not take: the message says why."""


class UrlFailed(Exception):
    """The file could not be fetched: the message says why."""


@dataclass(frozen=True)
class UrlPull:
    """Where a URL's file goes, and the entry the downloader fetches it as."""

    url: str
    name: str
    final: Path  # <models_dir>/<name>
    staging: Path  # the hidden folder the part lives in
    sha256: str | None

    def entry(self, size: int) -> CatalogEntry:
        """A one-file entry whose folder is the staging folder; what the catalog says of a model
        (family, context, licence, memory) is not known for a file by URL, and no reader of this
        entry looks at it."""
        file = CatalogFile(self.name, self.url, self.sha256, size)
        return CatalogEntry(self.staging.name, "unknown", "gguf", (file,), 1, "unknown", size_class_of(size), size)


def is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def plan(url: str, sha256: str | None, models_dir: Path) -> UrlPull:
    """Where `url`'s file goes; UrlRefused for a URL that is not a `.gguf` file's, a file name that
    would land outside the models folder, or a digest that is not 64 hex digits."""
    name = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    if not _NAME.fullmatch(name) or name.startswith("."):
        raise UrlRefused(f"{url}: a URL pull takes a .gguf file's URL (catalog entries are pulled by id)")
    if sha256 is not None and not _SHA256.fullmatch(sha256.lower()):
        raise UrlRefused(f"--sha256 {sha256!r} is not 64 hex digits")
    root = models_dir.resolve()
    final = models_dir / name
    if final.resolve().parent != root:  # a symlink under that name pointing elsewhere
        raise UrlRefused(f"{final} is not a file in the models folder {root}")
    staging = models_dir / (STAGING_PREFIX + hashlib.sha256(url.encode()).hexdigest()[:16])
    return UrlPull(url, name, final, staging, sha256.lower() if sha256 else None)


def remote_size(url: str, timeout_s: float) -> int:
    """The file's size as the server states it, from a one-byte range request."""
    headers = {"Range": "bytes=0-0", "Accept-Encoding": "identity", "User-Agent": "pooled"}
    try:
        with (
            httpx.Client(timeout=timeout_s, follow_redirects=True, headers=headers) as client,
            client.stream("GET", url) as response,
        ):
            if response.status_code == 206:
                size = _total_of(response.headers.get("content-range"))
            elif response.status_code == 200:
                length = response.headers.get("content-length", "")
                size = int(length) if length.isdigit() else None
            else:
                raise UrlFailed(f"HTTP {response.status_code} from {url}")
    except httpx.HTTPError as error:
        raise UrlFailed(f"cannot reach {url}: {error or type(error).__name__}") from None
    if size is None:
        raise UrlFailed(f"{url} does not say how large the file is (no Content-Length or Content-Range)")
    if size == 0:
        raise UrlFailed(f"{url} is an empty file")
    return size


def fetch(
    pull: UrlPull,
    size: int,
    on_progress: ProgressCallback | None,
    retries: int,
    stall_timeout_s: float,
) -> tuple[DownloadProgress, str | None]:
    """Download into the staging folder and, when it finished, move the file to its final name and
    drop the staging folder; the progress and the file's sha256 (None unless done). A
    KeyboardInterrupt goes through, the part kept in the staging folder."""
    models_dir = pull.staging.parent
    entry = pull.entry(size)
    progress = download(entry, models_dir, on_progress, retries=retries, stall_timeout_s=stall_timeout_s)
    if progress.state != "done":
        if not part_path(entry, models_dir, entry.files[0]).exists():
            remove_entry(entry, models_dir)  # nothing left to resume (a digest mismatch deleted it)
        return progress, None
    digest = read_verified(pull.staging).get(pull.name)
    (pull.staging / pull.name).replace(pull.final)
    remove_entry(entry, models_dir)  # the record and the lock; the file is no longer there
    return progress, digest


def kept(pull: UrlPull, size: int) -> int:
    """Bytes of the part kept in the staging folder."""
    return disk_state(pull.entry(size), pull.staging.parent).bytes


def already_there(pull: UrlPull) -> tuple[bool, str]:
    """For a file already at its final name: whether it may stay (no digest asked, or the one
    asked), and what to tell the user."""
    digest = sha256_file(pull.final)
    size = human_size(pull.final.stat().st_size)
    if pull.sha256 is None:
        return True, f"{pull.final} is already there ({size}, sha256 {digest}; not verified against anything)"
    if digest == pull.sha256:
        return True, f"{pull.final} is already there and verified ({size}, sha256 {digest})"
    return False, (
        f"{pull.final} is already there with sha256 {digest}, not {pull.sha256}: "
        f"remove it first (pooled rm {model_id_for(pull.final)} --yes)"
    )


def _total_of(content_range: str | None) -> int | None:
    match = re.fullmatch(r"bytes \d+-\d+/(\d+)", content_range or "")
    return int(match.group(1)) if match else None
