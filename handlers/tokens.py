"""`POST /v1/tokenize` and `POST /v1/detokenize` (also at vLLM's root paths) and `GET
/tokenizer_info`: the tokenizer and chat template alone, no engine.

They answer as soon as the tokenizer is read, while the engine may still be warming up.
"""

from __future__ import annotations

from fastapi import Request

from generated import models
from handlers.api_error import ApiError
from handlers.availability import counting_images, loaded_tokenizer
from handlers.context import context
from handlers.generation.images import ImagePart, check_images_served, planned, with_images
from handlers.generation.prompt import render_chat
from handlers.openai_chat.request import chat_messages, function_tools


async def tokenize(request: Request, body: models.TokenizeRequest) -> models.TokenizeResponse:
    model = context(request).model
    tokenizer = loaded_tokenizer(model)
    query = body.root
    if isinstance(query, models.TokenizeCompletionRequest):
        tokens = tokenizer.encode(query.prompt, add_special_tokens=query.add_special_tokens is not False)
    else:
        if query.continue_final_message:
            raise ApiError(400, "'continue_final_message' is not supported.", param="continue_final_message")
        tools = function_tools(query.tools or [], [])
        images: list[ImagePart] = []
        messages = chat_messages(query.messages, images)
        limits = context(request).limits
        with counting_images(model, 503) as vision:
            check_images_served(images, vision, limits.max_images)
        prompt = render_chat(
            model.chat_template,
            tokenizer,
            messages,
            tools,
            query.chat_template_kwargs,
            add_generation_prompt=query.add_generation_prompt is not False,
        )
        expanded, _ = await planned(vision, lambda: with_images(prompt.token_ids, images, vision, limits.image_fetch))
        tokens = list(expanded)
        if query.add_special_tokens and tokenizer.bos_token_id is not None and tokens[:1] != [tokenizer.bos_token_id]:
            tokens.insert(0, tokenizer.bos_token_id)
    answer = models.TokenizeResponse(count=len(tokens), max_model_len=model.ctx or 1, tokens=tokens)
    if query.return_token_strs:
        answer.token_strs = [tokenizer.token_text(token) or "" for token in tokens]
    return answer


async def detokenize(request: Request, body: models.DetokenizeRequest) -> models.DetokenizeResponse:
    tokenizer = loaded_tokenizer(context(request).model)
    outside = [token for token in body.tokens if not 0 <= token < tokenizer.vocab_size]
    if outside:
        raise ApiError(
            400,
            f"Token id {outside[0]} is outside this model's vocabulary (0 to {tokenizer.vocab_size - 1}).",
            code="invalid_token",
            param="tokens",
        )
    return models.DetokenizeResponse(prompt=tokenizer.decode(body.tokens))


tokenize_root = tokenize  # POST /tokenize
detokenize_root = detokenize  # POST /detokenize


async def get_tokenizer_info(request: Request) -> models.TokenizerInfoResponse:
    model = context(request).model
    tokenizer = loaded_tokenizer(model)
    return models.TokenizerInfoResponse(
        tokenizer_class="tokenizers.Tokenizer",
        bos_token=tokenizer.bos_token,
        eos_token=tokenizer.eos_token,
        pad_token=None,  # pooled pads nothing a client sees
        chat_template=model.chat_template.source if model.chat_template is not None else None,
        model_max_length=model.ctx or 1,
    )
