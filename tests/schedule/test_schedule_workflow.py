"""DurabilitySchedule and ScheduledRun on the real dev server: ticks, versions, cancel, the
FIFO queue, timeouts, outcome retries, dead letters, continue-as-new and bad input."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError

from tests.support.fakes import ScheduleFake
from tests.support.helpers import eventually, schedule_worker, temporal
from tests.support.schedule import (
    cancel_and_drain,
    every_second,
    live_schedule,
    no_runs_left,
    runs_of,
    set_schedule,
)
from workflows import search_attributes

pytestmark = pytest.mark.cacheless

YEARLY = "0 0 1 1 *"


async def test_runs_fire_on_time_and_their_outcomes_reach_the_outcome_activity(
    client: Client, task_queue: str, unique: str
) -> None:
    recorder = ScheduleFake()
    async with live_schedule(client, task_queue, unique, recorder, every_second(k="v")) as handle:
        await eventually(lambda: len(recorder.delivered()) >= 2)
        key = recorder.delivered()[0][0]["idempotency_key"]
        await eventually(lambda: len([e for e in recorder.events if e["id"] == key]) >= 3)
        stored = await handle.query("get")
        await handle.execute_update("cancel", {})

    run, outcome, attempt = recorder.delivered()[0]
    assert outcome == {"status": "complete"}
    assert attempt == 1
    assert run["object_id"] == unique
    assert run["scheduled_time"] % 1000 == 0
    assert run["due_at"] == run["scheduled_time"]
    assert run["idempotency_key"] == f"{unique}:{run['scheduled_time']}"
    assert run["params"] == {"k": "v"}
    assert stored["expression"] == "@every 1s"
    assert stored["version"] == 1 and stored["jitter_ms"] == 0
    assert stored["next_at"] % 1000 == 0 and stored["next_at"] > run["scheduled_time"]
    assert key == run["idempotency_key"]
    assert sorted(e["type"] for e in recorder.events if e["id"] == key) == [
        "due",
        "settled",
        "started",
    ]
    due = next(e for e in recorder.events if e["id"] == key and e["type"] == "due")
    assert due["entity_kind"] == "scheduled_run" and due["queued"] is False
    settled = next(e for e in recorder.events if e["id"] == key and e["type"] == "settled")
    assert settled["outcome"] == "complete" and settled["duration_ms"] >= 0
    described = await handle.describe()
    assert described.typed_search_attributes.get(search_attributes.OBJECT_ID) == unique
    assert described.typed_search_attributes.get(search_attributes.SCHEDULE_VERSION) == 1


async def test_set_stores_only_a_higher_version_and_keeps_a_versions_picked_jitter(
    client: Client, task_queue: str, unique: str
) -> None:
    recorder = ScheduleFake()
    async with live_schedule(client, task_queue, unique, recorder) as handle:
        assert await set_schedule(handle, expression="@every 1s", version=5, params={"tag": "a"})
        assert not await set_schedule(handle, expression="@every 2s", version=5)
        assert not await set_schedule(handle, expression="@every 2s", version=4)
        assert (await handle.query("get"))["expression"] == "@every 1s"
        await eventually(lambda: any(r["params"] == {"tag": "a"} for r in recorder.started))

        assert await set_schedule(handle, expression="@every 1s", version=6, params={"tag": "b"})
        await eventually(lambda: any(r["params"] == {"tag": "b"} for r in recorder.started))

        jitter = {"max_ms": 3_000_000}
        assert await set_schedule(handle, expression="@every 1h", version=7, jitter_ms=jitter)
        picked = (await handle.query("get"))["jitter_ms"]
        assert not await set_schedule(handle, expression="@every 1h", version=7, jitter_ms=jitter)
        assert (await handle.query("get"))["jitter_ms"] == picked
        assert 0 <= picked <= 3_000_000
        await handle.execute_update("cancel", {})


async def test_cancel_stops_ticks_while_the_in_flight_run_still_reports(
    client: Client, task_queue: str, unique: str
) -> None:
    recorder = ScheduleFake()
    schedule = every_second(sleep_ms=1500)
    async with live_schedule(client, task_queue, unique, recorder, schedule) as handle:
        await eventually(lambda: recorder.started)
        assert await handle.execute_update("cancel", {}, result_type=bool)
        recorded = {r["scheduled_time"] for r in await runs_of(handle)}
        recorded |= {run["scheduled_time"] for run, _, _ in recorder.outcomes}
        assert await handle.query("get") is None
        assert not await handle.execute_update("cancel", {}, result_type=bool)
        # a set of the cancelled version stays cancelled (tombstone, S5)
        assert not await set_schedule(handle, expression="@every 1s", version=1)

        await eventually(no_runs_left(handle), timeout=20)
        delivered = {run["scheduled_time"] for run, _, _ in recorder.delivered()}
        assert recorded and delivered == recorded
        assert {r["scheduled_time"] for r in recorder.started} == recorded


async def test_one_slot_queues_runs_and_starts_them_in_scheduled_time_order(
    client: Client, task_queue: str, unique: str
) -> None:
    recorder = ScheduleFake()
    schedule = every_second(sleep_ms=1300)
    async with live_schedule(
        client, task_queue, unique, recorder, schedule, max_concurrent_runs=1
    ) as handle:

        async def queued_behind_a_running_run() -> list[dict[str, Any]] | None:
            runs = await runs_of(handle)
            states = [r["state"] for r in runs]
            return runs if states.count("running") == 1 and "queued" in states else None

        snapshot = await eventually(queued_behind_a_running_run)
        await eventually(lambda: len(recorder.started) >= 3, timeout=30)
        await cancel_and_drain(handle)

    assert recorder.max_in_flight == 1
    started = [r["scheduled_time"] for r in recorder.started]
    assert started == sorted(started) and len(set(started)) == len(started)
    queued = [r["scheduled_time"] for r in snapshot if r["state"] == "queued"]
    assert set(queued) <= set(started)
    due_queued = [e for e in recorder.events if e["type"] == "due" and e["queued"]]
    assert due_queued, "ticks that found no free slot report due {queued: true}"


async def test_a_run_past_its_timeout_is_cancelled_and_errored_as_timeout(
    client: Client, task_queue: str, unique: str
) -> None:
    recorder = ScheduleFake()
    schedule = every_second(sleep_ms=20_000)
    timeouts = {"run_timeout_ms": 1000, "run_heartbeat_timeout_ms": 1000}
    async with live_schedule(client, task_queue, unique, recorder, schedule, **timeouts) as handle:
        await eventually(lambda: recorder.started)
        await handle.execute_update("cancel", {})
        first = recorder.started[0]["scheduled_time"]
        await eventually(
            lambda: [o for o in recorder.delivered() if o[0]["scheduled_time"] == first]
        )
        await eventually(no_runs_left(handle), timeout=30)

    _, outcome, _ = next(o for o in recorder.delivered() if o[0]["scheduled_time"] == first)
    assert outcome["status"] == "errored"
    assert outcome["error"]["name"] == "ScheduledRunTimeoutError"
    assert "run_timeout_ms=1000" in outcome["error"]["message"]
    assert first in recorder.cancelled, "the run activity must see the cancellation"


async def test_a_run_whose_worker_stops_heartbeating_is_interrupted_not_rerun(
    client: Client, task_queue: str, unique: str
) -> None:
    recorder = ScheduleFake()
    schedule = every_second(sleep_ms=3000, no_heartbeat=True)
    # Hosted externally: a plugin-hosted run's worker heartbeats for it while it lives (a
    # plugin-hosted run whose worker is killed: tests/schedule/test_schedule_run_host.py).
    settings = {"run_heartbeat_timeout_ms": 1000, "run_host": "external"}
    async with live_schedule(client, task_queue, unique, recorder, schedule, **settings) as handle:
        await eventually(lambda: recorder.started)
        await cancel_and_drain(handle)

    run, outcome, _ = recorder.delivered()[0]
    assert outcome["status"] == "errored"
    assert outcome["error"]["name"] == "ScheduledRunInterruptedError"
    keys = [r["idempotency_key"] for r in recorder.started]
    assert len(keys) == len(set(keys)), "an interrupted run is never re-run"
    settled = [
        e for e in recorder.events if e["type"] == "settled" and e["id"] == run["idempotency_key"]
    ]
    assert settled and "duration_ms" not in settled[0]


async def test_a_refused_outcome_is_redelivered_as_is_until_it_is_accepted(
    client: Client, task_queue: str, unique: str
) -> None:
    recorder = ScheduleFake()
    schedule = every_second(fail=True, outcome_failures=2)
    retries = {"max_attempts": 5, "initial_interval_ms": 100}
    async with live_schedule(
        client, task_queue, unique, recorder, schedule, outcome_retries=retries
    ) as handle:
        await eventually(lambda: recorder.delivered())
        await cancel_and_drain(handle)

    run, outcome, attempt = recorder.delivered()[0]
    assert attempt == 3
    calls = [o for o in recorder.outcomes if o[0]["scheduled_time"] == run["scheduled_time"]]
    assert [a for _, _, a in calls] == [1, 2, 3]
    assert all(c[0] == run and c[1] == outcome for c in calls)
    assert outcome == {
        "status": "errored",
        "error": {"name": "Boom", "message": "the run failed on purpose"},
    }


async def test_an_outcome_refused_max_attempts_times_is_dead_lettered_and_forgotten(
    client: Client, task_queue: str, unique: str
) -> None:
    recorder = ScheduleFake()
    schedule = every_second(outcome_failures=99)
    retries = {"max_attempts": 3, "initial_interval_ms": 100}
    async with live_schedule(
        client, task_queue, unique, recorder, schedule, outcome_retries=retries
    ) as handle:
        await eventually(lambda: any(e["type"] == "dead_lettered" for e in recorder.events))
        await cancel_and_drain(handle)
        dead = next(e for e in recorder.events if e["type"] == "dead_lettered")
        run_handle = client.get_workflow_handle(f"schedule-run:{dead['id']}")
        result = await run_handle.result()

    calls = [o for o in recorder.outcomes if o[0]["idempotency_key"] == dead["id"]]
    assert [a for _, _, a in calls] == [1, 2, 3]
    assert dead["attempt"] == 3
    assert dead["error"] == {"name": "Refused", "message": "outcome attempt 3 refused"}
    assert result["delivered"] is None and result["outcome_pending"] is True


@pytest.mark.slow
async def test_continue_as_new_keeps_in_flight_runs_and_duplicates_nothing(
    client: Client, task_queue: str, unique: str
) -> None:
    recorder = ScheduleFake()
    # 20 events: the first execution's opening tasks (start, set, the memo and search
    # attributes it publishes) stay under it, so it starts runs before its drain begins; three
    # slots, so several 6 s runs are going when it does.
    async with live_schedule(
        client, task_queue, unique, recorder, continue_as_new_after_events=20, max_concurrent_runs=3
    ) as handle:
        first_run_id = (await handle.describe()).run_id
        # Runs outlasting the drain before continue-as-new (at most 20 more events here):
        # still running at it.
        await set_schedule(handle, expression="@every 1s", version=1, params={"sleep_ms": 6000})

        async def continued_twice() -> bool:
            runs = []
            async for execution in client.list_workflows(f"WorkflowId = '{handle.id}'"):
                runs.append(execution.run_id)
            return len(runs) >= 3

        await eventually(continued_twice, timeout=60)
        await eventually(lambda: len(recorder.delivered()) >= 4, timeout=60)
        await client.get_workflow_handle(handle.id).execute_update("cancel", {})
        current = client.get_workflow_handle(handle.id)
        await eventually(no_runs_left(current), timeout=60)
        assert (await current.describe()).run_id != first_run_id
        assert await current.query("get") is None

    started = [r["scheduled_time"] for r in recorder.started]
    delivered = [run["scheduled_time"] for run, _, _ in recorder.delivered()]
    assert len(started) == len(set(started)), "no run started twice"
    assert sorted(delivered) == sorted(started), "every run reported, exactly once"
    assert all(outcome == {"status": "complete"} for _, outcome, _ in recorder.delivered())
    # the first run's runs outlived its continue-as-new (ABANDON) and reported to a later run
    history = await client.get_workflow_handle(handle.id, run_id=first_run_id).fetch_history()
    kinds = [event.event_type for event in history.events]
    assert kinds[-1] == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
    started_by_first = {
        json.loads(
            event.start_child_workflow_execution_initiated_event_attributes.input.payloads[0].data
        )["run"]["scheduled_time"]
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
    }
    completed_in_first = {
        _scheduled_time_of(e.child_workflow_execution_completed_event_attributes)
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED
    }
    handed_over = {
        _scheduled_time_of(e.signal_external_workflow_execution_initiated_event_attributes)
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED
        and e.signal_external_workflow_execution_initiated_event_attributes.signal_name
        == "durability.report_by_signal"
    }
    carried = started_by_first - completed_in_first
    assert carried, "some run of the first execution was still in flight at continue-as-new"
    # Each was handed over to signal reporting before continue-as-new, and was acknowledged
    # by a later run (no runs left above) after its outcome was delivered.
    assert carried <= handed_over
    assert carried <= set(delivered)


async def test_continue_as_new_waits_for_short_runs_to_end_and_hands_over_nothing(
    client: Client, task_queue: str, unique: str
) -> None:
    recorder = ScheduleFake()
    async with live_schedule(
        client, task_queue, unique, recorder, continue_as_new_after_events=20
    ) as handle:
        first_run_id = (await handle.describe()).run_id
        await set_schedule(handle, expression="@every 1s", version=1, params={"sleep_ms": 300})

        async def continued() -> bool:
            first = client.get_workflow_handle(handle.id, run_id=first_run_id)
            return (await first.describe()).status == WorkflowExecutionStatus.CONTINUED_AS_NEW

        await eventually(continued, timeout=30)
        await cancel_and_drain(client.get_workflow_handle(handle.id))
    history = await client.get_workflow_handle(handle.id, run_id=first_run_id).fetch_history()
    kinds = [event.event_type for event in history.events]
    initiated = kinds.count(EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED)
    assert initiated >= 1
    assert kinds.count(EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED) == initiated
    assert EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED not in kinds
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in kinds
    started = sorted(r["scheduled_time"] for r in recorder.started)
    assert sorted(run["scheduled_time"] for run, _, _ in recorder.delivered()) == started


async def test_bad_updates_are_rejected_naming_the_field_and_bad_signals_are_dropped(
    client: Client, task_queue: str, unique: str, dev_server_address: str
) -> None:
    recorder = ScheduleFake()
    async with live_schedule(client, task_queue, unique, recorder) as handle:
        with pytest.raises(WorkflowUpdateFailedError) as rejected:
            await set_schedule(handle, expression="@every 1s", version=-1)
        assert "set payload: version" in str(rejected.value.cause) and "-1" in str(
            rejected.value.cause
        )
        cause = rejected.value.cause
        assert isinstance(cause, ApplicationError)
        assert (cause.type, cause.non_retryable) == ("InvalidRequest", True)

        cli = await temporal(
            dev_server_address,
            "workflow", "update", "execute",
            "--workflow-id", handle.id,
            "--name", "set",
            "--input", json.dumps({"expression": "every second", "version": 1}),
            check=False,
        )  # fmt: skip
        assert cli.returncode != 0
        assert "set payload: expression" in cli.stderr + cli.stdout
        # What a CLI user reads: the stable type, and that resending will not help.
        assert "(type: InvalidRequest, retryable: false)" in cli.stderr + cli.stdout
        assert "every second" in cli.stderr + cli.stdout
        assert await handle.query("get") is None

        await temporal(
            dev_server_address,
            "workflow", "signal",
            "--workflow-id", handle.id,
            "--name", "set",
            "--input", json.dumps({"expression": "@every 1s", "version": "one"}),
        )  # fmt: skip
        await eventually(lambda: handle.query("dropped_signals"))
        await temporal(
            dev_server_address,
            "workflow", "signal",
            "--workflow-id", handle.id,
            "--name", "set",
            "--input", json.dumps({"expression": "@every 1s", "version": 1}),
        )  # fmt: skip
        await eventually(lambda: len(recorder.delivered()) >= 2)
        assert await handle.query("dropped_signals") == 1
        await cancel_and_drain(handle)

    assert {r["object_id"] for r in recorder.started} == {unique}


async def test_a_worker_outage_collapses_missed_ticks_into_one_run_at_the_earliest(
    client: Client, task_queue: str, unique: str
) -> None:
    recorder = ScheduleFake()
    async with live_schedule(client, task_queue, unique, recorder, every_second()) as handle:
        await eventually(lambda: recorder.delivered())
        before = (await handle.query("get"))["next_at"]
    # No worker: wait until two more ticks after `before` are due as well.
    await eventually(lambda: time.time() * 1000 > before + 2000, timeout=10, interval=0.05)

    def dues() -> list[dict[str, Any]]:
        return sorted(
            (e for e in recorder.events if e["type"] == "due"), key=lambda e: e["scheduled_time"]
        )

    def late(event: dict[str, Any]) -> int:
        return int(event["timestamp"] - event["scheduled_time"])

    async with schedule_worker(client, task_queue, recorder.activities()):
        # The tick that fired once the worker was back, then the one after it.
        await eventually(lambda: any(late(e) >= 2000 for e in dues()), timeout=20)
        collapsed = max(dues(), key=late)
        await eventually(
            lambda: any(e["scheduled_time"] > collapsed["scheduled_time"] for e in dues()),
            timeout=20,
        )
        await cancel_and_drain(handle)

    # What the workflow saw (its own clock, from the `due` event): at `fired`, every tick of
    # `@every 1s` from `collapsed` to `fired` was due. One run, for the earliest of them; the
    # next run is the first tick after `fired`.
    first, fired = collapsed["scheduled_time"], collapsed["timestamp"]
    assert first >= before
    missed = list(range(first, fired + 1, 1000))
    assert len(missed) >= 3, (first, fired)
    upcoming = next(t for t in itertools.count(first, 1000) if t > fired)
    recorded = [e["scheduled_time"] for e in dues()]
    assert recorded[recorded.index(first) + 1] == upcoming
    started = [r["scheduled_time"] for r in recorder.started]
    assert first in started and not set(missed[1:]) & set(started)
    assert not set(missed[1:]) & set(recorded)


async def test_a_run_terminated_from_outside_frees_its_slot_and_leaves_the_runs_list(
    client: Client, task_queue: str, unique: str
) -> None:
    """An operator terminates a stuck run: the schedule learns it from the child's closing
    (it will never report), frees the slot for the queued runs and forgets it."""
    recorder = ScheduleFake()
    schedule = every_second(sleep_ms=60_000)
    async with live_schedule(
        client, task_queue, unique, recorder, schedule, max_concurrent_runs=1
    ) as handle:
        await eventually(lambda: len(recorder.started) >= 1, timeout=15)
        stuck = recorder.started[0]["scheduled_time"]
        await eventually(
            lambda: _has_queued(handle), timeout=15
        )  # the one slot is held: later ticks wait
        await client.get_workflow_handle(f"schedule-run:{unique}:{stuck}").terminate("stuck")

        async def next_run_started() -> bool:
            return len(recorder.started) >= 2

        await eventually(next_run_started, timeout=15)
        assert recorder.started[1]["scheduled_time"] > stuck
        assert stuck not in [run["scheduled_time"] for run in await runs_of(handle)]
        await handle.execute_update("cancel", {})


async def _has_queued(handle: WorkflowHandle[Any, Any]) -> bool:
    return any(run["state"] == "queued" for run in await runs_of(handle))


async def test_a_slow_outcome_delivery_frees_the_slot_before_the_outcome_is_delivered(
    client: Client, task_queue: str, unique: str
) -> None:
    """The run's slot is freed once the run stopped (S9), not once its outcome is delivered:
    with one slot and outcome deliveries that do not return until the test lets them, the
    next run starts while the first outcome is still being delivered."""
    recorder = ScheduleFake()
    schedule = every_second(gated_outcome=True)
    async with live_schedule(
        client, task_queue, unique, recorder, schedule, max_concurrent_runs=1
    ) as handle:
        await eventually(lambda: len(recorder.started) >= 2, timeout=15)
        first = recorder.started[0]["scheduled_time"]
        # The first run's delivery is under way and cannot return before the gate opens.
        await eventually(
            lambda: first in [run["scheduled_time"] for run, _, _ in recorder.outcomes]
        )
        assert recorder.accepted == []
        recorder.outcome_gate.set()
        await cancel_and_drain(handle)
    assert recorder.accepted.count(first) == 1
    assert sorted(recorder.accepted) == sorted(r["scheduled_time"] for r in recorder.started)


def _scheduled_time_of(attributes: Any) -> int:
    """The scheduled time in a run's workflow ID (`schedule-run:<object_id>:<time>`)."""
    return int(attributes.workflow_execution.workflow_id.rsplit(":", 1)[1])


async def test_a_tick_that_finds_the_queue_full_is_skipped_with_a_lifecycle_event(
    client: Client, task_queue: str, unique: str
) -> None:
    recorder = ScheduleFake()
    schedule = every_second(sleep_ms=2500)
    slots = {"max_concurrent_runs": 1, "max_queued_runs": 0}
    async with live_schedule(client, task_queue, unique, recorder, schedule, **slots) as handle:

        def skipped() -> list[dict[str, Any]]:
            return [e for e in recorder.events if e["type"] == "skipped"]

        await eventually(lambda: len(skipped()) >= 2, timeout=20)
        assert await handle.query("skipped_ticks") >= 2
        await cancel_and_drain(handle, timeout=20)
    event = skipped()[0]
    assert event["reason"] == "queue_full"
    assert event["id"] == f"{unique}:{event['scheduled_time']}"
    ran = {run["scheduled_time"] for run in recorder.started}
    assert ran and not ran & {e["scheduled_time"] for e in skipped()}
    assert recorder.max_in_flight == 1


async def test_a_backfilled_time_that_already_ran_is_refused_by_its_child_id(
    client: Client, task_queue: str, unique: str
) -> None:
    recorder = ScheduleFake()
    async with live_schedule(client, task_queue, unique, recorder, every_second()) as handle:
        await eventually(lambda: recorder.delivered(), timeout=20)
        ran = recorder.delivered()[0][0]["scheduled_time"]
        await handle.execute_update("pause", {})  # no more ticks; the schedule stays live
        await eventually(no_runs_left(handle), timeout=20)
        recorded = await handle.execute_update(
            "backfill", {"start_at": ran, "end_at": ran + 1}, result_type=list[int]
        )
        assert recorded == [ran]  # recorded again: the state forgot the acknowledged run...
        await eventually(no_runs_left(handle), timeout=20)
    # ...and its child workflow ID refused to start it a second time (S6).
    assert [r["scheduled_time"] for r in recorder.started].count(ran) == 1
    assert [run["scheduled_time"] for run, _, _ in recorder.outcomes].count(ran) == 1


async def test_a_time_that_ran_is_refused_after_continue_as_new_and_a_new_version(
    client: Client, task_queue: str, unique: str
) -> None:
    """At most once (S6) does not rest on the state: the execution that backfills the time
    is not the one that ran it (continue-as-new) and a new version is live; the child
    workflow ID alone refuses the second start."""
    recorder = ScheduleFake()
    async with live_schedule(
        client, task_queue, unique, recorder, every_second(v=1), continue_as_new_after_events=30
    ) as handle:
        await eventually(lambda: recorder.delivered(), timeout=20)
        ran = recorder.delivered()[0][0]["scheduled_time"]
        ran_by = await client.get_workflow_handle(f"schedule-run:{unique}:{ran}").describe()
        started_by = ran_by.parent_run_id

        async def continued_since() -> bool:
            return (await client.get_workflow_handle(handle.id).describe()).run_id != started_by

        await eventually(continued_since, timeout=30)
        current = client.get_workflow_handle(handle.id)
        await current.execute_update("pause", {})  # no more ticks; the schedule stays live
        assert await set_schedule(current, expression="@every 1s", version=2, params={"v": 2})
        await eventually(no_runs_left(current), timeout=20)
        recorded = await current.execute_update(
            "backfill", {"start_at": ran, "end_at": ran + 1}, result_type=list[int]
        )
        assert recorded == [ran]  # the state does not know it ran...
        await eventually(no_runs_left(current), timeout=20)
        await current.terminate("test done")
    # ...its child workflow ID refused to start it a second time (S6).
    assert [r["scheduled_time"] for r in recorder.started].count(ran) == 1
    assert [run["scheduled_time"] for run, _, _ in recorder.outcomes].count(ran) == 1
    assert not [r for r in recorder.started if r["params"] == {"v": 2}]
    # The refusal, in the executions after the one that ran it (walking back the chain).
    failed_starts: list[str] = []
    run_id = (await client.get_workflow_handle(handle.id).describe()).run_id
    while run_id != started_by:
        history = await client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        failed_starts += [
            e.start_child_workflow_execution_failed_event_attributes.workflow_id
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_FAILED
        ]
        started = history.events[0].workflow_execution_started_event_attributes
        run_id = started.continued_execution_run_id
        assert run_id, "walked past the first execution"
    assert failed_starts == [f"schedule-run:{unique}:{ran}"]


async def test_trigger_rejections_are_typed_and_not_retryable(
    client: Client, task_queue: str, unique: str
) -> None:
    """A refused update says what kind of refusal it is and that resending will not help."""
    recorder = ScheduleFake()
    async with live_schedule(
        client, task_queue, unique, recorder, max_concurrent_runs=1, max_queued_runs=0
    ) as handle:
        with pytest.raises(WorkflowUpdateFailedError) as no_schedule:
            await handle.execute_update("trigger", {})
        await set_schedule(handle, expression="0 0 1 1 *", version=1, params={"sleep_ms": 3000})
        await handle.execute_update("trigger", {})  # takes the only slot for 3 s
        with pytest.raises(WorkflowUpdateFailedError) as no_room:
            await handle.execute_update("trigger", {})
        await eventually(no_runs_left(handle), timeout=30)
    for rejected, kind, text in (
        (no_schedule, "NoLiveSchedule", "trigger needs a live schedule"),
        (no_room, "NoRoomForRuns", "max_queued_runs=0"),
    ):
        cause = rejected.value.cause
        assert isinstance(cause, ApplicationError)
        assert (cause.type, cause.non_retryable) == (kind, True)
        assert text in cause.message
    assert len(recorder.started) == 1


async def event_kinds(client: Client, workflow_id: str) -> list[EventType.ValueType]:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return [event.event_type for event in history.events]


async def test_an_invalid_start_input_fails_the_schedule_once_naming_the_field(
    client: Client, task_queue: str, unique: str
) -> None:
    recorder = ScheduleFake()
    async with schedule_worker(client, task_queue, recorder.activities()):
        handle = await client.start_workflow(
            "DurabilitySchedule",
            {
                "max_concurrent_runs": 0,
                "outcome_retries": {"max_attempts": 0},
                "overlap": "sometimes",
            },
            id=f"schedule:{unique}",
            task_queue=task_queue,
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(handle.result(), timeout=20)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    assert (cause.type, cause.non_retryable) == ("InvalidStartInput", True)
    for named in ("max_concurrent_runs", "max_attempts", "overlap", "sometimes"):
        assert named in cause.message, (named, cause.message)
    kinds = await event_kinds(client, handle.id)
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in kinds  # failed once, not retried
    assert kinds[-1] == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED


async def next_tick_at(handle: WorkflowHandle[Any, Any]) -> int | None:
    """The published `DurabilityNextTickAt`, in epoch ms."""
    described = await handle.describe()
    value = described.typed_search_attributes.get(search_attributes.NEXT_TICK_AT)
    return None if value is None else int(value.timestamp() * 1000)


async def _published(handle: WorkflowHandle[Any, Any], expected: int | None) -> bool:
    return await next_tick_at(handle) == expected


async def test_next_tick_at_is_refreshed_when_the_tick_moves_earlier_or_over_a_minute_later(
    client: Client, task_queue: str, unique: str
) -> None:
    """docs/schedules.md: `DurabilityNextTickAt` is never later than the real next tick and at
    most a minute earlier; it is not upserted on every tick."""
    recorder = ScheduleFake()
    schedule = {"expression": YEARLY, "version": 1}
    async with live_schedule(client, task_queue, unique, recorder, schedule) as handle:
        new_year = (await handle.query("get"))["next_at"]
        await eventually(lambda: _published(handle, new_year))

        # Earlier: refreshed at once.
        assert await set_schedule(handle, expression="@every 1s", version=2)
        every_second = (await handle.query("get"))["next_at"]
        assert every_second < new_year
        await eventually(lambda: _published(handle, every_second))

        # Later by a second per tick: left alone (never later than the real next tick).
        await eventually(lambda: len(recorder.started) >= 3, timeout=20)
        real = (await handle.query("get"))["next_at"]
        assert real >= every_second + 3000
        assert await next_tick_at(handle) == every_second

        # Later by more than a minute: refreshed.
        assert await set_schedule(handle, expression=YEARLY, version=3)
        await eventually(lambda: _published(handle, new_year))

        # Nothing to tick: unset.
        await handle.execute_update("cancel", {})
        await eventually(lambda: _published(handle, None))
        await eventually(no_runs_left(handle), timeout=20)


async def _dropped(handle: WorkflowHandle[Any, Any], count: int) -> bool:
    return bool(await handle.query("dropped_signals") == count)


async def _cancelled(handle: WorkflowHandle[Any, Any]) -> bool:
    return await handle.query("get") is None


async def test_a_bad_cancel_signal_is_dropped_and_counted_and_the_schedule_stays_live(
    client: Client, task_queue: str, unique: str
) -> None:
    recorder = ScheduleFake()
    schedule = {"expression": YEARLY, "version": 3}
    async with live_schedule(client, task_queue, unique, recorder, schedule) as handle:
        await handle.signal("cancel", {"version": "3"})
        await handle.signal("cancel", {"versoin": 3})
        await handle.signal("cancel", "now")
        await eventually(lambda: _dropped(handle, 3), timeout=20)
        assert (await handle.query("get"))["version"] == 3
        await handle.signal("cancel", {"version": 3})
        await eventually(lambda: _cancelled(handle), timeout=20)
        assert await handle.query("dropped_signals") == 3
        await handle.terminate("test done")
