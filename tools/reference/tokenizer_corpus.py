"""Golden token ids for a text corpus, from two references.

1. transformers' tokenizer built on the SmolLM2 GGUF (byte-level BPE). Ids are taken with
   `split_special_tokens=True`: control tokens spelled in text stay plain text, which is what
   `text.Tokenizer.encode` promises.
2. SentencePiece itself, on a small BPE model with byte fallback trained here the way Llama's was
   (no normalization, digits split). Its vocabulary is stored as the `tokenizer.ggml.*` metadata
   llama.cpp's converter would write, so the test builds our tokenizer from it as from a GGUF.
"""

import io
import json
from pathlib import Path

import sentencepiece
import transformers
from transformers import AutoTokenizer

from tools.reference.smollm2_gguf import SMOLLM2_GGUF_NAME, smollm2_gguf_dir

GOLDEN_NAME = "tokenizer_smollm2.json"
SPM_GOLDEN_NAME = "tokenizer_spm.json"
SPM_VOCAB_SIZE = 600
# llama.cpp token types
NORMAL, UNKNOWN, CONTROL, UNUSED, BYTE = 1, 2, 3, 5, 6
CORPUS = [
    "",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "don't I'm we'll they've she'd it's",
    "   leading spaces and trailing spaces   ",
    "a     b      c",
    "tabs\tbetween\t\twords\t",
    "line one\nline two\r\nline three\n\n\n\nend",
    " \n \t \n",
    "1234567890 3.14159 1,000,000 -42 0x1F 2024-11-30",
    "日本語のテキストと中文混合、句読点。",
    "안녕하세요 세계",
    "Привет, мир! Ελληνικά. עברית. العربية. हिन्दी. ภาษาไทย",
    "café naïve résumé Ångström façade e\u0301 n\u0303",
    "emoji 👍 👍🏽 👨‍👩‍👧‍👦 🇫🇷 🤖✨ ☕",
    "zero\u200bwidth and non\u00a0breaking spaces",
    "def reverse(s: str) -> str:\n    if s is None:\n        return ''\n    return s[::-1]\n",
    '{"key": [1, 2, 3], "nested": {"a": null, "b": true}}',
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}",
    "<|im_start|>assistant\nHello!<|im_end|>\n",
    "user text with <|im_start|>assistant inside",
    "<|endoftext|><repo_name>pooled<file_sep><filename>a.py",
    "partial <|im_start and <|im_end| tokens",
    "Supercalifragilisticexpialidocious antidisestablishmentarianism",
    "mixed日本english中文123😀end",
]


def smollm2_golden() -> dict:
    tokenizer = AutoTokenizer.from_pretrained(smollm2_gguf_dir(), gguf_file=SMOLLM2_GGUF_NAME)
    cases = []
    for text in CORPUS:
        ids = tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        cases.append({"text": text, "ids": ids, "decoded": tokenizer.decode(ids)})
    return {"gguf": SMOLLM2_GGUF_NAME, "transformers_version": transformers.__version__, "cases": cases}


def sentencepiece_golden() -> dict:
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter([line for text in CORPUS * 4 for line in text.splitlines() if line.strip()]),
        model_writer=model,
        model_type="bpe",
        vocab_size=SPM_VOCAB_SIZE,
        byte_fallback=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=True,
        split_digits=True,
        allow_whitespace_only_pieces=True,
        hard_vocab_limit=False,
        num_threads=1,
        minloglevel=2,
    )
    processor = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
    ids = range(processor.get_piece_size())
    metadata = {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": [processor.id_to_piece(i) for i in ids],
        "tokenizer.ggml.scores": [processor.get_score(i) for i in ids],
        "tokenizer.ggml.token_type": [_token_type(processor, i) for i in ids],
        "tokenizer.ggml.bos_token_id": processor.bos_id(),
        "tokenizer.ggml.eos_token_id": processor.eos_id(),
        "tokenizer.ggml.unknown_token_id": processor.unk_id(),
        "tokenizer.ggml.add_space_prefix": True,
    }
    cases = [
        {"text": text, "ids": processor.encode(text), "decoded": processor.decode(processor.encode(text))}
        for text in CORPUS
    ]
    return {"sentencepiece_version": sentencepiece.__version__, "metadata": metadata, "cases": cases}


def _token_type(processor: sentencepiece.SentencePieceProcessor, token_id: int) -> int:
    """As llama.cpp's converter classifies SentencePiece pieces."""
    if processor.is_unknown(token_id):
        return UNKNOWN
    if processor.is_control(token_id):
        return CONTROL
    if processor.is_unused(token_id):
        return UNUSED
    return BYTE if processor.is_byte(token_id) else NORMAL


def main(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, golden in ((GOLDEN_NAME, smollm2_golden()), (SPM_GOLDEN_NAME, sentencepiece_golden())):
        (out_dir / name).write_text(json.dumps(golden, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {out_dir / name} ({len(golden['cases'])} texts)")


if __name__ == "__main__":
    main(Path(__file__).resolve().parents[2] / "tests" / "goldens")
