"""Serving an aiohttp application in the running event loop, as the worker's health endpoint
and the codec server both do: bind, start, and close everything again if starting fails."""

from __future__ import annotations

import logging
import socket

from aiohttp import web


class RunningServer:
    """A started server: its bound `port`, its `url`, and `close()` to stop it."""

    def __init__(self, runner: web.AppRunner, host: str, port: int) -> None:
        self._runner = runner
        self.port = port
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{port}"

    async def close(self) -> None:
        await self._runner.cleanup()


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (an IPv6 host in IPv6; port 0 picks a free port);
    raises OSError when the address cannot be used."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family)


async def serve(
    app: web.Application, sock: socket.socket, logger: logging.Logger | None = None
) -> RunningServer:
    """Serve `app` on the bound `sock`, without an access log; `logger` takes the server's
    reports of bad requests and handler errors (aiohttp's own by default)."""
    runner = (
        web.AppRunner(app, access_log=None, logger=logger)
        if logger is not None
        else web.AppRunner(app, access_log=None)
    )
    await runner.setup()
    try:
        await web.SockSite(runner, sock).start()
    except BaseException:
        await runner.cleanup()
        raise
    host, port = sock.getsockname()[:2]
    return RunningServer(runner, host, port)
