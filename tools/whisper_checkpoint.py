"""A tiny random Whisper with the real models' token layout, in Hugging Face's layout or in
CTranslate2's (faster-whisper's), for the parity tests (tools/whisper_goldens.py makes their
goldens with transformers) and the transcribe task's engine tests.

    python tools/whisper_checkpoint.py OUT_DIR [--layout hf|ct2] [--english-only] [--ct2-dtype float32|float16|int8]

The network is small (d_model 16, two layers each side) but its windows are real: 80 mel bins,
1500 audio positions (30 s), 448 text positions, and the real vocabulary's ids: GPT-2's byte
alphabet then byte pairs up to 50257 text tokens (50256 English-only), the special tokens with
all 99 languages, then 1501 timestamps — 51865 logits (51864). Weights are drawn with numpy from
`seed`, so the same call always writes the same model. The CTranslate2 form is what its converter
writes from the same weights: fused projections with a zero key bias, the output projection an
alias of the embeddings, int8 weights with a per-row scale.
"""

import argparse
import json
import struct
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

# The language tokens, in id order (openai-whisper's LANGUAGES without large-v3's "yue").
LANGUAGE_CODES = (
    "en zh de es ru ko fr ja pt tr pl ca nl ar sv it id hi fi vi he uk el ms cs ro da hu ta no th ur hr bg lt la mi "
    "ml cy sk te fa lv bn sr az sl kn et mk br eu is hy ne mn bs kk sq sw gl mr pa si km sn yo so af oc ka be tg sd "
    "gu am yi lo uz fo ht ps tk nn mt sa lb my bo tl mg as tt haw ln ha ba jw su"
)
LANGUAGES = tuple(LANGUAGE_CODES.split())
TASK_TOKENS = ("translate", "transcribe", "startoflm", "startofprev", "nocaptions", "notimestamps")
TIMESTAMPS = 1501  # <|0.00|> … <|30.00|>
N_MELS, D_MODEL, HEADS, LAYERS, FFN = 80, 16, 2, 2, 32
N_AUDIO_CTX, N_TEXT_CTX = 1500, 448
ALIGNMENT_HEADS = ((0, 1), (1, 0))
CT2_TYPES = {"float32": 0, "int8": 1, "int16": 2, "int32": 3, "float16": 4}


def text_tokens(english_only: bool) -> int:
    return 50256 if english_only else 50257


def special_names() -> list[str]:
    """The special tokens after the text ones, in id order (English-only models list the languages too)."""
    return [
        "<|endoftext|>",
        "<|startoftranscript|>",
        *(f"<|{code}|>" for code in LANGUAGES),
        *(f"<|{t}|>" for t in TASK_TOKENS),
    ]


def vocab_size(english_only: bool) -> int:
    return text_tokens(english_only) + len(special_names()) + TIMESTAMPS


def _alphabet() -> list[str]:
    """GPT-2's byte-level characters in its id order: the printable bytes as themselves, then the
    others as chr(256 + n) (so id 220 is "Ġ", the space)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [byte for byte in range(256) if byte not in printable]
    return [chr(byte) for byte in printable] + [chr(256 + n) for n in range(len(others))]


def tokenizer(english_only: bool, with_timestamps: bool) -> Tokenizer:
    """Byte-level BPE: the 256 bytes, then byte pairs (each a merge) up to the text vocabulary; the
    special tokens (and with `with_timestamps` the timestamp tokens, as HF's newer files list them)."""
    alphabet = _alphabet()
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    merges = []
    count = text_tokens(english_only)
    for a in alphabet:
        for b in alphabet:
            if len(vocab) == count:
                break
            vocab[a + b] = len(vocab)
            merges.append((a, b))
    built = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    built.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    built.decoder = decoders.ByteLevel()
    built.add_special_tokens(special_names())
    if with_timestamps:
        built.add_tokens([f"<|{i * 0.02:.2f}|>" for i in range(TIMESTAMPS)])
    return built


def random_tensors(english_only: bool = False, seed: int = 0) -> dict[str, np.ndarray]:
    """`WhisperForConditionalGeneration`'s tensors (float32), drawn from `seed`."""
    rng = np.random.default_rng(seed)

    def normal(*shape: int, std: float = 0.2) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    tensors: dict[str, np.ndarray] = {}

    def linear(name: str, out: int, into: int, bias: bool = True) -> None:
        tensors[f"{name}.weight"] = normal(out, into)
        if bias:
            tensors[f"{name}.bias"] = normal(out, std=0.05)

    def norm(name: str) -> None:
        tensors[f"{name}.weight"] = 1.0 + normal(D_MODEL, std=0.1)
        tensors[f"{name}.bias"] = normal(D_MODEL, std=0.1)

    def attention(name: str) -> None:
        linear(f"{name}.q_proj", D_MODEL, D_MODEL)
        linear(f"{name}.k_proj", D_MODEL, D_MODEL, bias=False)
        linear(f"{name}.v_proj", D_MODEL, D_MODEL)
        linear(f"{name}.out_proj", D_MODEL, D_MODEL)

    def block(name: str, cross: bool) -> None:
        attention(f"{name}.self_attn")
        norm(f"{name}.self_attn_layer_norm")
        if cross:
            attention(f"{name}.encoder_attn")
            norm(f"{name}.encoder_attn_layer_norm")
        linear(f"{name}.fc1", FFN, D_MODEL)
        linear(f"{name}.fc2", D_MODEL, FFN)
        norm(f"{name}.final_layer_norm")

    tensors["model.encoder.conv1.weight"] = normal(D_MODEL, N_MELS, 3, std=0.1)
    tensors["model.encoder.conv1.bias"] = normal(D_MODEL, std=0.05)
    tensors["model.encoder.conv2.weight"] = normal(D_MODEL, D_MODEL, 3)
    tensors["model.encoder.conv2.bias"] = normal(D_MODEL, std=0.05)
    tensors["model.encoder.embed_positions.weight"] = normal(N_AUDIO_CTX, D_MODEL, std=0.5)
    for i in range(LAYERS):
        block(f"model.encoder.layers.{i}", cross=False)
    norm("model.encoder.layer_norm")
    tensors["model.decoder.embed_tokens.weight"] = normal(vocab_size(english_only), D_MODEL, std=0.5)
    tensors["model.decoder.embed_positions.weight"] = normal(N_TEXT_CTX, D_MODEL, std=0.5)
    for i in range(LAYERS):
        block(f"model.decoder.layers.{i}", cross=True)
    norm("model.decoder.layer_norm")
    return tensors


def sample_mel(batch: int = 2, seed: int = 1) -> np.ndarray:
    """Log-mel windows [batch, 80, 3000] of noise in the real features' range, for the parity tests."""
    return np.random.default_rng(seed).uniform(-1.0, 1.5, (batch, N_MELS, 2 * N_AUDIO_CTX)).astype(np.float32)


def special_ids(english_only: bool = False) -> dict[str, int]:
    """Each special token's id: `special_ids()["<|startoftranscript|>"]`."""
    first = text_tokens(english_only)
    return {name: first + i for i, name in enumerate(special_names())}


def _suppress(english_only: bool) -> tuple[list[int], list[int]]:
    """suppress_tokens (a few punctuation-like ids, as the real list holds) and begin_suppress."""
    eot = special_ids(english_only)["<|endoftext|>"]
    return [1, 2, 7, 8, 9, 10, 14, 25, 26, 27, 28, 29, 31, 58, 59, 60, 61, 62, 63, 90, 91, 92, 93], [220, eot]


def write_hf(out: Path, english_only: bool = False, seed: int = 0) -> Path:
    """The HF folder: config.json, generation_config.json, model.safetensors, tokenizer.json."""
    out.mkdir(parents=True, exist_ok=True)
    ids = special_ids(english_only)
    suppress, begin = _suppress(english_only)
    config = {
        "architectures": ["WhisperForConditionalGeneration"],
        "model_type": "whisper",
        "num_mel_bins": N_MELS,
        "d_model": D_MODEL,
        "encoder_layers": LAYERS,
        "encoder_attention_heads": HEADS,
        "decoder_layers": LAYERS,
        "decoder_attention_heads": HEADS,
        "encoder_ffn_dim": FFN,
        "decoder_ffn_dim": FFN,
        "vocab_size": vocab_size(english_only),
        "max_source_positions": N_AUDIO_CTX,
        "max_target_positions": N_TEXT_CTX,
        "activation_function": "gelu",
        "scale_embedding": False,
        "tie_word_embeddings": True,
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|endoftext|>"],
        "pad_token_id": ids["<|endoftext|>"],
        "decoder_start_token_id": ids["<|startoftranscript|>"],
        "torch_dtype": "float32",
    }
    generation = {
        "alignment_heads": [list(pair) for pair in ALIGNMENT_HEADS],
        "begin_suppress_tokens": begin,
        "suppress_tokens": suppress,
        "is_multilingual": not english_only,
        "decoder_start_token_id": ids["<|startoftranscript|>"],
        "eos_token_id": ids["<|endoftext|>"],
        "pad_token_id": ids["<|endoftext|>"],
        "no_timestamps_token_id": ids["<|notimestamps|>"],
        "max_length": N_TEXT_CTX,
    }
    if not english_only:
        generation["lang_to_id"] = {f"<|{code}|>": ids[f"<|{code}|>"] for code in LANGUAGES}
        generation["task_to_id"] = {"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]}
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2))
    save_file(random_tensors(english_only, seed), str(out / "model.safetensors"), metadata={"format": "pt"})
    tokenizer(english_only, with_timestamps=True).save(str(out / "tokenizer.json"))
    return out


def ct2_variables(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """CTranslate2's `WhisperSpec` variables (float32) from HF tensors, as its converter names them."""
    variables: dict[str, np.ndarray] = {}

    def linear(to: str, *names: str) -> None:
        weights = [tensors[f"{n}.weight"] for n in names]
        biases = [
            tensors.get(f"{n}.bias", np.zeros(w.shape[0], np.float32)) for n, w in zip(names, weights, strict=True)
        ]
        variables[f"{to}/weight"] = np.concatenate(weights)
        variables[f"{to}/bias"] = np.concatenate(biases)

    def norm(to: str, name: str) -> None:
        variables[f"{to}/gamma"] = tensors[f"{name}.weight"]
        variables[f"{to}/beta"] = tensors[f"{name}.bias"]

    def block(to: str, name: str, cross: bool) -> None:
        a = f"{name}.self_attn"
        linear(f"{to}/self_attention/linear_0", f"{a}.q_proj", f"{a}.k_proj", f"{a}.v_proj")
        linear(f"{to}/self_attention/linear_1", f"{a}.out_proj")
        norm(f"{to}/self_attention/layer_norm", f"{name}.self_attn_layer_norm")
        if cross:
            c = f"{name}.encoder_attn"
            linear(f"{to}/attention/linear_0", f"{c}.q_proj")
            linear(f"{to}/attention/linear_1", f"{c}.k_proj", f"{c}.v_proj")
            linear(f"{to}/attention/linear_2", f"{c}.out_proj")
            norm(f"{to}/attention/layer_norm", f"{name}.encoder_attn_layer_norm")
        linear(f"{to}/ffn/linear_0", f"{name}.fc1")
        linear(f"{to}/ffn/linear_1", f"{name}.fc2")
        norm(f"{to}/ffn/layer_norm", f"{name}.final_layer_norm")

    for conv in ("conv1", "conv2"):
        linear(f"encoder/{conv}", f"model.encoder.{conv}")
    variables["encoder/position_encodings/encodings"] = tensors["model.encoder.embed_positions.weight"]
    for i in range(LAYERS):
        block(f"encoder/layer_{i}", f"model.encoder.layers.{i}", cross=False)
    norm("encoder/layer_norm", "model.encoder.layer_norm")
    variables["decoder/embeddings/weight"] = tensors["model.decoder.embed_tokens.weight"]
    variables["decoder/position_encodings/encodings"] = tensors["model.decoder.embed_positions.weight"]
    for i in range(LAYERS):
        block(f"decoder/layer_{i}", f"model.decoder.layers.{i}", cross=True)
    norm("decoder/layer_norm", "model.decoder.layer_norm")
    return variables


def _cast(variables: dict[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    """float16: every float variable; int8: each 2-D weight, as int8 with `<name>_scale` = 127 / its
    row's largest magnitude (CTranslate2's quantization); other variables stay float32."""
    if dtype == "float32":
        return variables
    if dtype == "float16":
        return {name: value.astype(np.float16) for name, value in variables.items()}
    cast: dict[str, np.ndarray] = {}
    for name, value in variables.items():
        if name.endswith("/weight") and value.ndim == 2:
            scale = (127.0 / np.maximum(np.abs(value).max(axis=1), 1e-12)).astype(np.float32)
            cast[name] = np.clip(np.round(value * scale[:, None]), -127, 127).astype(np.int8)
            cast[f"{name}_scale"] = scale
        else:
            cast[name] = value
    return cast


def write_model_bin(path: Path, variables: dict[str, np.ndarray], aliases: dict[str, str]) -> None:
    """CTranslate2's binary format, version 6 (engine/model/families/whisper/model_bin.py reads it)."""

    def string(text: str) -> bytes:
        raw = text.encode()
        return struct.pack("<H", len(raw) + 1) + raw + b"\0"

    with path.open("wb") as f:
        f.write(struct.pack("<I", 6) + string("WhisperSpec") + struct.pack("<I", 3))
        f.write(struct.pack("<I", len(variables)))
        for name, value in sorted(variables.items()):
            data = np.asarray(value, order="C")  # (ascontiguousarray would make a scalar 1-D)
            f.write(string(name) + struct.pack("<B", data.ndim) + struct.pack(f"<{data.ndim}I", *data.shape))
            f.write(struct.pack("<BI", CT2_TYPES[data.dtype.name], data.nbytes) + data.tobytes())
        f.write(struct.pack("<I", len(aliases)))
        for alias, target in aliases.items():
            f.write(string(alias) + string(target))


def write_ct2(out: Path, english_only: bool = False, seed: int = 0, dtype: str = "float32") -> Path:
    """The CTranslate2 folder: model.bin, config.json, tokenizer.json and vocabulary.txt."""
    out.mkdir(parents=True, exist_ok=True)
    ids = special_ids(english_only)
    suppress, begin = _suppress(english_only)
    variables = _cast(ct2_variables(random_tensors(english_only, seed)), dtype)
    scalars = {
        "encoder/num_heads": np.array(HEADS, np.int16),
        "decoder/num_heads": np.array(HEADS, np.int16),
        "decoder/activation": np.array(3, np.int8),  # GELU
        "decoder/pre_norm": np.array(1, np.int8),
        "decoder/scale_embeddings": np.array(0, np.int8),
        "decoder/alignment_layer": np.array(-1, np.int16),
        "decoder/alignment_heads": np.array(1, np.int16),
    }
    write_model_bin(
        out / "model.bin", {**variables, **scalars}, {"decoder/projection/weight": "decoder/embeddings/weight"}
    )
    config = {
        "alignment_heads": [list(pair) for pair in ALIGNMENT_HEADS],
        "lang_ids": [ids[f"<|{code}|>"] for code in LANGUAGES],
        "suppress_ids": suppress,
        "suppress_ids_begin": begin,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))
    built = tokenizer(english_only, with_timestamps=False)
    built.save(str(out / "tokenizer.json"))
    tokens = sorted(built.get_vocab(with_added_tokens=True).items(), key=lambda item: item[1])
    timestamps = [f"<|{i * 0.02:.2f}|>" for i in range(TIMESTAMPS)]
    (out / "vocabulary.txt").write_text("\n".join([*(token for token, _ in tokens), *timestamps]) + "\n")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--layout", choices=("hf", "ct2"), default="hf")
    parser.add_argument("--english-only", action="store_true")
    parser.add_argument("--ct2-dtype", choices=("float32", "float16", "int8"), default="float32")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.layout == "hf":
        write_hf(args.out, args.english_only, args.seed)
    else:
        write_ct2(args.out, args.english_only, args.seed, args.ct2_dtype)
    print(args.out)


if __name__ == "__main__":
    main()
