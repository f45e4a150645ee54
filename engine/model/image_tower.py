"""The one interface between the shared decoder and a family's image tower.

A family that takes images puts its tower's config in `ModelConfig.vision`; the decoder asks it for
the tower's Flax module (its parameters sit under "vision" in the model's tree), and the runner
(engine/device/image_embeddings.py) for the module, its inputs and its compiled sizes. Neither
knows which tower it is. The family's preprocessing makes a `PreparedImage` of each image; the
tower takes its patch rows and grid.

No jax here: HTTP handlers hold `PreparedImage`s.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    import flax.linen as nn

# One image's patch rows [patches, patch_inputs] and its grid (t, h, w) in patches.
TowerImage = tuple[np.ndarray, tuple[int, int, int]]


@dataclass(frozen=True)
class PreparedImage:
    """One image as the vision encoder takes it."""

    patches: np.ndarray  # float32 [t*h*w, channels*temporal_patch_size*patch_size**2], transformers' pixel_values
    grid: tuple[int, int, int]  # (t, h, w) in patches, transformers' image_grid_thw
    digest: bytes  # blake2b-128 of the image's bytes: equal bytes, equal embeddings
    merge_size: int

    @property
    def tokens(self) -> int:
        """The `<|image_pad|>` tokens the image takes in the prompt."""
        t, h, w = self.grid
        return t * h * w // self.merge_size**2


class ImageTower(Protocol):
    """A tower's config, as the decoder and the runner use it."""

    @property
    def patch_size(self) -> int:
        """Pixels on a patch's side."""
        ...

    @property
    def merge_size(self) -> int:
        """Patches on a side of the block that becomes one decoder token."""
        ...

    @property
    def out_size(self) -> int:
        """The width of its embeddings: the decoder's hidden size."""
        ...

    @property
    def patch_multiple(self) -> int:
        """The tower's compiled sizes, in patches, are multiples of this."""
        ...

    def module(self, dtype: Any, name: str | None = None) -> "nn.Module":
        """The Flax tower: `inputs(...)` → embeddings [merged tokens, decoder width]."""
        ...

    def inputs(self, images: Sequence[TowerImage], bucket: int) -> Any:
        """One tower call's inputs over `images`, padded to `bucket` patches."""
        ...

    def blank_inputs(self, bucket: int) -> Any:
        """The inputs of a blank image of `bucket` patches (to initialise or compile the tower)."""
        ...
