"""`ImageEmbeddings`: a runner's vision tower calls and the embeddings of the images it saw lately.

An image runs through the tower padded to the smallest bucket of patches that holds it
(`tower_buckets`: doubling up to the most patches an image of the server's largest size has), so
images of every size share a few compiled shapes, which the runner compiles with its others. Its
embeddings come back to the host (they join a prefill chunk's inputs there) and are kept by the
image's digest, the newest `capacity` of them: a conversation resent with its images needs the
tower no more (and the prefix cache usually spares its image tokens' prefill too).

Threads: the runner's engine thread only (and the building thread while it compiles).
"""

import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np

from engine.device.compiled_shapes import geometric_buckets
from engine.model.image_tower import ImageTower, PreparedImage

# The smallest tower bucket, in patches (a 448 × 448 image has 1,024).
SMALLEST_TOWER_BUCKET = 256


def tower_buckets(config: ImageTower, max_image_pixels: int) -> list[int]:
    """The tower's compiled sizes in patches: doubling up to the patches of an image of
    `max_image_pixels` (smart_resize keeps an image at or under it), in whole chunks of queries."""
    multiple = config.patch_multiple
    largest = math.ceil(max_image_pixels / config.patch_size**2 / multiple) * multiple
    return geometric_buckets(min(SMALLEST_TOWER_BUCKET, largest), largest, 2)


class ImageEmbeddings:
    def __init__(self, config: ImageTower, dtype: Any, params: Any, capacity: int) -> None:
        self._config, self._params = config, params
        self._capacity = capacity
        self._kept: OrderedDict[bytes, np.ndarray] = OrderedDict()
        tower = config.module(dtype)

        def run(params: Any, inputs: Any) -> jax.Array:
            return cast(jax.Array, tower.apply({"params": params}, inputs)).astype(jnp.float32)

        self._tower = jax.jit(run)

    def embeddings(self, image: PreparedImage, sizes: Sequence[int]) -> np.ndarray:
        """[image.tokens, out_size] float32; the tower runs at the smallest of `sizes` (the
        compiled ones, ascending) that holds the image."""
        kept = self._kept.get(image.digest)
        if kept is not None:
            self._kept.move_to_end(image.digest)
            return kept
        patches = len(image.patches)
        bucket = next((size for size in sizes if size >= patches), None)
        if bucket is None:
            raise ValueError(f"an image of {patches} patches is over the tower's largest size ({sizes[-1]})")
        inputs = self._config.inputs([(image.patches, image.grid)], bucket)
        embeddings = np.asarray(self._tower(self._params, inputs))[: image.tokens]
        self._kept[image.digest] = embeddings
        if len(self._kept) > self._capacity:
            self._kept.popitem(last=False)
        return embeddings

    def run_blank(self, bucket: int) -> None:
        """Runs the tower on a blank image of `bucket` patches: compiles that size."""
        jax.block_until_ready(self._tower(self._params, self._config.blank_inputs(bucket)))

    def held_arrays(self) -> tuple[jax.Array, ...]:
        return tuple(jax.tree.leaves(self._params))
