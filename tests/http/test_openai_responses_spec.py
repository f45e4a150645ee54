"""pooled's Responses schemas against what OpenAI's official spec says of the same objects.

`tests/goldens/openai_responses_schemas.json` holds, per object, OpenAI's property names, required
names and `type` constant (extracted by `tools/openai_schema_golden.py` from the official spec).
pooled may leave out OpenAI's optional fields, but may not invent fields, drop a required one or
name a different type: the official SDKs would then fail to parse, or clients would read nonsense.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
GOLDEN: dict[str, Any] = json.loads((ROOT / "tests" / "goldens" / "openai_responses_schemas.json").read_text())
OURS: dict[str, Any] = json.loads((ROOT / "generated" / "openapi.json").read_text())["components"]["schemas"]


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_schema_matches_openai(name: str) -> None:
    official, ours = GOLDEN[name], OURS[name]
    properties = set(ours["properties"])
    assert properties <= set(official["properties"]), f"not in OpenAI's {official['openai']}"
    assert set(official["required"]) <= set(ours["required"]), f"required by OpenAI's {official['openai']}"
    assert ours["properties"].get("type", {}).get("const") == official["type"]
