"""A download's progress bar on stderr for `pooled pull`: done of total, rate and time left.

The figures are the downloader's own (pooled/models_folder/downloads.py's DownloadProgress, or the same members of
the server's catalog row), not tqdm's count of updates: a resumed part is not counted as received
now, and a pull through the server shows what the server's download measures.
"""

import sys
from typing import TextIO

from tqdm import tqdm

from pooled.human_units import human_duration, human_size


class ProgressBar:
    def __init__(self, label: str, total: int, stream: TextIO | None = None) -> None:
        self._bar = tqdm(
            total=max(total, 1),
            desc=label,
            # The figures go in as a one-item list: tqdm puts ", " before a string postfix.
            bar_format="{desc}: {percentage:3.0f}%|{bar:30}| {postfix[0]}",
            postfix=[f"{human_size(0)}/{human_size(total)}"],
            file=stream or sys.stderr,
            leave=True,
        )

    def show(self, done: int, total: int, rate_bytes_per_s: float, eta_s: float | None) -> None:
        self._bar.total = max(total, 1)
        self._bar.n = done
        figures = f"{human_size(done)}/{human_size(total)}"
        if done >= total:  # the final progress has no rate: the time it took instead
            figures += f", done in {human_duration(self._bar.format_dict['elapsed'])}"
        else:
            rate = f"{human_size(rate_bytes_per_s)}/s" if rate_bytes_per_s > 0 else "-"
            figures += f", {rate}, ETA {human_duration(eta_s)}"
        self._bar.postfix = [figures]
        self._bar.refresh()

    def close(self) -> None:
        self._bar.close()
