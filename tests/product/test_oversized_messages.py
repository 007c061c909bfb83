"""Any caller's oversized or deeply nested message to both workflows: every update refused
(`InvalidRequest`, naming it), every signal counted in `dropped_signals` and dropped, a query
argument refused naming it; no failed workflow task, queries answer, a schedule's ticks go
on. Updates are sent with the raw `temporal` CLI, which bounds nothing. An update over the
server's own 2 MB limit is beyond any workflow's reach: docs/upstream-update-rejection.md."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from tests.support.helpers import eventually, running_worker, temporal
from workflows.limits import MAX_MESSAGE_BYTES

QUERY_TIMEOUT = timedelta(seconds=15)
SCHEDULE_UPDATES = [
    "set", "cancel", "configure", "pause", "unpause", "trigger", "backfill", "redeliver"
]  # fmt: skip
SCHEDULE_SIGNALS = ["set", "cancel", "configure", "pause", "unpause"]
LEDGER_UPDATES = ["enqueue", "hold", "release", "settle", "resume", "skip", "configure", "stop"]
LEDGER_SIGNALS = ["enqueue", "release", "resume", "skip", "configure"]
# Over the server's 2 MB payload limit (which the frontend does not apply to updates), under
# its 4 MB message limit.
OVER_SERVER_LIMIT = 3 * 1024 * 1024
# Over the workflows' bound, under the server's 2 MB limit.
BIG = 2 * MAX_MESSAGE_BYTES
# Deeper than the SDK's converter reads (it reads JSON nested up to 200 levels).
DEPTH = 300
NESTED = b"[" * DEPTH + b"]" * DEPTH


def json_payload(data: bytes) -> RawValue:
    return RawValue(Payload(metadata={"encoding": b"json/plain"}, data=data))


async def refused_by_every_update(
    address: str, handle: WorkflowHandle[Any, Any], updates: Sequence[str], tmp_path: Path
) -> None:
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"filler": "x" * BIG}))
    nested = tmp_path / "nested.json"
    nested.write_bytes(NESTED)
    for name in updates:
        for payload, says in ((big, "bytes, more than"), (nested, "cannot be decoded")):
            sent = await temporal(
                address, "workflow", "update", "execute", "--workflow-id", handle.id,
                "--name", name, "--input-file", str(payload), check=False,
            )  # fmt: skip
            shown = sent.stdout + sent.stderr
            assert sent.returncode != 0, f"{name} applied: {shown[:300]}"
            assert f"{name} update payload" in shown and says in shown, shown[:600]


async def refused_as_invalid_request(handle: WorkflowHandle[Any, Any], name: str) -> None:
    """Refused as the contract says: `InvalidRequest`, not retryable, naming the update."""
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(name, json_payload(NESTED), rpc_timeout=QUERY_TIMEOUT)
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError) and cause.non_retryable, cause
    assert cause.type == "InvalidRequest" and f"{name} update payload" in cause.message


async def dropped_by_every_signal(
    handle: WorkflowHandle[Any, Any], signals: Sequence[str], dropped: Any
) -> None:
    before = await dropped()
    big = json.dumps({"filler": "x" * BIG}).encode()
    for name in signals:
        await handle.signal(name, json_payload(big))
        await handle.signal(name, json_payload(NESTED))
    expected = before + 2 * len(signals)

    async def all_counted() -> bool:
        return bool(await dropped() == expected)

    await eventually(all_counted)


async def query_refused(handle: WorkflowHandle[Any, Any], name: str) -> None:
    with pytest.raises(WorkflowQueryFailedError, match=f"{name} query argument"):
        await handle.query(name, json_payload(NESTED), rpc_timeout=QUERY_TIMEOUT)


async def no_failed_tasks(handle: WorkflowHandle[Any, Any]) -> None:
    failed = [
        event.workflow_task_failed_event_attributes.failure.message
        async for event in handle.fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]
    assert failed == []


async def test_a_schedule_refuses_oversized_and_nested_messages_and_ticks_on(
    client: Client, dev_server_address: str, task_queue: str, unique: str, tmp_path: Path
) -> None:
    async with running_worker(client, task_queue):
        handle = await client.start_workflow(
            "DurabilitySchedule",
            {"object_id": f"big-{unique}"},
            id=f"schedule:big-{unique}",
            task_queue=task_queue,
        )
        await handle.execute_update("set", {"expression": "@every 1s", "version": 1})
        await refused_by_every_update(dev_server_address, handle, SCHEDULE_UPDATES, tmp_path)
        await refused_as_invalid_request(handle, "set")

        async def dropped() -> int:
            return int(await handle.query("dropped_signals", rpc_timeout=QUERY_TIMEOUT))

        await dropped_by_every_signal(handle, SCHEDULE_SIGNALS, dropped)
        await query_refused(handle, "describe")
        before = (await handle.query("get", rpc_timeout=QUERY_TIMEOUT))["next_at"]

        async def ticked() -> bool:
            after = (await handle.query("get", rpc_timeout=QUERY_TIMEOUT))["next_at"]
            return bool(after > before)

        await eventually(ticked)
        await no_failed_tasks(handle)


async def test_a_ledger_refuses_oversized_and_nested_messages_and_goes_on(
    client: Client, dev_server_address: str, task_queue: str, unique: str, tmp_path: Path
) -> None:
    async with running_worker(client, task_queue):
        handle = await client.start_workflow(
            "OperationLedger", {}, id=f"ledger:big-{unique}", task_queue=task_queue
        )
        await refused_by_every_update(dev_server_address, handle, LEDGER_UPDATES, tmp_path)
        await refused_as_invalid_request(handle, "enqueue")

        async def dropped() -> int:
            snapshot = await handle.query("snapshot", rpc_timeout=QUERY_TIMEOUT)
            return int(snapshot["dropped_signals"])

        await dropped_by_every_signal(handle, LEDGER_SIGNALS, dropped)
        await query_refused(handle, "snapshot")
        token = await handle.execute_update("hold", {}, rpc_timeout=QUERY_TIMEOUT)
        assert await handle.execute_update("release", {"token": token})
        await no_failed_tasks(handle)


async def refused_over_the_server_limit(
    address: str, handle: WorkflowHandle[Any, Any], updates: Sequence[str], tmp_path: Path
) -> None:
    """Every update with a 3 MB payload, at once: each refused; while the callers wait, the
    workflow's tasks fail (upstream, docs/upstream-update-rejection.md), then it goes on."""
    payload = tmp_path / "3mb.json"
    payload.write_text(json.dumps({"filler": "x" * OVER_SERVER_LIMIT}))
    args = ("workflow", "update", "execute", "--workflow-id", handle.id, "--input-file")
    sent = await asyncio.gather(
        *(temporal(address, *args, str(payload), "--name", name, check=False) for name in updates)
    )
    assert all(done.returncode != 0 for done in sent), [done.stdout for done in sent]

    async def answers() -> bool:
        try:
            await handle.query("settings", rpc_timeout=timedelta(seconds=5))
        except Exception:
            return False
        return True

    await eventually(answers, timeout=60)


async def only_the_upstream_failures(handle: WorkflowHandle[Any, Any]) -> None:
    """The workflow's failed tasks are the SDK refusing a completion that echoes a 3 MB
    update (never a termination by the server), and a task completed after them."""
    events = [event async for event in handle.fetch_history_events()]
    failed = [
        index
        for index, event in enumerate(events)
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]
    for index in failed:
        cause = events[index].workflow_task_failed_event_attributes.cause
        assert cause == WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_PAYLOADS_TOO_LARGE
    if failed:
        assert any(
            event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
            for event in events[failed[-1] :]
        )


@pytest.mark.slow
async def test_a_schedule_goes_on_after_3mb_updates_from_the_temporal_cli(
    client: Client, dev_server_address: str, task_queue: str, unique: str, tmp_path: Path
) -> None:
    async with running_worker(client, task_queue):
        handle = await client.start_workflow(
            "DurabilitySchedule",
            {"object_id": f"huge-{unique}"},
            id=f"schedule:huge-{unique}",
            task_queue=task_queue,
        )
        await handle.execute_update("set", {"expression": "@every 1s", "version": 1})
        await refused_over_the_server_limit(dev_server_address, handle, SCHEDULE_UPDATES, tmp_path)
        before = (await handle.query("get", rpc_timeout=QUERY_TIMEOUT))["next_at"]

        async def ticked() -> bool:
            after = (await handle.query("get", rpc_timeout=QUERY_TIMEOUT))["next_at"]
            return bool(after > before)

        await eventually(ticked)
        await only_the_upstream_failures(handle)
        assert (await handle.describe()).status is not None
        assert (await handle.describe()).status.name == "RUNNING"  # type: ignore[union-attr]


@pytest.mark.slow
async def test_a_ledger_goes_on_after_3mb_updates_from_the_temporal_cli(
    client: Client, dev_server_address: str, task_queue: str, unique: str, tmp_path: Path
) -> None:
    async with running_worker(client, task_queue):
        handle = await client.start_workflow(
            "OperationLedger", {}, id=f"ledger:huge-{unique}", task_queue=task_queue
        )
        await refused_over_the_server_limit(dev_server_address, handle, LEDGER_UPDATES, tmp_path)
        token = await handle.execute_update("hold", {}, rpc_timeout=QUERY_TIMEOUT)
        assert await handle.execute_update("release", {"token": token})
        await only_the_upstream_failures(handle)
        assert (await handle.describe()).status.name == "RUNNING"  # type: ignore[union-attr]
