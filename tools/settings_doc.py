"""Write docs/configuration.md from the settings table in pooled/configuration/settings.py.

python tools/settings_doc.py
"""

from __future__ import annotations

from pathlib import Path

from pooled.configuration.setting_sources import describe

PAGE = """# Configuration

Every setting of `pooled serve` is a flag, an environment variable and a key of the config
file. A flag wins over the variable, which wins over the config file (`--config`), which wins
over its profile (`--profile`), which wins over the served model's own defaults, which win over
the default. A model's own defaults are its catalog entry's `[model.serving]` table (the default
model's output cap, `--max-output-tokens 512 --max-output-tokens-finish stop`, and its model
card's sampling, `--temp 0.2 --top-p 0.9`), then the sampling its checkpoint recommends (a GGUF's
`general.sampling.*` keys, as llama-server reads them; a safetensors folder's
generation_config.json, as vLLM reads it). The sampling settings (`--temp`, `--top-k`, `--top-p`,
`--min-p`, `--repeat-penalty`, named as llama-server's flags) are what a request's omitted
sampling fields take, on every API; a request's own value always wins, and their defaults are the
APIs' own. This page is written by `tools/settings_doc.py` from the table in
`pooled/configuration/settings.py` (a test checks that it lists each setting with its default).

The *change* column says how a change takes effect on a running server (`PATCH /v1/config`,
docs/api.md): `live`, at once (the next request observes it); `reload`, by loading the model
again (`PATCH /v1/config?reload=true`); `restart`, only by starting the server again.
`GET /v1/config` shows the values in force (never `--api-key`), `GET /v1/config/origins` where
each came from.

| flag | environment | default | change | what it does |
| --- | --- | --- | --- | --- |
{rows}

## The config file

TOML, keys named as the settings are (the flag without its dashes, `-` as `_`), values of the
setting's kind (a list setting takes an array of strings; TOML has no null, so an unset value
is written as the flag would take it: `ctx = "auto"`). `[profile.NAME]` tables hold settings
too; `--profile NAME` picks one, and the file's own keys win over it. A key that names no
setting, anywhere in the file, or a value its setting does not take, stops the start with a
message naming the key and the file.

```toml
max_queue = 16
allow_origin = ["https://app.example"]
max_output_tokens = 512

[profile.big]
decode_lanes = 64
kv_memory = 8589934592
```

Examples:

```sh
pooled serve --model ./Qwen3-0.6B --port 9000 --api-key sekrit
POOLED_MAX_QUEUE=16 pooled serve
pooled serve --config pooled.toml --profile big
```
"""


def main() -> None:
    rows = "\n".join(
        f"| `{flag}` | `{env}` | `{default}` | {change} | {text} |" for flag, env, default, change, text in describe()
    )
    target = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
    target.write_text(PAGE.format(rows=rows), encoding="utf-8")


if __name__ == "__main__":
    main()
