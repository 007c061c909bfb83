"""A codec server for the Temporal UI and CLI: decodes encrypted payloads with the local keys.

Run `durability codec-server --port 8081` (with DURABILITY_CODEC_TOKEN set), then point the
UI or CLI at it (`--ui-codec-endpoint`, `TEMPORAL_CODEC_ENDPOINT`, Settings > Codec Server;
`temporal ... --codec-endpoint http://localhost:8081 --codec-auth "Bearer $TOKEN"`).
It implements Temporal's remote codec protocol: POST .../decode (and, only when enabled,
.../encode) with `{"payloads": [{"metadata": {k: base64}, "data": base64}]}`.

Whoever can call /decode reads every payload, so the server:
- requires `Authorization: Bearer <token>` (compared in constant time) on every POST,
- answers CORS only for the configured UI origins (a browser page from any other origin
  cannot read an answer), and refuses POSTs that carry another origin,
- serves /encode only when enabled: it lets its caller mint payloads workers decrypt,
- bounds the request body,
- never logs a request's headers or body (a token could be in either): not on a refusal,
  and not in the HTTP server's own error log (a malformed or oversized request line or
  header is logged by its error's type alone).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from aiohttp import web
from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads
from temporalio.converter import PayloadCodec

from durability import serving
from durability.serving import RunningServer

log = logging.getLogger("durability.codec_server")

TOKEN_ENV = "DURABILITY_CODEC_TOKEN"
ORIGINS_ENV = "DURABILITY_CODEC_ALLOWED_ORIGINS"
# The dev server's UI (`temporal server start-dev`) under both of its usual names.
DEFAULT_ORIGINS = ("http://localhost:8233", "http://127.0.0.1:8233")
MAX_BODY_BYTES = 4 * 1024 * 1024
MIN_TOKEN_CHARS = 16
ALLOW_HEADERS = "Content-Type, X-Namespace, Authorization"


def check_origin(origin: str) -> str:
    """An origin as browsers send it (`scheme://host[:port]`); ValueError otherwise."""
    parts = urlsplit(origin.strip().removesuffix("/"))
    if (
        parts.scheme not in ("http", "https")
        or not parts.netloc
        or parts.path
        or parts.query
        or parts.fragment
        or "@" in parts.netloc
    ):
        raise ValueError(
            f"allowed origin must be scheme://host[:port] with no path or '*', got {origin!r}"
        )
    return f"{parts.scheme}://{parts.netloc}".lower()


def check_token(token: str, source: str) -> str:
    token = token.strip()
    if len(token) < MIN_TOKEN_CHARS:
        raise ValueError(
            f"{source} must be at least {MIN_TOKEN_CHARS} characters, got {len(token)} "
            "(make one with `openssl rand -base64 32`)"
        )
    return token


@dataclass(frozen=True)
class CodecServerSettings:
    """How the server guards its codec. `token=None` serves without authentication."""

    token: str | None
    allowed_origins: frozenset[str] = field(default_factory=lambda: frozenset(DEFAULT_ORIGINS))
    enable_encode: bool = False
    max_body_bytes: int = MAX_BODY_BYTES

    @classmethod
    def build(
        cls,
        token: str | None,
        allowed_origins: Iterable[str] = DEFAULT_ORIGINS,
        enable_encode: bool = False,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> CodecServerSettings:
        return cls(
            token=None if token is None else check_token(token, "the codec token"),
            allowed_origins=frozenset(check_origin(o) for o in allowed_origins),
            enable_encode=enable_encode,
            max_body_bytes=max_body_bytes,
        )


def _json_error(status: int, message: str, **headers: str) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers)


def _authorized(request: web.Request, token: str) -> bool:
    scheme, _, provided = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(provided.strip().encode(), token.encode())


def make_app(codec: PayloadCodec, settings: CodecServerSettings) -> web.Application:
    """The aiohttp application serving `codec` under `settings`."""

    def cors_headers(origin: str | None) -> dict[str, str]:
        headers = {"Vary": "Origin"}
        if origin is not None and origin in settings.allowed_origins:
            headers.update(
                {
                    "Access-Control-Allow-Origin": origin,
                    "Access-Control-Allow-Credentials": "true",
                }
            )
        return headers

    async def handle(request: web.Request) -> web.StreamResponse:
        origin = request.headers.get("Origin")
        allowed_origin = origin is not None and origin in settings.allowed_origins
        cors = cors_headers(origin)
        if request.method == "OPTIONS":
            # Preflight: browsers send no Authorization on it, so it needs no token.
            if not allowed_origin:
                return web.Response(status=403, headers=cors)
            return web.Response(
                status=204,
                headers={
                    **cors,
                    "Access-Control-Allow-Methods": "POST, OPTIONS",
                    "Access-Control-Allow-Headers": ALLOW_HEADERS,
                    "Access-Control-Max-Age": "600",
                },
            )
        if request.method != "POST":
            return _json_error(405, "use POST", Allow="POST, OPTIONS", **cors)
        if origin is not None and not allowed_origin:
            log.warning("refused a request from %s: its Origin is not allowed", request.remote)
            return _json_error(
                403, f"origin {origin!r} is not allowed (see --allow-origin)", Vary="Origin"
            )
        if settings.token is not None and not _authorized(request, settings.token):
            log.warning("refused a request without a valid bearer token from %s", request.remote)
            return _json_error(
                401,
                "missing or wrong bearer token (Authorization: Bearer <token>)",
                **{"WWW-Authenticate": 'Bearer realm="durability-codec"'},
                **cors,
            )
        # Only the last path segment counts, so the server can sit under any prefix.
        operation = request.path.rstrip("/").rsplit("/", 1)[-1]
        if operation == "encode" and not settings.enable_encode:
            return _json_error(
                404,
                "/encode is disabled: start the codec server with --enable-encode to serve it "
                "(it lets its callers make payloads that workers accept)",
                **cors,
            )
        if operation not in ("encode", "decode"):
            return _json_error(404, f"unknown path {request.path!r}: use /decode", **cors)
        length = request.content_length
        if length is not None and length > settings.max_body_bytes:
            return _too_large(settings.max_body_bytes, cors)
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _too_large(settings.max_body_bytes, cors)
        try:
            payloads = json_format.Parse(body, Payloads())
        except Exception as error:  # ParseError, bad UTF-8, JSON nested too deep, ...
            return _json_error(400, f"body is not a Payloads JSON object: {error}", **cors)
        run = codec.encode if operation == "encode" else codec.decode
        try:
            result = await run(list(payloads.payloads))
        except ValueError as error:
            return _json_error(400, f"cannot {operation}: {error}", **cors)
        return web.Response(
            text=json_format.MessageToJson(Payloads(payloads=result)),
            content_type="application/json",
            headers=cors,
        )

    app = web.Application(client_max_size=settings.max_body_bytes)
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


class _WithoutRequestText(logging.Filter):
    """Reduces the HTTP server's own error records to their message and the exception's
    type: aiohttp's parse errors carry the offending request line or header (say, the first
    bytes of an oversized `Authorization` header) in their text and traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[0] is not None:
            record.msg = f"{record.msg} ({record.exc_info[0].__name__}; request not shown)"
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        return True


# The logger the HTTP server reports bad requests and handler errors on (aiohttp's
# `aiohttp.server` by default).
http_log = logging.getLogger("durability.codec_server.http")
http_log.addFilter(_WithoutRequestText())


def _too_large(limit: int, cors: dict[str, str]) -> web.Response:
    return _json_error(413, f"request body is larger than {limit} bytes", **cors)


async def start(
    codec: PayloadCodec, settings: CodecServerSettings, host: str = "127.0.0.1", port: int = 8081
) -> RunningServer:
    """Serve on host:port (0 picks a free port) in the running event loop."""
    return await serving.serve(make_app(codec, settings), serving.bind(host, port), http_log)


def origins_from(flags: Iterable[str] | None, env_value: str | None) -> list[str]:
    """--allow-origin values, else the comma-separated env value, else the dev UI's."""
    if flags:
        return list(flags)
    if env_value and env_value.strip():
        return [o.strip() for o in env_value.split(",") if o.strip()]
    return list(DEFAULT_ORIGINS)
