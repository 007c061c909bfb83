"""`python -m bench.replay_profile`: where the worker's CPU goes in a schedule's workflow tasks
against the raw chain's.

It records one `DurabilitySchedule` (`@every 1s`, plugin-hosted, the bench's run and outcome
activities) and one `BenchChain` for `--seconds` on an in-memory dev server, then replays the
parent and every child history with each activation run under `cProfile` in the SDK's
workflow thread (a profiler in the main thread does not see it), and prints, per side, the
profiled workflow-thread CPU per run and the functions of the workflow code with the most
cumulative time per run. Profiling slows everything down by a similar factor: compare the
sides, not the absolute figures with the bench's CPU per run.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import re
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.worker import Replayer

from bench import cost
from bench.env import dev_server, worker
from bench.machine import describe, loadavg
from bench.workflows import BenchChain, BenchChainChild
from durability.connect import data_converter
from durability.registry import all_workflows, workflow_runner

# The functions shown: the product's workflow code, the bench's, the SDK's activation.
SHOWN = r"^workflows/|^bench/workflows|_workflow_instance.py.*\((activate|_run_once)\)"


class ProfilingExecutor(ThreadPoolExecutor):
    """Runs every workflow activation under one profiler, one activation at a time."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.profile = cProfile.Profile()
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        def profiled() -> Any:
            with self._lock:
                return self.profile.runcall(fn, *args, **kwargs)

        return super().submit(profiled)


def _children(history: WorkflowHistory) -> list[str]:
    return [
        e.start_child_workflow_execution_initiated_event_attributes.workflow_id
        for e in history.events
        if cost.event_name(e) == "StartChildWorkflowExecutionInitiated"
    ]


async def record(client: Client, seconds: float) -> dict[str, list[WorkflowHistory]]:
    """One schedule and one raw chain ticking for `seconds`; their parents' and children's
    histories."""
    queue = f"replay-profile-{uuid.uuid4().hex[:8]}"
    async with worker(client, "http://127.0.0.1:9/", task_queue=queue):
        schedule = await client.start_workflow(
            "DurabilitySchedule",
            {"run_activity": "bench_run", "outcome_activity": "bench_outcome"},
            id=f"schedule:{queue}",
            task_queue=queue,
            start_signal="set",
            start_signal_args=[
                {"expression": "@every 1s", "version": 1, "params": {"bench_tag": queue}}
            ],
        )
        chain = await client.start_workflow(
            "BenchChain",
            {"tag": queue, "until_ms": int(time.time() * 1000 + seconds * 1000)},
            id=f"chain-{queue}",
            task_queue=queue,
        )
        await asyncio.sleep(seconds + 1)
        await schedule.signal("cancel", {})
        await asyncio.sleep(3)
        parents = {
            "durability": await schedule.fetch_history(),
            "chain": await chain.fetch_history(),
        }
    out: dict[str, list[WorkflowHistory]] = {}
    for side, parent in parents.items():
        out[f"{side} parent"] = [parent]
        out[f"{side} children"] = [
            await client.get_workflow_handle(child).fetch_history() for child in _children(parent)
        ]
    return out


async def profile(histories: Sequence[WorkflowHistory]) -> cProfile.Profile:
    """Replay `histories` (twice: the second, warm, is kept) with every activation profiled."""
    executor = ProfilingExecutor()
    for _ in range(2):
        executor = ProfilingExecutor()
        replayer = Replayer(
            workflows=[*all_workflows(), BenchChain, BenchChainChild],
            workflow_runner=workflow_runner(),
            data_converter=data_converter(),
            # As worker.py's workers: they get the tracing interceptor from their client.
            interceptors=[TracingInterceptor()],
            workflow_task_executor=executor,
        )
        for history in histories:
            await replayer.replay_workflow(history)
    executor.shutdown()
    return executor.profile


def total_ms(profiled: cProfile.Profile) -> float:
    """The profiled CPU time, ms (the sum of every function's own time)."""
    entries = pstats.Stats(profiled).stats  # type: ignore[attr-defined]
    return float(sum(entry[2] for entry in entries.values())) * 1000


def top(profiled: cProfile.Profile, runs: int, count: int) -> list[str]:
    """The `count` functions matching SHOWN with the most cumulative time, ms per run."""
    entries = pstats.Stats(profiled).stats  # type: ignore[attr-defined]
    rows: list[tuple[float, int, str]] = []
    for (filename, line, name), (_, calls, _, cumulative, _) in entries.items():
        where = re.sub(r"^.*?/(workflows/|bench/|temporalio/)", r"\1", f"{filename}:{line}({name})")
        if re.search(SHOWN, where):
            rows.append((cumulative, calls, where))
    rows.sort(reverse=True)
    return [f"| `{w}` | {n} | {c * 1000 / runs:.3f} |" for c, n, w in rows[:count]]


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.replay_profile", description=__doc__)
    parser.add_argument("--seconds", type=float, default=20, help="ticks recorded (20)")
    parser.add_argument("--top", type=int, default=15, help="functions shown per side (15)")
    args = parser.parse_args(argv)
    before = loadavg()
    async with dev_server(False) as (env, _):
        recorded = await record(env.client, args.seconds)
    print("Machine: " + ", ".join(f"{k} {v}" for k, v in describe().items()) + f". Load {before}.")
    for label, histories in recorded.items():
        runs = max(1, len(recorded[label.split()[0] + " children"]))
        profiled = await profile(histories)
        events = sum(len(h.events) for h in histories)
        print(
            f"\n### {label}: {events} events, {runs} runs, profiled workflow-thread CPU "
            f"{total_ms(profiled) / runs:.2f} ms per run\n"
        )
        print("| function | calls | cumulative ms per run |\n| --- | --- | --- |")
        print("\n".join(top(profiled, runs, args.top)))
    print(f"\nLoad after: {loadavg()}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
