"""`make run` (`python -m durability.run`) as a user runs it: it starts, and Ctrl-C stops the
worker and then the server, leaving the terminal free of the server's log."""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
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


async def test_a_busy_port_is_named_with_the_setting_that_moves_it_before_anything_starts(
    tmp_path: Path,
) -> None:
    from durability.settings import run_settings_table
    from harness.server import free_port
    from tests.support.helpers import PROJECT_ROOT, run_command, subprocess_env

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        for setting in ("DURABILITY_DEV_PORT", "DURABILITY_UI_PORT", "DURABILITY_METRICS_PORT"):
            ports = {
                "DURABILITY_DEV_PORT": str(free_port()),
                "DURABILITY_UI_PORT": str(free_port()),
                "DURABILITY_METRICS_PORT": str(free_port()),
                setting: str(busy),
            }
            env = subprocess_env("127.0.0.1:1", DURABILITY_DATA_DIR=str(tmp_path / "d"), **ports)
            result = await run_command(
                [sys.executable, "-m", "durability.run"], check=False, env=env, timeout=30
            )
            assert result.returncode == 2, result
            assert result.stdout == "", result.stdout  # no banner: nothing started
            assert result.stderr.strip() == (
                f"make run: port {busy} on {'0.0.0.0' if 'METRICS' in setting else '127.0.0.1'}"
                " is in use or cannot be bound (Address already in use; another `make run` or "
                f"Temporal server?): set {setting} to a free port, e.g. `{setting}={busy + 1} "
                "make run`; nothing was started"
            ), result.stderr
            assert not (tmp_path / "d").exists()
    # The settings that move the ports are documented where the operations guide lists them.
    operations = (PROJECT_ROOT / "docs" / "operations.md").read_text()
    assert run_settings_table() in operations, "paste run_settings_table() into operations.md"
