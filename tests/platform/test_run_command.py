"""`make run` (`python -m durability.run`) as a user runs it: it starts, and Ctrl-C stops the
worker and then the server, leaving the terminal free of the server's log."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from tests.support.helpers import PROJECT_ROOT, subprocess_env
from tests.support.server import free_port


async def test_ctrl_c_stops_worker_then_server_and_the_server_log_goes_to_its_file(
    tmp_path: Path,
) -> None:
    port, ui_port = free_port(), free_port()
    env = subprocess_env(
        f"127.0.0.1:{port}",
        DURABILITY_DEV_PORT=str(port),
        DURABILITY_UI_PORT=str(ui_port),
        DURABILITY_DATA_DIR=str(tmp_path),
        DURABILITY_DRAIN_SECONDS="2",
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "durability.run",
        env=env,
        cwd=PROJECT_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdout is not None
    seen = b""
    while b"worker polling task queue" not in seen:  # the worker is up and polling
        line = await asyncio.wait_for(process.stdout.readline(), timeout=60)
        assert line, seen.decode()[-2000:]
        seen += line
    process.send_signal(signal.SIGINT)  # what Ctrl-C sends to the foreground process
    rest, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    terminal = (seen + rest).decode()
    assert process.returncode == 0, terminal[-2000:]
    assert terminal.rstrip().endswith("stopped"), terminal[-2000:]
    assert "Failed to poll" not in terminal and "network dial error" not in terminal, terminal
    assert "worker stopped" in terminal  # the worker drained before the server went away
    assert (tmp_path / "temporal.db").exists()
    assert (tmp_path / "temporal-server.log").exists()
    assert f"log {tmp_path / 'temporal-server.log'}" in terminal
