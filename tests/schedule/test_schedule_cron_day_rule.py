"""The classic day rule on the dev server, behind the patch `cron-classic-day-rule`.

An expression whose day-of-month or day-of-week field begins with `*` while the other is
restricted fires on days where both match (classic cron); a schedule recorded before the
rule, when it fired where either matched, replays as recorded.

Runs recorded by a stand-in for that build (`OredSchedule`: ORed, no patch asked) with a
message in their first task check each handler that computes times decides the rule itself.

`schedule_parent_0_1_1_day_fields_ored.json` was recorded by the build before the rule with
`python -m tests.schedule.test_schedule_cron_day_rule` (starts its own dev server): a
schedule on such an expression that fired on a day where only one day field matched.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client, WithStartWorkflowOperation, WorkflowHandle, WorkflowHistory
from temporalio.common import RawValue, WorkflowIDConflictPolicy
from temporalio.worker import Worker

from durability.registry import workflow_runner
from harness.replay import production_replayer
from tests.support.cron_model import model_next
from tests.support.fakes import ScheduleFake
from tests.support.helpers import (
    HISTORY_DIR,
    eventually,
    save_history,
    schedule_worker,
    start_dev_server,
)
from tests.support.schedule import patch_ids, start_schedule
from workflows import SANDBOXED
from workflows.kernel import NO_INPUT
from workflows.schedule import SCHEDULE_WORKFLOW_TYPE, cron
from workflows.schedule.day_rule import DayRule
from workflows.schedule.patches import CLASSIC_DAY_RULE_PATCH
from workflows.schedule.run import ScheduledRunWorkflow
from workflows.schedule.workflow import DurabilityScheduleWorkflow

ORED = "schedule_parent_0_1_1_day_fields_ored"


def cron_weekday(day: datetime) -> int:
    """Cron's day of the week: 0 is Sunday."""
    return (day.weekday() + 1) % 7


def one_day_field_matches(day: datetime) -> str:
    """A 6-field expression firing every 2 seconds of a day where exactly one of its two
    (restricted) day fields matches `day`, and one of them begins with `*`: it fires on `day`
    under the rule "either matches" and not under the classic rule "both match"."""
    if day.day == 1:  # every `*/n` day of the month holds the 1st
        return f"*/2 * * */2 * {(cron_weekday(day) + 1) % 7}"
    step = next(n for n in range(2, 8) if (day.day - 1) % n)
    return f"*/2 * * */{step} * {cron_weekday(day)}"


def next_midnight(moment: datetime) -> datetime:
    return (moment + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)


async def wait_for_a_safe_day() -> datetime:
    """Now, or just after midnight UTC when the day ends within two minutes."""
    now = datetime.now(UTC)
    midnight = next_midnight(now)
    if midnight - now < timedelta(minutes=2):
        await asyncio.sleep((midnight - now).total_seconds() + 1)
        now = datetime.now(UTC)
    return now


async def record_ored_schedule(client: Client) -> WorkflowHistory:
    """A schedule on `one_day_field_matches(today)` that fires twice today, then cancelled
    (on the build before the rule: classic cron does not fire it today)."""
    today = await wait_for_a_safe_day()
    fake = ScheduleFake()
    task_queue = f"record-{uuid.uuid4().hex[:8]}"
    async with schedule_worker(client, task_queue, fake.activities()):
        handle = await client.start_workflow(
            "DurabilitySchedule",
            {},
            id=f"schedule:day-fields-ored-{uuid.uuid4().hex[:6]}",
            task_queue=task_queue,
        )
        await handle.execute_update(
            "set", {"expression": one_day_field_matches(today), "version": 1}
        )
        deadline = time.monotonic() + 30
        while len(fake.outcomes) < 2 or await handle.query("runs"):
            assert time.monotonic() < deadline, "the schedule did not fire twice"
            await asyncio.sleep(0.2)
        await handle.execute_update("cancel", {})
        return await handle.fetch_history()


def ms_of(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


async def test_an_expression_the_rule_changes_fires_by_classic_cron(
    client: Client, task_queue: str, unique: str
) -> None:
    today = await wait_for_a_safe_day()
    expression = one_day_field_matches(today)
    # Classic cron: the first later day where both day fields match, at 00:00:00.
    expected = model_next(expression, ms_of(today))
    assert expected is not None and expected >= ms_of(next_midnight(today))
    fake = ScheduleFake()
    async with schedule_worker(client, task_queue, fake.activities()):
        handle = await start_schedule(client, task_queue, f"classic-{unique}")
        assert await handle.execute_update("set", {"expression": expression, "version": 1})
        assert (await handle.query("get"))["next_at"] == expected
        await handle.execute_update("pause", {})
        await handle.execute_update("unpause", {})
        assert (await handle.query("get"))["next_at"] == expected
        # Either day field matching would have fired every 2 seconds today.
        await asyncio.sleep(3)
        assert fake.outcomes == [] and await handle.query("runs") == []

        # Backfill finds the classic days too: 10:00 on odd days that are Wednesdays.
        weekly = "0 10 */2 * wed"
        start_at = ms_of(today - timedelta(days=70))
        end_at = ms_of(today)
        classic_days: list[int] = []
        after = start_at - 1
        while (following := model_next(weekly, after)) is not None and following < end_at:
            classic_days.append(following)
            after = following
        assert 3 <= len(classic_days) <= 8  # either rule: about 40
        assert await handle.execute_update("set", {"expression": weekly, "version": 2})
        backfilled = await handle.execute_update(
            "backfill", {"start_at": start_at, "end_at": end_at}
        )
        assert backfilled == classic_days
        await eventually(lambda: len(fake.outcomes) == len(classic_days))
        await handle.execute_update("cancel", {})
        history = await handle.fetch_history()
    assert patch_ids(history.events, CLASSIC_DAY_RULE_PATCH) == [CLASSIC_DAY_RULE_PATCH]


async def test_an_expression_the_rule_does_not_change_records_no_marker(
    client: Client, task_queue: str, unique: str
) -> None:
    fake = ScheduleFake()
    async with schedule_worker(client, task_queue, fake.activities()):
        handle = await start_schedule(client, task_queue, f"unchanged-{unique}")
        await handle.execute_update("set", {"expression": "* * * * * *", "version": 1})
        await eventually(lambda: len(fake.outcomes) >= 2)
        # Both day fields restricted, or one a bare `*`: the same days under either rule.
        await handle.execute_update("set", {"expression": "0 0 1,15 * fri", "version": 2})
        await handle.execute_update("set", {"expression": "0 0 * * 3", "version": 3})
        await handle.execute_update("pause", {})
        await handle.execute_update("unpause", {})
        await handle.execute_update("cancel", {})
        history = await handle.fetch_history()
    assert patch_ids(history.events, CLASSIC_DAY_RULE_PATCH) == []


async def test_a_carried_tick_on_a_day_classic_cron_skips_moves_to_its_next_day(
    client: Client, task_queue: str, unique: str
) -> None:
    """A run continued as new by a run that ORed the day fields carries its next tick; the
    new run checks it under the classic rule."""
    today = await wait_for_a_safe_day()
    expression = one_day_field_matches(today)
    ored_tick = (ms_of(today) // 2000 + 30) * 2000  # an even second a minute on: ORed only
    assert cron.next_occurrence(expression, ored_tick - 1, classic_day_rule=False) == ored_tick
    carried = {"version": 1, "expression": expression, "next_at": ored_tick, "jitter_ms": 0}
    async with schedule_worker(client, task_queue):
        handle = await start_schedule(
            client, task_queue, f"carried-{unique}", carried={"schedule": carried}
        )
        assert (await handle.query("get"))["next_at"] == model_next(expression, ored_tick)
        await handle.execute_update("cancel", {})
        history = await handle.fetch_history()
    assert patch_ids(history.events, CLASSIC_DAY_RULE_PATCH) == [CLASSIC_DAY_RULE_PATCH]


@workflow.defn(name=SCHEDULE_WORKFLOW_TYPE, sandboxed=SANDBOXED)
class AlwaysClassicSchedule(DurabilityScheduleWorkflow):
    """The schedule with the classic rule and no patch: what replay would do without it."""

    def next_occurrence(self, expression: str, after_ms: int) -> int | None:
        return cron.next_occurrence(expression, after_ms)

    @workflow.run
    async def run(self, input: RawValue = NO_INPUT) -> None:
        await super().run(input)


async def test_a_schedule_recorded_before_the_rule_replays_with_the_days_it_fired_on() -> None:
    recorded = json.loads((HISTORY_DIR / f"{ORED}.json").read_text())
    history = WorkflowHistory.from_json(recorded["workflow_id"], recorded["history"])
    assert patch_ids(history.events, CLASSIC_DAY_RULE_PATCH) == []
    replayer = production_replayer([DurabilityScheduleWorkflow, ScheduledRunWorkflow])
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None
    # It fired on a day only one day field matched: the classic rule does not replay it.
    unpatched = production_replayer([AlwaysClassicSchedule, ScheduledRunWorkflow])
    result = await unpatched.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is not None
    assert "Nondeterminism" in str(result.replay_failure)


class _NeverAsks(DayRule):
    def decide(self, expression: str | None = None) -> None:
        return None


@workflow.defn(name=SCHEDULE_WORKFLOW_TYPE, sandboxed=SANDBOXED)
class OredSchedule(DurabilityScheduleWorkflow):
    """The schedule as builds before the rule ran it: day fields ORed, no patch asked."""

    @workflow.init
    def __init__(self, input: RawValue = NO_INPUT) -> None:
        super().__init__(input)
        self._day_rule = _NeverAsks(self._core, builtin=False)

    def next_occurrence(self, expression: str, after_ms: int) -> int | None:
        return cron.next_occurrence(expression, after_ms, classic_day_rule=False)

    @workflow.run
    async def run(self, input: RawValue = NO_INPUT) -> None:
        await super().run(input)


@pytest.mark.parametrize("message", ["set", "unpause", "backfill"])
async def test_a_message_in_a_runs_first_task_replays_with_the_rule_it_was_recorded_under(
    client: Client, task_queue: str, unique: str, message: str
) -> None:
    """Each handler that computes times decides the rule itself: in a run's first task a
    message is handled before the main loop's first step. Recorded ORed (no marker) with
    update-with-start, such a run must replay ORed."""
    today = await wait_for_a_safe_day()
    expression = one_day_field_matches(today)
    now = ms_of(today)
    ored_tick = (now // 2000 + 1800) * 2000  # an hour on
    stored = {"version": 1, "expression": expression, "next_at": ored_tick, "jitter_ms": 0}
    settings: dict[str, dict[str, Any]] = {
        "set": {},
        "unpause": {"carried": {"schedule": stored, "paused": True}},
        "backfill": {"carried": {"schedule": stored}},
    }
    argument: dict[str, dict[str, Any]] = {
        "set": {"expression": expression, "version": 1},
        "unpause": {},
        "backfill": {"start_at": now - 10_000, "end_at": now},
    }
    fake = ScheduleFake()
    workflow_id = f"schedule:first-task-{message}-{unique}"
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[OredSchedule, ScheduledRunWorkflow],
        activities=fake.activities(),
        workflow_runner=workflow_runner(),
    ):
        start: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
            SCHEDULE_WORKFLOW_TYPE,
            settings[message],
            id=workflow_id,
            task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
        )
        await client.execute_update_with_start_workflow(
            message, argument[message], start_workflow_operation=start
        )
        # ORed, it fires today (every 2 seconds; the backfill's 10 seconds hold 5 runs).
        await eventually(lambda: len(fake.outcomes) >= 1)
        handle = client.get_workflow_handle(workflow_id)
        await handle.execute_update("cancel", {})
        await eventually(lambda: _no_runs(handle))
        history = await handle.fetch_history()
    assert patch_ids(history.events, CLASSIC_DAY_RULE_PATCH) == []
    replayer = production_replayer([DurabilityScheduleWorkflow, ScheduledRunWorkflow])
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
    unpatched = production_replayer([AlwaysClassicSchedule, ScheduledRunWorkflow])
    result = await unpatched.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is not None


async def _no_runs(handle: WorkflowHandle[Any, Any]) -> bool:
    runs: list[Any] = await handle.query("runs")
    return runs == []


async def _main() -> None:
    env = await start_dev_server()
    try:
        history = await record_ored_schedule(env.client)
    finally:
        await env.shutdown()
    save_history(ORED, history)
    print(f"recorded {len(history.events)} schedule events in {ORED}.json")


if __name__ == "__main__":
    sys.exit(asyncio.run(_main()))
