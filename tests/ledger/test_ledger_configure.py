"""`configure` and `settings` on a live ledger, end to end: the `durability` CLI, the
`temporal` CLI (update, signal, query) and a real worker. Settings change without losing
operations, requests or claims; requests started before keep their input; continue-as-new
carries the new settings."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)

from tests.support.cold_worker import LedgerActivities
from tests.support.helpers import (
    durability_cli,
    eventually,
    running_worker,
    temporal,
    temporal_query,
)
from tests.support.ledger import record_history

pytestmark = pytest.mark.cacheless


def op(op_id: str, canvas: str, **payload: Any) -> dict[str, Any]:
    return {
        "id": op_id,
        "operation_type": "shape.update",
        "participants": [canvas],
        "payload": {"op": op_id, **payload},
    }


async def phases(handle: WorkflowHandle[Any, Any]) -> dict[str, str]:
    snap = await handle.query("snapshot")
    return {o["id"]: o["phase"] for o in snap["operations"]}


async def request_input(client: Client, ledger_id: str, request_id: str) -> dict[str, Any]:
    """The input a request's `FrozenRequest` child was started with."""
    handle = client.get_workflow_handle(f"request:{ledger_id}:{request_id}")
    async for event in handle.fetch_history_events():
        payload = event.workflow_execution_started_event_attributes.input.payloads[0]
        started: dict[str, Any] = json.loads(payload.data)
        return started
    raise AssertionError("no started event")


async def test_configure_raises_concurrency_while_operations_wait_and_keeps_them(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    ledger_id = f"conf-{unique}"
    workflow_id = f"ledger:{ledger_id}"
    acts = LedgerActivities()
    async with running_worker(client, task_queue, acts.all()):
        handle: WorkflowHandle[Any, Any] = await client.start_workflow(
            "OperationLedger", {"concurrency": 1}, id=workflow_id, task_queue=task_queue
        )
        slow = [op(f"op-{n}", f"c{n}", submit_ms=6000) for n in range(3)]
        await handle.execute_update("enqueue", {"operations": slow})
        await eventually(lambda: len(acts.sent) == 1, timeout=30)
        assert sorted((await phases(handle)).values()) == ["dispatched", "pending", "pending"]

        shown = await durability_cli(
            dev_server_address, "ledger", "configure", ledger_id, "--set", '{"concurrency": 3}'
        )
        assert re.search(r"^concurrency +3$", shown.stdout, re.M), shown.stdout

        # The waiting operations start at once, not when the first one's slot frees: all
        # three are dispatched together.
        async def all_dispatched() -> bool:
            return set((await phases(handle)).values()) == {"dispatched"}

        await eventually(all_dispatched, timeout=30)
        await eventually(lambda: _all_resolved(handle, 3), timeout=30)

        # The temporal CLI: the update returns the settings, a signal applies them.
        updated = await temporal(
            dev_server_address, "workflow", "update", "execute", "--workflow-id", workflow_id,
            "--name", "configure", "--input", '{"submit_activity": "submit", "lanes": {}}',
        )  # fmt: skip
        assert "concurrency:3" in updated.stdout and "lanes:map[]" in updated.stdout, updated
        await temporal(
            dev_server_address, "workflow", "signal", "--workflow-id", workflow_id,
            "--name", "configure", "--input", '{"retry": {"initial_interval_ms": 100}}',
        )  # fmt: skip

        async def signalled() -> dict[str, Any] | None:
            settings: dict[str, Any] = await temporal_query(
                dev_server_address, workflow_id, "settings"
            )
            return settings if settings["retry"]["initial_interval_ms"] == 100 else None

        settings = await eventually(signalled, timeout=30)
        assert settings["ledger_id"] == ledger_id and settings["lanes"] == {}

        # A request launched from now on gets the new retry in its input; earlier ones kept
        # theirs.
        await handle.execute_update("enqueue", {"operations": [op("op-3", "c3")]})
        await eventually(lambda: _all_resolved(handle, 4), timeout=30)
        snap = await handle.query("snapshot")
        request_of = {o["id"]: o["request_id"] for o in snap["operations"]}
        old = await request_input(client, ledger_id, request_of["op-0"])
        new = await request_input(client, ledger_id, request_of["op-3"])
        assert old["retry"]["initial_interval_ms"] == 500, old
        assert new["retry"]["initial_interval_ms"] == 100, new
        assert sorted(body["operation_ids"][0] for body in acts.sent[:3]) == [
            "op-0",
            "op-1",
            "op-2",
        ]

        # Refusals change nothing: the update is rejected, the signal dropped and counted.
        refused = await durability_cli(
            dev_server_address, "ledger", "configure", ledger_id,
            "--set", '{"ledger_id": "other"}', check=False,
        )  # fmt: skip
        assert refused.returncode == 1, refused
        line = refused.stderr.strip()
        assert line.startswith(f"durability: configure rejected by {workflow_id}: "), line
        assert "configure.ledger_id cannot change" in line and "Traceback" not in line
        signalled_bad = await durability_cli(
            dev_server_address, "ledger", "configure", ledger_id,
            "--set", '{"concurrency": 0}', "--signal", check=False,
        )  # fmt: skip
        assert signalled_bad.returncode == 1 and "concurrency" in signalled_bad.stderr
        await temporal(
            dev_server_address, "workflow", "signal", "--workflow-id", workflow_id,
            "--name", "configure", "--input", '{"concurrency": "3"}',
        )  # fmt: skip

        async def dropped() -> bool:
            return bool((await handle.query("snapshot"))["dropped_signals"] == 1)

        await eventually(dropped, timeout=30)
        assert await handle.query("settings") == settings
        table = await durability_cli(dev_server_address, "ledger", "settings", ledger_id)
        assert re.search(r"^concurrency +3$", table.stdout, re.M), table.stdout
        await record_history(client, workflow_id, "configure_0_1_1")
        await handle.terminate("test done")
        closed = await durability_cli(
            dev_server_address, "ledger", "configure", ledger_id,
            "--set", '{"concurrency": 2}', "--signal", check=False,
        )  # fmt: skip
        assert closed.returncode == 1, closed
        assert closed.stderr.startswith(f"durability: ledger {ledger_id} is closed (terminated")


async def _all_resolved(handle: WorkflowHandle[Any, Any], count: int) -> bool:
    current = await phases(handle)
    return len(current) == count and set(current.values()) == {"resolved"}


async def test_configured_settings_are_carried_across_continue_as_new(
    client: Client, task_queue: str, unique: str
) -> None:
    ledger_id = f"conf-can-{unique}"
    acts = LedgerActivities()
    async with running_worker(client, task_queue, acts.all()):
        handle = await client.start_workflow(
            "OperationLedger",
            {"continue_as_new_after_events": 40},
            id=f"ledger:{ledger_id}",
            task_queue=task_queue,
        )
        settings = await handle.execute_update(
            "configure", {"concurrency": 5, "complete_activity": "complete"}, result_type=dict
        )
        first_run = (await handle.describe()).run_id
        for index in range(6):
            await handle.execute_update("enqueue", {"operations": [op(f"op-{index}", "c")]})

        async def continued() -> bool:
            return (await handle.describe()).run_id != first_run

        await eventually(continued, timeout=60)
        latest = client.get_workflow_handle(f"ledger:{ledger_id}")
        assert await latest.query("settings") == settings
        await eventually(lambda: _all_resolved(latest, 6), timeout=60)
        assert acts.completions, "the configured complete_activity is called"
        await latest.terminate("test done")


async def test_a_carried_lane_of_zero_is_kept_across_continue_as_new(
    client: Client, task_queue: str, unique: str
) -> None:
    """A ledger carrying a lane of 0 (which earlier builds accepted at start) keeps it on its
    next continue-as-new: that type never dispatches, the others go on, `settings` shows the
    lane; a new start and a `configure` still refuse it."""
    ledger_id = f"conf-lane0-{unique}"
    acts = LedgerActivities()
    carried_input = {
        "continue_as_new_after_events": 40,
        "lanes": {"asset.upload": 1, "shape.update": 0},
        "ledger_id": ledger_id,
        "carried_state": {"ledger_id": ledger_id},
    }
    async with running_worker(client, task_queue, acts.all()):
        handle = await client.start_workflow(
            "OperationLedger", carried_input, id=f"ledger:{ledger_id}", task_queue=task_queue
        )
        first_run = (await handle.describe()).run_id
        parked = {**op("parked", "c"), "operation_type": "shape.update"}
        await handle.execute_update("enqueue", {"operations": [parked]})
        for index in range(6):
            moving = {**op(f"op-{index}", f"c{index}"), "operation_type": "asset.upload"}
            await handle.execute_update("enqueue", {"operations": [moving]})

        async def continued() -> bool:
            return (await handle.describe()).run_id != first_run

        await eventually(continued, timeout=60)
        latest = client.get_workflow_handle(f"ledger:{ledger_id}")

        async def others_resolved() -> bool:
            current = await phases(latest)
            return all(p == "resolved" for o, p in current.items() if o != "parked")

        await eventually(others_resolved, timeout=60)
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
        assert (await phases(latest))["parked"] == "pending"
        assert (await latest.query("settings"))["lanes"] == {"asset.upload": 1, "shape.update": 0}
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await latest.execute_update("configure", {"lanes": {"shape.update": 0}})
        assert "lane of 'shape.update' must be from 1 to 1000, got 0" in str(refused.value.cause)
        fresh = await client.start_workflow(
            "OperationLedger",
            {"lanes": {"shape.update": 0}},
            id=f"ledger:{ledger_id}-new",
            task_queue=task_queue,
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await fresh.result()
        assert "lane of 'shape.update'" in str(failed.value.cause)
        await latest.terminate("test done")
