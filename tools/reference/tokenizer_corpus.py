"""Golden token ids for a text corpus, from transformers' tokenizer built on the SmolLM2 GGUF.

Ids are taken with `split_special_tokens=True`: control tokens spelled in text stay plain text,
which is what `engine.tokenizer.Tokenizer.encode` promises.
"""

import json
from pathlib import Path

import transformers
from transformers import AutoTokenizer

from tools.reference.smollm2_gguf import SMOLLM2_GGUF_NAME, smollm2_gguf_dir

GOLDEN_NAME = "tokenizer_smollm2.json"
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


def main(out_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(smollm2_gguf_dir(), gguf_file=SMOLLM2_GGUF_NAME)
    cases = []
    for text in CORPUS:
        ids = tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        cases.append({"text": text, "ids": ids, "decoded": tokenizer.decode(ids)})
    out_dir.mkdir(parents=True, exist_ok=True)
    golden = {"gguf": SMOLLM2_GGUF_NAME, "transformers_version": transformers.__version__, "cases": cases}
    (out_dir / GOLDEN_NAME).write_text(json.dumps(golden, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out_dir / GOLDEN_NAME} ({len(cases)} texts)")


if __name__ == "__main__":
    main(Path(__file__).resolve().parents[2] / "tests" / "goldens")
