"""`GET`/`DELETE /v1/responses/{id}` and `GET /v1/responses/{id}/input_items` over the store.

An unknown id and an evicted one look the same from here, so the 404 says both.
"""

from __future__ import annotations

from typing import Literal

from fastapi import Request

from generated import models
from handlers.api_error import ApiError
from handlers.context import context
from handlers.response_store import StoredResponse


def _stored(request: Request, response_id: str) -> StoredResponse:
    entry = context(request).responses.get(response_id)
    if entry is None:
        raise ApiError(
            404,
            f"No stored response '{response_id}': it was never stored here (store: false, or another server), "
            "or it was evicted (the store keeps a bounded number of responses, each for a limited idle time).",
            code="response_not_found",
            param="response_id",
        )
    return entry


async def get_response(request: Request, response_id: str, include: list[str] | None = None) -> models.ResponseObject:
    return models.ResponseObject.model_validate(_stored(request, response_id).response)


async def delete_response(request: Request, response_id: str) -> models.ResponseDeleted:
    _stored(request, response_id)
    context(request).responses.delete(response_id)
    return models.ResponseDeleted(id=response_id, object="response", deleted=True)


async def list_input_items(
    request: Request,
    response_id: str,
    after: str | None = None,
    before: str | None = None,
    limit: int = 20,
    order: Literal["asc", "desc"] = "desc",
    include: list[str] | None = None,
) -> models.ResponseInputItemList:
    items = _stored(request, response_id).input_items
    ordered = items if order == "asc" else items[::-1]
    ids = [item["id"] for item in ordered]
    start = ids.index(after) + 1 if after in ids else 0
    stop = ids.index(before) if before in ids else len(ordered)
    page = ordered[start:stop][:limit]
    data = models.ResponseInputItemList.model_validate(
        {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": start + len(page) < stop,
        }
    )
    return data
