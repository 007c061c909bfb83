"""A Temporal dev server subprocess that can be killed and restarted on the same database."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import IO

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest

from durability.connect import connect
from durability.devserver import dev_server_extra_args, temporal_cli
from harness.bounds import bounded

# Ports this process handed out: a port is released by the probe before its user binds it,
# so each test process draws from its own range below the kernel's ephemeral ports (where
# the kernel picks for every other socket) and never hands the same port out twice.
_PORTS_PER_PROCESS = 2000
_PORT_BASE = 10_000
_handed_out: set[int] = set()
_draw = random.Random()  # its own: hypothesis seeds the shared one inside its tests


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on, from this test process's own range (see
    above: `PYTEST_XDIST_WORKER` gw0, gw1, ... each has one)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) if worker.isdigit() else 0
    low = _PORT_BASE + (index % 10) * _PORTS_PER_PROCESS
    for _ in range(200):
        port = _draw.randrange(low, low + _PORTS_PER_PROCESS)
        if port in _handed_out:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port in [{low}, {low + _PORTS_PER_PROCESS})")


# --------------------------------------------------------------------------- dev server


class DevServer:
    """`temporal server start-dev` as a subprocess on a database file, so it can be stopped
    and started again on the same port with everything it had."""

    def __init__(self, directory: Path, name: str = "chaos") -> None:
        self.directory = directory
        self.db = directory / f"{name}.db"
        self.port = free_port()
        self.ui_port = free_port()
        self.log_path = directory / f"{name}-dev-server.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._log: IO[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        return [
            temporal_cli(),
            "server",
            "start-dev",
            "--db-filename",
            str(self.db),
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--ui-port",
            str(self.ui_port),
            "--headless",
            "--log-level",
            "error",
            *dev_server_extra_args(),
        ]

    async def start(self, timeout: float = 60) -> None:
        if self._log is None:
            self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self.argv(), stdout=self._log, stderr=subprocess.STDOUT, cwd=self.directory
        )
        await self.wait_ready(timeout)

    async def wait_ready(self, timeout: float) -> None:
        """Until the frontend answers and the default namespace exists."""
        deadline = time.monotonic() + timeout
        last: BaseException | None = None
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(
                    f"dev server exited with {self.process.returncode}; see {self.log_path}"
                )
            try:
                await bounded(self._describe_default_namespace(), 10, "dev server readiness")
                return
            except Exception as error:  # not up yet
                last = error
                await asyncio.sleep(0.25)
        raise RuntimeError(f"dev server not ready after {timeout}s: {last!r}")

    async def _describe_default_namespace(self) -> None:
        client = await connect({"TEMPORAL_ADDRESS": self.address})
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace="default")
        )

    async def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(sig)
        deadline = time.monotonic() + timeout
        while process.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        if process.poll() is None:
            process.kill()
            await asyncio.to_thread(process.wait)

    async def restart(self, sig: int = signal.SIGTERM) -> None:
        """Stop it (SIGTERM, or SIGKILL) and start it again on the same port and database."""
        await self.stop(sig)
        await self.start()
        self.restarts += 1

    async def close(self) -> None:
        await self.stop()
        if self._log is not None:
            self._log.close()
            self._log = None
