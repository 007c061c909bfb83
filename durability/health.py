"""The worker's health endpoint, for a platform's probes (`DURABILITY_HEALTH_PORT`).

- `GET /livez`: 200 while the process's event loop answers. The worker's workflow code,
  activities and this handler share that loop, so a blocked loop fails the probe and the
  platform restarts the process; a worker that fails for good ends the process itself.
- `GET /readyz`: 200 while the worker polls its task queue and Temporal answers a call
  (`GetSystemInfo`, bounded by a short timeout); 503 naming the reason otherwise, and from
  the moment a SIGTERM starts the drain. A worker takes no inbound traffic, so readiness
  gates only rollouts and disruption budgets: a new pod counts as available once it really
  polls.

Both answer plain text and take no input; the port binds 0.0.0.0 like the metrics port.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta

from aiohttp import web
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import Worker

from durability import serving
from durability.serving import RunningServer
from durability.settings import ConfigurationError

log = logging.getLogger("durability.health")

LIVE_PATH = "/livez"
READY_PATH = "/readyz"
TEMPORAL_CHECK_TIMEOUT = timedelta(seconds=3)


class WorkerHealth:
    """What the probes ask about one worker: is it polling, and does Temporal answer."""

    def __init__(self, client: Client, worker: Worker) -> None:
        self._client = client
        self._worker = worker
        self.draining = False

    async def not_ready_because(self) -> str | None:
        """None when ready, else why not (one line)."""
        if self.draining:
            return "draining after SIGTERM/SIGINT: no longer polling"
        if not self._worker.is_running:
            return "worker is not running"
        try:
            await self._client.workflow_service.get_system_info(
                GetSystemInfoRequest(), timeout=TEMPORAL_CHECK_TIMEOUT
            )
        except RPCError as error:
            return f"Temporal does not answer: {error.status.name}: {error.message}"
        return None


def make_app(not_ready_because: Callable[[], Awaitable[str | None]]) -> web.Application:
    """The aiohttp application answering /livez and /readyz."""

    async def live(_request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def ready(_request: web.Request) -> web.Response:
        reason = await not_ready_because()
        if reason is None:
            return web.Response(text="ready\n")
        return web.Response(status=503, text=f"not ready: {reason}\n")

    app = web.Application()
    app.router.add_get(LIVE_PATH, live)
    app.router.add_get(READY_PATH, ready)
    return app


async def serve(
    not_ready_because: Callable[[], Awaitable[str | None]],
    port: int,
    setting_name: str,
    host: str = "0.0.0.0",
) -> RunningServer:
    """Serve the probes on host:port in the running loop; a port that cannot be bound
    raises ConfigurationError naming `setting_name`."""
    try:
        sock = serving.bind(host, port)
    except OSError as error:
        raise ConfigurationError(
            f"{setting_name} {port} cannot be used ({error.strerror}); choose a free port, "
            "or 0 to turn the health endpoint off"
        ) from None
    server = await serving.serve(make_app(not_ready_because), sock)
    log.info("health endpoint on port %s (%s, %s)", server.port, LIVE_PATH, READY_PATH)
    return server
