"""A fleet of worker subprocesses (`python -m worker`, the installed module): start, SIGKILL,
restart, stop."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import IO

# How long a client waits for the fleet's first poller: worker processes take seconds to
# import and connect on a loaded machine, longer than the client's default grace.
FLEET_START_GRACE = timedelta(seconds=60)


@dataclass
class WorkerSlot:
    index: int
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0


class WorkerFleet:
    """N `python -m worker` subprocesses polling one task queue."""

    def __init__(
        self,
        address: str,
        task_queue: str,
        size: int,
        directory: Path,
        env: dict[str, str] | None = None,
    ) -> None:
        self.address = address
        self.task_queue = task_queue
        self.directory = directory
        self.extra_env = dict(env or {})
        self.slots = [WorkerSlot(index) for index in range(size)]
        self.kills = 0
        self.unexpected_exits = 0
        self._logs: dict[int, IO[bytes]] = {}

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            TEMPORAL_ADDRESS=self.address,
            TEMPORAL_NAMESPACE="default",
            DURABILITY_TASK_QUEUE=self.task_queue,
            DURABILITY_METRICS_PORT="0",
            DURABILITY_DRAIN_SECONDS="2",
            DURABILITY_LOG_LEVEL="WARNING",
            # The webhooks call the Recorder (127.0.0.1, a free port); `env` may override.
            DURABILITY_WEBHOOK_ALLOWED_URLS="http://127.0.0.1:*/",
            PYTHONUNBUFFERED="1",
        )
        env.update(self.extra_env)
        return env

    def log_path(self, index: int) -> Path:
        return self.directory / f"worker-{index}.log"

    def start_one(self, index: int) -> None:
        slot = self.slots[index]
        log = self._logs.get(index)
        if log is None:
            log = self._logs[index] = self.log_path(index).open("ab")
        slot.process = subprocess.Popen(
            [sys.executable, "-m", "worker"],
            env=self.environment(),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.directory,
        )
        slot.starts += 1

    def start(self) -> None:
        for slot in self.slots:
            self.start_one(slot.index)

    def alive(self) -> list[int]:
        return [
            slot.index
            for slot in self.slots
            if slot.process is not None and slot.process.poll() is None
        ]

    def kill(self, index: int) -> None:
        """SIGKILL: no drain, no goodbye; whatever it was running is lost mid-flight."""
        process = self.slots[index].process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGKILL)
        process.wait()
        self.kills += 1

    def revive(self) -> list[int]:
        """Start every worker that is not running; count those that exited on their own."""
        started: list[int] = []
        for slot in self.slots:
            process = slot.process
            if process is not None and process.poll() is None:
                continue
            if process is not None and process.returncode != -signal.SIGKILL:
                self.unexpected_exits += 1
            self.start_one(slot.index)
            started.append(slot.index)
        return started

    async def stop(self, timeout: float = 20) -> None:
        for slot in self.slots:
            if slot.process is not None and slot.process.poll() is None:
                slot.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        for index in self.alive():
            self.kill(index)
        for log in self._logs.values():
            log.close()
        self._logs.clear()
