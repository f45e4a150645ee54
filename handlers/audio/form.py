"""The audio routes' `multipart/form-data` body, read in memory as it streams in.

Starlette's own form parser spools an upload over 1 MiB to a temporary file; this one keeps the
one file in memory and stops reading at `--max-audio-bytes` (a 413), so nothing reaches the disk.
Fields keep every value they were sent (repeated names: `timestamp_granularities[]=word` then
`=segment`); an array field's `[]` suffix, as the OpenAI SDKs send it, is dropped from its name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import Request
from python_multipart.multipart import MultipartParseError, MultipartParser, parse_options_header

from handlers.api_error import ApiError

# What the fields besides the file may hold in all (a prompt is a few hundred tokens).
MAX_FIELD_BYTES = 1024 * 1024
FILE_FIELD = "file"


@dataclass
class UploadForm:
    """The form's text fields by name (each value sent, in order) and its `file` part's bytes."""

    fields: dict[str, list[str]] = field(default_factory=dict)
    file: bytes | None = None
    filename: str | None = None


@dataclass
class _Part:
    name: str = ""
    filename: str | None = None
    headers: dict[bytes, bytes] = field(default_factory=dict)
    data: bytearray = field(default_factory=bytearray)


class _Reader:
    """python-multipart's callbacks, collecting the parts into an `UploadForm`."""

    def __init__(self, max_file_bytes: int) -> None:
        self.form = UploadForm()
        self.max_file_bytes = max_file_bytes
        self.field_bytes = 0
        self.part = _Part()
        self.header_name = bytearray()
        self.header_value = bytearray()

    def on_part_begin(self) -> None:
        self.part = _Part()

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self.header_name += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self.header_value += data[start:end]

    def on_header_end(self) -> None:
        self.part.headers[bytes(self.header_name).lower()] = bytes(self.header_value)
        self.header_name.clear()
        self.header_value.clear()

    def on_headers_finished(self) -> None:
        _, options = parse_options_header(self.part.headers.get(b"content-disposition", b""))
        name = options.get(b"name")
        if name is None:
            raise ApiError(400, "A part of the form has no name (its Content-Disposition names none).")
        self.part.name = name.decode("utf-8", "replace").removesuffix("[]")
        filename = options.get(b"filename")
        self.part.filename = filename.decode("utf-8", "replace") if filename is not None else None

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        self.part.data += data[start:end]
        if self.part.name == FILE_FIELD:
            if len(self.part.data) > self.max_file_bytes:
                raise ApiError(
                    413,
                    f"The audio file is over the server's {self.max_file_bytes}-byte limit (--max-audio-bytes).",
                    code="file_too_large",
                    param=FILE_FIELD,
                )
            return
        self.field_bytes += end - start
        if self.field_bytes > MAX_FIELD_BYTES:
            raise ApiError(413, f"The form's fields besides the file are over {MAX_FIELD_BYTES} bytes.")

    def on_part_end(self) -> None:
        part = self.part
        if part.name == FILE_FIELD:
            if self.form.file is not None:
                raise ApiError(400, "The form has more than one file; send one.", param=FILE_FIELD)
            self.form.file, self.form.filename = bytes(part.data), part.filename
            return
        self.form.fields.setdefault(part.name, []).append(part.data.decode("utf-8", "replace"))


async def read_form(request: Request, max_file_bytes: int) -> UploadForm:
    """The request's multipart form; a body of another kind or a broken one is a 400."""
    content_type, options = parse_options_header(request.headers.get("content-type"))
    boundary = options.get(b"boundary")
    if content_type != b"multipart/form-data" or not boundary:
        raise ApiError(
            400,
            "The body must be multipart/form-data (with a boundary), the audio in its `file` field.",
            code="invalid_request",
        )
    reader = _Reader(max_file_bytes)
    parser = MultipartParser(
        boundary,
        {
            "on_part_begin": reader.on_part_begin,
            "on_part_data": reader.on_part_data,
            "on_part_end": reader.on_part_end,
            "on_header_field": reader.on_header_field,
            "on_header_value": reader.on_header_value,
            "on_header_end": reader.on_header_end,
            "on_headers_finished": reader.on_headers_finished,
        },
    )
    try:
        async for chunk in request.stream():
            parser.write(chunk)
        parser.finalize()
    except MultipartParseError as error:
        raise ApiError(400, f"The multipart body is malformed: {error}.", code="invalid_request") from None
    return reader.form
