"""A codec server for the Temporal UI and CLI: decodes encrypted payloads with the local key.

Run `durability codec-server --port 8081`, then point the UI at it
(`TEMPORAL_CODEC_ENDPOINT=http://localhost:8081`, or Settings > Codec Server in the UI).
It implements Temporal's remote codec protocol: POST /encode and /decode with
`{"payloads": [{"metadata": {k: base64}, "data": base64}]}`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.converter import PayloadCodec


async def _call(
    operation: Callable[[Sequence[Payload]], Awaitable[list[Payload]]], payloads: list[Payload]
) -> list[Payload]:
    return await operation(payloads)


def make_handler(codec: PayloadCodec, allowed_origin: str = "*") -> type[BaseHTTPRequestHandler]:
    """A request handler class bound to `codec`."""

    class CodecHandler(BaseHTTPRequestHandler):
        def _cors(self) -> None:
            self.send_header("Access-Control-Allow-Origin", allowed_origin)
            self.send_header("Access-Control-Allow-Methods", "POST, OPTIONS")
            self.send_header(
                "Access-Control-Allow-Headers", "Content-Type, X-Namespace, Authorization"
            )

        def do_OPTIONS(self) -> None:
            self.send_response(200)
            self._cors()
            self.end_headers()

        def do_POST(self) -> None:
            operations: dict[str, Callable[[Sequence[Payload]], Awaitable[list[Payload]]]] = {
                "/encode": codec.encode,
                "/decode": codec.decode,
            }
            operation = operations.get(self.path)
            if operation is None:
                self.send_error(404, f"unknown path {self.path!r}: use /encode or /decode")
                return
            try:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                payloads = json_format.Parse(body, Payloads())
                result = asyncio.run(_call(operation, list(payloads.payloads)))
                answer = json_format.MessageToJson(Payloads(payloads=result))
            except Exception as error:
                self.send_response(400)
                self._cors()
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(json.dumps({"error": str(error)}).encode())
                return
            self.send_response(200)
            self._cors()
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(answer.encode())

        def log_message(self, format: str, *args: object) -> None:
            return

    return CodecHandler


def serve(codec: PayloadCodec, host: str = "127.0.0.1", port: int = 8081) -> ThreadingHTTPServer:
    """A started-but-not-serving server; call serve_forever() (or run it in a thread)."""
    return ThreadingHTTPServer((host, port), make_handler(codec))
