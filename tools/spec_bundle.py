"""Bundle the hand-written, multi-file spec in `spec/` into one OpenAPI document.

The spec's files follow fixed conventions (docs/spec.md): path items live in
`spec/paths/*.yaml`, schemas in `spec/components/schemas/*.yaml`, shared
responses and parameters in `spec/components/{responses,parameters}.yaml`, each
file a mapping of names to objects. A `$ref` into a path file is inlined; a
`$ref` into a component file becomes a local `#/components/<kind>/<Name>` and
the object is copied into the bundle once. Component names are global, so a name
defined twice is an error rather than a silent overwrite.

One rule is applied to the served document rather than written out by hand
(`nullable_optional_request_fields`): an optional property of a schema that only
JSON requests use also takes `null` (docs/spec.md), as real clients send it and as the
generated models already accept it (every optional field is `X | None = None`).
The models are generated from the bundle without it: datamodel-code-generator
drops the description of a field whose union gains a null.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

COMPONENT_KINDS = {"schemas", "responses", "parameters"}
SCHEMA_REF = "#/components/schemas/"
HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


class SpecError(Exception):
    """The spec breaks the file conventions; the message names the file and ref."""


def _load(path: Path, cache: dict[Path, Any]) -> Any:
    if path not in cache:
        if not path.is_file():
            raise SpecError(f"{path}: referenced file does not exist")
        cache[path] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return cache[path]


def _component_kind(spec_root: Path, target: Path) -> str | None:
    relative = target.relative_to(spec_root).parts
    if relative[0] != "components":
        return None
    if relative[1] == "schemas":
        return "schemas"
    kind = Path(relative[1]).stem
    if kind not in COMPONENT_KINDS:
        raise SpecError(f"{target}: unknown component file")
    return kind


class _Bundler:
    def __init__(self, spec_root: Path) -> None:
        self.spec_root = spec_root.resolve()
        self.files: dict[Path, Any] = {}
        self.components: dict[str, dict[str, Any]] = {kind: {} for kind in COMPONENT_KINDS}
        self.origins: dict[tuple[str, str], Path] = {}

    def resolve(self, node: Any, base: Path) -> Any:
        if isinstance(node, list):
            return [self.resolve(item, base) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str):
            return self._resolve_ref(ref, base, node)
        return {key: self.resolve(value, base) for key, value in node.items()}

    def _resolve_ref(self, ref: str, base: Path, node: dict[str, Any]) -> Any:
        file_part, _, pointer = ref.partition("#/")
        if "/" in pointer:
            raise SpecError(f"{base}: ref {ref!r} must name a top-level entry of its file")
        target = (base.parent / file_part).resolve() if file_part else base
        kind = _component_kind(self.spec_root, target)
        document = _load(target, self.files)
        if pointer not in document:
            raise SpecError(f"{base}: ref {ref!r} names nothing in {target.name}")
        if kind is None:
            if len(node) > 1:
                raise SpecError(f"{base}: a path-item ref {ref!r} takes no sibling keys")
            return self.resolve(document[pointer], target)
        self._register(kind, pointer, target, document[pointer])
        siblings = {key: self.resolve(value, base) for key, value in node.items() if key != "$ref"}
        return {"$ref": f"#/components/{kind}/{pointer}", **siblings}

    def _register(self, kind: str, name: str, source: Path, obj: Any) -> None:
        known = self.origins.get((kind, name))
        if known is not None:
            if known != source:
                raise SpecError(f"{kind} {name!r} is defined in both {known} and {source}")
            return
        self.origins[(kind, name)] = source
        self.components[kind][name] = None  # placeholder first: schemas may be recursive
        self.components[kind][name] = self.resolve(obj, source)

    def register_file(self, path: Path) -> None:
        """Every component in a file is bundled, referenced or not, so models exist for all."""
        kind = _component_kind(self.spec_root, path.resolve())
        assert kind is not None
        for name, obj in _load(path.resolve(), self.files).items():
            self._register(kind, name, path.resolve(), obj)


def bundle(spec_root: Path) -> dict[str, Any]:
    """Return the spec under `spec_root` as one self-contained OpenAPI document."""
    bundler = _Bundler(spec_root)
    root_path = bundler.spec_root / "openapi.yaml"
    root = _load(root_path, bundler.files)
    document = bundler.resolve({key: value for key, value in root.items() if key != "components"}, root_path)
    for path in sorted((bundler.spec_root / "components").rglob("*.yaml")):
        bundler.register_file(path)
    components = bundler.resolve(root.get("components", {}), root_path)
    for kind in sorted(COMPONENT_KINDS):
        if bundler.components[kind]:
            components[kind] = dict(sorted(bundler.components[kind].items()))
    document["components"] = components
    return document


def _schema_refs(node: Any) -> Iterator[str]:
    """The names of every component schema `node` refers to, however deep."""
    if isinstance(node, list):
        for item in node:
            yield from _schema_refs(item)
    elif isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(SCHEMA_REF):
            yield ref.removeprefix(SCHEMA_REF)
        for value in node.values():
            yield from _schema_refs(value)


def _reachable(document: dict[str, Any], roots: list[Any]) -> set[str]:
    """Component schemas reachable from `roots` through refs."""
    schemas = document["components"].get("schemas", {})
    seen: set[str] = set()
    pending = [name for root in roots for name in _schema_refs(root)]
    while pending:
        name = pending.pop()
        if name not in seen:
            seen.add(name)
            pending.extend(_schema_refs(schemas[name]))
    return seen


def _request_only_schemas(document: dict[str, Any]) -> set[str]:
    operations = [
        operation
        for item in document.get("paths", {}).values()
        for method, operation in item.items()
        if method in HTTP_METHODS
    ]
    # A form's fields (multipart/form-data) are text: null has no spelling there, so only JSON bodies.
    requests = [
        operation.get("requestBody", {}).get("content", {}).get("application/json", {}) for operation in operations
    ]
    responses = [operation.get("responses", {}) for operation in operations]
    responses.append(document["components"].get("responses", {}))
    return _reachable(document, requests) - _reachable(document, responses)


def _or_null(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema`, also taking null."""
    if "$ref" in schema or "const" in schema:
        inner = {key: value for key, value in schema.items() if key in ("$ref", "const")}
        rest = {key: value for key, value in schema.items() if key not in inner}
        return {**rest, "anyOf": [inner, {"type": "null"}]}
    for combinator in ("anyOf", "oneOf"):
        if combinator in schema:
            options = schema[combinator]
            if any(option.get("type") == "null" for option in options):
                return schema
            return {**schema, combinator: [*options, {"type": "null"}]}
    if "type" not in schema:
        return schema  # no type: anything, null included
    types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    nullable = {**schema, "type": types if "null" in types else [*types, "null"]}
    if "enum" in schema and None not in schema["enum"]:
        nullable["enum"] = [*schema["enum"], None]
    return nullable


def _optional_take_null(schema: Any) -> Any:
    """`schema` with every optional property (here and in inline schemas below) also taking null."""
    if isinstance(schema, list):
        return [_optional_take_null(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _optional_take_null(value) for key, value in schema.items() if key != "properties"}
    if isinstance(schema.get("properties"), dict):
        required = set(schema.get("required", ()))
        out["properties"] = {}
        for name, prop in schema["properties"].items():
            inner = _optional_take_null(prop)
            out["properties"][name] = inner if name in required else _or_null(inner)
    return out


def nullable_optional_request_fields(document: dict[str, Any]) -> dict[str, Any]:
    """A copy of the bundle with every optional property of a request-only schema also taking null."""
    schemas = dict(document["components"].get("schemas", {}))
    for name in sorted(_request_only_schemas(document)):
        schemas[name] = _optional_take_null(schemas[name])
    return {**document, "components": {**document["components"], "schemas": schemas}}
