"""`make generate`: compile spec/ into generated/ (the bundled document, models and routes).

    python tools/generate.py                 # write generated/
    python tools/generate.py --out DIR       # write elsewhere (the drift test uses this)
    python tools/generate.py --bundle-only F # only bundle and validate, into file F

Steps: bundle spec/ into one OpenAPI 3.1 document and validate it; run
datamodel-code-generator (options in pyproject.toml) for the Pydantic models;
render tools/templates/routes.py.jinja2 for the FastAPI routes; format with ruff
so the output is byte-for-byte deterministic; refuse operations without a handler.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from openapi_spec_validator import validate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spec_bundle import SpecError, bundle, nullable_optional_request_fields  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")
JSON_TYPES = {"string": "str", "integer": "int", "boolean": "bool", "number": "float"}


@dataclass(frozen=True)
class Param:
    name: str
    annotation: str
    has_default: bool


@dataclass(frozen=True)
class Operation:
    operation_id: str
    function: str
    route_path: str
    methods: list[str]
    summary: str
    params: list[Param]
    declared: list[str]


def snake_case(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def _schema_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _python_type(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return "Literal[" + ", ".join(repr(value) for value in schema["enum"]) + "]"
    if schema.get("type") == "array":
        return f"list[{_python_type(schema.get('items', {}))}]"
    return JSON_TYPES.get(schema.get("type", "string"), "Any")


def _constraints(schema: dict[str, Any]) -> str:
    keywords = {"minimum": "ge", "maximum": "le", "minLength": "min_length", "maxLength": "max_length"}
    return "".join(f", {arg}={schema[key]!r}" for key, arg in keywords.items() if key in schema)


def _param(parameter: dict[str, Any]) -> Param:
    name, schema = parameter["name"], parameter.get("schema", {})
    python_name = name.replace("[]", "").replace("-", "_")
    alias = f", alias={name!r}" if python_name != name else ""
    kind = {"path": "Path", "query": "Query"}[parameter["in"]]
    type_ = _python_type(schema)
    annotation = f"Annotated[{type_}, {kind}({alias.lstrip(', ')}{_constraints(schema)})]".replace("(, ", "(")
    if parameter.get("required") or parameter["in"] == "path":
        return Param(python_name, annotation, has_default=False)
    default = schema.get("default")
    if default is None:
        return Param(python_name, annotation.replace(f"[{type_},", f"[{type_} | None,", 1) + " = None", True)
    return Param(python_name, f"{annotation} = {default!r}", has_default=True)


def _declared_models(responses: dict[str, Any]) -> list[str]:
    for status in sorted(responses):
        if not status.startswith("2"):
            continue
        schema = responses[status].get("content", {}).get("application/json", {}).get("schema", {})
        if "$ref" in schema:
            return [_schema_name(schema["$ref"])]
        return [_schema_name(member["$ref"]) for member in schema.get("oneOf", []) if "$ref" in member]
    return []


def _route_path(path: str, parameters: list[dict[str, Any]]) -> str:
    for parameter in parameters:
        if parameter["in"] == "path" and parameter.get("x-path-converter") == "path":
            path = path.replace("{" + parameter["name"] + "}", "{" + parameter["name"] + ":path}")
    return path


def _deref(document: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    target: Any = document
    for part in ref.removeprefix("#/").split("/"):
        target = target[part]
    return _deref(document, target)


def operations(document: dict[str, Any]) -> list[Operation]:
    found = []
    for path, item in document["paths"].items():
        for method in HTTP_METHODS:
            op = item.get(method)
            if op is None:
                continue
            declared = [_deref(document, p) for p in item.get("parameters", []) + op.get("parameters", [])]
            parameters = [p for p in declared if p["in"] in ("path", "query")]
            params = [_param(p) for p in parameters]
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            if body is not None:
                if "$ref" not in body:
                    raise SpecError(f"{method.upper()} {path}: the request body must be a $ref to a component schema")
                params.append(Param("body", f"Annotated[models.{_schema_name(body['$ref'])}, Body()]", False))
            params.sort(key=lambda p: p.has_default)
            methods = [method.upper()] + (["HEAD"] if method == "get" else [])
            found.append(
                Operation(
                    operation_id=op["operationId"],
                    function=snake_case(op["operationId"]),
                    route_path=_route_path(path, parameters),
                    methods=methods,
                    summary=op.get("summary", op["operationId"]).rstrip(".") + ".",
                    params=params,
                    declared=_declared_models(op.get("responses", {})),
                )
            )
    return found


def write_bundle(target: Path) -> dict[str, Any]:
    """Writes the served document (optional request fields taking null) to `target`; returns the
    bundle without that rule, the models' input (see tools/spec_bundle.py)."""
    document = bundle(REPO / "spec")
    validate(document)
    served = nullable_optional_request_fields(document)
    validate(served)
    target.write_text(json.dumps(served, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return document


def check_handlers(ops: list[Operation]) -> None:
    handlers = importlib.import_module("handlers")
    missing = sorted(op.function for op in ops if not callable(getattr(handlers, op.function, None)))
    if missing:
        raise SpecError(f"no handler in handlers/ for: {', '.join(missing)}")


def generate(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    document = write_bundle(out / "openapi.json")
    ops = operations(document)
    # datamodel-code-generator formats with the settings it finds from the output's folder, so it
    # writes outside the repo whatever `out` is: in generated/ it would find pyproject.toml's line
    # length, elsewhere ruff's default, and the two split long lines differently.
    with tempfile.TemporaryDirectory() as scratch:
        models_input = Path(scratch) / "openapi.json"
        models_input.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        models = Path(scratch) / "models.py"
        subprocess.run(
            [sys.executable, "-m", "datamodel_code_generator", "--input", str(models_input), "--output", str(models)],
            cwd=REPO,
            check=True,
        )
        (out / "models.py").write_text(models.read_text(encoding="utf-8"), encoding="utf-8")
    check_handlers(ops)
    template = jinja2.Environment(
        loader=jinja2.FileSystemLoader(REPO / "tools" / "templates"), keep_trailing_newline=True
    )
    (out / "routes.py").write_text(template.get_template("routes.py.jinja2").render(operations=ops), encoding="utf-8")
    (out / "__init__.py").write_text(
        '"""Code generated from spec/ by tools/generate.py; do not edit."""\n', encoding="utf-8"
    )
    ruff = [sys.executable, "-m", "ruff", "--config", str(REPO / "pyproject.toml")]
    # Formatted outside the repo, the models' import block may come out split: the import sort joins it.
    imports = [*ruff, "check", "--fix-only", "--quiet", "--select", "I,F401"]
    subprocess.run([*imports, "--config", "lint.isort.split-on-trailing-comma = false", str(out)], cwd=REPO, check=True)
    subprocess.run([*ruff, "format", "--quiet", str(out)], cwd=REPO, check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "generated", help="output folder (default: generated/)")
    parser.add_argument("--bundle-only", type=Path, metavar="FILE", help="bundle and validate into FILE, nothing else")
    args = parser.parse_args()
    try:
        if args.bundle_only:
            write_bundle(args.bundle_only)
        else:
            generate(args.out)
    except SpecError as error:
        print(f"generate: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
