"""`PrefixCache`: the scheduler's side of the prefix cache — naming full pages, and the disk tier.

A row's full KV pages are named in the page pool (engine/serving/kv_pages.py) by the hash chained
over every token before their end, from its LoRA adapter's root; the hashes are kept on the row,
so that a long prompt is hashed once from its fetch to its decode.

With a disk tier (engine/serving/prefix_disk.py), a new request whose prompt continues past the
pages cached on the device with pages the disk holds waits, unadmitted, while the disk's IO
thread reads them; the engine thread then writes them into free pages, named like prefilled ones,
and queues the request, whose admission finds them as cached pages. A finished prompt's full
pages that the disk lacks are read back from the device and queued for the IO thread to write.

Threads: only the engine thread calls a `PrefixCache` (for the scheduler, engine/serving/scheduler.py),
and it alone touches the page pool and the runner. The disk's IO thread shares only the disk's
index, under the disk's own lock, and hands each finished load to the intake, which wakes the
engine thread; a request waits for its pages unadmitted, so running rows never wait on the disk.
"""

from collections.abc import Collection
from dataclasses import dataclass

from engine.device.runner_api import Runner
from engine.serving.intake import Intake
from engine.serving.kv_pages import PagePool, extend_page_hashes
from engine.serving.prefix_disk import Loaded, PrefixDisk
from engine.serving.rows import Request, Row


@dataclass(frozen=True)
class _Fetch:
    """A request waiting for pages from the disk tier: the loaded run starts at page `start` of
    its prompt's `hashes` (the pages before it were cached on the device)."""

    unit: list[Row]
    hashes: list[bytes]
    start: int


class PrefixCache:
    def __init__(self, runner: Runner, pool: PagePool, intake: Intake, disk: PrefixDisk | None) -> None:
        self._runner = runner
        self._pool = pool
        self._intake = intake
        self._disk = disk
        self._page_size = runner.page_size
        self._fetching: dict[int, _Fetch] = {}  # by request id

    def prompt_hashes(self, row: Row, tokens: list[int]) -> list[bytes]:
        """The hashes of the full pages of `tokens` (the row's own, or their start), kept on the row
        so that a long prompt is hashed once from its fetch to its decode."""
        # The row may hold more (a row preempted before its first token hashed its whole prompt).
        hashes = extend_page_hashes(row.page_hashes, tokens, self._page_size, _root(row))
        return hashes[: len(tokens) // self._page_size]

    def name_full_pages(self, row: Row, kv_written: int) -> None:
        """Names the row's pages that the KV written up to `kv_written` tokens fills, for later prompts."""
        full = kv_written // self._page_size
        if full > row.named_pages:
            hashes = extend_page_hashes(
                row.page_hashes, row.tokens[: full * self._page_size], self._page_size, _root(row)
            )
            for page, content_hash in zip(row.pages[row.named_pages : full], hashes[row.named_pages :], strict=True):
                self._pool.name(page, content_hash)
            row.named_pages = full

    # --- the disk tier ----------------------------------------------------------------------

    def fetch(self, unit: list[Row]) -> bool:
        """Starts reading the pages of `unit`'s prompt that follow its device-cached pages from the
        disk tier, if it holds any; the unit waits for them (True) or is not fetching (False)."""
        if self._disk is None:
            return False
        hashes = self.prompt_hashes(unit[0], unit[0].tokens[:-1])
        start = self._pool.cached_run(hashes)
        found = self._disk.has_run(hashes[start:])
        if found == 0:
            return False
        entry = unit[0].request
        self._fetching[entry.id] = _Fetch(unit, hashes, start)
        self._disk.load(entry.id, hashes[start : start + found])
        return True

    def fetched(self, loaded: Loaded) -> list[Row] | None:
        """The unit whose pages `loaded` holds, once they are in the pool; None if its request
        ended while they were read."""
        fetch = self._fetching.pop(loaded.ticket, None)
        if fetch is None:
            return None
        self._restore(fetch, loaded)
        return fetch.unit

    def _restore(self, fetch: _Fetch, loaded: Loaded) -> None:
        """Writes the loaded pages into free pages, named for the prefix cache. The device-cached
        pages before them are held meanwhile, so that no allocation here evicts them."""
        held = self._pool.lookup(fetch.hashes[: fetch.start])
        if len(held) < fetch.start:  # evicted since: the loaded run no longer joins the prefix
            self._pool.release(held)
            return
        pages = []
        for _ in loaded.contents:
            page = self._pool.allocate()
            if page is None:
                break
            pages.append(page)
        self._runner.write_pages(pages, loaded.contents[: len(pages)])
        for page, content_hash in zip(pages, loaded.hashes, strict=False):
            self._pool.name(page, content_hash)
        self._pool.release(held + pages)
        self._intake.restored(len(pages) * self._page_size)

    def save_prompt(self, pages: list[int], hashes: list[bytes]) -> None:
        """Queues the prompt's full pages (`hashes`, in `pages`) that the disk tier lacks to be
        written there; without a disk tier, nothing."""
        if self._disk is None:
            return
        missing = self._disk.missing(hashes)
        if missing:
            contents = self._runner.read_pages([pages[i] for i in missing])
            self._disk.save([hashes[i] for i in missing], contents)

    def fetching(self) -> list[Request]:
        """The requests waiting for their pages from the disk."""
        return [fetch.unit[0].request for fetch in self._fetching.values()]

    def drop(self, request_ids: Collection[int]) -> list[Request]:
        """Stops waiting for the pages of those of `request_ids` that wait; returns their requests
        (a load that finishes later is ignored)."""
        return [self._fetching.pop(i).unit[0].request for i in [i for i in self._fetching if i in request_ids]]


def _root(row: Row) -> bytes:
    adapter = row.request.adapter
    return b"" if adapter is None else adapter.root
