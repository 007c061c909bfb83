"""Pause, trigger-now and backfill (beyond the seed): the core's rules, then the whole path
through the `durability` CLI, a real worker and the run activity."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from durability.registry import workflow_runner
from tests.support.cold_worker import assert_healthy
from tests.support.fakes import ScheduleFake
from tests.support.helpers import cache_options, durability_cli, eventually, schedule_worker
from tests.support.schedule import (
    cancel_and_drain,
    every_second,
    live_schedule,
    no_runs_left,
    set_schedule,
)
from workflows import SANDBOXED
from workflows.kernel import NO_INPUT
from workflows.schedule import SCHEDULE_WORKFLOW_TYPE
from workflows.schedule.core import InvalidRequest, NoLiveSchedule, ScheduleCore
from workflows.schedule.messages import read_payload
from workflows.schedule.models import (
    MAX_BACKFILL_RUNS,
    CancelRequest,
    RunStatus,
    ScheduleInput,
    ScheduleState,
    SetRequest,
)
from workflows.schedule.run import ScheduledRunWorkflow
from workflows.schedule.workflow import DurabilityScheduleWorkflow

pytestmark = pytest.mark.cacheless

YEARLY = "0 0 1 1 *"


def every(expression: str, after_ms: int) -> int | None:
    step = int(expression.removeprefix("every:"))
    return (after_ms // step + 1) * step


def live_core(step: int = 1000, now: int = 10_500) -> ScheduleCore:
    core = ScheduleCore(ScheduleState(), every, ScheduleInput(max_concurrent_runs=2))
    core.set(SetRequest(expression=f"every:{step}", version=1, params={"p": 1}), now, lambda m: 0)
    return core


def test_pause_stops_ticks_and_unpause_skips_what_was_missed() -> None:
    core = live_core()
    assert core.pause() is True and core.pause() is False
    assert core.tick(50_000) is None and core.next_wake_at() is None
    assert core.unpause(50_250) is True and core.unpause(50_300) is False
    assert core.next_wake_at() == 51_000  # not 11_000: missed ticks are skipped, not collapsed
    run = core.tick(51_000)
    assert run is not None and run.scheduled_time == 51_000
    assert core.state.schedule is not None and core.state.schedule.version == 1


def test_trigger_records_one_run_now_even_when_paused_and_needs_a_live_schedule() -> None:
    core = live_core()
    core.pause()
    run = core.trigger(12_345)
    assert (run.scheduled_time, run.due_at, run.params) == (12_345, 12_345, {"p": 1})
    # A second trigger in the same millisecond records its own run, at the next free time.
    second = core.trigger(12_345)
    assert (second.scheduled_time, second.due_at) == (12_346, 12_345)
    assert core.trigger(12_345, distinct=False) is run  # as a history recorded before did
    assert [r.state for r in core.take_startable()] == [RunStatus.RUNNING] * 2
    core = live_core()
    run = core.trigger(12_345)
    assert [r.state for r in core.take_startable()] == [RunStatus.RUNNING]
    empty = ScheduleCore(ScheduleState(), every, ScheduleInput(max_concurrent_runs=1))
    with pytest.raises(NoLiveSchedule, match="trigger needs a live schedule"):
        empty.trigger(1)


def test_backfill_records_each_occurrence_in_the_range_once_in_order() -> None:
    core = live_core()
    core.trigger(3000)
    recorded = core.backfill(1000, 5000)
    assert [r.scheduled_time for r in recorded] == [1000, 2000, 4000]  # 3000 already recorded
    assert core.backfill(1000, 5000) == []
    started = core.take_startable()
    assert [r.scheduled_time for r in started] == [1000, 2000]  # FIFO by scheduled_time
    with pytest.raises(InvalidRequest, match=f"more than {MAX_BACKFILL_RUNS} occurrences"):
        core.backfill_times(0, 1000 * (MAX_BACKFILL_RUNS + 5))


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"start_at": 5, "end_at": 5}, "end_at: must be after start_at, got 5 <= 5"),
        ({"start_at": 1, "end_at": 10**6}, "end_at: must not be in the future, got 1000000 > 1000"),
        ({"start_at": "x", "end_at": 9}, "start_at: Input should be a valid integer (got 'x')"),
        ({"start_at": 1, "end_at": 9, "extra": 1}, "extra: Extra inputs are not permitted"),
    ],
)
def test_backfill_input_is_checked_naming_the_field(payload: object, message: str) -> None:
    with pytest.raises(InvalidRequest) as error:
        read_payload("backfill", payload, now_ms=1000)
    assert f"invalid backfill payload: {message}" in str(error.value)


async def test_pause_trigger_backfill_through_the_cli_reach_the_run_activity(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    object_id = f"ptb-{unique}"
    cli = ("--task-queue", task_queue, "--json")
    recorder = ScheduleFake()
    async with schedule_worker(client, task_queue, recorder.activities()):
        await durability_cli(
            dev_server_address, *cli, "schedule", "set", object_id, "@every 1h", "--version", "1"
        )
        paused = await durability_cli(dev_server_address, *cli, "schedule", "pause", object_id)
        assert json.loads(paused.stdout) == {"paused": True}

        # The dev server runs on this machine: the workflow's clock is this clock.
        before_trigger = int(time.time() * 1000)
        triggered = await durability_cli(dev_server_address, *cli, "schedule", "trigger", object_id)
        after_trigger = int(time.time() * 1000)
        trigger_time = json.loads(triggered.stdout)["scheduled_time"]
        assert before_trigger <= trigger_time <= after_trigger

        hour = 3_600_000
        now_ms = int(time.time() * 1000)
        start = (now_ms // hour - 3) * hour
        backfilled = await durability_cli(
            dev_server_address, *cli, "schedule", "backfill", object_id,
            "--start", str(start), "--end", str(start + 3 * hour),
        )  # fmt: skip
        times = json.loads(backfilled.stdout)["recorded"]
        assert times == [start, start + hour, start + 2 * hour]

        future = await durability_cli(
            dev_server_address, "--task-queue", task_queue, "schedule", "backfill", object_id,
            "--start", str(now_ms), "--end", str(now_ms + 10 * hour), check=False,
        )  # fmt: skip
        assert future.returncode == 1 and "end_at: must not be in the future" in future.stderr

        def ran() -> set[int]:
            return {run["scheduled_time"] for run in recorder.started}

        await eventually(lambda: ran() == {trigger_time, *times}, timeout=30)
        before_unpause = int(time.time() * 1000)
        unpaused = await durability_cli(dev_server_address, *cli, "schedule", "unpause", object_id)
        after_unpause = int(time.time() * 1000)
        assert json.loads(unpaused.stdout) == {"unpaused": True}
        again = await durability_cli(dev_server_address, *cli, "schedule", "unpause", object_id)
        assert json.loads(again.stdout) == {"unpaused": False}
        view = json.loads(
            (await durability_cli(dev_server_address, *cli, "schedule", "get", object_id)).stdout
        )
        # Versions untouched by pause; the next tick is the first hour after the unpause.
        # (That unpause skips the ticks missed while paused is tested on `@every 1s` below.)
        assert view["version"] == 1
        assert view["next_at"] in {
            (before_unpause // hour + 1) * hour,
            (after_unpause // hour + 1) * hour,
        }
        await client.get_workflow_handle(f"schedule:{object_id}").terminate("test done")


@settings(max_examples=300, deadline=None)
@given(
    paused=st.booleans(),
    live=st.booleans(),
    now=st.integers(20_000, 10**9),
    answer=st.sampled_from(["next", "same", "earlier", "none", "text"]),
    remaining=st.none() | st.integers(0, 3),
    start_at=st.none() | st.integers(0, 2 * 10**9),
)
def test_check_unpause_refuses_exactly_what_unpause_refuses_and_changes_nothing(
    paused: bool, live: bool, now: int, answer: str, remaining: int | None, start_at: int | None
) -> None:
    """The `unpause` signal asks `check_unpause` first, so a refusal leaves it paused."""
    misbehaving = False  # from once the schedule is set

    def reading(expression: str, after_ms: int) -> Any:
        if not misbehaving:
            return every(expression, after_ms)
        return {
            "next": after_ms + 1000, "same": after_ms, "earlier": after_ms - 1, "none": None,
            "text": "soon",
        }[answer]  # fmt: skip

    settings = ScheduleInput(max_concurrent_runs=2, start_at=start_at)
    core = ScheduleCore(ScheduleState(), reading, settings)
    core.set(SetRequest(expression="every:1000", version=1), 10_500, lambda m: 0)
    core.state.remaining_runs = remaining  # a spent count asks `next_occurrence` nothing
    misbehaving = True
    if not live:
        core.cancel(CancelRequest())
    if paused:
        core.pause()
    before = core.state.model_dump()
    try:
        core.check_unpause(now)
        checked: Exception | None = None
    except InvalidRequest as error:
        checked = error
    assert core.state.model_dump() == before
    refuses = paused and live and remaining != 0 and answer in ("same", "earlier", "text")
    assert (checked is not None) == refuses, (checked, paused, live, answer)
    if refuses:
        with pytest.raises(ValueError, match="must return None or an integer strictly after"):
            core.unpause(now)
    else:
        assert core.unpause(now) is paused
        assert core.state.paused is False


@workflow.defn(name=SCHEDULE_WORKFLOW_TYPE, sandboxed=SANDBOXED)
class RefusingSchedule(DurabilityScheduleWorkflow):
    """A deployment's `next_occurrence` that breaks S7: it answers `after_ms` itself."""

    def next_occurrence(self, expression: str, after_ms: int) -> int | None:
        return after_ms

    @workflow.run
    async def run(self, input: RawValue = NO_INPUT) -> None:
        await super().run(input)


async def test_an_unpause_next_occurrence_refuses_changes_nothing(
    client: Client, task_queue: str, unique: str
) -> None:
    """A bulk unpause reaches a schedule whose `next_occurrence` fails on its expression: the
    signal is counted in `dropped_signals` and nothing changes (no failed workflow task); the
    update is refused before anything is recorded."""
    stored = {"version": 1, "expression": "0 0 1 1 *", "next_at": 4_102_444_800_000}
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[RefusingSchedule, ScheduledRunWorkflow],
        workflow_runner=workflow_runner(),
        **cache_options(),
    ):
        handle = await client.start_workflow(
            SCHEDULE_WORKFLOW_TYPE,
            {"carried": {"schedule": {**stored, "jitter_ms": 0}, "paused": True}},
            id=f"schedule:refusing-{unique}",
            task_queue=task_queue,
        )
        await handle.signal("unpause", {})
        await eventually(lambda: _dropped(handle, 1))
        assert await handle.query("paused") is True
        assert (await handle.query("get"))["next_at"] == stored["next_at"]
        await handle.signal("pause", {})  # already paused: nothing to refuse
        await handle.signal("unpause", {})
        await eventually(lambda: _dropped(handle, 2))
        assert await handle.query("paused") is True
        await handle.signal("pause", {"note": 5})  # a bad note: dropped, the note unchanged
        await eventually(lambda: _dropped(handle, 3))
        assert await handle.query("pause_note") is None
        await handle.signal("pause", {"note": "why"})
        await eventually(lambda: _note_is(handle, "why"))
        assert await handle.query("dropped_signals") == 3
        # The update is refused by its validator: nothing recorded, still paused.
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update("unpause", {})
        assert isinstance(refused.value.cause, ApplicationError)
        assert refused.value.cause.type == "InvalidRequest"
        assert "must return None or an integer strictly after" in refused.value.cause.message
        assert await handle.query("paused") is True
        assert (await handle.query("get"))["next_at"] == stored["next_at"]
        events = [e async for e in handle.fetch_history_events()]
        assert not [
            e for e in events if e.HasField("workflow_execution_update_accepted_event_attributes")
        ]
        await assert_healthy(client, handle)
        await handle.terminate("test done")


async def _dropped(handle: WorkflowHandle[Any, Any], count: int) -> bool:
    return bool(await handle.query("dropped_signals") == count)


async def _note_is(handle: WorkflowHandle[Any, Any], note: str) -> bool:
    return bool(await handle.query("pause_note") == note)


def now_ms() -> int:
    return int(time.time() * 1000)


def first_tick_after(moment_ms: int, step_ms: int = 1000) -> int:
    """The first tick of `@every <step>` strictly after `moment_ms` (ticks at multiples)."""
    return (moment_ms // step_ms + 1) * step_ms


async def test_pause_stops_ticks_and_unpause_skips_the_ticks_missed_while_paused(
    client: Client, task_queue: str, unique: str
) -> None:
    recorder = ScheduleFake()
    async with live_schedule(client, task_queue, unique, recorder, every_second()) as handle:
        await eventually(lambda: recorder.started, timeout=20)
        assert await handle.query("paused") is False
        assert await handle.execute_update("pause", {}, result_type=bool) is True
        assert await handle.execute_update("pause", {}, result_type=bool) is False
        assert await handle.query("paused") is True
        kept = (await handle.query("get"))["next_at"]  # `get` keeps the next tick

        # Paused while two more ticks come due.
        await eventually(lambda: now_ms() > kept + 2000, timeout=10, interval=0.05)
        assert (await handle.query("get"))["next_at"] == kept
        assert not [r for r in recorder.started if r["scheduled_time"] >= kept]

        before = now_ms()
        assert await handle.execute_update("unpause", {}, result_type=bool) is True
        after = now_ms()
        assert await handle.execute_update("unpause", {}, result_type=bool) is False
        assert await handle.query("paused") is False
        upcoming = (await handle.query("get"))["next_at"]
        # Recomputed from the unpause, not the tick kept from before the pause.
        assert first_tick_after(before) <= upcoming <= first_tick_after(after)
        assert upcoming >= kept + 3000

        await eventually(
            lambda: any(r["scheduled_time"] >= kept for r in recorder.started), timeout=20
        )
        await cancel_and_drain(handle, timeout=20)
    resumed = sorted(r["scheduled_time"] for r in recorder.started if r["scheduled_time"] >= kept)
    assert resumed[0] == upcoming  # the missed ticks were skipped, not collapsed into a run
    due = {e["scheduled_time"] for e in recorder.events if e["type"] in ("due", "skipped")}
    assert not {t for t in due if kept <= t < upcoming}


async def test_trigger_runs_while_paused_and_is_refused_before_anything_is_recorded(
    client: Client, task_queue: str, unique: str
) -> None:
    """The trigger validator: with no live schedule (never set, or cancelled) a trigger is
    refused and leaves no trace in the history; while paused it runs (docs/schedules.md)."""
    recorder = ScheduleFake()
    async with live_schedule(client, task_queue, unique, recorder) as handle:
        refused: list[pytest.ExceptionInfo[WorkflowUpdateFailedError]] = []
        with pytest.raises(WorkflowUpdateFailedError) as never_set:
            await handle.execute_update("trigger", {})
        refused.append(never_set)
        await set_schedule(handle, expression=YEARLY, version=1, params={"p": 1})
        await handle.execute_update("pause", {})
        triggered = await handle.execute_update("trigger", {}, result_type=int)
        await eventually(no_runs_left(handle), timeout=20)
        await handle.execute_update("cancel", {})
        with pytest.raises(WorkflowUpdateFailedError) as cancelled:
            await handle.execute_update("trigger", {})
        refused.append(cancelled)
        history = await handle.fetch_history()
        await handle.terminate("test done")
    for rejected in refused:
        cause = rejected.value.cause
        assert isinstance(cause, ApplicationError)
        assert (cause.type, cause.non_retryable) == ("NoLiveSchedule", True)
    assert [(r["scheduled_time"], r["params"]) for r in recorder.started] == [(triggered, {"p": 1})]
    accepted = [
        e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    ]
    assert accepted == ["set", "pause", "trigger", "cancel"]  # no trace of the refused ones
