"""A loopback HTTP file server for download tests: in-memory blobs with the faults a real mirror
has, and a log of what each request asked for and was sent.

Threads: `ThreadingHTTPServer` answers each request on a daemon thread of its own, and
`serve_forever` runs on one more ("file-server"), started and shut down by the context manager.
Request handlers append to `requests` under a lock; a test reads it after the download it
started has ended (or under the same lock).
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType


@dataclass
class Blob:
    """One served file and its faults; the faults that take a count apply to the first N requests."""

    data: bytes
    ignore_range: bool = False  # answer 200 with the whole body whatever the Range
    status: int | None = None  # answer this status instead...
    status_requests: int = 1 << 30  # ...to this many requests
    drop_after: int | None = None  # close the connection after this many bytes of a body...
    drop_requests: int = 0  # ...in this many requests
    stall_after: int | None = None  # send this many bytes, then sleep stall_s and close...
    stall_s: float = 0.0
    stall_requests: int = 0  # ...in this many requests
    chunk: int = 16 * 1024
    delay_s: float = 0.0  # sleep between chunks (a slow mirror)
    seen: int = 0  # requests so far


@dataclass
class Request:
    path: str
    range_start: int | None
    status: int
    sent: int = 0  # body bytes written to the socket


class FileServer:
    def __init__(self) -> None:
        self.blobs: dict[str, Blob] = {}
        self.requests: list[Request] = []
        self.lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, name="file-server", daemon=True
        )

    def url(self, path: str) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/{path}"

    def add(self, path: str, blob: Blob) -> str:
        self.blobs[path] = blob
        return self.url(path)

    def requests_for(self, path: str) -> list[Request]:
        with self.lock:
            return [request for request in self.requests if request.path == path]

    def __enter__(self) -> FileServer:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler_for(server: FileServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

        def do_GET(self) -> None:
            path = self.path.lstrip("/")
            blob = server.blobs.get(path)
            if blob is None:
                self._record(path, None, 404)
                self.send_error(404)
                return
            with server.lock:
                index = blob.seen
                blob.seen += 1
            match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
            start = int(match.group(1)) if match else None
            if blob.status is not None and index < blob.status_requests:
                self._record(path, start, blob.status)
                self.send_error(blob.status)
                return
            size = len(blob.data)
            if start is not None and not blob.ignore_range:
                if start >= size:
                    self._record(path, start, 416)
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{size}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status, body = 206, blob.data[start:]
            else:
                status, body = 200, blob.data
            request = self._record(path, start, status)
            self.send_response(status)
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            self._send_body(blob, index, body, request)

        def _send_body(self, blob: Blob, index: int, body: bytes, request: Request) -> None:
            drop = blob.drop_after if index < blob.drop_requests else None
            stall = blob.stall_after if index < blob.stall_requests else None
            limit = min([len(body), *(n for n in (drop, stall) if n is not None)])
            sent = 0
            try:
                while sent < limit:
                    piece = body[sent : min(sent + blob.chunk, limit)]
                    self.wfile.write(piece)
                    sent += len(piece)
                    with server.lock:
                        request.sent = sent
                    if blob.delay_s:
                        time.sleep(blob.delay_s)
                if stall is not None and sent < len(body):
                    self.wfile.flush()
                    time.sleep(blob.stall_s)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up on this request
                pass
            self.close_connection = True

        def _record(self, path: str, start: int | None, status: int) -> Request:
            request = Request(path, start, status)
            with server.lock:
                server.requests.append(request)
            return request

    return Handler
