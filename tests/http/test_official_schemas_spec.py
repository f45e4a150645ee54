"""pooled's response schemas against what OpenAI's official spec and Anthropic's published types
say of the same objects.

`tests/goldens/openai_schemas.json` and `anthropic_schemas.json` hold, per object, the official
property names, required names, the names that may be null, and the `type` constant (extracted by
`tools/openai_schema_golden.py` from OpenAI's spec and `tools/anthropic_schema_golden.py` from
the Anthropic SDK's types). pooled may leave out optional fields and add fields it documents as
extensions, but may not invent others, drop a required one, send null where the official schema
has none (it omits what is absent) or name a different type: the official SDKs would then fail to
parse, or clients would read nonsense.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
GOLDEN: dict[str, Any] = {
    name: facts
    for source in ("openai", "anthropic")
    for name, facts in json.loads((ROOT / "tests" / "goldens" / f"{source}_schemas.json").read_text()).items()
}
OURS: dict[str, Any] = json.loads((ROOT / "generated" / "openapi.json").read_text())["components"]["schemas"]


# Nulls the official schema has no room for that pooled sends anyway, each with its reason.
SENT_NULLS = {
    # An empty page has no first or last item, and OpenAI's ResponseItemList requires both ids.
    ("ResponseInputItemList", "first_id"),
    ("ResponseInputItemList", "last_id"),
}


def nullable(prop: dict[str, Any]) -> bool:
    types = prop.get("type")
    if types == "null" or (isinstance(types, list) and "null" in types):
        return True
    return any(nullable(part) for part in prop.get("anyOf", []) + prop.get("oneOf", []))


def extension(prop: dict[str, Any]) -> bool:
    return str(prop.get("description", "")).startswith("Extension")


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_schema_matches_the_official_one(name: str) -> None:
    official, ours = GOLDEN[name], OURS[name]
    source = official["official"]
    properties = {key for key, prop in ours["properties"].items() if not extension(prop)}
    assert properties <= set(official["properties"]), f"not in {source}"
    assert set(official["required"]) <= set(ours.get("required", [])), f"required by {source}"
    assert ours["properties"].get("type", {}).get("const") == official["type"]
    null_where_official_has_none = {
        key
        for key, prop in ours["properties"].items()
        if nullable(prop) and key not in official["nullable"] and (name, key) not in SENT_NULLS
    }
    assert not null_where_official_has_none, f"{source} has no null for these: omit them instead"
