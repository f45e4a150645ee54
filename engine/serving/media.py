"""A prompt's images on the scheduler's side: their tokens as the engine keeps them, their M-RoPE
positions, and their embeddings once the vision tower has made them.

A request brings each image's tokens as runs of the model's image token id. The engine keeps
them as the image's *key*, an id below zero drawn from the image's digest: the prefix cache
hashes a page's token ids, so two pages with different images differ and the same image sent
again hits; and the decoder takes a token below zero for an image token, whose embedding comes
from `PromptMedia.embeddings` (engine/model/layers/transformer.py). Output tokens are never
below zero.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.model.families.qwen2_vl.rope_index import RopeIndex, rope_index
from engine.model.image_tower import PreparedImage


def image_key(image: PreparedImage) -> int:
    """The id below zero that stands for each of the image's tokens (int32, never -0)."""
    return -1 - int.from_bytes(image.digest[:4], "little") % (2**31 - 1)


def image_runs(prompt: Sequence[int], image_token: int) -> list[int]:
    """The lengths of the prompt's runs of image tokens, in order."""
    runs: list[int] = []
    previous = None
    for token in prompt:
        if token == image_token:
            if previous == image_token:
                runs[-1] += 1
            else:
                runs.append(1)
        previous = token
    return runs


@dataclass(eq=False)
class PromptMedia:
    images: tuple[PreparedImage, ...]
    rope: RopeIndex
    image_rows: np.ndarray  # the prompt's image tokens' indices, in order
    # [len(image_rows), D] once the tower has run (the engine thread, before a chunk needs them)
    embeddings: np.ndarray | None = None

    def needs_embeddings(self, start: int, length: int) -> bool:
        """Whether the chunk of tokens start..start+length holds an image token."""
        return self.embeddings is None and bool(np.any((self.image_rows >= start) & (self.image_rows < start + length)))

    def chunk(self, start: int, length: int) -> tuple[np.ndarray | None, np.ndarray]:
        """The chunk's image embeddings [length, D] (zero rows at other tokens; None: it holds no
        image token) and M-RoPE positions [length, 3]; tokens past the prompt (a recomputed row's
        output) turn at their place plus the prompt's shift."""
        media = None
        inside = (self.image_rows >= start) & (self.image_rows < start + length)
        if inside.any():
            assert self.embeddings is not None, "a chunk with image tokens before the tower ran"
            media = np.zeros((length, self.embeddings.shape[1]), np.float32)
            media[self.image_rows[inside] - start] = self.embeddings[inside]
        places = np.arange(start, start + length)
        prompt = len(self.rope.positions)
        rope = np.empty((length, 3), np.int32)
        within = places < prompt
        rope[within] = self.rope.positions[places[within]]
        rope[~within] = (places[~within] + self.rope.shift)[:, None]
        return media, rope


def keyed_prompt(
    prompt: Sequence[int], image_token: int, images: Sequence[PreparedImage]
) -> tuple[list[int], PromptMedia]:
    """The prompt with each image's tokens as its key, and its media. The caller has checked that
    the image-token runs match the images (`image_runs`)."""
    rope = rope_index(prompt, image_token, [image.grid for image in images], images[0].merge_size)
    keyed = list(prompt)
    rows = [i for i, token in enumerate(prompt) if token == image_token]
    at = 0
    for image in images:
        key = image_key(image)
        for row in rows[at : at + image.tokens]:
            keyed[row] = key
        at += image.tokens
    return keyed, PromptMedia(tuple(images), rope, np.asarray(rows, np.int64))
