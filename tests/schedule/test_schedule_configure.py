"""`configure` and `settings` on a live schedule, end to end: the `durability` CLI, the
`temporal` CLI (update, signal, query), a real worker and the run activity. Settings change
without losing state; runs started before keep theirs; continue-as-new carries them."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from tests.support.fakes import ScheduleFake
from tests.support.helpers import (
    durability_cli,
    eventually,
    record_history,
    schedule_worker,
    temporal,
    temporal_query,
)
from workflows.schedule.models import run_workflow_id

pytestmark = pytest.mark.cacheless

YEARLY = "0 0 1 1 *"


async def run_settings(client: Client, object_id: str, scheduled_time: int) -> dict[str, Any]:
    """The settings a run's `ScheduledRun` child was started with (its input)."""
    handle = client.get_workflow_handle(run_workflow_id(object_id, scheduled_time))
    async for event in handle.fetch_history_events():
        payload = event.workflow_execution_started_event_attributes.input.payloads[0]
        settings: dict[str, Any] = json.loads(payload.data)["settings"]
        return settings
    raise AssertionError("no started event")


async def settings_by_temporal(address: str, workflow_id: str) -> dict[str, Any]:
    settings: dict[str, Any] = await temporal_query(address, workflow_id, "settings")
    return settings


async def test_configure_raises_concurrency_at_once_and_keeps_runs_and_queue(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    object_id = f"conf-{unique}"
    workflow_id = f"schedule:{object_id}"
    acts = ScheduleFake()
    async with schedule_worker(client, task_queue, acts.activities()):
        handle: WorkflowHandle[Any, Any] = await client.start_workflow(
            "DurabilitySchedule",
            {"max_concurrent_runs": 1, "max_dead_letters": 5},
            id=workflow_id,
            task_queue=task_queue,
        )
        await handle.execute_update(
            "set", {"expression": YEARLY, "version": 1, "params": {"gated_run": True}}
        )
        times = [await handle.execute_update("trigger", {}, result_type=int) for _ in range(3)]
        await eventually(lambda: len(acts.started) == 1, timeout=30)
        runs = await handle.query("runs")
        assert [run["state"] for run in runs] == ["running", "queued", "queued"]

        # The durability CLI: the queued runs start at once, the running one goes on.
        shown = await durability_cli(
            dev_server_address, "schedule", "configure", object_id,
            "--set", '{"max_concurrent_runs": 3}',
        )  # fmt: skip
        assert re.search(r"^max_concurrent_runs +3$", shown.stdout, re.M), shown.stdout
        await eventually(lambda: len(acts.started) == 3, timeout=30)
        assert sorted(run["scheduled_time"] for run in acts.started) == times
        assert (await run_settings(client, object_id, times[0]))["max_concurrent_runs"] == 1
        assert (await run_settings(client, object_id, times[1]))["max_concurrent_runs"] == 3
        assert (await handle.query("get"))["version"] == 1

        # The temporal CLI: an update returns the settings in effect, a signal applies.
        updated = await temporal(
            dev_server_address, "workflow", "update", "execute", "--workflow-id", workflow_id,
            "--name", "configure", "--input", '{"outcome_timeout_ms": 5000}',
        )  # fmt: skip
        assert "outcome_timeout_ms:5000" in updated.stdout, updated.stdout
        await temporal(
            dev_server_address, "workflow", "signal", "--workflow-id", workflow_id,
            "--name", "configure", "--input", '{"max_queued_runs": 7}',
        )  # fmt: skip

        async def signalled() -> dict[str, Any] | None:
            settings = await settings_by_temporal(dev_server_address, workflow_id)
            return settings if settings["max_queued_runs"] == 7 else None

        settings = await eventually(signalled, timeout=30)
        assert settings["max_concurrent_runs"] == 3 and settings["outcome_timeout_ms"] == 5000
        assert settings["object_id"] == object_id
        table = await durability_cli(dev_server_address, "schedule", "settings", object_id)
        assert re.search(r"^max_queued_runs +7$", table.stdout, re.M), table.stdout

        # Refusals: the update is rejected naming the field, the signal dropped and counted;
        # neither changes anything.
        bad = await temporal(
            dev_server_address, "workflow", "update", "execute", "--workflow-id", workflow_id,
            "--name", "configure", "--input", '{"max_concurrent_runs": 0}', check=False,
        )  # fmt: skip
        assert bad.returncode != 0 and "max_concurrent_runs" in bad.stderr + bad.stdout
        await temporal(
            dev_server_address, "workflow", "signal", "--workflow-id", workflow_id,
            "--name", "configure", "--input", '{"object_id": "other"}',
        )  # fmt: skip
        await eventually(lambda: _dropped(handle, 1), timeout=30)
        assert await settings_by_temporal(dev_server_address, workflow_id) == settings
        refused = await durability_cli(
            dev_server_address, "schedule", "configure", object_id,
            "--set", '{"max_concurrent_runs": 3, "overlap": "never"}', check=False,
        )  # fmt: skip
        assert refused.returncode == 1, refused
        assert refused.stderr.startswith(f"durability: configure rejected by {workflow_id}: ")
        assert "overlap" in refused.stderr and "'never'" in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr
        usage = await durability_cli(
            dev_server_address, "schedule", "configure", object_id, "--set", "{", check=False
        )
        assert usage.returncode == 2 and "--set must be JSON" in usage.stderr, usage.stderr

        acts.run_gate.set()
        await eventually(lambda: len(acts.accepted) == 3, timeout=30)
        await eventually(lambda: _no_runs(handle), timeout=30)
        history = await handle.fetch_history()
        record_history("schedule_parent_0_1_1_configure", history)
        await handle.terminate("test done")
        closed = await durability_cli(
            dev_server_address, "schedule", "configure", object_id,
            "--set", '{"max_concurrent_runs": 2}', check=False,
        )  # fmt: skip
        assert closed.returncode == 1, closed
        assert closed.stderr.startswith(f"durability: schedule {object_id} is closed (terminated")


async def _dropped(handle: WorkflowHandle[Any, Any], count: int) -> bool:
    return bool(await handle.query("dropped_signals") == count)


async def _no_runs(handle: WorkflowHandle[Any, Any]) -> bool:
    return not await handle.query("runs")


async def test_configured_settings_are_carried_across_continue_as_new_with_the_state(
    client: Client, task_queue: str, unique: str
) -> None:
    object_id = f"conf-can-{unique}"
    acts = ScheduleFake(refusing=True, refusals_final=True)
    async with schedule_worker(client, task_queue, acts.activities()):
        handle = await client.start_workflow(
            "DurabilitySchedule",
            {"continue_as_new_after_events": 40, "max_dead_letters": 5},
            id=f"schedule:{object_id}",
            task_queue=task_queue,
        )
        await handle.execute_update("set", {"expression": YEARLY, "version": 4})
        await handle.execute_update("trigger", {})
        await eventually(lambda: _letters(handle, 1), timeout=30)
        settings = await handle.execute_update(
            "configure", {"max_dead_letters": 3, "run_timeout_ms": 7000}, result_type=dict
        )
        assert settings["max_dead_letters"] == 3
        first_run = (await handle.describe()).run_id

        async def continued() -> bool:
            # Messages grow the history until the run continues as new.
            await handle.execute_update("pause", {})
            await handle.execute_update("unpause", {})
            return (await handle.describe()).run_id != first_run

        await eventually(continued, timeout=60)
        latest = client.get_workflow_handle(f"schedule:{object_id}")
        assert (await latest.query("settings")) == settings
        assert (await latest.query("get"))["version"] == 4
        assert len(await latest.query("dead_letters")) == 1
        await latest.terminate("test done")


async def _letters(handle: WorkflowHandle[Any, Any], count: int) -> bool:
    return len(await handle.query("dead_letters")) == count
