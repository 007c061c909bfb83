"""`durability codec-server`: its options, and the runner that checks the keys, token and
origins and serves `/decode` (`durability.codec_server`) until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from pathlib import Path
from typing import Any

from durability.cli_common import UsageError
from durability.settings import ConfigurationError


def add_codec_server(top: Any) -> None:
    """The `codec-server` command under the top-level subparsers `top`."""
    codec = top.add_parser(
        "codec-server",
        help="serve /decode for the Temporal UI and CLI (bearer token, allowed origins only)",
        description="Decode payloads for the Temporal UI and `temporal --codec-endpoint`. "
        "Keys from DURABILITY_ENCRYPTION_KEYS (or DURABILITY_ENCRYPTION_KEY); callers must "
        "send `Authorization: Bearer <token>` with the token from DURABILITY_CODEC_TOKEN "
        "or --token-file.",
    )
    codec.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default %(default)s)"
    )
    codec.add_argument(
        "--port", type=int, default=8081, help="port to listen on (default %(default)s)"
    )
    codec.add_argument(
        "--token-file", help="file holding the bearer token (instead of DURABILITY_CODEC_TOKEN)"
    )
    codec.add_argument(
        "--allow-origin",
        action="append",
        metavar="ORIGIN",
        help="a UI origin browsers may call from, e.g. https://temporal.example.com "
        "(repeatable; default DURABILITY_CODEC_ALLOWED_ORIGINS, else http://localhost:8233 "
        "and http://127.0.0.1:8233)",
    )
    codec.add_argument(
        "--enable-encode",
        action="store_true",
        help="also serve /encode (it lets its callers make payloads that workers accept)",
    )
    codec.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="serve without a token: anyone who reaches the port reads every payload "
        "(local use only)",
    )


def run_codec_server(args: argparse.Namespace) -> int:
    """`durability codec-server`: check the keys, token and origins, then serve until
    Ctrl-C or SIGTERM."""
    import signal

    from durability.codec import KEY_ENV, KEYS_ENV, codec_from_env
    from durability.codec_server import (
        ORIGINS_ENV,
        TOKEN_ENV,
        CodecServerSettings,
        origins_from,
        start,
    )

    codec = codec_from_env()
    if codec is None:
        raise ConfigurationError(f"{KEY_ENV} is not set (nor {KEYS_ENV}): nothing to decode with")
    if args.token_file is not None:
        try:
            token: str | None = Path(args.token_file).read_text()
        except OSError as error:
            raise ConfigurationError(f"--token-file {args.token_file}: {error.strerror}") from None
        source = f"--token-file {args.token_file}"
    else:
        token = os.environ.get(TOKEN_ENV) or None
        source = TOKEN_ENV
    if token is not None and args.insecure_no_auth:
        raise UsageError(f"--insecure-no-auth and a token ({source}) contradict: give one")
    if token is None and not args.insecure_no_auth:
        raise ConfigurationError(
            f"no codec token: set {TOKEN_ENV} or pass --token-file PATH (callers send it as "
            "`Authorization: Bearer <token>`); --insecure-no-auth serves without one, for "
            "local use only"
        )
    settings = CodecServerSettings.build(
        token, origins_from(args.allow_origin, os.environ.get(ORIGINS_ENV)), args.enable_encode
    )

    async def serve() -> None:
        server = await start(codec, settings, args.host, args.port)
        print(f"codec server on {server.url}", flush=True)
        print(
            f"keys {', '.join(codec.key_ids)} (current {codec.key_id}); origins "
            f"{', '.join(sorted(settings.allowed_origins))}; /encode "
            f"{'enabled' if settings.enable_encode else 'disabled'}",
            flush=True,
        )
        if settings.token is None:
            print(
                f"durability: WARNING: --insecure-no-auth: anyone who can reach {server.url} "
                "can decrypt every payload; use it only on a machine of your own",
                file=sys.stderr,
                flush=True,
            )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(signum, stop.set)
        try:
            await stop.wait()
        finally:
            await server.close()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())
    return 0
