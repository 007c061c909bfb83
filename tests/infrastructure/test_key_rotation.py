"""Rotating the encryption key under running workflows, on the real dev server.

A schedule and a ledger start with workers and clients on key A. Workers restart with the
ring {A, B} and current key B: the workflows go on (their A-encrypted histories replay, new
payloads are written under B), answer queries, and their histories replay offline with the
new ring. A worker given {B} alone cannot read those histories: the operator sees a query
error and a failed workflow task naming key A and the setting to add it to, and the
workflow resumes once a worker has A again (a failed workflow task is retried, not fatal).
"""

from __future__ import annotations

import base64
import os
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory, WorkflowQueryFailedError
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.converter import DataConverter
from temporalio.service import RPCError
from temporalio.worker import Replayer

from durability.client import DurabilityClient
from durability.connect import data_converter
from durability.registry import all_workflows, workflow_runner
from tests.support.helpers import eventually, running_worker

KEY_A = os.urandom(32)
KEY_B = os.urandom(32)


def ring(current: str, **keys: bytes) -> DataConverter:
    """The converter a process gets from DURABILITY_ENCRYPTION_KEYS/_KEY_ID."""
    listed = ",".join(f"{key_id}:{base64.b64encode(key).decode()}" for key_id, key in keys.items())
    return data_converter(
        {"DURABILITY_ENCRYPTION_KEYS": listed, "DURABILITY_ENCRYPTION_KEY_ID": current}
    )


def with_converter(client: Client, converter: DataConverter) -> Client:
    """A client on the same connection with another data converter (another key ring)."""
    config = client.config()
    config["data_converter"] = converter
    return Client(**config)


async def events(client: Client, workflow_id: str) -> list[HistoryEvent]:
    return [e async for e in client.get_workflow_handle(workflow_id).fetch_history_events()]


def key_id_of_input(event: HistoryEvent) -> bytes:
    if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        payloads = event.workflow_execution_started_event_attributes.input.payloads
    else:
        payloads = event.start_child_workflow_execution_initiated_event_attributes.input.payloads
    return bytes(payloads[0].metadata["encryption-key-id"])


def runs_completed_after(history: list[HistoryEvent], index: int) -> int:
    return sum(
        e.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED
        for e in history[index:]
    )


def replayer(converter: DataConverter) -> Replayer:
    """As harness.replay.production_replayer, with the given key ring."""
    return Replayer(
        workflows=all_workflows(),
        data_converter=converter,
        interceptors=[TracingInterceptor()],
        workflow_runner=workflow_runner(),
    )


async def test_workflows_keep_running_across_a_key_rotation_and_a_missing_key_is_named(
    client: Client, task_queue: str, unique: str
) -> None:
    only_a = with_converter(client, ring("A", A=KEY_A))
    rotated = with_converter(client, ring("B", A=KEY_A, B=KEY_B))
    only_b = with_converter(client, ring("B", B=KEY_B))
    object_id, ledger_id = f"rotate-{unique}", f"rotate-{unique}"
    schedule_id, ledger_wf = f"schedule:{object_id}", f"ledger:{ledger_id}"
    marker = f"marker-{unique}"
    op = {"operation_type": "shape.update", "participants": ["c1"]}

    async def ledger_resolved(durability: DurabilityClient, count: int) -> bool:
        operations = (await durability.snapshot(ledger_id))["operations"]
        return [o["phase"] for o in operations] == ["resolved"] * count

    # 1. Everything on key A.
    async with running_worker(only_a, task_queue):
        durability_a = DurabilityClient(only_a, task_queue)
        await durability_a.set_schedule(object_id, "@every 1s", 1, params={"marker": marker})
        await durability_a.enqueue(ledger_id, [{"id": "op-1", **op}])

        async def a_run_completed() -> bool:
            return runs_completed_after(await events(client, schedule_id), 0) >= 1

        await eventually(a_run_completed, timeout=30)
        await eventually(lambda: ledger_resolved(durability_a, 1), timeout=30)
    before = await events(client, schedule_id)
    switched_at = len(before)
    assert key_id_of_input(before[0]) == b"A"
    assert marker.encode() not in before[0].SerializeToString()  # stored encrypted

    # 2. Workers and clients on the ring {A, B}, current key B.
    async with running_worker(rotated, task_queue):
        durability = DurabilityClient(rotated, task_queue)

        async def a_run_completed_after_the_switch() -> list[HistoryEvent] | None:
            history = await events(client, schedule_id)
            return history if runs_completed_after(history, switched_at) >= 1 else None

        after = await eventually(a_run_completed_after_the_switch, timeout=45)
        started_after_switch = [
            e
            for e in after[switched_at:]
            if e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
        ]
        assert started_after_switch, "no run was started by the worker on the new ring"
        assert {key_id_of_input(e) for e in started_after_switch} == {b"B"}
        view = await durability.get_schedule(object_id)
        assert view is not None and view["params"] == {"marker": marker}
        assert view["version"] == 1
        assert isinstance(await durability.list_runs(object_id), list)
        await durability.enqueue(ledger_id, [{"id": "op-2", "dependencies": ["op-1"], **op}])
        await eventually(lambda: ledger_resolved(durability, 2), timeout=30)

    # 3. The histories (A, then B payloads) replay with the new ring, not without A.
    for workflow_id in (schedule_id, ledger_wf):
        history = await rotated.get_workflow_handle(workflow_id).fetch_history()
        result = await replayer(rotated.data_converter).replay_workflow(
            history, raise_on_replay_failure=False
        )
        assert result.replay_failure is None, f"{workflow_id}: {result.replay_failure}"
        missing = await replayer(only_b.data_converter).replay_workflow(
            WorkflowHistory(history.workflow_id, history.events), raise_on_replay_failure=False
        )
        assert "key id 'A'" in str(missing.replay_failure)

    # 4. A worker and client that dropped A too early: the operator is told which key.
    failed_from = len(await events(client, schedule_id))
    async with running_worker(only_b, task_queue):
        # The new worker replays the whole history to answer: on a loaded machine the first
        # query can outlast the server's query timeout, which says nothing about the key. And
        # when the schedule's next workflow task reached that worker first, the server answers
        # for it ("Workflow Task in failed state"): the task's failure, checked below, then
        # names the key.
        query_error: pytest.ExceptionInfo[WorkflowQueryFailedError] | None = None
        for attempt in range(3):
            try:
                with pytest.raises(WorkflowQueryFailedError) as query_error:
                    await DurabilityClient(only_b, task_queue).get_schedule(object_id)
                break
            except RPCError as error:
                if "Workflow Task in failed state" in error.message:
                    query_error = None
                    break
                if error.message != "Timeout expired" or attempt == 2:
                    raise
        if query_error is not None:
            assert "key id 'A'" in str(query_error.value)
            assert "DURABILITY_ENCRYPTION_KEYS" in str(query_error.value)

        async def task_failure() -> Any:
            for event in (await events(client, schedule_id))[failed_from:]:
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                    return event.workflow_task_failed_event_attributes
            return None

        failed = await eventually(task_failure, timeout=30)
    unhandled = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_WORKER_UNHANDLED_FAILURE
    assert failed.cause == unhandled
    assert "key id 'A'" in failed.failure.message
    assert "add A:<base64 key> to DURABILITY_ENCRYPTION_KEYS" in failed.failure.message
    assert not failed.failure.application_failure_info.non_retryable
    description = await client.get_workflow_handle(schedule_id).describe()
    assert description.status is not None and description.status.name == "RUNNING"

    # 5. With A back in the ring, the same workflow resumes where it stopped.
    resumed_from = len(await events(client, schedule_id))
    async with running_worker(rotated, task_queue):

        async def a_run_completed_after_the_fix() -> bool:
            return runs_completed_after(await events(client, schedule_id), resumed_from) >= 1

        await eventually(a_run_completed_after_the_fix, timeout=60)
        durability = DurabilityClient(rotated, task_queue)
        await durability.cancel_schedule(object_id)
    for workflow_id in (schedule_id, ledger_wf):
        await client.get_workflow_handle(workflow_id).terminate("test done")
