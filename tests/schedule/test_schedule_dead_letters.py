"""Dead letters a user can see and re-drive: the `dead_letters` query and the `redeliver`
update, through the `durability` CLI and the `temporal` CLI on the dev server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError

from tests.support.fakes import ScheduleFake
from tests.support.helpers import (
    durability_cli,
    eventually,
    record_history,
    schedule_worker,
    temporal_query,
)
from tests.support.schedule import (
    live_schedule,
    no_runs_left,
)

pytestmark = pytest.mark.cacheless

YEARLY = "0 0 1 1 *"


async def _start(
    client: Client, task_queue: str, object_id: str, **options: Any
) -> WorkflowHandle[Any, Any]:
    """A schedule whose outcomes get 2 attempts 50 ms apart, with `options` on top."""
    return await client.start_workflow(
        "DurabilitySchedule",
        {"outcome_retries": {"max_attempts": 2, "initial_interval_ms": 50}, **options},
        id=f"schedule:{object_id}",
        task_queue=task_queue,
    )


async def test_dead_letters_are_kept_bounded_and_redelivered_with_their_original_key(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    receiver = ScheduleFake(refusing=True)
    object_id = f"dead-{unique}"
    async with schedule_worker(client, task_queue, receiver.activities()):
        handle = await _start(client, task_queue, object_id, max_dead_letters=2)
        await handle.execute_update("set", {"expression": YEARLY, "version": 1, "params": {"n": 1}})
        triggered = []
        for _ in range(3):
            triggered.append(await handle.execute_update("trigger", {}, result_type=int))

            async def lettered(count: int = len(triggered)) -> bool:
                letters = await handle.query("dead_letters")
                return len(letters) == min(count, 2) and not await handle.query("runs")

            await eventually(lettered, timeout=30)
        # The oldest of the three was dropped: at most max_dead_letters are kept.
        letters = await temporal_query(dev_server_address, handle.id, "dead_letters")
        assert [d["scheduled_time"] for d in letters] == triggered[1:]
        first = letters[0]
        assert first["idempotency_key"] == f"{object_id}:{triggered[1]}"
        assert first["outcome"] == {"status": "complete", "error": None}
        assert first["error"] == {"name": "Unavailable", "message": "receiver down"}
        assert first["redelivering"] is False

        # A key with no dead letter is refused, naming it; nothing changes.
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update("redeliver", {"idempotency_key": f"{object_id}:1"})
        cause = refused.value.cause
        assert isinstance(cause, ApplicationError)
        assert (cause.type, cause.non_retryable) == ("InvalidRequest", True)
        assert f"{object_id}:1" in cause.message

        receiver.refusing = False
        calls_before = len(receiver.outcomes)
        redelivered = await durability_cli(
            dev_server_address, "schedule", "redeliver", object_id, first["idempotency_key"],
            "--json",
        )  # fmt: skip
        assert json.loads(redelivered.stdout) == {"redelivering": True}

        async def left_the_list() -> bool:
            keys = [d["idempotency_key"] for d in await handle.query("dead_letters")]
            return keys == [f"{object_id}:{triggered[2]}"]

        await eventually(left_the_list, timeout=30)
        table = await durability_cli(dev_server_address, "schedule", "dead-letters", object_id)
        assert f"{object_id}:{triggered[2]}" in table.stdout and "receiver down" in table.stdout
        await handle.terminate("test done")
    # Delivered again as it was: the same run object (the same idempotency key and params)
    # and the same outcome, a first attempt of a new delivery.
    run, outcome, attempt = receiver.outcomes[calls_before]
    assert len(receiver.outcomes) == calls_before + 1
    assert run["idempotency_key"] == first["idempotency_key"] and run["params"] == {"n": 1}
    assert outcome == {"status": "complete"} and attempt == 1
    original = next(c for c in receiver.outcomes if c[0]["scheduled_time"] == triggered[1])
    assert original[0] == run


async def test_a_redelivery_going_on_at_continue_as_new_is_finished_by_the_next_run(
    client: Client, task_queue: str, unique: str
) -> None:
    """`redeliver` answers at once; the letter leaves the list once delivered. A run that
    continues as new mid-redelivery leaves the letter marked as being redelivered: the next
    run starts the redelivery again instead of keeping it stuck (and refusing `redeliver`)."""
    receiver = ScheduleFake(refusing=True)
    object_id = f"stranded-{unique}"
    async with schedule_worker(client, task_queue, receiver.activities()):
        handle = await _start(client, task_queue, object_id, continue_as_new_after_events=40)
        await handle.execute_update("set", {"expression": YEARLY, "version": 1})
        await handle.execute_update("trigger", {}, result_type=int)
        await eventually(lambda: _one_letter(handle), timeout=30)
        first_run = (await handle.describe()).run_id
        receiver.refusing = False
        receiver.outcomes_open.clear()  # the redelivery hangs until the run has continued as new
        await handle.execute_update("redeliver", {"idempotency_key": (await _letters(handle))[0]})
        while (await handle.describe()).run_id == first_run:
            await handle.execute_update("pause", {})  # history events, up to continue-as-new
        assert (await _letters_full(handle))[0]["redelivering"] is True
        receiver.outcomes_open.set()
        await eventually(lambda: _no_letters(handle), timeout=30)
        record_history("schedule_parent_0_1_1_resumed_redelivery", await handle.fetch_history())
        await handle.terminate("test done")


async def _letters_full(handle: WorkflowHandle[Any, Any]) -> list[dict[str, Any]]:
    letters: list[dict[str, Any]] = await handle.query("dead_letters")
    return letters


async def _letters(handle: WorkflowHandle[Any, Any]) -> list[str]:
    return [letter["idempotency_key"] for letter in await _letters_full(handle)]


async def _one_letter(handle: WorkflowHandle[Any, Any]) -> bool:
    return len(await _letters(handle)) == 1 and not await handle.query("runs")


async def _no_letters(handle: WorkflowHandle[Any, Any]) -> bool:
    return not await _letters(handle)


async def test_an_outcome_slower_than_its_timeout_is_dead_lettered_as_an_outcome_timeout(
    client: Client, task_queue: str, unique: str
) -> None:
    recorder = ScheduleFake()  # `gated_outcome`: the outcome activity never returns here
    schedule = {"expression": YEARLY, "version": 1, "params": {"gated_outcome": True}}
    outcomes = {
        "outcome_timeout_ms": 300,
        "outcome_retries": {"max_attempts": 2, "initial_interval_ms": 100},
    }
    async with live_schedule(client, task_queue, unique, recorder, schedule, **outcomes) as handle:
        scheduled_time = await handle.execute_update("trigger", {}, result_type=int)
        await eventually(
            lambda: [e for e in recorder.events if e["type"] == "dead_lettered"], timeout=20
        )
        run = client.get_workflow_handle(f"schedule-run:{unique}:{scheduled_time}")
        result = await asyncio.wait_for(run.result(), timeout=20)
        await eventually(no_runs_left(handle), timeout=20)
        [letter] = await handle.query("dead_letters")
        await handle.terminate("test done")
    timeout = {
        "name": "ScheduledOutcomeTimeoutError",
        "message": "activity timed out (START_TO_CLOSE)",
    }
    # The run ended as it stopped; the schedule delivered, and dead-lettered, its outcome.
    assert result == {
        "outcome": {"status": "complete", "error": None},
        "delivered": None,  # the schedule's to deliver: not the run's to claim
        "dead_letter_error": None,
        "outcome_pending": True,
    }
    assert letter["error"] == timeout
    [dead] = [e for e in recorder.events if e["type"] == "dead_lettered"]
    assert (dead["scheduled_time"], dead["attempt"], dead["error"]) == (scheduled_time, 2, timeout)
    assert [a for run_, _, a in recorder.outcomes if run_["scheduled_time"] == scheduled_time] == [
        1,
        2,
    ]
    assert recorder.accepted == []
