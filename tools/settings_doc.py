"""Write docs/configuration.md from the settings table in pooled/settings.py.

python tools/settings_doc.py
"""

from __future__ import annotations

from pathlib import Path

from pooled.settings import describe

PAGE = """# Configuration

Every setting of `pooled serve` is a flag and an environment variable; a flag
wins over the variable, which wins over the default. This page is written by
`tools/settings_doc.py` from the table in `pooled/settings.py` (a test checks
that it lists each setting with its default).

| flag | environment | default | what it does |
| --- | --- | --- | --- |
{rows}

Examples:

```sh
pooled serve --model ./Qwen3-0.6B --port 9000 --api-key sekrit
POOLED_MAX_QUEUE=16 pooled serve
```
"""


def main() -> None:
    rows = "\n".join(f"| `{flag}` | `{env}` | `{default}` | {text} |" for flag, env, default, text in describe())
    target = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
    target.write_text(PAGE.format(rows=rows), encoding="utf-8")


if __name__ == "__main__":
    main()
