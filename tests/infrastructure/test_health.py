"""The worker's probe endpoint (`DURABILITY_HEALTH_PORT`), on a real worker process: live
while the process runs, ready only while it polls and Temporal answers."""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
import uuid
from pathlib import Path

import pytest

from harness.server import DevServer, free_port
from tests.support.helpers import PROJECT_ROOT, eventually, probe, run_command, subprocess_env


@pytest.mark.timeout(150)
async def test_ready_follows_temporal_and_live_follows_the_process(tmp_path: Path) -> None:
    server = DevServer(tmp_path, name="health")
    await server.start()
    port = free_port()
    worker = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "worker",
        env=subprocess_env(
            server.address,
            DURABILITY_TASK_QUEUE=f"health-{uuid.uuid4().hex[:8]}",
            DURABILITY_HEALTH_PORT=str(port),
            DURABILITY_DRAIN_SECONDS="2",
        ),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        cwd=tmp_path,
    )
    try:

        async def answers(path: str, status: int, words: str) -> tuple[int, str] | None:
            found = await probe(port, path)
            return found if found[0] == status and words in found[1] else None

        await eventually(lambda: answers("/readyz", 200, "ready"), timeout=60, interval=0.5)
        assert await probe(port, "/livez") == (200, "ok\n")

        # Temporal goes away: the worker is still alive, but no longer ready.
        await server.stop()
        await eventually(
            lambda: answers("/readyz", 503, "Temporal does not answer"), timeout=30, interval=0.5
        )
        assert await probe(port, "/livez") == (200, "ok\n")

        # It comes back on the same address: ready again, without a restart.
        await server.start()
        await eventually(lambda: answers("/readyz", 200, "ready"), timeout=60, interval=0.5)
        assert (await probe(port, "/nothing-here"))[0] == 404

        worker.send_signal(signal.SIGTERM)
        output, _ = await asyncio.wait_for(worker.communicate(), timeout=60)
        assert worker.returncode == 0, output.decode()[-2000:]
        # Gone with the process: nothing is left listening on the probe port.
        assert (await probe(port, "/livez"))[0] == 0
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()
        await server.close()


async def test_a_taken_health_port_exits_two_naming_the_setting(dev_server_address: str) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = await run_command(
            [sys.executable, str(PROJECT_ROOT / "worker.py")],
            check=False,
            env=subprocess_env(
                dev_server_address,
                DURABILITY_TASK_QUEUE=f"health-{uuid.uuid4().hex[:8]}",
                DURABILITY_HEALTH_PORT=str(port),
            ),
        )
    assert result.returncode == 2, result.stderr
    assert f"DURABILITY_HEALTH_PORT {port} cannot be used" in result.stderr
    assert "Traceback" not in result.stderr, result.stderr


def test_health_port_off_by_default_and_checked() -> None:
    from durability import settings

    assert settings.HEALTH_PORT.read({}) == 0
    with pytest.raises(settings.ConfigurationError, match="DURABILITY_HEALTH_PORT must be"):
        settings.worker_settings({"DURABILITY_HEALTH_PORT": "http"})
