"""DurabilitySchedule on a cold worker: every kind of completion that can end a workflow task,
then every message it accepts, sent at once to a worker that starts with an empty cache
(`pause` and `unpause` both as updates and as the signals a bulk command's batch job sends).

Without the progress barrier (`workflows.kernel`), `run_completion` x `trigger` can fail
its workflow tasks with BAD_CANCEL_TIMER_ATTRIBUTES and get the update refused. A run's child
now ends as its run stops and the task that applies it schedules the outcome's delivery (a
command), and the delivery's end (`delivery_completion`) sends the barrier.
`test_trigger_after_a_run_ends_by_completion_on_a_cold_worker` covers a run's end that
frees a slot in a task that starts nothing else.

`redeliver` needs a dead letter: for it, one is made before the completion (`_dead_letter`),
which is why each completion waits only for events that came after it began. A failed
redelivery followed by `redeliver` of its key, which the matrix does not reach, has its own
test (`test_redeliver_after_a_failed_redelivery_on_a_cold_worker`).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.exceptions import CancelledError

from tests.support.cold_worker import (
    ColdScheduleFake,
    activity_worker,
    assert_healthy,
    assert_healthy_and_updated,
    cold_names,
    events_of,
    kind,
    wait_for_applied,
    workflow_worker,
)
from tests.support.helpers import eventually

YEARLY = "0 0 1 1 *"
Step = Callable[[WorkflowHandle[Any, Any], ColdScheduleFake], Awaitable[None]]
DAY_MS = 86_400_000


async def _trigger_and_wait(handle: WorkflowHandle[Any, Any], acts: ColdScheduleFake) -> int:
    scheduled: int = await handle.execute_update("trigger", {}, result_type=int)
    await eventually(lambda: scheduled in acts.accepted, timeout=30)
    return scheduled


async def _last_event_id(handle: WorkflowHandle[Any, Any]) -> int:
    return (await events_of(handle))[-1].event_id


def _after(event_id: int) -> Callable[[HistoryEvent], bool]:
    return lambda e: e.event_id > event_id


async def _dead_letter(handle: WorkflowHandle[Any, Any], acts: ColdScheduleFake) -> str:
    """Trigger a run of the live version whose outcome the activity refuses: return its
    idempotency key once its dead letter is kept, the run forgotten and nothing is pending
    (the activity accepts outcomes again from then on)."""
    acts.refusing = True
    scheduled: int = await handle.execute_update("trigger", {}, result_type=int)

    async def kept() -> list[dict[str, Any]] | None:
        letters = [
            d for d in await handle.query("dead_letters") if d["scheduled_time"] == scheduled
        ]
        pending = (await handle.describe()).raw_description
        if pending.pending_activities or pending.pending_children or await handle.query("runs"):
            return None
        return letters

    (letter,) = await eventually(kept, timeout=30)
    acts.refusing = False
    key = str(letter["idempotency_key"])
    assert acts.refused[-1] == key and acts.refused.count(key) == 1, acts.refused
    assert letter["redelivering"] is False, letter
    return key


# --- the completions: each drives the schedule until a task that applied one has completed


async def run_completion(handle: WorkflowHandle[Any, Any], acts: ColdScheduleFake) -> None:
    """A run's child completes as its run stops: the schedule frees the slot and starts the
    outcome's delivery (a run of an earlier build completed only once delivered)."""
    since = await _last_event_id(handle)
    await handle.execute_update("set", {"expression": YEARLY, "version": 1})
    acts.expression = YEARLY
    await _trigger_and_wait(handle, acts)
    await wait_for_applied(handle, "CHILD_WORKFLOW_EXECUTION_COMPLETED", _after(since))


async def delivery_completion(handle: WorkflowHandle[Any, Any], acts: ColdScheduleFake) -> None:
    """The schedule's delivery of a run's outcome completes: the run leaves `runs`."""
    since = await _last_event_id(handle)
    await handle.execute_update("set", {"expression": YEARLY, "version": 1})
    acts.expression = YEARLY
    await _trigger_and_wait(handle, acts)
    outcome_id = await eventually(lambda: _outcome_scheduled(handle, since))
    await wait_for_applied(
        handle,
        "ACTIVITY_TASK_COMPLETED",
        lambda e: e.activity_task_completed_event_attributes.scheduled_event_id == outcome_id,
    )


async def lifecycle_completion(handle: WorkflowHandle[Any, Any], acts: ColdScheduleFake) -> None:
    """The `due` lifecycle activity completes while the run is still going."""
    since = await _last_event_id(handle)
    await handle.execute_update(
        "set", {"expression": YEARLY, "version": 1, "params": {"sleep_ms": 2500}}
    )
    acts.expression = YEARLY
    await handle.execute_update("trigger", {})
    await wait_for_applied(handle, "ACTIVITY_TASK_COMPLETED", _after(since))


async def tick_while_busy(handle: WorkflowHandle[Any, Any], acts: ColdScheduleFake) -> None:
    """A tick fires while the only slot is busy: its run is queued."""
    since = await _last_event_id(handle)
    await handle.execute_update(
        "set", {"expression": "@every 1s", "version": 1, "params": {"sleep_ms": 1500}}
    )
    acts.expression = "@every 1s"

    async def queued() -> bool:
        runs = await handle.query("runs")
        return any(run["state"] == "queued" for run in runs)

    await eventually(queued, timeout=20)
    await wait_for_applied(handle, "TIMER_FIRED", _after(since))


async def settle_signal(handle: WorkflowHandle[Any, Any], acts: ColdScheduleFake) -> None:
    """A queued run waits for the only slot, held by a run that reports by signal (a run the
    schedule handed over at continue-as-new, or one of an earlier build that took the last
    free slot): its `run_settled` frees the slot. The test sends the signal for the run, which
    then ends and is delivered as any other."""
    since = await _last_event_id(handle)
    await handle.execute_update(
        "set", {"expression": YEARLY, "version": 1, "params": {"gated_run": True}}
    )
    acts.expression = YEARLY
    acts.run_gate.clear()
    first: int = await handle.execute_update("trigger", {}, result_type=int)
    await handle.execute_update("trigger", {})
    await eventually(lambda: first in [run["scheduled_time"] for run in acts.started], timeout=30)
    settled = {"scheduled_time": first, "outcome": {"status": "complete"}}
    await handle.signal("durability.run_settled", settled)
    await wait_for_applied(
        handle,
        "WORKFLOW_EXECUTION_SIGNALED",
        lambda e: (
            e.event_id > since
            and e.workflow_execution_signaled_event_attributes.signal_name
            == "durability.run_settled"
        ),
    )
    acts.run_gate.set()


async def redelivery_completion(handle: WorkflowHandle[Any, Any], acts: ColdScheduleFake) -> None:
    """A dead letter's redelivery completes: its outcome activity (scheduled by the schedule
    itself) delivered, so the letter leaves `dead_letters`.

    The redelivery ends after a task that sent no command (a `run_settled` that settles no
    run), as when a run settles meanwhile: right after the `redeliver` update's own task,
    which sends commands, a cold worker did not fold the completion into the next message
    even with no barrier (temporalio 1.35.0); after a task with no command, it does."""
    await handle.execute_update("set", {"expression": YEARLY, "version": 1})
    acts.expression = YEARLY
    key = await _dead_letter(handle, acts)
    await _redelivery_ended(handle, acts, key, "ACTIVITY_TASK_COMPLETED")
    assert acts.accepted_keys.count(key) == 1, acts.accepted_keys


async def _redeliver_after_a_task_with_no_command(
    handle: WorkflowHandle[Any, Any], acts: ColdScheduleFake, key: str
) -> int:
    """Send `redeliver` of `key` with the outcome activity held, then a `run_settled` that
    settles nothing (a workflow task with no command), and let the activity go only once
    that task completed: its end is applied in the task right after it. Returns the last
    event ID from before the `redeliver`."""
    since = await _last_event_id(handle)
    acts.outcomes_open.clear()
    assert await handle.execute_update("redeliver", {"idempotency_key": key}) is True
    nothing_settled = {"scheduled_time": 0, "outcome": {"status": "complete"}}
    await handle.signal("durability.run_settled", nothing_settled)
    await wait_for_applied(handle, "WORKFLOW_EXECUTION_SIGNALED", _after(since))
    acts.outcomes_open.set()
    return since


async def _redelivery_ended(
    handle: WorkflowHandle[Any, Any], acts: ColdScheduleFake, key: str, end: str
) -> None:
    """Redeliver `key` after a task with no command (see below) and wait until the end
    (`ACTIVITY_TASK_COMPLETED` or `ACTIVITY_TASK_FAILED`) of its outcome activity is applied,
    with only command-less tasks in between."""
    since = await _redeliver_after_a_task_with_no_command(handle, acts, key)
    outcome_id = await eventually(lambda: _outcome_scheduled(handle, since))

    def ends_the_outcome(e: HistoryEvent) -> bool:
        attributes = (
            e.activity_task_completed_event_attributes
            if end == "ACTIVITY_TASK_COMPLETED"
            else e.activity_task_failed_event_attributes
        )
        return bool(attributes.scheduled_event_id == outcome_id)

    await wait_for_applied(handle, end, ends_the_outcome)
    await _no_command_between(handle, since, end)


async def _outcome_scheduled(handle: WorkflowHandle[Any, Any], since: int) -> int:
    """The event ID of the first `on_outcome` activity scheduled after `since`, else 0."""
    for e in await events_of(handle):
        attributes = e.activity_task_scheduled_event_attributes
        if (
            e.event_id > since
            and kind(e) == "ACTIVITY_TASK_SCHEDULED"
            and attributes.activity_type.name == "on_outcome"
        ):
            return e.event_id
    return 0


async def _no_command_between(handle: WorkflowHandle[Any, Any], since: int, end: str) -> None:
    """Between the first signal after `since` and the redelivery's `end` event, only workflow
    tasks that sent no command."""
    kinds = [kind(e) for e in await events_of(handle) if e.event_id > since]
    between = kinds[kinds.index("WORKFLOW_EXECUTION_SIGNALED") + 1 : kinds.index(end)]
    assert set(between) <= {
        "WORKFLOW_TASK_SCHEDULED",
        "WORKFLOW_TASK_STARTED",
        "WORKFLOW_TASK_COMPLETED",
        "ACTIVITY_TASK_STARTED",
    }, kinds


COMPLETIONS: dict[str, Step] = {
    "run_completion": run_completion,
    "delivery_completion": delivery_completion,
    "lifecycle_completion": lifecycle_completion,
    "tick_while_busy": tick_while_busy,
    "settle_signal": settle_signal,
    "redelivery_completion": redelivery_completion,
}


# --- the messages: each is sent at once to the new worker, then checked as applied


async def set_update(handle: WorkflowHandle[Any, Any], acts: ColdScheduleFake) -> None:
    assert await handle.execute_update("set", {"expression": YEARLY, "version": 2}) is True
    assert (await handle.query("get"))["version"] == 2


async def set_signal(handle: WorkflowHandle[Any, Any], acts: ColdScheduleFake) -> None:
    await handle.signal("set", {"expression": YEARLY, "version": 2})

    async def stored() -> bool:
        return (await handle.query("get") or {}).get("version") == 2

    await eventually(stored)


async def cancel_update(handle: WorkflowHandle[Any, Any], acts: ColdScheduleFake) -> None:
    assert await handle.execute_update("cancel", {}) is True
    assert await handle.query("get") is None


async def cancel_signal(handle: WorkflowHandle[Any, Any], acts: ColdScheduleFake) -> None:
    await handle.signal("cancel", {})

    async def cancelled() -> bool:
        return await handle.query("get") is None

    await eventually(cancelled)


async def trigger(handle: WorkflowHandle[Any, Any], acts: ColdScheduleFake) -> None:
    await _trigger_and_wait(handle, acts)


async def pause(handle: WorkflowHandle[Any, Any], acts: ColdScheduleFake) -> None:
    assert await handle.execute_update("pause", {}) is True
    assert await handle.query("paused") is True


async def unpause(handle: WorkflowHandle[Any, Any], acts: ColdScheduleFake) -> None:
    # Paused before the completion (see `test_message_after_completion_on_a_cold_worker`).
    assert await handle.execute_update("unpause", {}) is True
    assert await handle.query("paused") is False


async def pause_signal(handle: WorkflowHandle[Any, Any], acts: ColdScheduleFake) -> None:
    # What a bulk `schedule pause --query` sends to each schedule (a batch job's signal).
    await handle.signal("pause", {})

    async def paused() -> bool:
        return bool(await handle.query("paused"))

    await eventually(paused)
    assert await handle.query("dropped_signals") == 0


async def unpause_signal(handle: WorkflowHandle[Any, Any], acts: ColdScheduleFake) -> None:
    # Paused before the completion, as for `unpause`.
    await handle.signal("unpause", {})

    async def unpaused() -> bool:
        return await handle.query("paused") is False

    await eventually(unpaused)
    assert await handle.query("dropped_signals") == 0


async def backfill(handle: WorkflowHandle[Any, Any], acts: ColdScheduleFake) -> None:
    # A range with 1 occurrence of the yearly expression, or 3 of `@every 1s`, long past.
    # The expression is the one the completion set, not a query's: a query would bring the
    # workflow into the new worker's cache before the update.
    start_at = (int(time.time() * 1000) - 400 * DAY_MS) // 1000 * 1000
    assert acts.expression in (YEARLY, "@every 1s"), acts.expression
    every_second = acts.expression == "@every 1s"
    end_at = start_at + 3000 if every_second else int(time.time() * 1000)
    times: list[int] = await handle.execute_update(
        "backfill", {"start_at": start_at, "end_at": end_at}, result_type=list[int]
    )
    assert len(times) == (3 if every_second else 1), times
    acts.expected.extend(times)  # delivered by the end of the test


async def redeliver(handle: WorkflowHandle[Any, Any], acts: ColdScheduleFake) -> None:
    # The dead letter made before the completion (see the test) is the only outcome refused
    # and not delivered since; the outcome activity accepts it now. Its key comes from the
    # activity, not from a query: a query would bring the workflow into the new worker's
    # cache before the update.
    (key,) = [k for k in acts.refused if k not in acts.accepted_keys]
    assert await handle.execute_update("redeliver", {"idempotency_key": key}) is True

    async def delivered_again() -> bool:
        return key in acts.accepted_keys and await handle.query("dead_letters") == []

    await eventually(delivered_again, timeout=30)
    assert acts.accepted_keys.count(key) == 1, acts.accepted_keys


async def configure_update(handle: WorkflowHandle[Any, Any], acts: ColdScheduleFake) -> None:
    # A second slot: a run the completion left queued starts in the update's own task.
    settings = await handle.execute_update(
        "configure", {"max_concurrent_runs": 2, "outcome_timeout_ms": 30_000}, result_type=dict
    )
    assert settings["max_concurrent_runs"] == 2 and settings["max_queued_runs"] == 100
    assert await handle.query("settings") == settings


async def configure_signal(handle: WorkflowHandle[Any, Any], acts: ColdScheduleFake) -> None:
    await handle.signal("configure", {"max_concurrent_runs": 2})

    async def applied() -> bool:
        return bool((await handle.query("settings"))["max_concurrent_runs"] == 2)

    await eventually(applied)
    assert await handle.query("dropped_signals") == 0


MESSAGES: dict[str, Step] = {
    "configure_update": configure_update,
    "configure_signal": configure_signal,
    "set_update": set_update,
    "set_signal": set_signal,
    "cancel_update": cancel_update,
    "cancel_signal": cancel_signal,
    "trigger": trigger,
    "pause": pause,
    "unpause": unpause,
    "pause_signal": pause_signal,
    "unpause_signal": unpause_signal,
    "backfill": backfill,
    "redeliver": redeliver,
}


async def _start_schedule(
    client: Client, suffix: str, task_queue: str, activity_queue: str
) -> WorkflowHandle[Any, Any]:
    """One slot, lifecycle events, activities on their own queue (so the workflow worker can
    be replaced while they run), outcome retries 1.5 s apart."""
    start = {
        "max_concurrent_runs": 1,
        "lifecycle_activity": "lifecycle",
        "activity_task_queue": activity_queue,
        "outcome_retries": {"initial_interval_ms": 1500},
    }
    return await client.start_workflow(
        "DurabilitySchedule", start, id=f"schedule:cold-{suffix}", task_queue=task_queue
    )


# A paused schedule has no tick timer, so no tick can fire while it is paused: `unpause`
# right after `tick_while_busy` would need a `pause` in between, whose task sends commands,
# and would test nothing the other `unpause` cases do not.
UNREACHABLE = {("tick_while_busy", "unpause"), ("tick_while_busy", "unpause_signal")}


@pytest.mark.parametrize(
    ("completion", "message"),
    [
        pair
        for pair in itertools.product(sorted(COMPLETIONS), sorted(MESSAGES))
        if pair not in UNREACHABLE
    ],
)
async def test_message_after_completion_on_a_cold_worker(
    client: Client, completion: str, message: str
) -> None:
    suffix, task_queue, activity_queue = cold_names()
    acts = ColdScheduleFake()
    async with activity_worker(client, activity_queue, acts.activities()):
        async with workflow_worker(client, task_queue):
            handle = await _start_schedule(client, suffix, task_queue, activity_queue)
            if message == "redeliver":
                # Version 0, so that the completion's `set` (version 1) still applies.
                await handle.execute_update("set", {"expression": YEARLY, "version": 0})
                await _dead_letter(handle, acts)
            if message in ("unpause", "unpause_signal"):
                await handle.execute_update("pause", {})
            await COMPLETIONS[completion](handle, acts)
        # The only workflow worker is gone; a new one starts with nothing cached.
        async with workflow_worker(client, task_queue):
            await MESSAGES[message](handle, acts)
        # Another cold worker replays what the last one recorded, then must make progress:
        # a new version and a run of it that reports.
        async with workflow_worker(client, task_queue):
            assert await handle.execute_update("set", {"expression": YEARLY, "version": 10})
            await _trigger_and_wait(handle, acts)
            await eventually(lambda: no_runs_left(handle), timeout=30)
    assert set(acts.expected) <= set(acts.accepted)
    await assert_healthy_and_updated(client, handle)


async def no_runs_left(handle: WorkflowHandle[Any, Any]) -> bool:
    return not await handle.query("runs")


async def test_redeliver_after_a_failed_redelivery_on_a_cold_worker(client: Client) -> None:
    """A redelivery whose outcome activity fails keeps the letter, no longer `redelivering`;
    a cold worker must then accept `redeliver` of that key.

    This guards the barrier in `_redeliver` (`_send_progress` after `redelivered`), which no
    matrix case needs: there a redelivery delivers, and a delivered letter changes nothing a
    message decides. Here the failure is applied right after a workflow task with no command
    (a `run_settled` that settles nothing), so without the barrier the task that applies it
    sends none either, and a cold worker folds it into the `redeliver` update's activation,
    whose validator runs first and still sees the letter `redelivering`: refused with
    "already being redelivered". With the barrier, the update gets an activation of its own.
    """
    suffix, task_queue, activity_queue = cold_names()
    acts = ColdScheduleFake()
    async with activity_worker(client, activity_queue, acts.activities()):
        async with workflow_worker(client, task_queue):
            handle = await _start_schedule(client, suffix, task_queue, activity_queue)
            await handle.execute_update("set", {"expression": YEARLY, "version": 1})
            key = await _dead_letter(handle, acts)
            # The redelivery's outcome activity refuses too, once the no-op signal's task (no
            # command) has completed: the failure is applied in the task right after it.
            acts.refusing = True
            await _redelivery_ended(handle, acts, key, "ACTIVITY_TASK_FAILED")
            assert acts.refused.count(key) == 2 and key not in acts.accepted_keys, acts.refused
            acts.refusing = False
            acts.outcomes_open.set()
        # The only workflow worker is gone; a new one starts with nothing cached and gets the
        # update at once (no query before it).
        async with workflow_worker(client, task_queue):
            assert await handle.execute_update("redeliver", {"idempotency_key": key}) is True

            async def delivered_again() -> bool:
                return key in acts.accepted_keys and await handle.query("dead_letters") == []

            await eventually(delivered_again, timeout=30)
            assert acts.accepted_keys.count(key) == 1, acts.accepted_keys
    await assert_healthy_and_updated(client, handle)


async def test_trigger_after_a_run_ends_by_completion_on_a_cold_worker(client: Client) -> None:
    """A run that reports only by completing ends in a workflow task that frees its slot and
    starts nothing; a cold worker must then accept a `trigger` that needs that slot.

    This guards the barrier in `RunReports._watch` (`send_progress` after `acknowledged`), which
    the matrix does not need: there the schedule has one slot, so every run takes the last
    free slot and frees it by `run_settled` before it completes. Here there are two slots and
    no queue: run A starts first (not the last slot, so it reports only by completing), run B
    takes the last slot and is still running when A completes. Without the barrier, the task
    that applies A's completion sends no command, a cold worker folds it into the `trigger`
    update's activation, and the validator, which runs first, still sees both slots taken:
    refused with no room. With the barrier, the update gets an activation of its own.
    """
    suffix, task_queue, activity_queue = cold_names()
    acts = ColdScheduleFake()
    async with activity_worker(client, activity_queue, acts.activities()):
        async with workflow_worker(client, task_queue):
            handle = await client.start_workflow(
                "DurabilitySchedule",
                {
                    "max_concurrent_runs": 2,
                    "max_queued_runs": 0,
                    "activity_task_queue": activity_queue,
                },
                id=f"schedule:cold-{suffix}",
                task_queue=task_queue,
            )
            await handle.execute_update(
                "set", {"expression": YEARLY, "version": 1, "params": {"sleep_ms": 1500}}
            )
            first: int = await handle.execute_update("trigger", {}, result_type=int)
            await handle.execute_update(
                "set", {"expression": YEARLY, "version": 2, "params": {"sleep_ms": 8000}}
            )
            await handle.execute_update("trigger", {})
            await eventually(lambda: first in acts.accepted, timeout=30)
            since = (await events_of(handle))[0].event_id
            await wait_for_applied(handle, "CHILD_WORKFLOW_EXECUTION_COMPLETED", _after(since))
            assert len(await handle.query("runs")) == 1, "run B still holds the last slot"
        # The only workflow worker is gone; a new one starts with nothing cached and gets the
        # update at once (no query before it).
        async with workflow_worker(client, task_queue):
            third: int = await handle.execute_update("trigger", {}, result_type=int)
            await eventually(lambda: third in acts.accepted, timeout=30)
            await eventually(lambda: no_runs_left(handle), timeout=30)
    await assert_healthy_and_updated(client, handle)


async def test_configure_starts_queued_runs_at_once_on_a_cold_worker(client: Client) -> None:
    """Runs wait for the only slot; a cold worker gets `configure` of three slots at once:
    both queued runs start in the update's own task (the running one goes on), and the
    history replays with the decisions the live worker took."""
    suffix, task_queue, activity_queue = cold_names()
    acts = ColdScheduleFake()
    acts.run_gate.clear()
    async with activity_worker(client, activity_queue, acts.activities()):
        async with workflow_worker(client, task_queue):
            handle = await _start_schedule(client, suffix, task_queue, activity_queue)
            await handle.execute_update(
                "set", {"expression": YEARLY, "version": 1, "params": {"gated_run": True}}
            )
            times = [await handle.execute_update("trigger", {}, result_type=int) for _ in "abc"]
            await eventually(lambda: len(acts.started) == 1, timeout=30)
        async with workflow_worker(client, task_queue):
            settings = await handle.execute_update(
                "configure", {"max_concurrent_runs": 3}, result_type=dict
            )
            assert settings["max_concurrent_runs"] == 3
            await eventually(lambda: len(acts.started) == 3, timeout=30)
            assert sorted(run["scheduled_time"] for run in acts.started) == times
            acts.run_gate.set()
            await eventually(lambda: no_runs_left(handle), timeout=30)
    assert set(times) <= set(acts.accepted)
    await assert_healthy_and_updated(client, handle)


@pytest.mark.parametrize("completion", sorted(COMPLETIONS))
async def test_cancellation_after_completion_on_a_cold_worker(
    client: Client, completion: str
) -> None:
    """A cancellation request sent to a worker with nothing cached, right after each kind of
    completion: the schedule closes as cancelled once its runs reported, with no failed
    workflow task, and its history replays."""
    suffix, task_queue, activity_queue = cold_names()
    acts = ColdScheduleFake()
    async with activity_worker(client, activity_queue, acts.activities()):
        async with workflow_worker(client, task_queue):
            handle = await _start_schedule(client, suffix, task_queue, activity_queue)
            await COMPLETIONS[completion](handle, acts)
        async with workflow_worker(client, task_queue):
            await handle.cancel()
            with pytest.raises(WorkflowFailureError) as closed:
                await asyncio.wait_for(handle.result(), timeout=60)
    assert isinstance(closed.value.cause, CancelledError)
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
    assert set(acts.expected) <= set(acts.accepted)
    await assert_healthy(client, handle)


@pytest.mark.parametrize("message", ["unpause", "pause", "trigger"])
async def test_a_message_after_a_failed_run_paused_the_schedule_on_a_cold_worker(
    client: Client, message: str
) -> None:
    """Under `pause_on_failure`, the completion of a run that errored pauses the schedule: a
    decision `pause` and `unpause` answer on (and `trigger` records a run past). The task
    that applies it schedules the outcome's delivery (a command) and cancels the tick timer,
    so a cold worker gives the update sent at once an activation of its own: `unpause` finds
    the schedule paused, `pause` finds it already paused, and no workflow task fails."""
    suffix, task_queue, activity_queue = cold_names()
    acts = ColdScheduleFake()
    async with activity_worker(client, activity_queue, acts.activities()):
        async with workflow_worker(client, task_queue):
            handle = await client.start_workflow(
                "DurabilitySchedule",
                {
                    "max_concurrent_runs": 1,
                    "lifecycle_activity": "lifecycle",
                    "activity_task_queue": activity_queue,
                    "pause_on_failure": True,
                },
                id=f"schedule:cold-{suffix}",
                task_queue=task_queue,
            )
            await handle.execute_update(
                "set", {"expression": YEARLY, "version": 1, "params": {"fail": True}}
            )
            since = await _last_event_id(handle)
            failed: int = await handle.execute_update("trigger", {}, result_type=int)
            await wait_for_applied(handle, "CHILD_WORKFLOW_EXECUTION_COMPLETED", _after(since))
        # The only workflow worker is gone; a new one starts with nothing cached and gets the
        # update at once (no query before it).
        async with workflow_worker(client, task_queue):
            if message == "unpause":
                assert await handle.execute_update("unpause", {}) is True
                assert await handle.query("pause_note") is None
            elif message == "pause":
                assert await handle.execute_update("pause", {"note": "later"}) is False
                assert await handle.query("pause_note") == "later"
            else:
                triggered: int = await handle.execute_update("trigger", {}, result_type=int)
                await eventually(lambda: triggered in acts.accepted, timeout=30)
                note = await handle.query("pause_note")
                assert note.startswith(f"paused on failure: run cold-{suffix}:{failed} errored")
            await eventually(lambda: no_runs_left(handle), timeout=30)
    assert failed in acts.accepted
    await assert_healthy_and_updated(client, handle)


async def test_describe_answers_the_same_on_a_cold_worker(client: Client) -> None:
    """The ring of ended runs and the counters are carried state, their times read from the
    workflow's clock: a cold worker replaying the history answers `describe` as the worker
    that recorded it did."""
    suffix, task_queue, activity_queue = cold_names()
    acts = ColdScheduleFake()
    async with activity_worker(client, activity_queue, acts.activities()):
        async with workflow_worker(client, task_queue):
            handle = await _start_schedule(client, suffix, task_queue, activity_queue)
            await handle.execute_update("set", {"expression": YEARLY, "version": 1})
            await _trigger_and_wait(handle, acts)
            await _dead_letter(handle, acts)
            acts.refusing = False
            await handle.execute_update(
                "set", {"expression": YEARLY, "version": 2, "params": {"fail": True}}
            )
            await _trigger_and_wait(handle, acts)
            await eventually(lambda: no_runs_left(handle), timeout=30)
            warm = await handle.query("describe")
        async with workflow_worker(client, task_queue):
            cold = await handle.query("describe")
    assert cold == warm
    assert [r["delivery"] for r in warm["recent_runs"]] == [
        "delivered", "dead_lettered", "delivered"
    ]  # fmt: skip
    assert warm["recent_runs"][0]["outcome"]["status"] == "errored"
    assert (warm["counters"]["runs_started"], warm["counters"]["outcomes_dead_lettered"]) == (3, 1)
    await assert_healthy(client, handle)


async def test_crontab_reading_and_set_rules_on_a_cold_worker(client: Client) -> None:
    """Messages that ask the patches `cron-crontab-reading` and `schedule-set-rules` (a `set`
    of a one-value range, one refused by the rules), delivered at once to a worker with
    nothing cached after a run completed: no failed workflow task, the refused one dropped,
    the times crontab's, and the history replays."""
    hour = (time.gmtime().tm_hour + 3) % 24
    probe = f"*/2 * {hour}-{hour} * * *"
    suffix, task_queue, activity_queue = cold_names()
    acts = ColdScheduleFake()
    async with activity_worker(client, activity_queue, acts.activities()):
        async with workflow_worker(client, task_queue):
            handle = await _start_schedule(client, suffix, task_queue, activity_queue)
            await handle.execute_update("set", {"expression": YEARLY, "version": 1})
            await _trigger_and_wait(handle, acts)
            await eventually(lambda: no_runs_left(handle), timeout=30)
        # No worker: the signals wait, then reach the next one in one activation.
        await handle.signal("set", {"expression": probe, "version": 2, "jitter_ms": 2000})
        await handle.signal("set", {"expression": probe, "version": 3})
        await handle.signal("pause", {})
        await handle.signal("unpause", {})
        async with workflow_worker(client, task_queue):
            await eventually(lambda: _version_is(handle, 3), timeout=30)
            assert await handle.query("dropped_signals") == 1
            stored = await handle.query("get")
            assert stored["next_at"] - int(time.time() * 1000) > 3_600_000
            assert await handle.execute_update("set", {"expression": YEARLY, "version": 4})
    assert set(acts.expected) <= set(acts.accepted)
    await assert_healthy_and_updated(client, handle)


async def _version_is(handle: WorkflowHandle[Any, Any], version: int) -> bool:
    stored = await handle.query("get")
    return stored is not None and stored["version"] == version
