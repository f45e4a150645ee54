"""Sampling parameters: an API's fields → the engine's `SamplingParams`.

A field the request leaves out takes the server's default for it (`SamplingDefaults`: the settings
--temp, --top-k, --top-p, --min-p and --repeat-penalty in force, which the served model's own
recommendation sets where the user did not); one the request gives always wins, `temperature: 0`
included (greedy). A logit bias naming no token of the model, or more than `MAX_LOGIT_BIAS`
biases, is a 400 naming the field. The prompt against the context, `n` against the decode lanes
and the output budget are the engine's to decide (engine/serving/admission.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from engine.api import SamplingParams
from handlers.api_error import ApiError

MAX_LOGIT_BIAS = 10_000
_API = SamplingParams()  # the APIs' own defaults


@dataclass(frozen=True)
class SamplingDefaults:
    """What a request's omitted sampling fields take: the values of the settings `DEFAULT_SETTINGS`
    names (where each came from: pooled/configuration/setting_sources.py). Built with none, the
    APIs' own defaults."""

    temperature: float = _API.temperature
    top_k: int = _API.top_k  # 0: off
    top_p: float = _API.top_p
    min_p: float = _API.min_p
    repetition_penalty: float = _API.repetition_penalty


# Each of SamplingDefaults' fields → the setting that sets it (llama-server's flags, by name).
DEFAULT_SETTINGS = {
    "temperature": "temp",
    "top_k": "top_k",
    "top_p": "top_p",
    "min_p": "min_p",
    "repetition_penalty": "repeat_penalty",
}


@dataclass(frozen=True)
class SamplingFields:
    """The sampling fields the APIs share, as the request gave them (None: not given)."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: Mapping[str, float] | None = None
    seed: int | None = None
    logprobs: int | None = None  # top alternatives per token; None: no logprobs at all
    ignore_eos: bool | None = None  # vLLM's: past the model's EOS and end-of-turn ids, to the token limit


class OpenAISamplingBody(Protocol):
    """The sampling fields Chat Completions and Completions requests both carry, under these names."""

    @property
    def temperature(self) -> float | None: ...
    @property
    def top_p(self) -> float | None: ...
    @property
    def top_k(self) -> int | None: ...
    @property
    def min_p(self) -> float | None: ...
    @property
    def repetition_penalty(self) -> float | None: ...
    @property
    def presence_penalty(self) -> float | None: ...
    @property
    def frequency_penalty(self) -> float | None: ...
    @property
    def logit_bias(self) -> Mapping[str, float] | None: ...
    @property
    def seed(self) -> int | None: ...
    @property
    def ignore_eos(self) -> bool | None: ...


def openai_sampling_fields(body: OpenAISamplingBody, logprobs: int | None) -> SamplingFields:
    return SamplingFields(
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        min_p=body.min_p,
        repetition_penalty=body.repetition_penalty,
        presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty,
        logit_bias=body.logit_bias,
        seed=body.seed,
        logprobs=logprobs,
        ignore_eos=body.ignore_eos,
    )


def sampling_params(fields: SamplingFields, vocab_size: int, defaults: SamplingDefaults) -> SamplingParams:
    return SamplingParams(
        temperature=defaults.temperature if fields.temperature is None else fields.temperature,
        top_k=defaults.top_k if fields.top_k is None else max(fields.top_k, 0),  # -1 and 0 both mean "all tokens"
        top_p=defaults.top_p if fields.top_p is None else fields.top_p,
        min_p=defaults.min_p if fields.min_p is None else fields.min_p,
        repetition_penalty=defaults.repetition_penalty
        if fields.repetition_penalty is None
        else fields.repetition_penalty,
        presence_penalty=fields.presence_penalty or 0.0,
        frequency_penalty=fields.frequency_penalty or 0.0,
        logit_bias=logit_bias(fields.logit_bias, vocab_size),
        seed=fields.seed,
        logprobs=fields.logprobs,
        ignore_eos=bool(fields.ignore_eos),
    )


def logit_bias(biases: Mapping[str, float] | None, vocab_size: int) -> dict[int, float]:
    if not biases:
        return {}
    if len(biases) > MAX_LOGIT_BIAS:
        raise ApiError(
            400,
            f"logit_bias has {len(biases)} entries; at most {MAX_LOGIT_BIAS} are allowed.",
            code="invalid_logit_bias",
            param="logit_bias",
        )
    parsed: dict[int, float] = {}
    for key, bias in biases.items():
        token_id = int(key) if key.strip().lstrip("-").isdigit() else -1
        if not 0 <= token_id < vocab_size:
            raise ApiError(
                400,
                f"logit_bias key '{key}' is not a token id of this model (0 to {vocab_size - 1}).",
                code="invalid_logit_bias",
                param="logit_bias",
            )
        parsed[token_id] = bias
    return parsed
