"""`python -m bench.start_breakdown`'s history parsing, on real histories of one schedule and
one raw chain that ticked on the dev server: each point of a run's start is the timestamp of
the event it names, and the cost tally groups what the histories hold. No timing asserted."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Worker

from bench import cost
from bench.activities import BENCH_ACTIVITIES, RECORDER
from bench.start_breakdown import POINTS, RunStart, child_due, child_points, parent_starts
from bench.workflows import BenchChain, BenchChainChild
from durability.registry import all_workflows, workflow_runner
from tests.support.helpers import cache_options, eventually


def _worker(client: Client, task_queue: str) -> Worker:
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[*all_workflows(), BenchChain, BenchChainChild],
        activities=BENCH_ACTIVITIES,
        workflow_runner=workflow_runner(),
        **cache_options(),
    )


def _ms(event: HistoryEvent) -> float:
    return event.event_time.ToNanoseconds() / 1e6


def _expected_points(
    parent: Sequence[HistoryEvent], child: Sequence[HistoryEvent], child_id: str, activity: str
) -> dict[str, float]:
    """The points, found by event IDs: the initiation names its task's completion C, whose
    started event it names in turn; the timer fire is the last one before that task was
    scheduled."""
    by_id = {e.event_id: e for e in parent}
    initiated = next(
        e
        for e in parent
        if cost.event_name(e) == "StartChildWorkflowExecutionInitiated"
        and e.start_child_workflow_execution_initiated_event_attributes.workflow_id == child_id
    )
    completed = initiated.start_child_workflow_execution_initiated_event_attributes
    task_completed_id = completed.workflow_task_completed_event_id
    task_started = by_id[
        by_id[task_completed_id].workflow_task_completed_event_attributes.started_event_id
    ]
    task_scheduled = task_started.workflow_task_started_event_attributes.scheduled_event_id
    fired = [
        e for e in parent if cost.event_name(e) == "TimerFired" and e.event_id < task_scheduled
    ][-1]
    timer_set = by_id[fired.timer_fired_event_attributes.started_event_id]
    fire_in = timer_set.timer_started_event_attributes.start_to_fire_timeout.ToNanoseconds() / 1e6
    scheduled = next(
        e
        for e in child
        if cost.event_name(e) == "ActivityTaskScheduled"
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity
    )
    started = next(
        e
        for e in child
        if cost.event_name(e) == "ActivityTaskStarted"
        and e.activity_task_started_event_attributes.scheduled_event_id == scheduled.event_id
    )
    assert [cost.event_name(e) for e in child[:3]] == [
        "WorkflowExecutionStarted",
        "WorkflowTaskScheduled",
        "WorkflowTaskStarted",
    ]
    return {
        "timer_expiry": _ms(timer_set) + fire_in,
        "timer_fired": _ms(fired),
        "parent_task_started": _ms(task_started),
        "child_initiated": _ms(initiated),
        "child_started": _ms(child[0]),
        "child_task_scheduled": _ms(child[1]),
        "child_task_started": _ms(child[2]),
        "activity_scheduled": _ms(scheduled),
        "activity_started": _ms(started),
    }


async def _check_breakdown(
    client: Client, parent: WorkflowHistory, due_of: dict[str, int], activity: str
) -> list[RunStart]:
    """Every timer-driven child start of `parent` is broken down at the events it names."""
    starts = parent_starts(parent.events)
    assert set(starts) == set(due_of), (starts.keys(), due_of.keys())
    checked: list[RunStart] = []
    for child_id, start in starts.items():
        await eventually(lambda: _closed(client, child_id), timeout=30)  # noqa: B023
        child = await client.get_workflow_handle(child_id).fetch_history()
        assert await child_due(client, child) == due_of[child_id]
        start.points["due"] = due_of[child_id]
        child_points(start, child.events, activity)
        expected = _expected_points(parent.events, child.events, child_id, activity)
        assert {k: v for k, v in start.points.items() if k != "due"} == expected
        assert start.extra_parent_tasks == 0
        assert "StartChildWorkflowExecutionInitiated" in start.start_task_commands
        assert "ActivityTaskScheduled" in start.child_task_commands
        for index, point in enumerate(POINTS[1:], 1):
            previous = start.points[POINTS[index - 1]]
            assert start.step(point) == start.points[point] - previous
        assert (
            start.span("due", "activity_started") == expected["activity_started"] - due_of[child_id]
        )
        checked.append(start)
    return checked


async def test_breakdown_of_a_schedule_tick(client: Client, task_queue: str, unique: str) -> None:
    tag = f"breakdown-{unique}"
    async with _worker(client, task_queue):
        handle = await client.start_workflow(
            "DurabilitySchedule",
            {"run_activity": "bench_run", "outcome_activity": "bench_outcome"},
            id=f"schedule:{tag}",
            task_queue=task_queue,
            start_signal="set",
            start_signal_args=[
                {"expression": "@every 1s", "version": 1, "params": {"bench_tag": tag}}
            ],
        )
        await eventually(lambda: len(RECORDER.outcomes.get(tag, [])) >= 2, timeout=30)
        # `cancel` stops the ticks (the workflow stays open); then every run started ends.
        await handle.signal("cancel", {})
        await eventually(lambda: _cancel_applied(client, handle.id), timeout=30)
        parent = await handle.fetch_history()
        runs = [
            e.start_child_workflow_execution_initiated_event_attributes.workflow_id
            for e in parent.events
            if cost.event_name(e) == "StartChildWorkflowExecutionInitiated"
        ]
        for run in runs:
            await eventually(lambda: _closed(client, run), timeout=30)  # noqa: B023
        parent = await handle.fetch_history()
        await handle.terminate("test over")
    # No jitter: a run is due at its scheduled time, the last part of its workflow ID.
    starts = await _check_breakdown(
        client, parent, {run: int(run.rsplit(":", 1)[1]) for run in runs}, "bench_run"
    )
    assert len(starts) >= 2
    child = await client.get_workflow_handle(runs[0]).fetch_history()
    tally = cost.tally(child.events)
    names = [cost.event_name(e) for e in child.events]
    assert tally.events == len(child.events)
    assert tally.by_kind()["activities"] == names.count("ActivityTaskScheduled")
    assert tally.by_kind().get("timers", 0) == names.count("TimerStarted")
    assert tally.by_kind().get("child starts", 0) == 0
    whole = cost.tally(parent.events)
    inside = cost.tally(cost.between(parent.events, _ms(parent.events[1]), _ms(parent.events[-1])))
    assert inside.events == len(parent.events) - 2
    parent_names = [cost.event_name(e) for e in parent.events]
    assert whole.by_kind()["child starts"] == 2 * len(runs)
    assert whole.by_kind()["timers"] == parent_names.count("TimerStarted")
    assert whole.by_kind().get("activities", 0) == parent_names.count("ActivityTaskScheduled")


async def test_breakdown_of_a_raw_chain(client: Client, task_queue: str, unique: str) -> None:
    tag = f"chain-{unique}"
    until_ms = int(time.time() * 1000) + 5000
    async with _worker(client, task_queue):
        result = await client.execute_workflow(
            "BenchChain",
            {"tag": tag, "until_ms": until_ms},
            id=f"chain-{unique}",
            task_queue=task_queue,
        )
        parent = await client.get_workflow_handle(f"chain-{unique}").fetch_history()
        runs = [
            e.start_child_workflow_execution_initiated_event_attributes.workflow_id
            for e in parent.events
            if cost.event_name(e) == "StartChildWorkflowExecutionInitiated"
        ]
        assert len(runs) == result >= 1
        # The chain's child is due at the aligned second its ID ends with.
        await _check_breakdown(
            client, parent, {run: int(run.rsplit(":", 1)[1]) for run in runs}, "bench_mark"
        )


async def _cancel_applied(client: Client, workflow_id: str) -> bool:
    """Whether a workflow task completed after the `cancel` signal (no tick follows it). Not
    its timer's cancellation: a tick that just fired leaves no timer to cancel."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    names = [cost.event_name(e) for e in history.events]
    signals = [
        i
        for i, e in enumerate(history.events)
        if names[i] == "WorkflowExecutionSignaled"
        and e.workflow_execution_signaled_event_attributes.signal_name == "cancel"
    ]
    return bool(signals) and "WorkflowTaskCompleted" in names[signals[-1] :]


async def _closed(client: Client, workflow_id: str) -> bool:
    description: Any = await client.get_workflow_handle(workflow_id).describe()
    return description.status is not None and description.status.name != "RUNNING"
