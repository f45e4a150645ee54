"""The Whisper family against transformers' `WhisperForConditionalGeneration` (goldens made by
tools/whisper_goldens.py on tools/whisper_checkpoint.py's tiny random model), in both checkpoint
layouts: the encoder's output and a prefix's logits within 1e-4, the alignment heads'
cross-attention weights, and the same greedy tokens."""

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine.model.families.whisper import LoadedWhisper, cross_kv, decode, encode, init_self_kv, load_whisper
from tools.whisper_checkpoint import sample_mel, write_ct2, write_hf

pytestmark = pytest.mark.slow  # the model through XLA against transformers' goldens

GOLDEN = np.load(Path(__file__).resolve().parent.parent / "goldens" / "whisper" / "tiny_random.npz")
TOLERANCE = 1e-4
LAYOUTS: dict[str, Callable[[Path], Path]] = {"hf": write_hf, "ct2": write_ct2}


@pytest.fixture(scope="module", params=list(LAYOUTS))
def model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> LoadedWhisper:
    return load_whisper(LAYOUTS[request.param](tmp_path_factory.mktemp(request.param)))


def _params(model: LoadedWhisper) -> Any:
    return jax.tree_util.tree_map(jnp.asarray, model.params)


def _cross(model: LoadedWhisper, rows: int = 1) -> Any:
    features = encode(_params(model), model.config, jnp.asarray(sample_mel()[:rows]))
    return cross_kv(_params(model), model.config, features)


def test_the_encoder_output_matches_transformers(model: LoadedWhisper) -> None:
    features = np.asarray(encode(_params(model), model.config, jnp.asarray(sample_mel())))
    np.testing.assert_allclose(features[:, ::5], GOLDEN["encoder_rows"], atol=TOLERANCE, rtol=0)


def test_a_prefix_logits_and_alignment_weights_match_transformers(model: LoadedWhisper) -> None:
    prefix = jnp.asarray(GOLDEN["prefix"])[None]
    positions = jnp.arange(prefix.shape[1])[None]
    kv = init_self_kv(model.config, 1, model.config.n_text_ctx)
    logits, _, alignment = decode(_params(model), model.config, prefix, positions, kv, _cross(model), alignment=True)
    np.testing.assert_allclose(
        np.asarray(logits)[0][:, GOLDEN["logit_columns"]], GOLDEN["logits"], atol=TOLERANCE, rtol=0
    )
    assert alignment is not None and alignment.shape == (1, 2, prefix.shape[1], model.config.n_audio_ctx)
    np.testing.assert_allclose(np.asarray(alignment)[0], GOLDEN["alignment"], atol=TOLERANCE, rtol=0)


def test_greedy_tokens_match_transformers(model: LoadedWhisper) -> None:
    """A jitted one-token step over the cache, as the transcribe task runs the decoder."""
    config, params = model.config, _params(model)
    step = jax.jit(partial(decode, config=config), donate_argnames="self_kv")
    golden = [int(t) for t in GOLDEN["greedy"]]
    prompt_length = 4
    tokens = golden[:prompt_length]
    kv = init_self_kv(config, 1, config.n_text_ctx)
    cross = _cross(model)
    logits, kv, _ = step(
        params, tokens=jnp.asarray([tokens]), positions=jnp.arange(len(tokens))[None], self_kv=kv, cross=cross
    )
    while len(tokens) < len(golden):
        tokens.append(int(jnp.argmax(logits[0, -1])))
        logits, kv, _ = step(
            params,
            tokens=jnp.asarray([[tokens[-1]]]),
            positions=jnp.asarray([[len(tokens) - 1]]),
            self_kv=kv,
            cross=cross,
        )
    assert tokens == golden
