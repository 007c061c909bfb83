"""`make run`: the embedded Temporal dev server (with its UI) plus one worker.

The server keeps its database in data/temporal.db, so schedules and ledgers survive a
restart of this command; its own log goes to data/temporal-server.log, so the terminal shows
only this command and the worker. Ctrl-C stops the worker first (it drains), then the server.
Before starting anything it checks that its ports are free, and names the setting that moves
a busy one (`python -m durability.run --help` lists them).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from durability import settings
from durability.devserver import dev_server_extra_args, temporal_cli
from durability.settings import ConfigurationError, Setting

PROJECT_ROOT = Path(__file__).resolve().parent.parent

# `make run` is one developer's machine, its server on 127.0.0.1 by default: whoever can set
# a schedule here is the operator, so the webhook activities may call local servers on any
# port (127.0.0.1 and localhost only, never other hosts). Set DURABILITY_DEV_HOST to share
# the server and others can make the worker call your local ports: narrow this then. A
# DURABILITY_WEBHOOK_ALLOWED_URLS already in the environment (even empty) is kept.
LOCAL_WEBHOOK_ALLOWED_URLS = "http://127.0.0.1:*/,http://localhost:*/"

DEMO = (
    "temporal workflow signal-with-start --workflow-id schedule:acct-42 "
    "--type DurabilitySchedule --task-queue durability --input '{}' "
    "--signal-name set --signal-input "
    """'{"expression": "@every 10s", "version": 1, "params": {"plan": "pro"}}'"""
)


class RunSettings:
    """`make run`'s settings, read from the environment (ConfigurationError names a bad one)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.host: str = settings.DEV_HOST.read(env)
        self.port: int = settings.DEV_PORT.read(env)
        self.ui_port: int = settings.UI_PORT.read(env)
        self.metrics_port: int = settings.METRICS_PORT.read(env)
        self.data_dir = PROJECT_ROOT / settings.DATA_DIR.read(env)
        self.server_log = self.data_dir / "temporal-server.log"

    def ports(self) -> list[tuple[Setting[int], str, int]]:
        """Each port this command's processes listen on: (its setting, host, port)."""
        ports = [
            (settings.DEV_PORT, self.host, self.port),
            (settings.UI_PORT, self.host, self.ui_port),
        ]
        if self.metrics_port:  # the worker's /metrics, on every interface (0: off)
            ports.append((settings.METRICS_PORT, "0.0.0.0", self.metrics_port))
        return ports


def busy_port(run: RunSettings) -> str | None:
    """Why a port this command needs is taken (naming the setting that moves it), or None."""
    seen: dict[int, Setting[int]] = {}
    for setting, host, port in run.ports():
        if port in seen:
            return (
                f"{setting.name} and {seen[port].name} are both {port}: give them different "
                "ports; nothing was started"
            )
        seen[port] = setting
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError as error:
                return (
                    f"port {port} on {host} is in use or cannot be bound ({error.strerror}; "
                    f"another `make run` or Temporal server?): set {setting.name} to a free "
                    f"port, e.g. `{setting.name}={port + 1} make run`; nothing was started"
                )
    return None


def server_command(run: RunSettings) -> list[str]:
    """`temporal server start-dev` with a persistent database and the product's settings."""
    return [
        temporal_cli(),
        "server",
        "start-dev",
        "--ip",
        run.host,
        "--port",
        str(run.port),
        "--ui-port",
        str(run.ui_port),
        "--db-filename",
        str(run.data_dir / "temporal.db"),
        "--log-level",
        "warn",
        *dev_server_extra_args(),
    ]


def wait_for_port(
    host: str, port: int, timeout: float, process: subprocess.Popen[bytes], log: Path
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(
                f"temporal dev server exited with code {process.returncode}; its log: {log}"
            )
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"temporal dev server did not listen on {host}:{port} within {timeout}s")


def help_text() -> str:
    """What `python -m durability.run --help` prints."""
    lines = [
        "usage: make run  (python -m durability.run [--help])",
        "",
        __doc__.strip().splitlines()[0],
        "",
        "Settings (environment variables):",
    ]
    for setting in (*settings.RUN_SETTINGS, settings.METRICS_PORT):
        lines.append(f"  {setting.name}  (default: {setting.default})")
        lines += textwrap.wrap(
            setting.meaning, 92, initial_indent=" " * 6, subsequent_indent=" " * 6
        )
    lines += ["", "The worker reads its other settings too: python worker.py --help"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv in (["--help"], ["-h"]):
        print(help_text(), end="")
        return 0
    if argv:
        print(f"durability.run: takes no arguments, got {' '.join(argv)} (try --help)")
        return 2
    try:
        run = RunSettings(dict(os.environ))
    except ConfigurationError as error:
        print(f"make run: {error}", file=sys.stderr)
        return 2
    busy = busy_port(run)
    if busy is not None:
        print(f"make run: {busy}", file=sys.stderr)
        return 2
    run.data_dir.mkdir(parents=True, exist_ok=True)
    # Own sessions: Ctrl-C reaches only this process, which stops the worker before the
    # server (a worker outliving its server logs a poll failure every second).
    with run.server_log.open("ab") as server_log:
        server = subprocess.Popen(
            server_command(run),
            stdout=server_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    worker: subprocess.Popen[bytes] | None = None
    stopping = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        wait_for_port(run.host, run.port, 60, server, run.server_log)
        env = dict(os.environ, TEMPORAL_ADDRESS=f"{run.host}:{run.port}")
        env.setdefault("DURABILITY_WEBHOOK_ALLOWED_URLS", LOCAL_WEBHOOK_ALLOWED_URLS)
        worker = subprocess.Popen([sys.executable, "-m", "worker"], env=env, start_new_session=True)
        print(
            f"\nTemporal UI:      http://{run.host}:{run.ui_port}\n"
            f"Temporal server:  {run.host}:{run.port} (database {run.data_dir / 'temporal.db'}, "
            f"log {run.server_log})\n"
            "Worker:           task queue 'durability'\n\n"
            + (
                ""
                if run.port == 7233 and run.host == "127.0.0.1"
                else f"In other terminals: export TEMPORAL_ADDRESS={run.host}:{run.port}\n\n"
            )
            + "Set a demo schedule (in another terminal, with .venv/bin on PATH):\n"
            f"  {DEMO}\n\n"
            "Press Ctrl-C to stop.\n",
            flush=True,
        )
        while not stopping:
            if server.poll() is not None:
                print(
                    f"temporal dev server exited ({server.returncode}); its log: {run.server_log}",
                    file=sys.stderr,
                )
                return 1
            if worker.poll() is not None:
                print(f"worker exited ({worker.returncode})", file=sys.stderr)
                return 1
            time.sleep(0.5)
        return 0
    finally:
        for process in (worker, server):  # in this order: the worker drains, then the server
            if process is None:
                continue
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                process.kill()
        print("stopped", flush=True)


if __name__ == "__main__":
    sys.exit(main())
