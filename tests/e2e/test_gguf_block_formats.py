"""`pooled serve --model FILE.gguf` on a file whose matrices are in every block format pooled
serves from its own blocks, mixed per tensor: `/health` and the banner name the formats, and the
model answers (tests/engine/test_gguf_blocks_model.py checks the numbers)."""

from __future__ import annotations

from collections import Counter

import httpx
import pytest

from engine.model import kernels
from pooled.hosting.model_host import default_model_path
from tests.engine.tiny_gguf_decoders import EVERY_FORMAT, LAYERS, format_of, matrix_shapes, write_tiny_gguf
from tests.pooled_servers import running_server


@pytest.mark.skipif(not kernels.available(), reason="block formats are served on the native CPU kernels")
def test_a_gguf_in_every_block_format_serves_from_its_blocks(tmp_path_factory: pytest.TempPathFactory) -> None:
    model = tmp_path_factory.mktemp("gguf") / "every-format.gguf"
    write_tiny_gguf(model, EVERY_FORMAT, tokenizer_from=default_model_path())
    expected = Counter(format_of(name, EVERY_FORMAT) for name in matrix_shapes(tied=False))
    assert LAYERS == 2 and len(expected) == 8  # the file holds all eight formats

    with running_server(tmp_path_factory, ["--model", str(model), "--ctx", "256", "--decode-lanes", "2"]) as base:
        health = httpx.get(f"{base}/health").json()
        assert health["quantization"] == "gguf"
        assert health["weight_formats"] == dict(sorted(expected.items()))
        banner = httpx.get(f"{base}/").text
        assert "Weights: the file's own blocks" in banner and "Q6_K ×3" in banner

        body = {"model": health["model"], "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6}
        answer = httpx.post(f"{base}/v1/chat/completions", json={**body, "temperature": 0}, timeout=120)
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["completion_tokens"] == 6  # greedy on these weights: no end token
