"""`/v1/models/catalog`, `/download`, `/download/cancel`, `/remove` and `/switch`: the models
folder and its catalog, and switching the served model (pooled/models_folder/folder_library.py does the work).

A refusal answers by its rule: no such model 404, something under way or in use, or a model
too large for this machine's memory 409, a switch
whose model did not load 500 (the old model serves again; `/v1/models` says `failed`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import TypeVar

from fastapi import Request

from generated import models
from handlers.api_error import ApiError
from handlers.context import CatalogView, DownloadView, LibraryRefused, ModelLibrary, ServerContext, context
from handlers.model_list import served_model

T = TypeVar("T")

_STATUS = {"not_found": 404, "busy": 409, "unavailable": 409, "switch_failed": 500}


async def list_catalog(request: Request) -> models.CatalogList:
    _, library = _library(request)
    return models.CatalogList(
        object="list", data=[catalog_row(row) for row in library.catalog()], models_dir=library.models_dir
    )


async def start_download(request: Request, body: models.ModelIdRequest) -> models.CatalogRow:
    _, library = _library(request)
    return catalog_row(_refusals(lambda: library.start_download(body.id)))


async def cancel_download(request: Request) -> models.DownloadCancelled:
    _, library = _library(request)
    cancelled, download = library.cancel_download()
    return models.DownloadCancelled(cancelled=cancelled, download=download_progress(download))


async def remove_model(request: Request, body: models.ModelIdRequest) -> models.ModelRemoved:
    _, library = _library(request)
    freed = _refusals(lambda: library.remove(body.id))
    return models.ModelRemoved(object="model.removed", id=body.id, freed_bytes=freed)


async def switch_model(request: Request, body: models.ModelIdRequest) -> models.OpenAIModel:
    server, library = _library(request)
    try:
        await library.switch(body.id)
    except LibraryRefused as refused:
        raise library_error(refused) from None
    return served_model(server)


def catalog_row(row: CatalogView) -> models.CatalogRow:
    return models.CatalogRow.model_validate(asdict(row))


def download_progress(download: DownloadView | None) -> models.DownloadProgress | None:
    return None if download is None else models.DownloadProgress.model_validate(asdict(download))


def _library(request: Request) -> tuple[ServerContext, ModelLibrary]:
    server = context(request)
    if server.library is None:
        raise ApiError(404, "This server has no models folder.", code="not_found")
    return server, server.library


def _refusals(work: Callable[[], T]) -> T:
    try:
        return work()
    except LibraryRefused as refused:
        raise library_error(refused) from None


def library_error(refused: LibraryRefused) -> ApiError:
    return ApiError(_STATUS[refused.code], refused.message, code=refused.code)
