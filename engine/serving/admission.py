"""The rules a generation request must meet that depend on this server and its model, in one
place: the prompt against the context, `n` against the decode lanes, the scored ids, a prompt's
images against the model's image tokens, and the output budget.

Each rule lives once. A rule on the request's own shape — `max_tokens` ≥ 1, `n` ≥ 1,
`prompt_logprobs` from 0 to MAX_TOP_LOGPROBS — is the API spec's (spec/components/schemas): the
generated models refuse it in the API's own error shape before a handler runs, so the engine
takes a `GenerationRequest` that meets them as given (engine/api.py says so). "This model takes
no images" is the handlers' (handlers/generation/images.py): they meet a request's images first,
before its prompt renders and in routes that never reach the engine (counting tokens), and need
the model's image rules (`EngineFront.vision`) to prepare them at all.

The handlers compute none of what is here: they pass the request's own fields (and the server's
output cap) and turn a `RequestRefused` into their API's error, renaming its `field`.
"""

from dataclasses import dataclass
from typing import Literal

from engine.api import MAX_SCORED_IDS, MAX_TOKENS_CAP, GenerationRequest, RequestRefused
from engine.serving.media import image_runs


@dataclass(frozen=True)
class Admission:
    """What a request valid on its face gets: its rows' output budget, and how a row that reaches
    it finishes ("length", or what the server's output cap says when that cap is the budget)."""

    max_tokens: int
    length_finish: Literal["length", "stop"]


def admit(
    request: GenerationRequest, max_context: int, decode_lanes: int, image_token_id: int | None = None
) -> Admission:
    """Raises RequestRefused naming the field at fault. `image_token_id`: the model's, when it
    takes images."""
    prompt_tokens = len(request.prompt_ids)
    if prompt_tokens == 0:
        raise RequestRefused("invalid_prompt", "The prompt is empty.", "prompt")
    if request.images or (image_token_id is not None and image_token_id in request.prompt_ids):
        _check_images(request, image_token_id)
    room = max_context - prompt_tokens
    if room < 1:
        raise RequestRefused(
            "context_length_exceeded",
            f"The prompt is {prompt_tokens} tokens; this server's context is {max_context} tokens, "
            "which leaves no room to generate. Shorten the prompt.",
            "prompt",
        )
    if request.n > decode_lanes:
        raise RequestRefused(
            "invalid_n",
            f"n={request.n} is more than the {decode_lanes} sequences this server decodes at once (its decode lanes).",
            "n",
        )
    scored = request.sampling.scored_ids
    if len(scored) > MAX_SCORED_IDS:
        raise RequestRefused(
            "invalid_scored_ids",
            f"{len(scored)} token ids to score; at most {MAX_SCORED_IDS} are allowed.",
            "scored_ids",
        )
    if scored and request.sampling.logprobs is None:
        raise RequestRefused("invalid_scored_ids", "Token ids to score need logprobs.", "scored_ids")
    budget = min(room, MAX_TOKENS_CAP, room if request.max_tokens is None else request.max_tokens)
    cap = request.output_cap
    if cap is not None and cap.tokens <= budget:
        return Admission(cap.tokens, cap.finish)
    return Admission(budget, "length")


def _check_images(request: GenerationRequest, image_token_id: int | None) -> None:
    """The prompt's runs of image tokens must match its images one for one (a model without an
    image token has no runs: images sent to it are refused here too)."""
    runs = [] if image_token_id is None else image_runs(request.prompt_ids, image_token_id)
    wanted = [image.tokens for image in request.images]
    if runs != wanted:
        raise RequestRefused(
            "invalid_images",
            f"The prompt's image tokens come in runs of {runs}; its images take {wanted} tokens.",
            "images",
        )
    if request.prompt_logprobs is not None:
        raise RequestRefused(
            "invalid_prompt_logprobs", "Prompt logprobs are not served for prompts with images.", "prompt_logprobs"
        )
