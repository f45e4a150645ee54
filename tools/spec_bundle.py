"""Bundle the hand-written, multi-file spec in `spec/` into one OpenAPI document.

The spec's files follow fixed conventions (docs/spec.md): path items live in
`spec/paths/*.yaml`, schemas in `spec/components/schemas/*.yaml`, shared
responses and parameters in `spec/components/{responses,parameters}.yaml`, each
file a mapping of names to objects. A `$ref` into a path file is inlined; a
`$ref` into a component file becomes a local `#/components/<kind>/<Name>` and
the object is copied into the bundle once. Component names are global, so a name
defined twice is an error rather than a silent overwrite.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

COMPONENT_KINDS = {"schemas", "responses", "parameters"}


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
