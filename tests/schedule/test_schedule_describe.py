"""`describe` end to end: the last runs that ended (outcome and delivery result), the next
fire times and the counters, through the `durability` CLI and the `temporal` CLI on the dev
server, before and after a forced continue-as-new."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from tests.support.fakes import ScheduleFake
from tests.support.helpers import (
    assert_no_workflow,
    durability_cli,
    eventually,
    one_line_error,
    schedule_worker,
    temporal,
    temporal_query,
)

pytestmark = pytest.mark.cacheless

YEARLY = "0 0 1 1 *"


async def _settled(handle: WorkflowHandle[Any, Any]) -> bool:
    return not await handle.query("runs")


async def _run_once(handle: WorkflowHandle[Any, Any], version: int, **params: Any) -> int:
    """Store `version` with `params`, trigger one run and wait until it is forgotten."""
    await handle.execute_update("set", {"expression": YEARLY, "version": version, "params": params})
    scheduled_time: int = await handle.execute_update("trigger", {}, result_type=int)
    await eventually(lambda: _settled(handle), timeout=30)
    return scheduled_time


def _without_times(recent: list[dict[str, Any]]) -> list[tuple[int, Any, str]]:
    return [(r["scheduled_time"], r["outcome"], r["delivery"]) for r in recent]


async def test_describe_shows_ended_runs_next_times_and_counters_across_continue_as_new(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    receiver = ScheduleFake()
    object_id = f"describe-{unique}"
    async with schedule_worker(client, task_queue, receiver.activities()):
        handle = await client.start_workflow(
            "DurabilitySchedule",
            {"outcome_retries": {"max_attempts": 1}, "continue_as_new_after_events": 150},
            id=f"schedule:{object_id}",
            task_queue=task_queue,
        )
        complete = await _run_once(handle, 1)
        errored = await _run_once(handle, 2, fail=True)
        receiver.refusing = True  # one attempt: dead-lettered at once
        lettered = await _run_once(handle, 3)
        receiver.refusing = False
        await durability_cli(
            dev_server_address, "schedule", "redeliver", object_id, f"{object_id}:{lettered}"
        )

        async def redelivered() -> bool:
            return not await handle.query("dead_letters")

        await eventually(redelivered, timeout=30)

        shown = await durability_cli(
            dev_server_address, "--json", "schedule", "describe", object_id
        )
        described = json.loads(shown.stdout)
        assert described["schedule"] == await handle.query("get")
        assert described["paused"] is False
        boom = {"name": "Boom", "message": "the run failed on purpose"}
        assert _without_times(described["recent_runs"]) == [
            (lettered, {"status": "complete"}, "redelivered"),
            (errored, {"status": "errored", "error": boom}, "delivered"),
            (complete, {"status": "complete"}, "delivered"),
        ]
        for run in described["recent_runs"]:
            assert run["scheduled_time"] <= run["started_at"] <= run["ended_at"]
        assert described["counters"] == {
            "runs_started": 3,
            "runs_completed": 2,
            "runs_errored": 1,
            "ticks_skipped": {},
            "ticks_skipped_total": 0,
            "outcomes_delivered": 2,
            "outcomes_dead_lettered": 1,
            "outcomes_redelivered": 1,
        }
        upcoming = described["next_fire_times"]
        assert len(upcoming) == 10 and upcoming[0] == described["schedule"]["next_at"]
        years = [datetime.fromtimestamp(t / 1000, UTC) for t in upcoming]
        assert [(y.month, y.day, y.hour, y.minute) for y in years] == [(1, 1, 0, 0)] * 10
        assert [y.year for y in years] == list(range(years[0].year, years[0].year + 10))

        as_table = await durability_cli(dev_server_address, "schedule", "describe", object_id)
        for heading in ("ended run", "next fire time", "counters"):
            assert heading in as_table.stdout, as_table.stdout
        assert "Boom: the run failed on purpose" in as_table.stdout
        assert "outcomes_redelivered    1" in as_table.stdout, as_table.stdout

        # The temporal CLI asks the same query, sized by its argument.
        sized = await temporal_query(
            dev_server_address, handle.id, "describe", {"runs": 2, "next": 3}
        )
        assert sized["recent_runs"] == described["recent_runs"][:2]
        assert sized["next_fire_times"] == upcoming[:3]

        # A bad argument is refused naming the field and the value, by both.
        refused = await temporal(
            dev_server_address,
            "workflow", "query", "--workflow-id", handle.id, "--type", "describe",
            "--input", '{"runs": 99}',
            check=False,
        )  # fmt: skip
        assert refused.returncode != 0
        assert "runs: Input should be less than or equal to 10 (got 99)" in refused.stderr
        too_many = await durability_cli(
            dev_server_address, "schedule", "describe", object_id, "--next", "51", check=False
        )
        assert too_many.returncode == 1
        assert "next: Input should be less than or equal to 50 (got 51)" in one_line_error(
            too_many.stderr
        )

        # Continue-as-new (pauses push the history past the threshold): ring and counters
        # are carried; paused, no fire time is due.
        first_run = (await handle.describe()).run_id
        while (await handle.describe()).run_id == first_run:
            await handle.execute_update("pause", {})
        carried = json.loads(
            (
                await durability_cli(
                    dev_server_address, "--json", "schedule", "describe", object_id
                )
            ).stdout
        )
        assert carried["recent_runs"] == described["recent_runs"]
        assert carried["counters"] == described["counters"]
        assert (carried["paused"], carried["next_fire_times"]) == (True, [])
        await handle.execute_update("unpause", {})
        after = await _run_once(handle, 4)
        resumed: dict[str, Any] = await handle.query("describe", {"runs": 2})
        assert _without_times(resumed["recent_runs"]) == [
            (after, {"status": "complete"}, "delivered"),
            (lettered, {"status": "complete"}, "redelivered"),
        ]
        assert resumed["counters"]["runs_started"] == 4
        assert resumed["next_fire_times"][:1] == [resumed["schedule"]["next_at"]]
        await handle.terminate("test done")


async def test_describe_of_a_missing_schedule_says_so_and_creates_nothing(
    client: Client, dev_server_address: str, unique: str
) -> None:
    object_id = f"nobody-{unique}"
    result = await durability_cli(
        dev_server_address, "schedule", "describe", object_id, check=False
    )
    assert result.returncode == 1
    assert one_line_error(result.stderr) == f"durability: no such schedule {object_id}"
    refused = await durability_cli(
        dev_server_address, "schedule", "describe", object_id, "--runs", "-1", check=False
    )
    assert refused.returncode == 1
    assert "runs: Input should be greater than or equal to 0 (got -1)" in refused.stderr
    await assert_no_workflow(client, f"schedule:{object_id}")


async def test_describe_respects_the_schedules_bounds_and_shows_the_pause_note(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    """With `remaining_runs` and `end_at`, the next fire times are only those the schedule
    will still fire; `pause --note` shows in `describe` and in its table."""
    object_id = f"bounded-{unique}"
    hour = 3_600_000
    end_at = (int(datetime.now(UTC).timestamp() * 1000) // hour + 2) * hour + 1
    cli = ("--task-queue", task_queue)
    async with schedule_worker(client, task_queue, ScheduleFake().activities()):
        options = json.dumps({"remaining_runs": 5, "end_at": end_at})
        await durability_cli(
            dev_server_address, *cli, "schedule", "set", object_id, "@hourly", "--version", "1",
            "--options", options,
        )  # fmt: skip
        described = json.loads(
            (
                await durability_cli(
                    dev_server_address, "--json", "schedule", "describe", object_id
                )
            ).stdout
        )
        # The next two whole hours, then `end_at`: two, not five, not ten.
        upcoming = described["next_fire_times"]
        assert len(upcoming) == 2 and all(t % hour == 0 and t < end_at for t in upcoming)
        await durability_cli(dev_server_address, "schedule", "pause", object_id, "--note", "deploy")
        paused = await durability_cli(dev_server_address, "schedule", "describe", object_id)
        assert "pause_note  deploy" in paused.stdout, paused.stdout
        assert "no upcoming fire time" in paused.stdout
        note: dict[str, Any] = await client.get_workflow_handle(f"schedule:{object_id}").query(
            "describe", {"runs": 0, "next": 1}
        )
        assert (note["paused"], note["pause_note"], note["next_fire_times"]) == (
            True, "deploy", []
        )  # fmt: skip
        await client.get_workflow_handle(f"schedule:{object_id}").terminate("test done")
