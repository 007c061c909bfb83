"""N objects each due once a second, on one of three sides, measured the same way: the time a
worker starts the run's activity minus the time the run was due."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleHandle,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    WorkflowHandle,
)
from temporalio.service import RPCError

from bench.activities import RECORDER, Mark, now_ms

WARMUP_MS = 3000
SIDES = ("durability", "native", "chain")


@dataclass
class LoadResult:
    side: str
    objects: int
    window_ms: tuple[int, int]
    expected: int
    seen: int
    duplicates: int
    completed: int
    lateness: list[float]
    keys: list[str] = field(default_factory=list)
    tag: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def missing(self) -> int:
        return max(0, self.expected - self.seen)

    @property
    def runs_per_s(self) -> float:
        span = (self.window_ms[1] - self.window_ms[0]) / 1000
        return self.seen / span if span > 0 else 0.0


async def _gather_bounded(coros: list[Any], limit: int = 32) -> list[Any]:
    semaphore = asyncio.Semaphore(limit)

    async def one(coro: Any) -> Any:
        async with semaphore:
            return await coro

    return await asyncio.gather(*(one(c) for c in coros))


async def _terminate(handles: list[WorkflowHandle[Any, Any]]) -> None:
    async def stop(handle: WorkflowHandle[Any, Any]) -> None:
        with contextlib.suppress(RPCError):
            await handle.terminate("bench over")

    await _gather_bounded([stop(h) for h in handles])


async def run_load(
    client: Client,
    task_queue: str,
    side: str,
    objects: int,
    duration_s: float,
    grace_s: float = 3.0,
    schedule_settings: dict[str, Any] | None = None,
) -> LoadResult:
    """Start `objects` one-second schedules on `side`, measure, tear down. `schedule_settings`
    adds start settings to durability's schedules (e.g. `activity_task_queue`)."""
    tag = f"{side}-{objects}-{uuid.uuid4().hex[:6]}"
    keys = [f"bench-{tag}-{i}" for i in range(objects)]
    start = now_ms()
    until_ms = int(start + duration_s * 1000)
    stoppers: list[Any] = []
    notes: list[str] = []
    if side == "durability":
        handles = await _gather_bounded(
            [
                client.start_workflow(
                    "DurabilitySchedule",
                    {
                        "run_activity": "bench_run",
                        "outcome_activity": "bench_outcome",
                        # No activity_task_queue: the run activity runs on the schedule's own
                        # queue, on a worker with the plugin's interceptors (bench.env), the
                        # default case (run_host "plugin": no run timer).
                        **(schedule_settings or {}),
                    },
                    id=f"schedule:{key}",
                    task_queue=task_queue,
                    start_signal="set",
                    start_signal_args=[
                        {"expression": "@every 1s", "version": 1, "params": {"bench_tag": tag}}
                    ],
                )
                for key in keys
            ]
        )

        async def stop_durability() -> None:
            async def cancel(handle: WorkflowHandle[Any, Any]) -> None:
                with contextlib.suppress(RPCError):
                    await handle.signal("cancel", {})

            await _gather_bounded([cancel(h) for h in handles])
            await asyncio.sleep(1)
            await _terminate(handles)

        stoppers.append(stop_durability)
    elif side == "native":
        schedules: list[ScheduleHandle] = await _gather_bounded(
            [
                client.create_schedule(
                    key,
                    Schedule(
                        action=ScheduleActionStartWorkflow(
                            "BenchNativeRun",
                            {"tag": tag, "key": key},
                            id=f"native-run-{key}",
                            task_queue=task_queue,
                        ),
                        spec=ScheduleSpec(
                            intervals=[ScheduleIntervalSpec(every=timedelta(seconds=1))]
                        ),
                        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.ALLOW_ALL),
                    ),
                )
                for key in keys
            ]
        )

        async def stop_native() -> None:
            with contextlib.suppress(RPCError):
                info = (await schedules[0].describe()).info
                notes.append(
                    f"native schedule {schedules[0].id}: {info.num_actions} actions, "
                    f"{info.num_actions_missed_catchup_window} missed catch-up window, "
                    f"{info.num_actions_skipped_overlap} skipped overlap"
                )

            async def delete(handle: ScheduleHandle) -> None:
                with contextlib.suppress(RPCError):
                    await handle.delete()

            await _gather_bounded([delete(h) for h in schedules])

        stoppers.append(stop_native)
    elif side == "chain":
        handles = await _gather_bounded(
            [
                client.start_workflow(
                    "BenchChain",
                    {"tag": tag, "until_ms": until_ms + 1000},
                    id=key,
                    task_queue=task_queue,
                )
                for key in keys
            ]
        )

        async def stop_chain() -> None:
            await _terminate(handles)

        stoppers.append(stop_chain)
    else:
        raise ValueError(f"unknown side {side!r}")

    ready = now_ms()
    w0 = int((ready // 1000 + 1) * 1000 + WARMUP_MS)
    w1 = int(until_ms // 1000 * 1000)
    await asyncio.sleep(max(0.0, (w1 - now_ms()) / 1000 + grace_s))
    for stop in stoppers:
        await stop()
    await drain(client)
    result = collect(side, tag, keys, w0, w1)
    result.notes = notes
    return result


async def drain(client: Client, timeout_s: float = 90.0) -> int:
    """Terminate everything still running (children a failed level left behind, workflows a
    deleted native Schedule started) and wait until the worker has gone quiet, so the next
    level starts on an idle server. Returns how many workflows were terminated."""
    deadline = time.monotonic() + timeout_s
    terminated = 0
    quiet_rounds = 0
    while time.monotonic() < deadline and quiet_rounds < 2:
        marks_before = sum(len(v) for v in RECORDER.marks.values())
        running = [
            client.get_workflow_handle(w.id, run_id=w.run_id)
            async for w in client.list_workflows("ExecutionStatus = 'Running'")
        ]
        await _terminate(running)
        terminated += len(running)
        await asyncio.sleep(1.0)
        marks_after = sum(len(v) for v in RECORDER.marks.values())
        quiet_rounds = quiet_rounds + 1 if not running and marks_after == marks_before else 0
    return terminated


def collect(side: str, tag: str, keys: list[str], w0: int, w1: int) -> LoadResult:
    marks: list[Mark] = [m for m in RECORDER.marks.get(tag, []) if w0 <= m.due_ms < w1]
    unique = {(m.key, m.due_ms) for m in marks}
    completed = {
        (k, t)
        for k, t, status in RECORDER.outcomes.get(tag, [])
        if status == "complete" and w0 <= t < w1
    }
    expected = len(keys) * max(0, (w1 - w0) // 1000)
    return LoadResult(
        side=side,
        objects=len(keys),
        window_ms=(w0, w1),
        expected=expected,
        seen=len(unique),
        duplicates=len(marks) - len(unique),
        completed=len(completed) if side == "durability" else len(unique),
        lateness=[m.lateness_ms for m in marks],
        keys=keys,
        tag=tag,
    )


def wall() -> float:
    return time.monotonic()
