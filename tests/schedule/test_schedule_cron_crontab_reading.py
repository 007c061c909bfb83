"""crontab's reading of cron and the rules of a new `set`, on the dev server, behind the
patches `cron-crontab-reading` and `schedule-set-rules`.

A one-value range in the hours field (`H-H`, H another hour than now) is the probe: croniter
read it as `*` and fires every 2 seconds now; crontab's reading waits for hour H. Runs
recorded by stand-ins for the builds before (no patch asked) replay on this build.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client, WithStartWorkflowOperation, WorkflowHandle, WorkflowHistory
from temporalio.common import RawValue, WorkflowIDConflictPolicy
from temporalio.service import RPCError
from temporalio.worker import Worker

from durability.registry import workflow_runner
from harness.replay import production_replayer
from tests.support.cron_model import model_next
from tests.support.fakes import ScheduleFake
from tests.support.helpers import eventually, schedule_worker
from tests.support.schedule import patch_ids, start_schedule
from workflows import SANDBOXED
from workflows.kernel import NO_INPUT
from workflows.schedule import SCHEDULE_WORKFLOW_TYPE, cron
from workflows.schedule.day_rule import DayRule
from workflows.schedule.patches import CRONTAB_READING_PATCH, SET_RULES_PATCH
from workflows.schedule.run import ScheduledRunWorkflow
from workflows.schedule.workflow import DurabilityScheduleWorkflow

pytestmark = pytest.mark.cacheless


def other_hour_probe() -> str:
    """Every 2 seconds of one hour that is not this one nor the next (UTC)."""
    hour = (datetime.now(UTC).hour + 3) % 24
    return f"*/2 * {hour}-{hour} * * *"


def now_ms() -> int:
    return int(datetime.now(UTC).timestamp() * 1000)


class _OldBuild(DayRule):
    """The choices of builds before: croniter's reading, no set rules, no patch asked."""

    @property
    def crontab(self) -> bool:
        return False

    def decide(self, expression: str | None = None) -> None:
        return None

    def refuses_new_set(self) -> bool:
        return False


@workflow.defn(name=SCHEDULE_WORKFLOW_TYPE, sandboxed=SANDBOXED)
class OldBuildSchedule(DurabilityScheduleWorkflow):
    @workflow.init
    def __init__(self, input: RawValue = NO_INPUT) -> None:
        super().__init__(input)
        self._day_rule = _OldBuild(self._core, builtin=True)

    @workflow.run
    async def run(self, input: RawValue = NO_INPUT) -> None:
        await super().run(input)


class _NewWithoutPatches(DayRule):
    """Crontab's reading and the set rules, never asking the patches."""

    def decide(self, expression: str | None = None) -> None:
        return None

    def refuses_new_set(self) -> bool:
        return True


@workflow.defn(name=SCHEDULE_WORKFLOW_TYPE, sandboxed=SANDBOXED)
class UnpatchedSchedule(DurabilityScheduleWorkflow):
    @workflow.init
    def __init__(self, input: RawValue = NO_INPUT) -> None:
        super().__init__(input)
        self._day_rule = _NewWithoutPatches(self._core, builtin=True)

    @workflow.run
    async def run(self, input: RawValue = NO_INPUT) -> None:
        await super().run(input)


async def test_a_one_value_range_fires_in_its_hour_only_and_records_the_marker(
    client: Client, task_queue: str, unique: str
) -> None:
    probe = other_hour_probe()
    async with schedule_worker(client, task_queue, ScheduleFake().activities()):
        handle = await start_schedule(client, task_queue, f"reading-{unique}")
        before = now_ms()
        assert await handle.execute_update("set", {"expression": probe, "version": 1})
        next_at = (await handle.query("get"))["next_at"]
        assert next_at in {model_next(probe, before), model_next(probe, now_ms())}
        assert next_at - before > 3_600_000  # croniter's reading: within 2 seconds
        await handle.execute_update("cancel", {})
        history = await handle.fetch_history()
    assert patch_ids(history.events, CRONTAB_READING_PATCH) == [CRONTAB_READING_PATCH]
    assert patch_ids(history.events, SET_RULES_PATCH) == []


async def test_expressions_both_readings_agree_on_record_no_marker(
    client: Client, task_queue: str, unique: str
) -> None:
    fake = ScheduleFake()
    async with schedule_worker(client, task_queue, fake.activities()):
        handle = await start_schedule(client, task_queue, f"agree-{unique}")
        await handle.execute_update("set", {"expression": "* * * * * *", "version": 1})
        await eventually(lambda: len(fake.outcomes) >= 2)
        for version, expression in enumerate(["0 0 1,15 * fri", "@every 1s", "@daily"], 2):
            await handle.execute_update("set", {"expression": expression, "version": version})
        await handle.execute_update("cancel", {})
        history = await handle.fetch_history()
    assert patch_ids(history.events, CRONTAB_READING_PATCH) == []


async def test_a_carried_tick_croniter_found_moves_to_crontabs_next_time(
    client: Client, task_queue: str, unique: str
) -> None:
    """A run continued as new by a build that read croniter's way carries its next tick;
    the new run checks it under crontab's reading."""
    probe = other_hour_probe()
    croniter_tick = (now_ms() // 2000 + 30) * 2000
    assert cron.next_occurrence(probe, croniter_tick - 1, crontab_reading=False) == croniter_tick
    carried = {"version": 1, "expression": probe, "next_at": croniter_tick, "jitter_ms": 0}
    async with schedule_worker(client, task_queue):
        handle = await start_schedule(
            client, task_queue, f"carried-{unique}", carried={"schedule": carried}
        )
        assert (await handle.query("get"))["next_at"] == model_next(probe, croniter_tick)
        await handle.execute_update("cancel", {})
        history = await handle.fetch_history()
    assert patch_ids(history.events, CRONTAB_READING_PATCH) == [CRONTAB_READING_PATCH]


async def _no_runs(handle: WorkflowHandle[Any, Any]) -> bool:
    runs: list[Any] = await handle.query("runs")
    return runs == []


async def record_old_build(client: Client, task_queue: str, workflow_id: str, raw: Any) -> Any:
    """A run of the old build whose first task holds a `set` (update-with-start) that fires
    every second or two there: recorded until it ran once, then cancelled."""
    fake = ScheduleFake()
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[OldBuildSchedule, ScheduledRunWorkflow],
        activities=fake.activities(),
        workflow_runner=workflow_runner(),
    ):
        start: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
            SCHEDULE_WORKFLOW_TYPE,
            {},
            id=workflow_id,
            task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
        )
        await client.start_workflow(
            SCHEDULE_WORKFLOW_TYPE, {}, id=workflow_id, task_queue=task_queue
        ) if raw.get("signal") else await client.execute_update_with_start_workflow(
            "set", raw["set"], start_workflow_operation=start
        )
        handle = client.get_workflow_handle(workflow_id)
        if raw.get("signal"):
            await handle.signal("set", raw["set"])
        await eventually(lambda: len(fake.outcomes) >= 1)
        await handle.execute_update("cancel", {})
        await eventually(lambda: _no_runs(handle))
        return await handle.fetch_history()


async def replays(history: WorkflowHistory, schedule: type) -> bool:
    replayer = production_replayer([schedule, ScheduledRunWorkflow])
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    return result.replay_failure is None


async def test_a_run_recorded_by_croniters_reading_replays_as_recorded(
    client: Client, task_queue: str, unique: str
) -> None:
    history = await record_old_build(
        client,
        task_queue,
        f"schedule:old-reading-{unique}",
        {"set": {"expression": other_hour_probe(), "version": 1}},
    )
    assert patch_ids(history.events, CRONTAB_READING_PATCH) == []
    assert await replays(history, DurabilityScheduleWorkflow)
    assert not await replays(history, UnpatchedSchedule)


async def test_a_set_signal_an_older_build_applied_replays_as_applied(
    client: Client, task_queue: str, unique: str
) -> None:
    """A jitter of at least the interval, sent as a signal: the old build stored it."""
    history = await record_old_build(
        client,
        task_queue,
        f"schedule:old-rules-{unique}",
        {"signal": True, "set": {"expression": "* * * * * *", "version": 1, "jitter_ms": 1000}},
    )
    assert patch_ids(history.events, SET_RULES_PATCH) == []
    assert await replays(history, DurabilityScheduleWorkflow)
    assert not await replays(history, UnpatchedSchedule)


async def test_a_new_set_that_cannot_be_meant_is_refused_naming_the_field(
    client: Client, task_queue: str, unique: str
) -> None:
    interval = (
        "invalid set payload: jitter_ms: must be less than the expression's interval of 10000 ms"
    )
    often = "invalid set payload: expression: fires more often than every 1000 ms"
    refused = {
        "@every 1ms": (0, f"{often}, the shortest @every (got '@every 1ms')"),
        "@every 999ms": (0, often),
        "0 0 30 2 *": (0, "expression: never fires after now (got '0 0 30 2 *')"),
        "*/10 * * * * *": (3_000_000, f"{interval} (got 3000000)"),
        "@every 10s": ({"max_ms": 10_000}, f"{interval} (got 10000)"),
        "0 0 L * *": (0, "expression: is not supported: day-of-month field: 'L'"),
    }
    async with schedule_worker(client, task_queue):
        handle = await start_schedule(client, task_queue, f"refused-{unique}")
        for expression, (jitter, message) in refused.items():
            raw = {"expression": expression, "version": 1, "jitter_ms": jitter}
            try:
                await handle.execute_update("set", raw)
            except Exception as error:  # WorkflowUpdateFailedError: the validator's refusal
                assert message in str(getattr(error, "cause", error)), (expression, error)
            else:
                raise AssertionError(f"{expression} was accepted")
            await handle.signal("set", raw)
        await eventually(lambda: _dropped(handle, len(refused)))
        assert await handle.query("get") is None
        # The same expressions under the rules: an interval just above the jitter is fine.
        assert await handle.execute_update(
            "set", {"expression": "@every 1s", "version": 2, "jitter_ms": 999}
        )
        await handle.execute_update("cancel", {})
        history = await handle.fetch_history()
    assert patch_ids(history.events, SET_RULES_PATCH) == [SET_RULES_PATCH]
    # Nothing recorded for a refused update: only the last `set` and `cancel` were accepted.
    assert (
        sum(
            event.HasField("workflow_execution_update_accepted_event_attributes")
            for event in history.events
        )
        == 2
    )


async def _dropped(handle: WorkflowHandle[Any, Any], count: int) -> bool:
    try:
        dropped: int = await handle.query("dropped_signals")
    except RPCError:
        return False
    return dropped == count
