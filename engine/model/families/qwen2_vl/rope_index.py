"""M-RoPE positions of a prompt with images (Qwen2-VL): where each token turns, on the host.

A text token turns by one position for all three parts (time, row, column), counting on from the
token before it. An image's tokens share the time of the image's first token and spread over rows
and columns of its merged grid from there; the text after an image goes on from the image's
largest position plus one, so a prompt's positions end below its length. What follows the prompt
(its output tokens) turns at the token's place in the sequence plus the prompt's `shift` (≤ 0).
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RopeIndex:
    positions: np.ndarray  # i32[T, 3] each prompt token's (time, row, column) position
    shift: int  # a token after the prompt turns at its place + shift


def rope_index(
    tokens: Sequence[int], image_token: int, grids: Sequence[tuple[int, int, int]], merge_size: int
) -> RopeIndex:
    """The positions of `tokens`, whose runs of `image_token` are the images of `grids` (patches,
    in order; each run as long as its image's merged tokens)."""
    ids = np.asarray(tokens)
    positions = np.zeros((len(ids), 3), np.int32)
    at, next_position, images = 0, 0, iter(grids)
    while at < len(ids):
        if ids[at] != image_token:
            positions[at] = next_position
            at, next_position = at + 1, next_position + 1
            continue
        t, h, w = next(images)
        rows, columns = h // merge_size, w // merge_size
        count = t * rows * columns
        grid_t, grid_h, grid_w = np.meshgrid(np.arange(t), np.arange(rows), np.arange(columns), indexing="ij")
        positions[at : at + count] = next_position + np.stack([grid_t, grid_h, grid_w], -1).reshape(count, 3)
        at += count
        next_position += max(rows, columns)  # as transformers counts, whatever t (an image's is 1)
    return RopeIndex(positions, next_position - len(ids))
