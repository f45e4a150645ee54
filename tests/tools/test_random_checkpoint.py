"""tools/random_checkpoint.py's made-in-code tokenizer: any text encodes and decodes back, and every
id of the vocabulary decodes, so a served random model's answers always turn into text."""

import importlib.util
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location(
    "random_checkpoint", Path(__file__).parents[2] / "tools" / "random_checkpoint.py"
)
assert _SPEC is not None and _SPEC.loader is not None
random_checkpoint = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(random_checkpoint)


def test_the_byte_level_tokenizer_round_trips_and_covers_its_vocabulary() -> None:
    tokenizer = random_checkpoint.byte_level_tokenizer(random_checkpoint.VOCAB)
    assert tokenizer.get_vocab_size() == random_checkpoint.VOCAB
    text = "Hello, wörld! 你好 <|im_end|>"
    ids = tokenizer.encode(text).ids
    assert tokenizer.decode(ids, skip_special_tokens=False) == text
    assert ids[-1] == tokenizer.token_to_id("<|im_end|>")
    assert all(tokenizer.id_to_token(i) is not None for i in range(0, random_checkpoint.VOCAB, 997))
