"""A GGUF matrix kept in its file's blocks, as the loader hands it to a family's conversion."""

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from engine.errors import CheckpointError


@dataclass(frozen=True)
class BlockMatrix:
    """A matrix [N, K] kept in the file's blocks: `source` uint8 [N, row bytes] of `format`, one
    output channel per row, in HF's row order.

    A family's conversion handles it as the float matrix it stands for, and the layout changes it
    makes there (the transpose and reshape that give a float kernel [K, ...]) are no-ops here: a
    block parameter is output-major, the file's own order, so the loader only fits the rows to the
    parameter's shape (`fitted`).
    """

    source: np.ndarray  # the file's rows (a view of the memory-mapped file)
    format: str
    shape: tuple[int, int]  # the float matrix's [N, K]
    transform: Callable[[np.ndarray], np.ndarray] | None = None  # a permutation of the rows (llama's q and k)

    @property
    def T(self) -> "BlockMatrix":  # noqa: N802 - numpy's name, which the conversions call
        return self

    def reshape(self, *shape: int) -> "BlockMatrix":
        return self

    def rows(self) -> np.ndarray:
        """The file's rows in HF's row order, [N, row bytes]."""
        return self.source if self.transform is None else self.transform(self.source)

    def fitted(self, shape: tuple[int, ...], name: str) -> np.ndarray:
        """The rows as the parameter's [*channels, row bytes]."""
        rows = self.rows()
        if math.prod(shape[:-1]) != self.shape[0] or shape[-1] != rows.shape[-1]:
            raise CheckpointError(
                f"parameter {name} has shape {shape} but the file's {self.format} rows are {rows.shape}"
            )
        return np.ascontiguousarray(rows).reshape(shape)
