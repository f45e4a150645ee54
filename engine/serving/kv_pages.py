"""Host-side bookkeeping of the paged KV cache: which page holds what, and who holds each page.

Only the engine thread touches a `PagePool`. The pool never sees device memory: it hands out page
ids, and the step functions write keys and values into those pages.

Full pages are named by a content hash chained over every token before them (BLAKE2b, 16 bytes:
the same in every process, so the disk tier, engine/serving/prefix_disk.py, keys its entries by it), so
two rows whose token prefixes agree name their pages alike. A named page that no row holds stays cached (least
recently used first out) until a fresh page is needed; a later prompt with the same prefix takes
it back instead of prefilling those tokens again.
"""

import hashlib
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from engine.device.runner_api import NULL_PAGE

HASH_BYTES = 16


def page_hashes(tokens: Sequence[int], page_size: int) -> list[bytes]:
    """The chained content hash of each full page of `tokens`."""
    return extend_page_hashes([], tokens, page_size)


def extend_page_hashes(hashes: list[bytes], tokens: Sequence[int], page_size: int, root: bytes = b"") -> list[bytes]:
    """`hashes` (of the first full pages of `tokens`) extended to every full page of `tokens`; the
    chain starts from `root` (a LoRA adapter's digest: pages of its prompts are its own)."""
    full = len(tokens) // page_size
    if full > len(hashes):
        ids = np.asarray(tokens[len(hashes) * page_size : full * page_size], np.int32).reshape(-1, page_size)
        parent = hashes[-1] if hashes else root
        for page in ids:
            parent = hashlib.blake2b(parent + page.tobytes(), digest_size=HASH_BYTES).digest()
            hashes.append(parent)
    return hashes


class PagePool:
    def __init__(self, pages: int, page_size: int) -> None:
        self.page_size = page_size
        self.total = pages - 1  # without the null page
        self._free = list(range(pages - 1, NULL_PAGE, -1))
        self._holders = [0] * pages
        self._page_by_hash: dict[bytes, int] = {}
        self._hash_by_page: dict[int, bytes] = {}
        self._idle_cached: OrderedDict[int, None] = OrderedDict()  # named pages nobody holds, LRU first

    @property
    def used(self) -> int:
        """Pages held by at least one row (idle cached pages count as free)."""
        return self.total - len(self._free) - len(self._idle_cached)

    @property
    def available(self) -> int:
        return len(self._free) + len(self._idle_cached)

    def allocate(self) -> int | None:
        """A fresh page held once, evicting the least recently used idle cached page if need be."""
        if self._free:
            page = self._free.pop()
        elif self._idle_cached:
            page, _ = self._idle_cached.popitem(last=False)
            del self._page_by_hash[self._hash_by_page.pop(page)]
        else:
            return None
        self._holders[page] = 1
        return page

    def hold(self, page: int) -> None:
        if self._holders[page] == 0:
            self._idle_cached.pop(page, None)
        self._holders[page] += 1

    def release(self, pages: Sequence[int]) -> None:
        for page in pages:
            self._holders[page] -= 1
            if self._holders[page] == 0:
                if page in self._hash_by_page:
                    self._idle_cached[page] = None
                else:
                    self._free.append(page)

    def cached_run(self, hashes: Sequence[bytes]) -> int:
        """How many of `hashes`, from the first, have a cached page (nothing is held)."""
        count = 0
        while count < len(hashes) and hashes[count] in self._page_by_hash:
            count += 1
        return count

    def lookup(self, hashes: Sequence[bytes]) -> list[int]:
        """Holds and returns the cached pages of the longest cached run of `hashes` from the start."""
        found = []
        for h in hashes:
            page = self._page_by_hash.get(h)
            if page is None:
                break
            self.hold(page)
            found.append(page)
        return found

    def name(self, page: int, content_hash: bytes) -> None:
        """Records that `page` now holds the full page whose chained hash is `content_hash`."""
        if content_hash in self._page_by_hash or page in self._hash_by_page:
            return  # another page already serves this prefix; this one stays private
        self._page_by_hash[content_hash] = page
        self._hash_by_page[page] = content_hash
