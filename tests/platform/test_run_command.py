"""`make run` (`python -m durability.run`) as a user runs it: it starts, and Ctrl-C stops the
worker and then the server, leaving the terminal free of the server's log."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from tests.support.helpers import start_run_stack


async def test_ctrl_c_stops_worker_then_server_and_the_server_log_goes_to_its_file(
    tmp_path: Path,
) -> None:
    stack = await start_run_stack(tmp_path)
    process, seen = stack.process, stack.printed
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
