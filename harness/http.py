"""The base of every far side the tests and the benchmarks serve over HTTP on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any

# The header of a JSON answer.
JSON = {"Content-Type": "application/json"}


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing, with `request_body()` to read what was posted and
    `answer()` to reply."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def request_body(self) -> bytes:
        """The request's body (empty without a `Content-Length`)."""
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def answer(
        self, status: int, body: Any = None, headers: Mapping[str, str] | None = None
    ) -> None:
        """Reply `status`, with `headers`, and `body` as JSON (None: an empty body)."""
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
