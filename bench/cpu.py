"""CPU milliseconds per run, worker and server, for one side at a fixed load (the `cpu`
scenario of `python -m bench`). Where the capacity scenario says *how much*, this says *who
pays*: the worker process (workflow tasks, activities, the bench's client) or the dev server.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client

from bench.activities import RECORDER
from bench.load import run_load
from bench.stats import Summary

TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


@dataclass
class CpuUsage:
    runs: int
    p99: float
    worker_ms_per_run: float
    server_ms_per_run: float


def cpu_ms(pid: int) -> float:
    """User + system CPU of one process, in ms (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / TICKS_PER_SECOND


def child_pids(pid: int) -> list[int]:
    """Direct children of `pid`: the dev server the bench started."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat[1]) == pid:
            found.append(int(entry.name))
    return found


async def measure_cpu(
    client: Client, task_queue: str, side: str, objects: int, duration_s: float
) -> CpuUsage:
    """Run `objects` one-second schedules on `side` and charge the CPU used to its runs."""
    me, servers = os.getpid(), child_pids(os.getpid())
    worker0, server0 = cpu_ms(me), sum(cpu_ms(p) for p in servers)
    result = await run_load(client, task_queue, side, objects, duration_s)
    worker1, server1 = cpu_ms(me), sum(cpu_ms(p) for p in servers)
    runs = max(1, len(RECORDER.marks.get(result.tag, [])))
    return CpuUsage(
        runs=runs,
        p99=Summary.of(result.lateness).p99,
        worker_ms_per_run=(worker1 - worker0) / runs,
        server_ms_per_run=(server1 - server0) / runs,
    )
