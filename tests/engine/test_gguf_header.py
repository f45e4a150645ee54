"""engine/model/checkpoint/gguf_header.py reads what gguf-py's GGUFReader reads: every metadata
value as `contents()` gives it and every tensor's type, shape and bytes (the reader's own
`GGUF.*` entries aside)."""

from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader

from engine.model.checkpoint.gguf_header import read_header
from pooled.hosting.model_host import default_model_path
from tests.engine.tiny_gguf_decoders import EVERY_FORMAT, write_tiny_gguf


def _assert_reads_alike(path: Path) -> None:
    header, reader = read_header(path), GGUFReader(path)
    expected = {key: field.contents() for key, field in reader.fields.items() if not key.startswith("GGUF.")}
    assert header.fields == expected
    assert [t.name for t in header.tensors] == [t.name for t in reader.tensors]
    for ours, theirs in zip(header.tensors, reader.tensors, strict=True):
        assert (ours.tensor_type, ours.n_bytes) == (theirs.tensor_type, theirs.n_bytes)
        assert ours.n_elements == theirs.n_elements
        assert ours.shape.tolist() == theirs.shape.tolist()
        assert ours.data.dtype == theirs.data.dtype and ours.data.shape == theirs.data.shape
        np.testing.assert_array_equal(ours.data, theirs.data)


@pytest.mark.slow  # reads a whole model's tensors both ways
def test_the_default_model_reads_alike() -> None:
    _assert_reads_alike(default_model_path())


@pytest.mark.slow  # reads a whole model's tensors both ways
@pytest.mark.parametrize("formats", [EVERY_FORMAT, {"default": "F32"}], ids=["blocks", "float"])
def test_a_file_of_every_block_format_reads_alike(tmp_path: Path, formats: dict[str, str]) -> None:
    _assert_reads_alike(write_tiny_gguf(tmp_path / "tiny.gguf", formats, tokenizer_from=default_model_path()))


def test_a_string_past_the_end_is_refused(tmp_path: Path) -> None:
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(default_model_path().read_bytes()[:200_000])  # inside the vocabulary
    with pytest.raises(ValueError, match="past the end"):
        read_header(truncated)
