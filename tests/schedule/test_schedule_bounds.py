"""Bounds on a schedule's life end to end: `catchup_window_ms`,
`start_at` / `end_at`, `remaining_runs` and `pause_on_failure`, through the `durability` CLI,
the `temporal` CLI and the time-skipping server; bad bounds refused before anything exists."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle, WorkflowHistory
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from harness.replay import production_replayer
from tests.support.fakes import ScheduleFake
from tests.support.helpers import (
    HISTORY_DIR,
    durability_cli,
    eventually,
    record_history,
    schedule_worker,
    temporal,
    temporal_query,
)
from workflows import search_attributes
from workflows.schedule.run import ScheduledRunWorkflow
from workflows.schedule.workflow import DurabilityScheduleWorkflow

pytestmark = pytest.mark.cacheless

DAY_MS = 86_400_000


def now_ms() -> int:
    # The dev server runs on this machine: the workflow's clock is this clock.
    return int(time.time() * 1000)


def skipped_events(recorder: ScheduleFake, object_id: str) -> list[dict[str, Any]]:
    return [
        e for e in recorder.events if e["type"] == "skipped" and e["id"].startswith(f"{object_id}:")
    ]


async def _missed_daily(
    env: WorkflowEnvironment, task_queue: str, object_id: str, **bounds: Any
) -> tuple[WorkflowHandle[Any, Any], int, int]:
    """A daily schedule whose last tick was due three days ago: the state it carries after
    its workers were down three days (the time-skipping server stops its clock while a
    workflow task waits for a missing worker, so the outage itself cannot be played there)."""
    now = int((await env.get_current_time()).timestamp() * 1000)
    missed = (now // DAY_MS - 3) * DAY_MS
    stored = {"version": 1, "expression": "@daily", "next_at": missed, "jitter_ms": 0}
    handle = await env.client.start_workflow(
        "DurabilitySchedule",
        {"lifecycle_activity": "lifecycle", **bounds, "carried": {"schedule": stored}},
        id=f"schedule:{object_id}",
        task_queue=task_queue,
    )
    return handle, missed, now


async def test_a_daily_schedule_missed_for_three_days_skips_the_stale_ticks_with_a_window(
    time_skipping_env: WorkflowEnvironment, task_queue: str, unique: str
) -> None:
    env = time_skipping_env
    recorder = ScheduleFake()
    now = int((await env.get_current_time()).timestamp() * 1000)
    today = now // DAY_MS * DAY_MS
    # A window that today's occurrence (at midnight) is past, and one it is inside.
    stale_window = 3_600_000 if now - today > 2 * 3_600_000 else max(1, (now - today) // 2)
    wide_window = now - today + 600_000
    async with schedule_worker(env.client, task_queue, recorder.activities()):
        windowed, missed, now = await _missed_daily(
            env, task_queue, f"w-{unique}", catchup_window_ms=stale_window
        )
        caught, _, _ = await _missed_daily(
            env, task_queue, f"c-{unique}", catchup_window_ms=wide_window
        )
        # Without a window the same state runs the stale tick, three days late (collapsed).
        plain, _, _ = await _missed_daily(env, task_queue, f"p-{unique}")
        await eventually(lambda: windowed.query("skipped_ticks"), timeout=30)
        # The `skipped` event reaches the recorder by the lifecycle activity, after the count.
        [skipped] = await eventually(lambda: skipped_events(recorder, f"w-{unique}"), timeout=30)
        assert skipped["scheduled_time"] == missed and skipped["reason"] == "catchup_window"
        next_day = (now // DAY_MS + 1) * DAY_MS
        assert (await windowed.query("get"))["next_at"] == next_day
        # Inside the wide window today's occurrence runs for the two stale ones, skipped once.
        await eventually(lambda: any(r["object_id"] == f"c-{unique}" for r in recorder.started))
        [caught_skip] = await eventually(
            lambda: skipped_events(recorder, f"c-{unique}"), timeout=30
        )
        assert caught_skip["scheduled_time"] == missed
        assert await caught.query("skipped_ticks") == 1
        await eventually(lambda: any(r["object_id"] == f"p-{unique}" for r in recorder.started))
        started = {(r["object_id"], r["scheduled_time"]) for r in recorder.started}
        assert started == {(f"c-{unique}", today), (f"p-{unique}", missed)}
        assert await plain.query("skipped_ticks") == 0
        # The next day's tick is on time: it runs.
        await env.sleep(timedelta(milliseconds=next_day - now + 60_000))
        await eventually(
            lambda: (
                {(r["object_id"], r["scheduled_time"]) for r in recorder.started}
                >= {(f"w-{unique}", next_day)}
            ),
            timeout=30,
        )
        assert await windowed.query("skipped_ticks") == 1
        for handle in (windowed, caught, plain):
            await handle.terminate("test done")


async def test_ticks_missed_in_a_worker_outage_past_the_window_are_skipped_via_the_cli(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    object_id = f"cw-{unique}"
    workflow_id = f"schedule:{object_id}"
    recorder = ScheduleFake()
    window = 1500
    options = {"catchup_window_ms": window, "lifecycle_activity": "lifecycle"}
    async with schedule_worker(client, task_queue, recorder.activities()):
        await durability_cli(
            dev_server_address, "--task-queue", task_queue, "schedule", "set", object_id,
            "@every 1s", "--version", "1", "--options", json.dumps(options),
        )  # fmt: skip
        await eventually(lambda: recorder.started, timeout=20)
    # No worker for four seconds: the ticks due meanwhile fire well past the window.
    await asyncio.sleep(4)
    async with schedule_worker(client, task_queue, recorder.activities()):
        await eventually(lambda: skipped_events(recorder, object_id), timeout=20)
        started_after = len(recorder.started)
        await eventually(lambda: len(recorder.started) > started_after, timeout=20)
        skipped = skipped_events(recorder, object_id)
        assert {e["reason"] for e in skipped} == {"catchup_window"}
        # (A loaded machine may be late on another tick too; each skip was past the window.)
        assert all(e["timestamp"] - e["scheduled_time"] > window for e in skipped)
        ran = {r["scheduled_time"] for r in recorder.started}
        assert not {e["scheduled_time"] for e in skipped} & ran
        assert await temporal_query(dev_server_address, workflow_id, "skipped_ticks") == len(
            skipped
        )
        await client.get_workflow_handle(workflow_id).terminate("test done")


async def test_no_tick_before_start_at_nor_at_or_after_end_at_via_the_cli(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    object_id = f"se-{unique}"
    # Far enough ahead that the CLI has set the schedule by then on a loaded machine.
    start_at = (now_ms() // 1000 + 6) * 1000
    end_at = start_at + 3000
    recorder = ScheduleFake()
    options = {"start_at": start_at, "end_at": end_at}
    cli = ("--task-queue", task_queue, "--json")
    async with schedule_worker(client, task_queue, recorder.activities()):
        await durability_cli(
            dev_server_address, *cli, "schedule", "set", object_id, "@every 1s", "--version",
            "1", "--options", json.dumps(options),
        )  # fmt: skip
        got = await durability_cli(dev_server_address, *cli, "schedule", "get", object_id)
        assert json.loads(got.stdout)["next_at"] == start_at  # not the next second

        async def ended() -> bool:
            view = await client.get_workflow_handle(f"schedule:{object_id}").query("get")
            return bool(view["next_at"] is None)

        await eventually(ended, timeout=20)
        await eventually(lambda: len(recorder.outcomes) == 3, timeout=20)
        await asyncio.sleep(1.5)  # one more second of `@every 1s`: nothing more
        times = sorted(r["scheduled_time"] for r in recorder.started)
        assert times == [start_at, start_at + 1000, start_at + 2000]
        shown = await durability_cli(
            dev_server_address, "--task-queue", task_queue, "schedule", "get", object_id
        )
        rows = dict(line.split(None, 1) for line in shown.stdout.splitlines()[2:])
        assert rows["next_at"] == "-"
        # The published next tick says so too (visibility: no tick to come).
        handle = client.get_workflow_handle(f"schedule:{object_id}")
        await eventually(lambda: _no_next_tick_published(handle), timeout=10)
        # trigger is not bounded (as a native Schedule's manual trigger is not).
        triggered = await durability_cli(dev_server_address, *cli, "schedule", "trigger", object_id)
        assert json.loads(triggered.stdout)["scheduled_time"] > end_at
        await client.get_workflow_handle(f"schedule:{object_id}").terminate("test done")


async def _no_next_tick_published(handle: WorkflowHandle[Any, Any]) -> bool:
    described = await handle.describe()
    return described.typed_search_attributes.get(search_attributes.NEXT_TICK_AT) is None


async def test_five_runs_then_no_more_ticks_via_the_temporal_cli(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    workflow_id = f"schedule:five-{unique}"
    recorder = ScheduleFake()
    async with schedule_worker(client, task_queue, recorder.activities()):
        await temporal(
            dev_server_address,
            "workflow", "start", "--type", "DurabilitySchedule", "--task-queue", task_queue,
            "--workflow-id", workflow_id,
            # A short history: the count is carried across continue-as-new, the start field
            # (passed again to every run) read no more.
            "--input", json.dumps({"remaining_runs": 5, "continue_as_new_after_events": 30}),
        )  # fmt: skip
        first_run = (await client.get_workflow_handle(workflow_id).describe()).run_id
        await temporal(
            dev_server_address,
            "workflow", "update", "execute", "--workflow-id", workflow_id, "--name", "set",
            "--input", json.dumps({"expression": "@every 1s", "version": 1}),
        )  # fmt: skip
        await eventually(lambda: len(recorder.outcomes) >= 5, timeout=30)

        async def stopped() -> bool:
            return (await temporal_query(dev_server_address, workflow_id, "get"))["next_at"] is None

        await eventually(stopped, timeout=10)
        await asyncio.sleep(2)  # two more seconds of `@every 1s`: no sixth run
        assert len(recorder.started) == 5
        times = [r["scheduled_time"] for r in recorder.started]
        assert times == sorted(times) and times[-1] - times[0] == 4000
        assert (await client.get_workflow_handle(workflow_id).describe()).run_id != first_run
        # A new version does not tick again: the count is spent.
        await temporal(
            dev_server_address,
            "workflow", "update", "execute", "--workflow-id", workflow_id, "--name", "set",
            "--input", json.dumps({"expression": "@every 1s", "version": 2}),
        )  # fmt: skip
        assert (await temporal_query(dev_server_address, workflow_id, "get"))["next_at"] is None
        await client.get_workflow_handle(workflow_id).terminate("test done")


NOTE = re.compile(r"paused on failure: run (.+):(\d+) errored: Boom: the run failed on purpose")


async def test_a_failing_run_pauses_with_its_note_and_unpause_clears_it_via_the_cli(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    object_id = f"pf-{unique}"
    workflow_id = f"schedule:{object_id}"
    recorder = ScheduleFake()
    cli = ("--task-queue", task_queue, "--json")
    options = {"pause_on_failure": True, "lifecycle_activity": "lifecycle"}
    async with schedule_worker(client, task_queue, recorder.activities()):
        await durability_cli(
            dev_server_address, *cli, "schedule", "set", object_id, "@every 1s", "--version",
            "1", "--params", json.dumps({"fail": True}), "--options", json.dumps(options),
        )  # fmt: skip

        async def paused() -> bool:
            return bool(await temporal_query(dev_server_address, workflow_id, "paused"))

        await eventually(paused, timeout=20)
        note = await temporal_query(dev_server_address, workflow_id, "pause_note")
        matched = NOTE.fullmatch(note)
        assert matched is not None, note
        assert matched[1] == object_id
        assert int(matched[2]) in {r["scheduled_time"] for r in recorder.started}
        got = await durability_cli(dev_server_address, *cli, "schedule", "get", object_id)
        view = json.loads(got.stdout)
        assert view["paused"] is True and view["pause_note"] == note
        shown = await durability_cli(
            dev_server_address, "--task-queue", task_queue, "schedule", "get", object_id
        )
        rows = dict(line.split(None, 1) for line in shown.stdout.splitlines()[2:])
        assert rows["pause_note"] == note
        # Paused: no tick fires (the runs recorded before the pause still run and report).
        await asyncio.sleep(1.5)
        ran = len(recorder.started)
        await asyncio.sleep(1.5)
        assert len(recorder.started) == ran
        assert (await client.get_workflow_handle(workflow_id).query("get"))["next_at"] is not None

        # A version that succeeds, then unpause: the note is gone and runs go on, unpaused.
        await durability_cli(
            dev_server_address, *cli, "schedule", "set", object_id, "@every 1s", "--version", "2"
        )
        unpaused = await durability_cli(dev_server_address, *cli, "schedule", "unpause", object_id)
        assert json.loads(unpaused.stdout) == {"unpaused": True}
        assert await temporal_query(dev_server_address, workflow_id, "pause_note") is None
        await eventually(lambda: recorder.finished, timeout=20)
        assert not await temporal_query(dev_server_address, workflow_id, "paused")

        # `pause --note` says why; a note that is not a string is refused, naming it.
        await durability_cli(
            dev_server_address, *cli, "schedule", "pause", object_id, "--note", "deploying v2"
        )
        assert await temporal_query(dev_server_address, workflow_id, "pause_note") == "deploying v2"
        refused = await temporal(
            dev_server_address,
            "workflow", "update", "execute", "--workflow-id", workflow_id, "--name", "pause",
            "--input", json.dumps({"note": 7}),
            check=False,
        )  # fmt: skip
        assert refused.returncode != 0
        assert (
            "pause payload: note: Input should be a valid string (got 7)"
            in refused.stderr + refused.stdout
        )
        assert await temporal_query(dev_server_address, workflow_id, "pause_note") == "deploying v2"
        long_note = await durability_cli(
            dev_server_address, "--task-queue", task_queue, "schedule", "pause", object_id,
            "--note", "x" * 1201, check=False,
        )  # fmt: skip
        assert long_note.returncode == 1
        assert "note: String should have at most 1200 characters" in long_note.stderr
        assert "Traceback" not in long_note.stderr
        handle = client.get_workflow_handle(workflow_id)
        record_history("schedule_parent_0_1_1_pause_on_failure", await handle.fetch_history())
        await handle.terminate("test done")


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"catchup_window_ms": 0}, "catchup_window_ms: Input should be greater than or equal to 1"),
        ({"start_at": -5}, "start_at: Input should be greater than or equal to 0 (got -5)"),
        ({"start_at": 9, "end_at": 3}, "end_at must be after start_at, got end_at=3 <= start_at=9"),
        ({"remaining_runs": "5"}, "remaining_runs: Input should be a valid integer (got '5')"),
        ({"pause_on_failure": "yes"}, "pause_on_failure: Input should be a valid boolean"),
    ],
)
async def test_a_bad_bound_is_refused_before_anything_is_created(
    client: Client, dev_server_address: str, task_queue: str, unique: str,
    options: dict[str, Any], named: str,
) -> None:  # fmt: skip
    object_id = f"bad-{unique}"
    refused = await durability_cli(
        dev_server_address, "--task-queue", task_queue, "schedule", "set", object_id,
        "@every 1s", "--version", "1", "--options", json.dumps(options), check=False,
    )  # fmt: skip
    assert refused.returncode == 1, refused
    assert named in refused.stderr and "Traceback" not in refused.stderr
    listed = await temporal(
        dev_server_address, "workflow", "describe", "--workflow-id", f"schedule:{object_id}",
        check=False,
    )  # fmt: skip
    assert listed.returncode != 0  # no workflow was created


async def test_a_schedule_started_by_hand_with_a_bad_bound_fails_once_naming_it(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    workflow_id = f"schedule:badstart-{unique}"
    async with schedule_worker(client, task_queue, ScheduleFake().activities()):
        await temporal(
            dev_server_address,
            "workflow", "start", "--type", "DurabilitySchedule", "--task-queue", task_queue,
            "--workflow-id", workflow_id, "--input", json.dumps({"remaining_runs": -1}),
        )  # fmt: skip
        result = await temporal(
            dev_server_address, "workflow", "result", "--workflow-id", workflow_id, check=False
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(client.get_workflow_handle(workflow_id).result(), 20)
    assert "remaining_runs: Input should be greater than or equal to 0 (got -1)" in result.stdout
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidStartInput"


def _with_bounds(name: str, bounds: dict[str, Any]) -> WorkflowHistory:
    """A committed history whose start input also set `bounds`, as a build that ignored
    them would have recorded it."""
    recorded = json.loads((HISTORY_DIR / name).read_text())
    attributes = recorded["history"]["events"][0]["workflowExecutionStartedEventAttributes"]
    payload = attributes["input"]["payloads"][0]
    start_input = json.loads(base64.b64decode(payload["data"])) | bounds
    payload["data"] = base64.b64encode(json.dumps(start_input).encode()).decode()
    return WorkflowHistory.from_json(recorded["workflow_id"], recorded["history"])


@pytest.mark.parametrize(
    "name", ["schedule_parent_0_1_0.json", "schedule_parent_0_1_0_messages.json"]
)
async def test_a_history_recorded_by_a_build_that_ignored_the_bounds_still_replays(
    name: str,
) -> None:
    """The bounds are behind the `schedule-bounds` patch: without its marker they are off."""
    history = _with_bounds(
        name,
        {
            "remaining_runs": 1,
            "catchup_window_ms": 1,
            "end_at": int(datetime(2000, 1, 2, tzinfo=UTC).timestamp() * 1000),
            "start_at": 0,
            "pause_on_failure": True,
        },
    )
    replayer = production_replayer([DurabilityScheduleWorkflow, ScheduledRunWorkflow])
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure


async def test_configure_gives_a_spent_schedule_more_runs_and_ends_it_via_the_cli(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    object_id = f"cf-{unique}"
    workflow_id = f"schedule:{object_id}"
    handle = client.get_workflow_handle(workflow_id)
    recorder = ScheduleFake()
    cli = ("--task-queue", task_queue, "--json")

    async def spent() -> bool:
        return bool((await handle.query("get"))["next_at"] is None)

    async with schedule_worker(client, task_queue, recorder.activities()):
        await durability_cli(
            dev_server_address, *cli, "schedule", "set", object_id, "@every 1s", "--version",
            "1", "--options", json.dumps({"remaining_runs": 2}),
        )  # fmt: skip
        await eventually(spent, timeout=20)  # the second tick recorded its run
        await eventually(lambda: len(recorder.started) == 2, timeout=20)
        # Two more: the count is set again, and ticking resumes from now.
        await durability_cli(
            dev_server_address, *cli, "schedule", "configure", object_id,
            "--set", json.dumps({"remaining_runs": 2}),
        )  # fmt: skip
        await eventually(lambda: len(recorder.started) == 4, timeout=20)
        await eventually(spent, timeout=20)
        # No limit, then an end in the past: ticking stops at once.
        await durability_cli(
            dev_server_address, *cli, "schedule", "configure", object_id,
            "--set", json.dumps({"remaining_runs": None}),
        )  # fmt: skip
        await eventually(lambda: len(recorder.started) >= 5, timeout=20)
        await durability_cli(
            dev_server_address, *cli, "schedule", "configure", object_id,
            "--set", json.dumps({"end_at": now_ms() - 1000}),
        )  # fmt: skip
        assert await spent()
        ran = len(recorder.started)
        await asyncio.sleep(1.5)
        assert len(recorder.started) <= ran + 1  # at most a tick recorded before the configure
        refused = await durability_cli(
            dev_server_address, "--task-queue", task_queue, "schedule", "configure", object_id,
            "--set", json.dumps({"catchup_window_ms": 0}), check=False,
        )  # fmt: skip
        assert refused.returncode == 1 and "catchup_window_ms" in refused.stderr
        await handle.terminate("test done")
