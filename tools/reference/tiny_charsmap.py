"""Print the precompiled normalisation map the tiny XLM-RoBERTa's Unigram tokenizer carries
(`tests.engine.tiny_encoders.TINY_CHARSMAP`), compiled by sentencepiece from a few rules.

Real XLM-RoBERTa checkpoints carry sentencepiece's compiled NFKC map (about 240 KB); this one maps
capitals and full-width letters to lower case, the "fi" ligature to two letters and the ideographic
space to a space, which is enough to show that a reader applies the map, in 1 KB.

    .venv/bin/python tools/reference/tiny_charsmap.py
"""

import base64
import io
import tempfile
from pathlib import Path

import sentencepiece
from sentencepiece import sentencepiece_model_pb2


def rules() -> list[str]:
    """sentencepiece's rule format: source code points, a tab, target code points (hex)."""
    capitals = [f"{c:X}\t{c + 32:X}" for c in range(ord("A"), ord("Z") + 1)]
    full_width = [f"{0xFF21 + i:X}\t{ord('a') + i:X}" for i in range(26)]
    return [*capitals, *full_width, "FB01\t66 69", "3000\t20"]


def charsmap() -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        rule_file, corpus = Path(tmp) / "rules.tsv", Path(tmp) / "corpus.txt"
        rule_file.write_text("\n".join(rules()) + "\n")
        corpus.write_text("the cat sat on the mat\n" * 50)  # the trainer needs a corpus; only the map is kept
        model = io.BytesIO()
        sentencepiece.SentencePieceTrainer.train(
            input=str(corpus),
            model_writer=model,
            vocab_size=20,
            hard_vocab_limit=False,
            normalization_rule_tsv=str(rule_file),
            minloglevel=2,
        )
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model.getvalue())
    return bytes(proto.normalizer_spec.precompiled_charsmap)


if __name__ == "__main__":
    print(base64.b64encode(charsmap()).decode())
