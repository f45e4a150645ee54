"""The prefix cache's disk tier on its own (engine/serving/prefix_disk.py): entries survive a new
instance, damaged or foreign entries are never served, and the byte cap evicts the least
recently used."""

import os
import queue
from pathlib import Path

from engine.serving.kv_pages import page_hashes
from engine.serving.prefix_disk import Loaded, PrefixDisk, entry_bytes, namespace_digest

PAGE_BYTES = 64
NAMESPACE = namespace_digest({"model": "a"})


def payload(i: int) -> bytes:
    return bytes([i % 256]) * PAGE_BYTES


class Tier:
    """A PrefixDisk whose finished loads arrive on a queue."""

    def __init__(self, root: Path, cap_pages: int = 100, namespace: bytes = NAMESPACE) -> None:
        self.loads: queue.Queue[Loaded] = queue.Queue()
        self.disk = PrefixDisk(root, namespace, PAGE_BYTES, cap_pages * entry_bytes(PAGE_BYTES), self.loads.put)

    def load(self, hashes: list[bytes]) -> list[bytes]:
        self.disk.load(7, hashes)
        loaded = self.loads.get(timeout=10)
        assert loaded.ticket == 7 and list(loaded.hashes) == hashes
        return loaded.contents


HASHES = page_hashes(list(range(40)), 4)  # ten chained page hashes


def test_saved_pages_are_read_back_by_a_new_instance(tmp_path: Path) -> None:
    first = Tier(tmp_path)
    first.disk.save(HASHES[:6], [payload(i) for i in range(6)])
    first.disk.close()  # finishes the queued save
    second = Tier(tmp_path)
    assert second.disk.entries == 6
    assert second.disk.has_run(HASHES) == 6 and second.disk.missing(HASHES) == [6, 7, 8, 9]
    assert second.load(HASHES[:6]) == [payload(i) for i in range(6)]
    second.disk.close()


def test_a_damaged_entry_ends_the_run_and_is_removed(tmp_path: Path) -> None:
    tier = Tier(tmp_path)
    tier.disk.save(HASHES[:4], [payload(i) for i in range(4)])
    tier.disk.close()
    folder = next(tmp_path.iterdir())
    damaged = folder / f"{HASHES[2].hex()}.kv"
    data = bytearray(damaged.read_bytes())
    data[-20] ^= 0xFF  # one payload byte: the checksum no longer matches
    damaged.write_bytes(bytes(data))
    reopened = Tier(tmp_path)
    assert reopened.load(HASHES[:4]) == [payload(0), payload(1)]
    assert not damaged.exists() and reopened.disk.has_run(HASHES) == 2
    reopened.disk.close()


def test_an_entry_of_another_namespace_or_hash_is_never_served(tmp_path: Path) -> None:
    other = Tier(tmp_path, namespace=namespace_digest({"model": "b"}))
    other.disk.save(HASHES[:2], [payload(9), payload(9)])
    other.disk.close()
    tier = Tier(tmp_path)
    assert tier.disk.has_run(HASHES) == 0  # another model's folder
    other_folder = tmp_path / namespace_digest({"model": "b"}).hex()
    own_folder = tmp_path / NAMESPACE.hex()
    # The same files copied into this namespace's folder: their headers name the other one.
    for path in other_folder.iterdir():
        (own_folder / path.name).write_bytes(path.read_bytes())
    # And an entry renamed to another hash: its header names the hash it was written for.
    tier.disk.save(HASHES[5:6], [payload(5)])
    tier.disk.close()
    os.replace(own_folder / f"{HASHES[5].hex()}.kv", own_folder / f"{HASHES[6].hex()}.kv")
    reopened = Tier(tmp_path)
    assert reopened.disk.entries == 3  # the index trusts names and sizes; a load checks the rest
    assert reopened.load(HASHES[:1]) == [] and reopened.load(HASHES[1:2]) == []
    assert reopened.load(HASHES[6:7]) == []
    assert reopened.disk.entries == 0  # each was removed when it failed its check
    reopened.disk.close()


def test_the_cap_evicts_the_least_recently_used(tmp_path: Path) -> None:
    first = Tier(tmp_path, cap_pages=4)
    first.disk.save(HASHES[:4], [payload(i) for i in range(4)])
    first.disk.close()
    tier = Tier(tmp_path, cap_pages=4)
    assert tier.load(HASHES[:1]) == [payload(0)]  # page 0 is now the most recently used
    tier.disk.save(HASHES[4:6], [payload(4), payload(5)])
    tier.disk.close()
    reopened = Tier(tmp_path, cap_pages=4)
    assert reopened.disk.missing(HASHES[:6]) == [1, 2]
    reopened.disk.close()


def test_a_smaller_cap_at_start_and_stray_staging_files(tmp_path: Path) -> None:
    tier = Tier(tmp_path)
    tier.disk.save(HASHES[:5], [payload(i) for i in range(5)])
    tier.disk.close()
    folder = tmp_path / NAMESPACE.hex()
    (folder / "feed.tmp").write_bytes(b"half an entry")
    reopened = Tier(tmp_path, cap_pages=3)
    assert reopened.disk.entries == 3 and not (folder / "feed.tmp").exists()
    reopened.disk.close()
