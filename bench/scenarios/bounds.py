"""`--scenario bounds`: workflows that live forever stay under Temporal's payload limit.

- Ledger: one ledger through 20,000 operations (`--quick`: 3,000) with ~1 KB payloads over 64
  canvases, continuing as new many times. Reported: the carried state at each
  continue-as-new (the next run's input), the largest payload in any of its histories, the
  ops/s, enqueues refused as "ledger is full" (the feeder then waits), failed workflow tasks.
- Schedule: `@every 1s` with runs that take 10 s and one slot, for 3 minutes (`--quick`: 1):
  the queue fills to `max_queued_runs` (here 50) and further ticks are skipped. Reported:
  the largest carried state and payload, runs queued at most, ticks skipped.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError

if TYPE_CHECKING:
    from bench.scenarios.common import Ctx

PAYLOAD_LIMIT = 2 * 1024 * 1024


def _payload_sizes(message: Message) -> list[int]:
    """Sizes of every payload a history event carries (inputs, results, signal and update
    arguments, memos), found by walking its fields."""
    if isinstance(message, Payload):
        return [len(message.data)]
    sizes: list[int] = []
    for _, value in message.ListFields():
        if isinstance(value, Message):
            sizes += _payload_sizes(value)
        elif isinstance(value, Mapping):
            for item in value.values():
                if isinstance(item, Message):
                    sizes += _payload_sizes(item)
        elif not isinstance(value, str | bytes) and isinstance(value, Iterable):
            for item in value:
                if isinstance(item, Message):
                    sizes += _payload_sizes(item)
    return sizes


async def _runs(client: Client, workflow_id: str) -> list[tuple[str, list[HistoryEvent]]]:
    """Every run of a workflow ID, oldest first, with its events."""
    runs = [e async for e in client.list_workflows(f"WorkflowId = '{workflow_id}'")]
    runs.sort(key=lambda e: e.start_time)
    found = []
    for execution in runs:
        handle = client.get_workflow_handle(workflow_id, run_id=execution.run_id)
        found.append((execution.run_id, [e async for e in handle.fetch_history_events()]))
    return found


def _carried(events: list[HistoryEvent]) -> int:
    payloads = events[0].workflow_execution_started_event_attributes.input.payloads
    return sum(len(p.data) for p in payloads)


def _failed_tasks(runs: list[tuple[str, list[HistoryEvent]]]) -> int:
    return sum(
        1
        for _, events in runs
        for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    )


async def bounds(ctx: Ctx) -> None:
    await _ledger_bounds(ctx)
    await _schedule_bounds(ctx)


async def _ledger_bounds(ctx: Ctx) -> None:
    r = ctx.results
    total = 3_000 if ctx.quick else 20_000
    rng = random.Random(12)
    ledger_id = f"bounds-{uuid.uuid4().hex[:8]}"
    handle: WorkflowHandle[Any, Any] = await ctx.client.start_workflow(
        "OperationLedger",
        {"concurrency": 32, "activity_task_queue": ctx.task_queue},
        id=f"ledger:{ledger_id}",
        task_queue=ctx.task_queue,
    )
    refused = 0
    began = time.monotonic()
    for start in range(0, total, 100):
        batch = [
            {
                "id": f"op-{n}",
                "operation_type": "shape.update",
                "participants": [f"canvas-{rng.randrange(64)}"],
                "payload": {"n": n, "blob": rng.randbytes(480).hex()},
            }
            for n in range(start, min(start + 100, total))
        ]
        while True:
            try:
                await handle.execute_update("enqueue", {"operations": batch})
                break
            except WorkflowUpdateFailedError as error:
                if "ledger is full" not in str(error.cause):
                    raise
                refused += 1
                await asyncio.sleep(0.5)
    resolved = 0
    deadline = time.monotonic() + (600 if ctx.quick else 2400)
    while time.monotonic() < deadline:
        resolved = (await handle.query("snapshot", {"limit": 1}))["counts"]["resolved_total"]
        if resolved >= total:
            break
        await asyncio.sleep(1.0)
    elapsed = time.monotonic() - began
    runs = await _runs(ctx.client, f"ledger:{ledger_id}")
    carried = [_carried(events) for _, events in runs[1:]]
    largest = max((size for _, events in runs for e in events for size in _payload_sizes(e)))
    r.row(
        "bounds",
        "ledger: operations resolved / enqueued",
        f"{resolved} / {total}",
        f"~1 KB payloads, 64 canvases, concurrency 32; {refused} enqueue(s) refused as "
        "'ledger is full' and retried",
    )
    r.row("bounds", "ledger: ops/s, enqueue to last resolved", f"{resolved / elapsed:.1f}", "")
    r.row(
        "bounds",
        "ledger: continue-as-new count",
        str(len(runs) - 1),
        "carried state (next run's input) at each, KiB: "
        + ", ".join(f"{size / 1024:.0f}" for size in carried),
    )
    r.row(
        "bounds",
        "ledger: largest carried state / largest payload in any history (KiB)",
        f"{max(carried, default=0) / 1024:.0f} / {largest / 1024:.0f}",
        f"Temporal's limit {PAYLOAD_LIMIT // 1024} KiB",
    )
    r.row("bounds", "ledger: failed workflow tasks", str(_failed_tasks(runs)), "must be 0")


async def _schedule_bounds(ctx: Ctx) -> None:
    r = ctx.results
    span_s = 60 if ctx.quick else 180
    object_id = f"bounds-{uuid.uuid4().hex[:8]}"
    handle: WorkflowHandle[Any, Any] = await ctx.client.start_workflow(
        "DurabilitySchedule",
        {
            "max_concurrent_runs": 1,
            "max_queued_runs": 50,
            "run_activity": "bench_sleep_run",
            "activity_task_queue": ctx.task_queue,
            "continue_as_new_after_events": 300,
        },
        id=f"schedule:{object_id}",
        task_queue=ctx.task_queue,
    )
    await handle.execute_update(
        "set", {"expression": "@every 1s", "version": 1, "params": {"sleep_ms": 10_000}}
    )
    most_queued = 0
    deadline = time.monotonic() + span_s
    while time.monotonic() < deadline:
        runs = await handle.query("runs")
        most_queued = max(most_queued, sum(1 for run in runs if run["state"] == "queued"))
        await asyncio.sleep(1.0)
    skipped = await handle.query("skipped_ticks")
    await handle.execute_update("cancel", {})
    runs = await _runs(ctx.client, f"schedule:{object_id}")
    carried = [_carried(events) for _, events in runs]
    largest = max((size for _, events in runs for e in events for size in _payload_sizes(e)))
    r.row(
        "bounds",
        f"schedule: {span_s} s of @every 1s, 10 s runs, 1 slot, max_queued_runs 50",
        f"queued at most {most_queued}; {skipped} ticks skipped",
        f"{len(runs) - 1} continue-as-new; carried state at each, KiB: "
        + ", ".join(f"{size / 1024:.1f}" for size in carried[1:]),
    )
    r.row(
        "bounds",
        "schedule: largest carried state / largest payload in any history (KiB)",
        f"{max(carried) / 1024:.1f} / {largest / 1024:.1f}",
        f"failed workflow tasks: {_failed_tasks(runs)} (must be 0)",
    )
