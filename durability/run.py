"""`make run`: the embedded Temporal dev server (with its UI) plus one worker.

The server keeps its database in data/temporal.db, so schedules and ledgers survive a
restart of this command; its own log goes to data/temporal-server.log, so the terminal shows
only this command and the worker. Ctrl-C stops the worker first (it drains), then the server.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from durability.devserver import dev_server_extra_args, temporal_cli

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("DURABILITY_DATA_DIR", PROJECT_ROOT / "data"))
SERVER_LOG = DATA_DIR / "temporal-server.log"
HOST = os.environ.get("DURABILITY_DEV_HOST", "127.0.0.1")
PORT = int(os.environ.get("DURABILITY_DEV_PORT", "7233"))
UI_PORT = int(os.environ.get("DURABILITY_UI_PORT", "8233"))

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


def server_command() -> list[str]:
    """`temporal server start-dev` with a persistent database and the product's settings."""
    return [
        temporal_cli(),
        "server",
        "start-dev",
        "--ip",
        HOST,
        "--port",
        str(PORT),
        "--ui-port",
        str(UI_PORT),
        "--db-filename",
        str(DATA_DIR / "temporal.db"),
        "--log-level",
        "warn",
        *dev_server_extra_args(),
    ]


def wait_for_port(host: str, port: int, timeout: float, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"temporal dev server exited with code {process.returncode}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"temporal dev server did not listen on {host}:{port} within {timeout}s")


def main() -> int:
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    # Own sessions: Ctrl-C reaches only this process, which stops the worker before the
    # server (a worker outliving its server logs a poll failure every second).
    with SERVER_LOG.open("ab") as server_log:
        server = subprocess.Popen(
            server_command(), stdout=server_log, stderr=subprocess.STDOUT, start_new_session=True
        )
    worker: subprocess.Popen[bytes] | None = None
    stopping = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        wait_for_port(HOST, PORT, 60, server)
        env = dict(os.environ, TEMPORAL_ADDRESS=f"{HOST}:{PORT}")
        env.setdefault("DURABILITY_WEBHOOK_ALLOWED_URLS", LOCAL_WEBHOOK_ALLOWED_URLS)
        worker = subprocess.Popen([sys.executable, "-m", "worker"], env=env, start_new_session=True)
        print(
            f"\nTemporal UI:      http://{HOST}:{UI_PORT}\n"
            f"Temporal server:  {HOST}:{PORT} (database {DATA_DIR / 'temporal.db'}, "
            f"log {SERVER_LOG})\n"
            "Worker:           task queue 'durability'\n\n"
            "Set a demo schedule (in another terminal, with .venv/bin on PATH):\n"
            f"  {DEMO}\n\n"
            "Press Ctrl-C to stop.\n",
            flush=True,
        )
        while not stopping:
            if server.poll() is not None:
                print(f"temporal dev server exited ({server.returncode})", file=sys.stderr)
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
