"""`python -m bench.memory`: worker memory per cached workflow, a schedule against a raw
workflow, side by side in one run (against the goal "at most 64 KiB per cached schedule").

For each side a fresh process starts an in-memory dev server and one in-process worker whose
cache holds everything (the worker is built from `DurabilityPlugin`, as `worker.py` does),
warms it with 50 workflows, then starts `--count` more and waits until each has completed its
first workflow task (so it is cached). Reported: VmRSS delta per workflow (the process also
holds the client that started them: both sides pay it), the Python heap delta per workflow
(tracemalloc, in a second process per side because tracing inflates RSS) and gc-tracked
objects per workflow.

- schedule: an idle hourly `DurabilitySchedule` started by `set` (signal-with-start);
- raw: `BenchAwaitedChain` with one tick an hour away (a workflow waiting on one timer, the
  floor any cached workflow costs in this SDK).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import time
import tracemalloc
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from bench.machine import describe
from bench.scale_worker import bounded, memory_kib
from durability.client import DurabilityClient
from durability.devserver import dev_server_extra_args, temporal_cli
from durability.plugin import DurabilityPlugin
from durability.registry import workflow_runner
from workflows.schedule.models import schedule_workflow_id

SIDES = ("schedule", "raw")
WARM_UP = 50


def rss_kib() -> int:
    """This process's resident set, KiB."""
    return memory_kib(os.getpid())[0]


async def measure_side(side: str, count: int, trace: bool) -> dict[str, float]:
    """One side in this process: the figures per cached workflow."""
    from bench.activities import bench_noop
    from bench.workflows import BenchAwaitedChain, BenchAwaitedChild

    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_cli(), dev_server_extra_args=dev_server_extra_args()
    )
    client = await Client.connect(
        env.client.service_client.config.target_host, plugins=[DurabilityPlugin()]
    )
    task_queue = f"memory-{side}-{uuid.uuid4().hex[:6]}"
    durability = DurabilityClient(client, task_queue_name=task_queue)
    minute = (time.gmtime().tm_min + 30) % 60

    def starter(workflow_key: str) -> Callable[[], Awaitable[Any]]:
        if side == "schedule":
            return lambda: durability.signal_set_schedule(workflow_key, f"{minute} * * * *", 1)
        return lambda: client.start_workflow(
            "BenchAwaitedChain",
            {"ticks": 1, "period_ms": 3_600_000},
            id=workflow_key,
            task_queue=task_queue,
        )

    def workflow_id(key: str) -> str:
        return schedule_workflow_id(key) if side == "schedule" else key

    async def cached(keys: list[str]) -> None:
        """Until every workflow completed its first task (a timer started: cached)."""

        async def first_task_done(key: str) -> bool:
            described = await client.get_workflow_handle(workflow_id(key)).describe()
            return described.raw_description.workflow_execution_info.history_length >= 5

        pending = list(keys)
        while pending:
            done = await bounded([first_task_done(k) for k in pending], 32)
            pending = [k for k, d in zip(pending, done, strict=True) if not d]
            if pending:
                await asyncio.sleep(1)

    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[BenchAwaitedChain, BenchAwaitedChild],
        activities=[bench_noop],
        workflow_runner=workflow_runner(),
        max_cached_workflows=count + 2 * WARM_UP,
    )
    async with worker:
        warm = [f"warm-{side}-{i}" for i in range(WARM_UP)]
        await bounded([starter(k)() for k in warm], 64)
        await cached(warm)
        await asyncio.sleep(3)
        gc.collect()
        if trace:
            tracemalloc.start()
        rss_before, objects_before = rss_kib(), len(gc.get_objects())
        heap_before = tracemalloc.get_traced_memory()[0] if trace else 0
        keys = [f"idle-{side}-{i}" for i in range(count)]
        await bounded([starter(k)() for k in keys], 64)
        await cached(keys)
        await asyncio.sleep(8)
        gc.collect()
        figures = {
            "rss_kib": (rss_kib() - rss_before) / count,
            "gc_objects": (len(gc.get_objects()) - objects_before) / count,
        }
        if trace:
            figures = {
                "heap_kib": (tracemalloc.get_traced_memory()[0] - heap_before) / count / 1024
            }
    await env.shutdown()
    return figures


def run_side(side: str, count: int, trace: bool) -> dict[str, float]:
    """`measure_side` in a fresh interpreter (so the sides share no heap)."""
    argv = [sys.executable, "-m", "bench.memory", "--side", side, "--count", str(count)]
    if trace:
        argv.append("--trace")
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__)
    parser.add_argument("--count", type=int, default=2000, help="cached workflows per side")
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        figures = asyncio.run(measure_side(args.side, args.count, args.trace))
        print(json.dumps(figures), flush=True)
        os._exit(0)  # the SDK's threads can abort interpreter finalization (sdk-python#300)
    load = os.getloadavg()
    rows = {
        side: {**run_side(side, args.count, False), **run_side(side, args.count, True)}
        for side in SIDES
    }
    machine = describe()
    print(
        "# durability bench: memory per cached workflow, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n"
    )
    print(f"Command: `python -m bench.memory --count {args.count}`\n")
    print(
        "Machine: "
        + ", ".join(f"{k} {v}" for k, v in machine.items())
        + f". Load average at the start {load[0]:.2f}.\n"
    )
    print(
        "| side | VmRSS KiB per cached workflow | Python heap KiB per workflow (tracemalloc) "
        "| gc objects per workflow |"
    )
    print("| --- | --- | --- | --- |")
    for side, r in rows.items():
        print(f"| {side} | {r['rss_kib']:.1f} | {r['heap_kib']:.1f} | {r['gc_objects']:.0f} |")
    schedule, raw = rows["schedule"], rows["raw"]
    print(
        f"\nschedule / raw: VmRSS {schedule['rss_kib'] / raw['rss_kib']:.2f}x, "
        f"heap {schedule['heap_kib'] / raw['heap_kib']:.2f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
